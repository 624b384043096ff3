"""Measure before training: how often does a base model's first DataSciCoding action run?

Issue 46 item 4. The decision rule of ``studies/fair-cpu-v2-datascicoding.md`` (written before
any training run) reads this probe: where a model and prompt style reach >= 5 % runnable, the
agents train from the base model, otherwise from a supervised warm start.

Every cell (model x prompt style x dataset) samples ``--samples`` first actions exactly as a
training run does:

* the prompt is the env's reset observation (``gym.make(id, prompt_style=...)``, ``reset``);
* the policy is :func:`agentbench_poad.rl.trainer.build_policy` of POAD's
  ``datascicoding-mini`` preset (temperature 0.5, top-k 50, up to 128 new tokens; LoRA's ``B``
  starts at zero, so this is the base model), with the env's declared stop rule
  (``policy.settings_for(info["action_stop"])``, as the trainer sets it);
* the chat template: SmolLM2-Instruct with the paper's prompt as a chat turn, as the earlier
  DataSciCoding training runs did (``studies/smollm2-cpu.toml``: ``chat_template = true``);
  the worked-example style is a module to continue, so it, and the base Gemma model, take the
  raw prompt (``--chat`` overrides; each cell records what it used);
* each action is graded by the env itself (``env.step`` after ``reset(seed=0)``: the sandbox,
  5 splits). An attempt is *runnable* when its reward is not the failure penalty (-1).

Generation is batched (``--batch`` rows at once; each row samples from the same
distribution as one at a time), and the prompt, the same in every row, runs once per batch
(:func:`share_prompt_prefill`). Batch ``b`` of a cell draws from
``torch.Generator().manual_seed(cell_seed + b)``, so a cell resumes exactly where it stopped
(``--out`` is rewritten after every batch and read back at start). Per cell the output holds
the counts, a 95 % **Wilson score** interval for the runnable rate, the mean AUC of the
runnable attempts, the failure categories, seconds per attempt (generation and grading
separately) and a sample of programs. ``--markdown`` prints the table.

Example (one model per process, so two models can run side by side)::

    OMP_NUM_THREADS=1 python studies/dsc_runnable_probe.py --model smollm2-135m \\
        --samples 200 --out studies/probes/dsc_runnable-smollm2-135m.json
    python studies/dsc_runnable_probe.py --smoke   # a tiny random model, 2 attempts
    python studies/dsc_runnable_probe.py --report studies/probes/dsc_runnable-*.json  # table
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

STYLES = ("paper", "worked_example")
#: iris: real, bundled. gen-xor: generated, and the one where only a non-linear model that finds
#: the x0*x1 interaction scores (linear 0.54, GNB 0.54, AdaBoost 0.51 vs HGB/MLP 0.92; the
#: widest spread after circles, whose GNB already reaches 0.99): a reward there says which
#: model was chosen.
DATASETS = ("iris", "gen-xor")
FAILURE_PENALTY = -1.0  # the grader's reward for every failed attempt
Z95 = 1.959963984540054  # the standard normal's 0.975 quantile
BASE_MODEL_RATE = 0.05  # the study's rule: train from the base model at >= 5 % runnable
SAMPLE_PROGRAMS = 6  # programs kept per cell: the first few, and up to as many runnable ones


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % for the default ``z``).

    It is the set of ``p`` whose score test accepts ``successes`` of ``n``:
    ``|successes/n - p| <= z * sqrt(p (1 - p) / n)``; unlike the Wald interval it stays inside
    [0, 1] and is not empty at 0 or ``n`` successes.

    Raises:
        ValueError: ``n < 1`` or ``successes`` outside ``0..n``.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # Clamp the rounding at the ends: the exact bounds are 0 at 0 successes and 1 at n.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


def default_chat(model: str, style: str) -> bool:
    """The layout training uses: the chat template for an instruct model on the paper style."""
    return style == "paper" and "smollm2" in Path(model).name.lower()


def cell_seed(seed: int, model: str, style: str, dataset: str) -> int:
    """A cell's generator seed: a function of the run seed and the cell's names only."""
    digest = hashlib.sha256(f"{seed}/{Path(model).name}/{style}/{dataset}".encode()).digest()
    return int.from_bytes(digest[:4], "big") * 1000


def share_prompt_prefill(policy: Any) -> Any:
    """Make ``policy.act`` run a batch's prompt once when every row has the same one.

    A probe samples one prompt many times: at 20 rows of a ~400-token prompt and up to 128
    generated tokens the prompt's forward is most of the work. Its key/value cache is the same
    for every row, so it is computed once and repeated over the batch
    (``DynamicCache.batch_repeat_interleave``); sampling, stop rules and everything after the
    prompt are the policy's own. Exact up to floating-point summation order
    (tests/test_dsc_runnable_probe.py compares greedy generations both ways).
    """
    run = policy._run_prompts

    def shared(prompt_ids: list[list[int]], lengths: Any) -> tuple[Any, Any, Any]:
        n = len(prompt_ids)
        if n < 2 or any(ids != prompt_ids[0] for ids in prompt_ids[1:]):
            return run(prompt_ids, lengths)
        logits, cache, attention = run(prompt_ids[:1], lengths[:1])
        repeated = cache.batch_repeat_interleave(n)
        cache = cache if repeated is None else repeated  # in place in recent transformers
        return logits.expand(n, -1).contiguous(), cache, attention.expand(n, -1).contiguous()

    policy._run_prompts = shared
    return policy


def summarise(cell: dict[str, Any]) -> dict[str, Any]:
    """Counts, interval, AUC and timing of a cell's attempts (kept in ``cell['attempts']``)."""
    attempts = cell["attempts"]
    n = len(attempts)
    runs = [a for a in attempts if a["runs"]]
    low, high = wilson_interval(len(runs), n) if n else (0.0, 1.0)
    aucs = [a["reward"] for a in runs]
    return {
        "n": n,
        "runnable": len(runs),
        "rate": len(runs) / n if n else None,
        "wilson95": [low, high],
        "mean_auc_runnable": sum(aucs) / len(aucs) if aucs else None,
        "best_auc": max(aucs) if aucs else None,
        "failures": dict(Counter(a["error"] for a in attempts if not a["runs"]).most_common()),
        "mean_tokens": sum(a["tokens"] for a in attempts) / n if n else None,
        "seconds_per_attempt": {
            "generation": cell["generation_seconds"] / n if n else None,
            "grading": sum(a["grade_seconds"] for a in attempts) / n if n else None,
            "grading_runnable": (sum(a["grade_seconds"] for a in runs) / len(runs))
            if runs
            else None,
        },
    }


