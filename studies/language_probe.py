"""Does RL fine-tuning keep the model's language ability? A perplexity proxy for Table 2.

The paper (Table 2) scores the base and the POAD-trained LLaMA2-7B on ARC, HellaSwag, PIQA and
MMLU and finds no loss. Those benchmarks are not reachable offline, so this probe measures a
proxy that is: each trained run's per-token negative log-likelihood (and perplexity) on fixed
texts, beside the base model's on the same texts. The base model is the same policy with its
LoRA adapter disabled, so the difference is the adapter's alone. A run whose adapter never moved
(every LoRA ``B`` matrix still exactly zero, as initialised: a run that took no policy step) adds
exactly zero to every layer, so its model *is* the base model; its row copies the base's numbers
and says so (``adapter_is_identity``) instead of recomputing them.

Texts (present on any Debian/Python machine, read as they are):

* ``english``: Debian's copies of the Apache-2.0 and CC0-1.0 licence texts (English prose);
* ``python``: the source of two Python standard-library modules, ``json.decoder`` and
  ``string`` (code, the DataSciCoding skill).

Each text is split into non-overlapping windows of ``--window`` tokens (no BOS); every token
but a window's first is scored. Example::

    OMP_NUM_THREADS=1 python studies/language_probe.py \\
        runs/smollm2-cpu/runs/Overcooked-TomatoSalad-v0/*/seed* \\
        --out studies/probes/language-probe-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import inspect
import math
import sys
from pathlib import Path

LICENCES = ("/usr/share/common-licenses/Apache-2.0", "/usr/share/common-licenses/CC0-1.0")
MODULES = ("json.decoder", "string")


def texts() -> dict[str, str]:
    """The probe's fixed texts (see the module docstring)."""
    import importlib

    missing = [p for p in LICENCES if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"{missing} not found; install Debian's base-files")
    english = "\n\n".join(Path(p).read_text() for p in LICENCES)
    python = "\n\n".join(inspect.getsource(importlib.import_module(m)) for m in MODULES)
    return {"english": english, "python": python}


def mean_nll(model, tokenizer, text: str, window: int) -> tuple[float, int]:
    """Mean per-token NLL (nats) of ``text`` in windows of ``window`` tokens, and the count."""
    import torch

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[start : start + window]])
            if chunk.shape[1] < 2:
                break
            logits = model(input_ids=chunk).logits.float()[0, :-1]
            nll = torch.nn.functional.cross_entropy(logits, chunk[0, 1:], reduction="sum")
            total += float(nll)
            count += chunk.shape[1] - 1
    return total / count, count


def adapter_is_identity(model) -> bool:
    """Whether every LoRA ``B`` weight of ``model`` is exactly zero (the adapter adds nothing)."""
    b_weights = [p for name, p in model.named_parameters() if "lora_B" in name]
    return bool(b_weights) and all(not bool(p.detach().any()) for p in b_weights)


def probe(run_dirs: list[Path], window: int, previous: dict | None = None) -> dict:
    """Measure ``run_dirs``; rows of ``previous`` (an earlier output) are kept, not re-measured."""
    from tqdm.auto import tqdm

    from agentbench_poad.rl.run_dir import load_run_config
    from agentbench_poad.rl.trainer import load_agent

    corpus = texts()
    result: dict = {
        "window": window,
        "python": sys.version.split()[0],
        "texts": {},
        "base": None,
        "runs": [],
    }
    base_done = False
    if previous is not None:
        if previous["window"] != window:
            raise ValueError(
                f"--resume file measured windows of {previous['window']} tokens, not {window}"
            )
        result.update(texts=previous["texts"], base=previous["base"], runs=list(previous["runs"]))
        base_done = True
        done = {str(Path(row["run"])) for row in previous["runs"]}
        run_dirs = [r for r in run_dirs if str(r) not in done]
    for run_dir in tqdm(run_dirs, desc="runs", unit="run"):
        policy = load_agent(run_dir).policy
        model, tokenizer = policy.model, policy.tokenizer
        config = load_run_config(run_dir)
        if base_done and config["model"] != result["base"]["model"]:
            raise ValueError(
                f"{run_dir} trained {config['model']}, not {result['base']['model']}; "
                "probe runs of one base model at a time"
            )
        if not base_done:
            base = {}
            with model.disable_adapter():
                for name, text in corpus.items():
                    nll, count = mean_nll(model, tokenizer, text, window)
                    base[name] = {"nll": nll, "perplexity": math.exp(nll)}
                    result["texts"][name] = {"tokens": count}
            result["base"] = {"model": config["model"], **base}
            base_done = True
        row = {
            "run": str(run_dir),
            "agent": config["agent"],
            "env_id": config["env_id"],
            "seed": config["seed"],
            "overrides": {
                k: v
                for k, v in config["algorithm"].items()
                if k in ("intra_gamma", "chat_template") and v
            },
        }
        row["adapter_is_identity"] = adapter_is_identity(model)
        for name, text in corpus.items():
            if row["adapter_is_identity"]:
                nll = result["base"][name]["nll"]
            else:
                nll, _ = mean_nll(model, tokenizer, text, window)
            row[name] = {
                "nll": nll,
                "perplexity": math.exp(nll),
                "change_vs_base": math.exp(nll - result["base"][name]["nll"]) - 1.0,
            }
        result["runs"].append(row)
        print(
            f"{row['agent']:<8} {row['env_id']} seed {row['seed']}"
            + (" (adapter never moved: the base model)" if row["adapter_is_identity"] else "")
            + ": "
            + ", ".join(
                f"{name} ppl {row[name]['perplexity']:.3f} "
                f"(base {result['base'][name]['perplexity']:.3f}, "
                f"{100 * row[name]['change_vs_base']:+.2f} %)"
                for name in corpus
            ),
            flush=True,
        )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="trained run directories")
    parser.add_argument("--window", type=int, default=512, help="tokens per scored window")
    parser.add_argument("--out", type=Path, help="write the measurements as JSON")
    parser.add_argument(
        "--resume",
        type=Path,
        help="an earlier --out file: keep its rows, measure only the runs it lacks "
        "(same window and base model)",
    )
    args = parser.parse_args(argv)
    if args.window < 2:
        parser.error("--window must be >= 2")
    not_runs = [str(r) for r in args.runs if not (r / "config.json").is_file()]
    if not_runs:
        parser.error(f"not run directories (no config.json): {not_runs}")
    previous = None
    if args.resume:
        import json

        try:
            previous = json.loads(args.resume.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--resume {args.resume}: {exc}")
        missing = {"window", "texts", "base", "runs"} - set(previous)
        if missing:
            parser.error(
                f"--resume {args.resume} is not this probe's output (no {sorted(missing)})"
            )
    result = probe(args.runs, args.window, previous)
    if args.out:
        from agentbench_poad.rl.run_dir import write_json

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
