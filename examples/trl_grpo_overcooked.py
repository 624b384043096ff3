"""Train SmolLM2-135M-Instruct with TRL's GRPOTrainer against a served Overcooked Tomato Salad.

The environment runs as an OpenEnv server (``agentbench-poad serve Overcooked-TomatoSalad-v0``,
or one this script starts in a background thread when ``--url`` is not given) and every episode
is played through OpenEnv's client, as an outside trainer would. TRL trains a LoRA adapter
(peft) on CPU and the script writes it, with a manifest of the trainer, its version and its
configuration, to ``OUT/adapter``. Put it on the board with::

    agentbench-poad evaluate --agent lm:smollm2-135m --adapter OUT/adapter \\
        --env Overcooked-TomatoSalad-v0 --seeds 100 101 102 --episodes 10 --name trl-grpo

How TRL is driven (docs/integrations.md): TRL's own environment path (``environment_factory``)
exposes an environment's methods as *tools* and needs a chat template that can render tool
calls; SmolLM2-135M-Instruct's cannot, and ``GRPOTrainer.__init__`` stops with "The provided
chat template does not support tool calling". vLLM is not the obstacle (``use_vllm`` stays off:
generation runs in transformers on CPU). So this script uses TRL's lower-level ``rollout_func``:
one rollout is one episode on the server. Each turn the model samples one of the offered
actions (its own distribution restricted to them: probability proportional to the product of the
action's token probabilities, i.e. constrained decoding) and the server's next observation is
appended; ``env_mask`` tells TRL which tokens the model wrote (the actions) and which the
environment wrote, and the episode's return is the GRPO reward.

Quick check (the opt-in test ``pytest -m trl`` runs this; ~4 minutes on 2 CPU cores beside a training job)::

    python examples/trl_grpo_overcooked.py --steps 2 --max-turns 3 --out /tmp/trl-run

A longer run (hours on CPU)::

    python examples/trl_grpo_overcooked.py --steps 100 --max-turns 10 --out runs/trl-grpo-overcooked
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import random
import sys
import time
from pathlib import Path

ENV_ID = "Overcooked-TomatoSalad-v0"
MANIFEST = "agentbench_trainer.json"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", help="a running server (default: start one in this process)")
    p.add_argument("--env", default=ENV_ID, help="the served id (restricted-action ids)")
    p.add_argument("--model", default="smollm2-135m", help="named model, directory or hub id")
    p.add_argument("--out", required=True, help="output folder; the adapter goes to OUT/adapter")
    p.add_argument("--steps", type=int, default=2, help="GRPO optimiser steps")
    p.add_argument("--num-generations", type=int, default=2, help="episodes per seed (group)")
    p.add_argument("--seeds-per-step", type=int, default=1, help="distinct seeds per step")
    p.add_argument("--max-turns", type=int, default=4, help="actions per episode (<= time limit)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=[1000, 1001])
    p.add_argument("--lr", type=float, default=1e-4, help="learning rate")
    p.add_argument("--seed", type=int, default=0, help="trainer and sampling seed")
    return p.parse_args(argv)


def resolve(model: str) -> str:
    from agentbench_poad.models import resolve_model

    return resolve_model(model)


class EpisodeRoller:
    """TRL's ``rollout_func``: plays one episode on the server per prompt."""

    def __init__(self, remote, tokenizer, *, max_turns: int, seed: int) -> None:
        self.remote = remote
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.rng = random.Random(seed)
        self.episodes = 0
        self.env_steps = 0  # actions sent to the server: the env-step budget the board compares
        self.returns: list[float] = []

    def _ids(self, text: str, special: bool = False) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def _score(self, model, context: list[int], candidates: list[list[int]]) -> list[list[float]]:
        """Per-token log-probabilities of each candidate after ``context``: the context runs
        once and its key/value cache is shared by the candidates (right-padded, so padding
        never changes a real token's logits under the causal mask)."""
        import torch

        # transformers renamed `past_key_values` to `cache` (5.x); speak whichever it takes
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        key = (
            "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        )
        with torch.no_grad():
            out = model(input_ids=torch.tensor([context]), use_cache=True)
            first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
            cache = getattr(out, key)
            cache.batch_repeat_interleave(len(candidates))
            width = max(len(c) for c in candidates)
            pad = self.tokenizer.pad_token_id
            ids = torch.tensor([c + [pad] * (width - len(c)) for c in candidates])
            logits = model(input_ids=ids, use_cache=True, **{key: cache}).logits.float()
            logp = torch.log_softmax(logits, dim=-1)
        scores = []
        for i, c in enumerate(candidates):
            row = [float(first[c[0]])]
            row += [float(logp[i, j - 1, c[j]]) for j in range(1, len(c))]
            scores.append(row)
        return scores

    def play(self, model, seed: int) -> tuple[list[int], list[int], list[float], list[int], float]:
        prompt, info = self.remote.reset(seed=seed)
        prompt_ids = self._ids(prompt, special=True)
        completion, logprobs, env_mask = [], [], []
        total = 0.0
        for turn in range(self.max_turns):
            actions = info["available_actions"]
            candidates = [self._ids(" " + a) for a in actions]
            scores = self._score(model, prompt_ids + completion, candidates)
            weights = [math.exp(sum(s) - max(sum(t) for t in scores)) for s in scores]
            k = self.rng.choices(range(len(actions)), weights=weights)[0]
            completion += candidates[k]
            logprobs += scores[k]
            env_mask += [1] * len(candidates[k])
            prompt, reward, terminated, truncated, info = self.remote.step(actions[k])
            self.env_steps += 1
            total += reward
            if terminated or truncated or turn == self.max_turns - 1:
                break
            feedback = self._ids("\n" + prompt)
            completion += feedback
            logprobs += [0.0] * len(feedback)
            env_mask += [0] * len(feedback)
        return prompt_ids, completion, logprobs, env_mask, total

    def __call__(self, prompts: list, trainer) -> dict:
        model = trainer.model
        was_training = model.training
        model.eval()
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        out["env_return"] = []
        for prompt in prompts:
            text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            seed = int(text.rsplit("seed=", 1)[1])
            p, c, lp, m, total = self.play(model, seed)
            for key, value in zip(
                ("prompt_ids", "completion_ids", "logprobs", "env_mask"), (p, c, lp, m)
            ):
                out[key].append(value)
            out["env_return"].append(total)
            self.returns.append(total)
            self.episodes += 1
        model.train(was_training)
        return out


def env_return(prompts, completions, env_return, **kwargs) -> list[float]:
    """GRPO reward: the episode's return on the server."""
    return [float(r) for r in env_return]


def main(argv=None) -> int:
    args = parse_args(argv)
    import openenv
    import peft
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from agentbench_poad.models import LoraSettings
    from agentbench_poad.serve.app import ServerThread
    from agentbench_poad.serve.client import RemoteTextEnv

    started = time.monotonic()
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_path = resolve(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    server = None if args.url else ServerThread(args.env).start()
    url = args.url or server.base_url
    try:
        with RemoteTextEnv(url) as remote:
            group = args.num_generations
            per_step = group * args.seeds_per_step
            config = GRPOConfig(
                output_dir=str(out / "trainer"),
                max_steps=args.steps,
                per_device_train_batch_size=per_step,
                gradient_accumulation_steps=1,
                num_generations=group,
                learning_rate=args.lr,
                beta=0.0,
                temperature=1.0,
                logging_steps=1,
                save_strategy="no",
                report_to="none",
                use_cpu=True,
                bf16=False,
                seed=args.seed,
                dataloader_num_workers=0,
                mask_truncated_completions=False,
                gradient_checkpointing=False,  # 135M parameters: memory is not the limit on CPU
            )
            lora = LoraSettings()  # the paper's adapter (r 8, alpha 16, q_proj and v_proj)
            roller = EpisodeRoller(remote, tokenizer, max_turns=args.max_turns, seed=args.seed)
            seeds = list(args.train_seeds)
            dataset = Dataset.from_dict({"prompt": [f"{args.env} seed={s}" for s in seeds]})
            trainer = GRPOTrainer(
                model=model_path,
                reward_funcs=[env_return],
                args=config,
                train_dataset=dataset,
                processing_class=tokenizer,
                peft_config=lora.to_peft_config(),
                rollout_func=roller,
            )
            trainer.train()
            adapter = out / "adapter"
            trainer.model.save_pretrained(adapter)
    finally:
        if server is not None:
            server.stop()

    manifest = {
        "agent_name": "trl-grpo",
        "trainer": "trl.GRPOTrainer (rollout_func)",
        "trainer_version": f"trl {trl.__version__}",
        "software": {
            "trl": trl.__version__,
            "openenv-core": getattr(openenv, "__version__", None) or _dist_version("openenv-core"),
            "peft": peft.__version__,
            "torch": torch.__version__,
        },
        "env_id": args.env,
        "server": "in-process ServerThread" if server is not None else url,
        "base_model": args.model,
        "train_seeds": seeds,
        "steps": args.steps,
        "env_steps": roller.env_steps,
        "episodes": roller.episodes,
        "mean_return": sum(roller.returns) / max(len(roller.returns), 1),
        "config": {
            "num_generations": group,
            "per_device_train_batch_size": per_step,
            "learning_rate": args.lr,
            "beta": 0.0,
            "temperature": 1.0,
            "max_turns": args.max_turns,
            "lora": {
                "r": lora.r,
                "alpha": lora.alpha,
                "dropout": lora.dropout,
                "target_modules": list(lora.target_modules),
            },
            "action_choice": "sampled from the offered actions, p ~ prod of token probabilities",
            "seed": args.seed,
        },
        "command": " ".join(["python", "examples/trl_grpo_overcooked.py", *(argv or sys.argv[1:])]),
        "wall_time_s": round(time.monotonic() - started, 1),
    }
    (adapter / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    print(
        f"adapter: {adapter}  ({roller.episodes} episodes, mean return "
        f"{manifest['mean_return']:.3f}, {manifest['wall_time_s']} s)"
    )
    return 0


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