class StaleCell(Exception):
    """A stored cell was sampled from another prompt than the env gives now (the style changed)."""


def run_cell(
    policy: Any,
    env_id: str,
    style: str,
    cell: dict[str, Any],
    samples: int,
    batch: int,
    sandbox: str,
    save: Any,
) -> None:
    """Sample and grade attempts until ``cell`` holds ``samples``; ``save()`` after each batch."""
    import gymnasium as gym
    import torch

    env = gym.make(env_id, prompt_style=style, sandbox=sandbox)
    try:
        prompt, info = env.reset(seed=0)
        base = policy.generation
        # The trainer's rule: the env's declared stop added to the policy's own.
        policy.generation = policy.settings_for(info.get("action_stop"))
        text = policy.prompt_text(prompt)
        if cell.setdefault("prompt", text) != text:
            raise StaleCell(cell["style"] + "/" + cell["dataset"])
        cell["action_stop"] = info.get("action_stop")
        while len(cell["attempts"]) < samples:
            index = len(cell["attempts"]) // batch
            n = min(batch, samples - index * batch)
            generator = torch.Generator().manual_seed(cell["seed"] + index)
            start = time.perf_counter()
            actions = policy.act([prompt] * n, [None] * n, generator=generator)
            cell["generation_seconds"] += time.perf_counter() - start
            for sample in actions:
                env.reset(seed=0)
                start = time.perf_counter()
                _, reward, _, _, step_info = env.step(sample.text)
                seconds = time.perf_counter() - start
                runs = float(reward) != FAILURE_PENALTY
                cell["attempts"].append(
                    {
                        "reward": float(reward),
                        "runs": runs,
                        "error": None if runs else step_info.get("failure_category", "error"),
                        "tokens": len(sample.token_ids),
                        "grade_seconds": round(seconds, 4),
                    }
                )
                kept = cell["programs"]
                first = len(cell["attempts"]) <= SAMPLE_PROGRAMS
                runnable_kept = sum(p["runs"] for p in kept)
                if first or (runs and runnable_kept < SAMPLE_PROGRAMS):
                    kept.append(
                        {
                            "attempt": len(cell["attempts"]) - 1,
                            "runs": runs,
                            "reward": float(reward),
                            "error": cell["attempts"][-1]["error"],
                            "message": None
                            if runs
                            else str(step_info.get("failure_message") or "")[:300],
                            "program": sample.text,
                        }
                    )
            cell["summary"] = summarise(cell)
            save()
            s = cell["summary"]
            print(
                f"  {env_id} {style}: {s['runnable']}/{s['n']} ran "
                f"({s['seconds_per_attempt']['generation']:.2f}s gen/attempt)",
                flush=True,
            )
        policy.generation = base
    finally:
        env.close()


