"""How often does a base model write DataSciCoding code that runs, under three prompt layouts?

Issue 12 item 4 asks for this before any POAD-vs-NTPO comparison on DataSciCoding: without one
attempt that runs there is no reward signal to assign credit for. The board's record
``DataSciCoding-iris-v0__base__smollm2-135m`` measures the environment's own prompt (``plain``).
This probe adds two layouts that favour a small instruct model, so a 0 is not an artefact of
the prompt:

* ``plain``: the environment's observation as is (what every agent sees);
* ``chat``: the same observation wrapped in the tokenizer's chat template as a user turn, and the
  first Markdown code block of the reply submitted (the whole reply when there is none);
* ``completion``: a Python module to complete: the task in a module docstring, ``import numpy``,
  the ``build_model`` signature and its docstring line. The continuation is
  submitted as the body (generation stops at ``return``, as for every open action).

Each attempt is graded by the real environment (``env.step``, the sandbox, 5 splits): an attempt
"runs" when its reward is not the failure penalty. Sampling uses the policy's open-action
settings (temperature 0.5, up to 128 new tokens, the reference's). Example::

    OMP_NUM_THREADS=1 python studies/dsc_prompt_probe.py --samples 24 \\
        --out studies/probes/dsc-prompt-probe-smollm2-135m.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

FORMATS = ("plain", "chat", "completion")


def completion_prompt(description: str, shape: tuple[int, int], n_classes: int) -> str:
    """A module for the model to continue, ending inside ``build_model``'s body."""
    rows, features = shape
    return (
        f'"""Train a classifier on the "{description}" dataset: {rows} rows of {features} '
        f"numeric features, labels 0..{n_classes - 1}.\n"
        "Scored by ROC AUC on held-out rows; the classifier must have predict_proba.\n"
        '"""\n'
        "import numpy as np\n\n\n"
        "def build_model(x_train: np.ndarray, y_train: np.ndarray):\n"
        '    """Build a scikit-learn classifier, fit it on x_train and y_train, store it in '
        '`model`."""\n'
    )


def probe(
    model: str, dataset: str, samples: int, batch: int, sandbox: str, formats: list[str]
) -> dict:
    import gymnasium as gym
    import torch
    from tqdm.auto import tqdm

    import agentbench_poad  # noqa: F401 - registers the ids
    from agentbench_poad.models import LoraSettings
    from agentbench_poad.rl.policy import LMPolicy

    policy = LMPolicy(model, lora=LoraSettings())
    # The chat layout is the agents' own, LMPolicy(chat_template=True): the observation as a
    # user turn, the reply's first code block submitted (reply_code).
    chat = LMPolicy(model, lora=LoraSettings(), chat_template=True) if "chat" in formats else None
    env = gym.make(f"DataSciCoding-{dataset}-v0", sandbox=sandbox)
    observation, _ = env.reset(seed=0)
    data = env.unwrapped.dataset  # loaded by reset: the facts the environment's prompt states
    prompts = {
        "plain": observation,
        "chat": observation,
        "completion": completion_prompt(data.description, data.shape, data.n_classes),
    }
    results: dict = {"model": model, "dataset": dataset, "sandbox": sandbox, "formats": {}}
    generator = torch.Generator().manual_seed(0)
    for name in formats:
        prompt = prompts[name]
        layout_policy = chat if name == "chat" else policy
        attempts = []
        start = time.perf_counter()
        with tqdm(total=samples, desc=name, unit="attempt") as bar:
            while len(attempts) < samples:
                n = min(batch, samples - len(attempts))
                for sample in layout_policy.act([prompt] * n, [None] * n, generator=generator):
                    action = sample.text
                    env.reset(seed=0)
                    _, reward, _, _, step_info = env.step(action)
                    attempts.append(
                        {
                            "reward": float(reward),
                            "runs": bool(reward > -1.0),
                            "error": step_info.get("failure_category"),
                            "action": action,
                        }
                    )
                    bar.update(1)
        runs = sum(a["runs"] for a in attempts)
        results["formats"][name] = {
            "prompt": layout_policy.prompt_text(prompt),
            "attempts": len(attempts),
            "runs": runs,
            "best_reward": max(a["reward"] for a in attempts),
            "seconds": round(time.perf_counter() - start, 1),
            "samples": attempts,
        }
        print(f"{name}: {runs} of {len(attempts)} attempts ran", flush=True)
    env.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="named model or local directory")
    parser.add_argument("--dataset", default="iris", help="a DataSciCoding dataset name")
    parser.add_argument("--samples", type=int, default=24, help="attempts per prompt layout")
    parser.add_argument("--batch", type=int, default=8, help="attempts generated together")
    parser.add_argument("--sandbox", default="auto", help="auto | docker | process")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated layouts")
    parser.add_argument("--out", type=Path, help="write the attempts and counts as JSON")
    args = parser.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        parser.error(f"unknown layout(s) {unknown}; choose from {list(FORMATS)}")
    if args.samples < 1 or args.batch < 1:
        parser.error("--samples and --batch must be >= 1")
    results = probe(args.model, args.dataset, args.samples, args.batch, args.sandbox, formats)
    if args.out:
        from agentbench_poad.rl.run_dir import write_json

        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, results)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
