"""Train a warm-start adapter with TRL's ``SFTTrainer``, and merge it into a model folder.

A warm start is a folder (``warmstarts/NAME/`` in this repository) holding:

* ``adapter/`` -- the LoRA adapter, as peft saves it (small; committed);
* ``manifest.json`` -- what it was trained from and how: the base model (as runs record it),
  prompt style, chat template, training datasets, programs per dataset, seed, LoRA and optimiser
  settings, the per-step training loss, TRL/peft/transformers versions and the adapter's sha256;
* ``model/`` -- the base model with the adapter merged in (made on demand by
  :func:`merged_model`, never committed: ``.gitignore``), with ``warm_start.json`` naming the
  adapter's sha256. Agents train from this folder (``--model warmstarts/NAME/model``) with a
  fresh LoRA of their own, so every agent starts from the same warm-started weights, and the
  records made from their runs name the warm start (``model.warm_start``).

Usage: ``agentbench-poad warmstart build`` and ``agentbench-poad warmstart merge`` (see
``--help``), or :func:`train_warm_start` and :func:`merged_model` from Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.warmstart.examples import DEFAULT_TRAINING_DATASETS, build_examples

MANIFEST = "manifest.json"
ADAPTER = "adapter"
MERGED = "model"
MERGED_NOTE = "warm_start.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: Every linear layer of a decoder block (Llama/SmolLM2 and Gemma 3 names).
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def adapter_sha256(folder: str | os.PathLike) -> str:
    """sha256 of a warm start's adapter weights (``adapter/adapter_model.safetensors``)."""
    path = Path(folder) / ADAPTER / ADAPTER_WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: {folder} is not a warm start (build one with "
            "`agentbench-poad warmstart build`)"
        )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """A warm start's manifest, with its adapter's digest checked against the weights."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: {folder} is not a warm start")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    actual = adapter_sha256(folder)
    if manifest.get("adapter_sha256") != actual:
        raise ValueError(
            f"{folder}: the adapter's sha256 is {actual}, the manifest says "
            f"{manifest.get('adapter_sha256')}: the adapter was changed after training; "
            "rebuild the warm start"
        )
    return manifest


def train_warm_start(
    model: str,
    out: str | os.PathLike,
    *,
    style: str,
    chat_template: bool,
    programs_per_dataset: int = 64,
    datasets: Sequence[str] = DEFAULT_TRAINING_DATASETS,
    evaluation_datasets: Sequence[str] = ("iris", "gen-xor"),
    epochs: float = 2.0,
    learning_rate: float = 2e-4,
    batch_size: int = 8,
    lora_r: int = 16,
    lora_layers: int | None = None,
    seed: int = 0,
    max_steps: int = -1,
    progress: bool = True,
) -> Path:
    """Fine-tune ``model`` on working bodies for ``datasets`` and write a warm start to ``out``.

    ``lora_layers`` puts the adapter on the top that many decoder layers only (``None``: all),
    as the agents' ``lora_layers`` does: the backward pass then stops there, which on a CPU
    halves a step's cost.

    Returns ``out``. Raises ``FileExistsError`` when ``out`` already holds a manifest (a warm
    start is data: build a new one under another name instead of overwriting it).
    """
    from agentbench_poad.errors import require
    from agentbench_poad.models.loading import load_causal_lm
    from agentbench_poad.models.reference import model_reference
    from agentbench_poad.rl.policy_model import chat_prompt_text

    out = Path(out)
    if (out / MANIFEST).exists():
        raise FileExistsError(f"{out} already holds a warm start; choose another --out")
    trl = require("trl", "warmstart")
    datasets_lib = require("datasets", "warmstart")
    peft = require("peft", "train")

    base, tokenizer = load_causal_lm(model, dtype="float32", device="cpu", progress=progress)
    examples = build_examples(
        (lambda text: chat_prompt_text(tokenizer, text)) if chat_template else str,
        style=style,
        programs_per_dataset=programs_per_dataset,
        seed=seed,
        datasets=datasets,
        evaluation_datasets=evaluation_datasets,
    )
    rows = [{"prompt": e.prompt, "completion": e.completion} for e in examples]
    train_set = datasets_lib.Dataset.from_list(rows)
    layers = base.config.num_hidden_layers
    top = None if lora_layers is None else list(range(max(0, layers - lora_layers), layers))
    lora = peft.LoraConfig(
        r=lora_r,
        lora_alpha=2 * lora_r,
        lora_dropout=0.0,
        target_modules=list(TARGET_MODULES),
        layers_to_transform=top,
        task_type="CAUSAL_LM",
    )
    with tempfile.TemporaryDirectory(prefix="warmstart-") as scratch:
        config = trl.SFTConfig(
            output_dir=scratch,
            num_train_epochs=epochs,
            max_steps=max_steps,
            per_device_train_batch_size=batch_size,
            learning_rate=learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=0,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=seed,
            data_seed=seed,
            completion_only_loss=True,
            max_length=1024,
            use_cpu=True,
            disable_tqdm=not progress,
            dataloader_num_workers=0,
            # Recomputing activations saves memory a 135M-270M model does not need, and costs a
            # forward pass per step; it would also make the frozen layers below the adapter
            # carry gradients (input embeddings set to require them).
            activation_checkpointing=False,
        )
        trainer = trl.SFTTrainer(
            model=base,
            args=config,
            train_dataset=train_set,
            processing_class=tokenizer,
            peft_config=lora,
        )
        result = trainer.train()
        losses = [
            {"step": entry["step"], "loss": entry["loss"]}
            for entry in trainer.state.log_history
            if "loss" in entry
        ]
        out.mkdir(parents=True, exist_ok=True)
        trainer.model.save_pretrained(out / ADAPTER)
    import transformers

    manifest = {
        "kind": "agentbench-poad warm start",
        "base_model": model_reference(model),
        "prompt_style": style,
        "chat_template": chat_template,
        "datasets": list(datasets),
        "evaluation_datasets_excluded": list(evaluation_datasets),
        "programs_per_dataset": programs_per_dataset,
        "examples": len(rows),
        # the training set itself, so a later change of the program grid cannot pass unseen
        "examples_sha256": hashlib.sha256(
            json.dumps(rows, sort_keys=True).encode("utf-8")
        ).hexdigest(),
        "seed": seed,
        "lora": {
            "r": lora_r,
            "alpha": 2 * lora_r,
            "dropout": 0.0,
            "target_modules": list(TARGET_MODULES),
            "layers": top,
        },
        "optimiser": {
            "epochs": epochs,
            "max_steps": max_steps,
            "learning_rate": learning_rate,
            "batch_size": batch_size,
            "schedule": "cosine",
        },
        "training_loss": losses,
        "train_seconds": result.metrics.get("train_runtime"),
        "versions": {
            "trl": trl.__version__,
            "peft": peft.__version__,
            "transformers": transformers.__version__,
        },
        "adapter_sha256": adapter_sha256(out),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def merged_model(folder: str | os.PathLike, *, progress: bool = True) -> Path:
    """``folder/model``: the warm start's base with its adapter merged (made once, then reused).

    The folder is remade when its ``warm_start.json`` names another adapter digest than the
    committed adapter's (the adapter was rebuilt).
    """
    from agentbench_poad.errors import require
    from agentbench_poad.models.loading import load_causal_lm

    folder = Path(folder).resolve()
    manifest = read_manifest(folder)
    target = folder / MERGED
    note = target / MERGED_NOTE
    if note.is_file():
        made = json.loads(note.read_text(encoding="utf-8"))
        if made.get("adapter_sha256") == manifest["adapter_sha256"]:
            return target
    peft = require("peft", "train")
    base, tokenizer = load_causal_lm(manifest["base_model"], progress=progress)
    merged = peft.PeftModel.from_pretrained(base, folder / ADAPTER).merge_and_unload()
    staging = folder / (MERGED + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    merged.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / MERGED_NOTE).write_text(
        json.dumps(
            {
                "warm_start": folder.name,
                "adapter_sha256": manifest["adapter_sha256"],
                "base_model": manifest["base_model"],
                "prompt_style": manifest["prompt_style"],
                "chat_template": manifest["chat_template"],
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def warm_start_of(model_dir: str | os.PathLike) -> dict[str, Any] | None:
    """What a merged warm-start model folder says of itself (``None`` for any other model)."""
    note = Path(model_dir) / MERGED_NOTE
    if not note.is_file():
        return None
    return json.loads(note.read_text(encoding="utf-8"))