#: What a restarted cell keeps of the stale one: who it is, not what it measured.
FRESH_KEYS = ("style", "dataset", "env_id", "chat_template", "seed", "sampling")


def probe(args: argparse.Namespace, out: Path | None, model: str) -> dict[str, Any]:
    """Run every cell of one model (resuming from ``out``) and return the results."""
    from agentbench_poad.baselines.poad import POADConfig
    from agentbench_poad.rl.run_dir import write_json
    from agentbench_poad.rl.trainer import build_policy

    results: dict[str, Any] = {}
    if out is not None and out.exists():
        results = json.loads(out.read_text(encoding="utf-8"))
    results.setdefault("model", args.model)
    results.update(
        {
            "sandbox": args.sandbox,
            "seed": args.seed,
            "batch": args.batch,
            "preset": "poad datascicoding-mini",
            "runnable": "the step's reward is not the failure penalty (-1.0)",
            "interval": "Wilson score, 95 %",
        }
    )
    cells = results.setdefault("cells", {})

    def save() -> None:
        if out is not None:
            write_json(out, results)

    policies: dict[bool, Any] = {}
    for style in args.styles:
        chat = default_chat(args.model, style) if args.chat == "auto" else args.chat == "on"
        if chat not in policies:
            config = POADConfig.preset(
                "datascicoding-mini", chat_template=chat, **args.config_overrides
            )
            policy = share_prompt_prefill(build_policy(config, model, seed=args.seed))
            policies[chat] = (policy, config)
        policy, config = policies[chat]
        for dataset in args.datasets:
            key = f"{style}/{dataset}"
            cell = cells.setdefault(
                key,
                {
                    "style": style,
                    "dataset": dataset,
                    "env_id": f"DataSciCoding-{dataset}-v0",
                    "chat_template": chat,
                    "seed": cell_seed(args.seed, args.model, style, dataset),
                    "sampling": {
                        "temperature": config.temperature,
                        "top_k": config.top_k,
                        "max_new_tokens": config.max_new_tokens,
                    },
                    "generation_seconds": 0.0,
                    "attempts": [],
                    "programs": [],
                },
            )
            done = len(cell["attempts"])
            if cell["chat_template"] != chat or (done < args.samples and done % args.batch):
                raise SystemExit(
                    f"{out} holds cell {key} made with chat_template={cell['chat_template']} "
                    f"and {len(cell['attempts'])} attempts; resume with the same --chat and "
                    "--batch, or write to a new --out"
                )
            print(f"{args.model} {key} (chat_template={chat})", flush=True)

            for restarted in (False, True):
                try:
                    run_cell(
                        policy, cell["env_id"], style, cell, args.samples, args.batch,
                        args.sandbox, save,
                    )  # fmt: skip
                    break
                except StaleCell:
                    if restarted:  # a fresh cell cannot be stale
                        raise
                # Attempts on an older prompt say nothing about this one: kept apart, not mixed.
                stale = results.setdefault("stale_cells", {}).setdefault(key, [])
                stale.append({k: v for k, v in cell.items() if k != "attempts"})
                print(f"  {key}: the env's prompt changed since these attempts; restarting")
                fresh = {k: v for k, v in cell.items() if k in FRESH_KEYS}
                cells[key] = cell = {
                    **fresh,
                    "generation_seconds": 0.0,
                    "attempts": [],
                    "programs": [],
                }
                save()
    save()
    return results


def decision(summary: dict[str, Any]) -> str:
    """The study's rule for one cell: the base model at >= 5 % runnable, else a warm start.

    The rule reads the measured rate; "(interval spans 5 %)" marks a cell whose 95 % interval
    does not settle which side it is on.
    """
    verdict = "base model" if summary["rate"] >= BASE_MODEL_RATE else "warm start"
    low, high = summary["wilson95"]
    return verdict + (" (interval spans 5 %)" if low < BASE_MODEL_RATE <= high else "")


def markdown(*results: dict[str, Any]) -> str:
    """The table of the cells of one or more models, with the rule's decision per cell."""
    lines = [
        "| model | style | dataset | chat | runnable | rate | 95 % Wilson | mean AUC (runnable) "
        "| gen s/attempt | grade s/attempt | decision |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for cell in result["cells"].values():
            s = cell["summary"]
            auc = "-" if s["mean_auc_runnable"] is None else f"{s['mean_auc_runnable']:.3f}"
            lines.append(
                f"| {result['model']} | {cell['style']} | {cell['dataset']} | "
                f"{'yes' if cell['chat_template'] else 'no'} | {s['runnable']}/{s['n']} | "
                f"{s['rate']:.1%} | {s['wilson95'][0]:.1%}-{s['wilson95'][1]:.1%} | {auc} | "
                f"{s['seconds_per_attempt']['generation']:.2f} | "
                f"{s['seconds_per_attempt']['grading']:.2f} | {decision(s)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="named model or local directory")
    parser.add_argument("--styles", default=",".join(STYLES), help="comma-separated styles")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated names")
    parser.add_argument("--samples", type=int, help="attempts per cell (200; --smoke: 2)")
    parser.add_argument("--batch", type=int, help="attempts generated together (20; --smoke: 2)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (cells derive theirs)")
    parser.add_argument("--sandbox", default="docker", help="auto | docker | process")
    parser.add_argument(
        "--chat",
        choices=("auto", "on", "off"),
        default="auto",
        help="chat template: auto = on for SmolLM2 on the paper style (as trained before)",
    )
    parser.add_argument("--out", type=Path, help="JSON to write (and resume from)")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print the table of these outputs (with the decision per cell); runs nothing",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny random model, iris, process sandbox, 2 attempts per cell unless --samples "
        "says otherwise (a quick check)",
    )
    args = parser.parse_args(argv)
    if args.report:
        print(markdown(*(json.loads(p.read_text(encoding="utf-8")) for p in args.report)))
        return 0
    args.styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    unknown = sorted(set(args.styles) - set(STYLES))
    if unknown:
        parser.error(f"unknown style(s) {unknown}; choose from {list(STYLES)}")
    args.samples = args.samples or (2 if args.smoke else 200)
    args.batch = args.batch or (2 if args.smoke else 20)
    if args.samples < 1 or args.batch < 1:
        parser.error("--samples and --batch must be >= 1")
    tiny_dir = None
    model = args.model
    args.config_overrides = {}
    if args.smoke:
        from agentbench_poad.models import init_tiny_model

        tiny_dir = tempfile.TemporaryDirectory(prefix="dsc-runnable-smoke-")
        model = str(init_tiny_model(Path(tiny_dir.name) / "tiny", seed=0))
        args.model = "tiny-random"
        args.datasets, args.sandbox, args.chat = ["iris"], "process", "off"
        args.config_overrides = {"lora_layers": 2}  # the tiny model has 2 layers, the preset 8
    try:
        results = probe(args, args.out, model)
    finally:
        if tiny_dir is not None:
            tiny_dir.cleanup()
    for key, cell in results["cells"].items():
        s = cell["summary"]
        low, high = s["wilson95"]
        print(f"{key}: {s['runnable']} of {s['n']} ran (95 % Wilson {low:.3f}-{high:.3f})")
    if args.markdown:
        print(markdown(results))
    if args.out:
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
