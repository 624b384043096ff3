"""Where a training update's time goes, per agent family, against a plain forward + backward.

Run: ``python benchmarks/update_profile.py [--agents poad,twosome,grpo] [--updates 6]
[--threads 2] [--tiny]``.

Each agent trains through the trainer's own :func:`~agentbench_poad.rl.trainer.train` (the
README's main command in miniature: the CPU preset, Overcooked Tomato Salad, episodes capped at 30
decisions, a learning-curve evaluation of 4 sampled episodes every 6 updates, as ``quickstart``
runs it), while a clock attributes every second to the innermost named phase running:

* ``model load`` and ``setup`` (run directory, environments, first resets): before update 1;
* ``rollout: scoring`` (the restricted actions' scores, :meth:`LMPolicy.act`), ``rollout: lower
  layers`` (frozen lower-layer states of sequences and scoring trees met for the first time,
  ``lora_layers``), ``rollout: critic features``, ``rollout: generation`` (open actions),
  ``rollout: env steps``, ``advantages`` (bootstrap values and credit assignment);
* ``update: critic step``, ``update: policy forward`` (the agent's ``evaluate_policy``),
  ``update: policy backward``, ``update: optimiser`` (clip + AdamW step of the policy),
  ``update: KL guard``;
* ``evaluation episodes`` (the learning-curve point), ``log + checkpoint``;
* ``rest``: whatever no phase names (the loops' Python: batching, minibatch selection, losses).

It prints, per agent, the first update and the mean warm update (updates 2 .. N) by phase, each
as a share of its update and as a multiple of an *anchor* measured in the same process: one plain
Hugging Face forward + backward of the same adapted model on a fixed batch (8 sequences of 64
tokens, ``model(ids, labels=ids).loss.backward()``). Bare seconds are printed for reading, never
as a target: the machine's load moves them, the ratios much less.

``--tiny`` runs the same on a tiny random model at a smoke-test size (seconds); the smoke test
(``tests/test_rl_speed.py``) runs it.

Model: ``--model``, else ``$AGENTBENCH_POAD_BENCH_MODEL``, else the cached named model
``smollm2-135m``, else a tiny random model (see ``benchmarks/_bench_model.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from _bench_model import (
    QUICKSTART_MAX_EPISODE_STEPS,
    QUICKSTART_OVERRIDES,
    TINY_MAX_EPISODE_STEPS,
    TINY_OVERRIDES,
    resolve_model,
)

#: The phases in print order.
PHASES = (
    "model load",
    "setup",
    "rollout: scoring",
    "rollout: lower layers",
    "rollout: critic features",
    "rollout: generation",
    "rollout: env steps",
    "advantages",
    "update: critic step",
    "update: policy forward",
    "update: policy backward",
    "update: optimiser",
    "update: KL guard",
    "evaluation episodes",
    "log + checkpoint",
    "rest",
)
#: Phases whose nested calls stay theirs (a forward inside the evaluation is the evaluation's).
SEALED = {
    "cold anchor",
    "model load",
    "update: critic step",
    "update: policy forward",
    "update: KL guard",
    "evaluation episodes",
    "log + checkpoint",
}


class PhaseClock:
    """Exclusive wall time per (update, phase): a second counts for the innermost phase."""

    def __init__(self) -> None:
        self.times: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.bucket: Any = "setup"
        self._stack: list[str] = []
        self._mark = time.perf_counter()

    def _charge(self) -> None:
        now = time.perf_counter()
        self.times[self.bucket][self._stack[-1] if self._stack else "rest"] += now - self._mark
        self._mark = now

    @contextlib.contextmanager
    def phase(self, label: str) -> Iterator[None]:
        if self._stack and self._stack[-1] in SEALED:
            yield
            return
        self._charge()
        self._stack.append(label)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def next_update(self) -> None:
        """Charge what ran so far to the current bucket; later time to the next update."""
        self._charge()
        self.bucket = 1 if self.bucket == "setup" else self.bucket + 1


class Patches:
    """Wrap callables in a phase for the duration of a ``with`` block (restored after)."""

    def __init__(self, clock: PhaseClock) -> None:
        self.clock = clock
        self._undo: list[tuple[Any, str, Any, bool]] = []

    def wrap(
        self, owner: Any, name: str, label: str, *, before: Any = None, optional: bool = False
    ) -> None:
        is_dict = isinstance(owner, dict)
        if optional and (name not in owner if is_dict else not hasattr(owner, name)):
            return  # a stage this tree does not have under that name
        original = owner[name] if is_dict else getattr(owner, name)
        had_own = is_dict or name in vars(owner)
        clock = self.clock

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if before is not None:
                before()
            with clock.phase(label):
                return original(*args, **kwargs)

        if is_dict:
            owner[name] = wrapper
        else:
            setattr(owner, name, wrapper)
        self._undo.append((owner, name, original, had_own))

    def restore(self) -> None:
        for owner, name, original, had_own in reversed(self._undo):
            if isinstance(owner, dict):
                owner[name] = original
            elif had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self._undo.clear()


def _instrument(patches: Patches, agent_class: type, captured: dict[str, Any]) -> None:
    """Put every phase of ``PHASES`` on the functions that run it."""
    import agentbench_poad.rl.env_executors as env_executors
    from agentbench_poad.rl import trainer
    from agentbench_poad.rl.policy import LMPolicy
    from agentbench_poad.rl.ppo import PPOAgent

    try:
        from agentbench_poad.rl.ppo_loop import ppo_update
    except ImportError:  # a tree from before rl/ppo.py was split (--tree)
        from agentbench_poad.rl.ppo import ppo_update

    loop = trainer.train.__globals__  # the trainer's module: its stages by name
    update_loop = ppo_update.__globals__  # the PPO loop's module: critic step, optimiser step
    clock = patches.clock

    original_build = loop["build_policy"]

    def build_policy(*args: Any, **kwargs: Any) -> Any:
        with clock.phase("model load"):
            captured["policy"] = original_build(*args, **kwargs)
        # The process's first forward + backward against its second, before anything trains:
        # what a first call pays once (lazy initialisation), charged to no phase.
        with clock.phase("cold anchor"):
            captured["cold_anchor"] = anchor_seconds(captured["policy"], repeats=2)
        return captured["policy"]

    patches._undo.append((loop, "build_policy", original_build, True))
    loop["build_policy"] = build_policy
    patches.wrap(loop, "_start", "setup")
    # (an older tree names the stages with a leading underscore)
    rollout = "rollout" if "rollout" in loop else "_rollout"
    patches.wrap(loop, rollout, "rest", before=clock.next_update)
    learn_globals = loop["_learn"].__globals__
    bootstrap = "bootstrap" if "bootstrap" in learn_globals else "_bootstrap"
    patches.wrap(learn_globals, bootstrap, "advantages")
    patches.wrap(agent_class, "compute_advantages", "advantages")
    patches.wrap(loop, "_evaluate_if_due", "rest")
    patches.wrap(loop, "evaluate_agent", "evaluation episodes")
    for stage in ("_log", "_checkpoint", "_checkpoint_if_due", "_commit_update"):
        patches.wrap(loop, stage, "log + checkpoint", optional=True)
    patches.wrap(LMPolicy, "_score_restricted", "rollout: scoring")
    patches.wrap(LMPolicy, "_tree_lower_states", "rollout: lower layers")
    patches.wrap(LMPolicy, "_lower_hidden", "rollout: lower layers")
    patches.wrap(LMPolicy, "critic_features", "rollout: critic features")
    patches.wrap(LMPolicy, "_act_open", "rollout: generation")
    patches.wrap(env_executors, "step_envs", "rollout: env steps")
    patches.wrap(update_loop, "critic_step", "update: critic step")
    patches.wrap(agent_class, "evaluate_policy", "update: policy forward")
    patches.wrap(torch.Tensor, "backward", "update: policy backward")
    patches.wrap(update_loop, "_grad_norm_step", "update: optimiser")
    patches.wrap(PPOAgent, "guard_kl", "update: KL guard")


def anchor_seconds(policy: Any, repeats: int = 3, rows: int = 8, tokens: int = 64) -> list[float]:
    """Seconds of one plain forward + backward of ``policy.model`` on a fixed batch, each run."""
    generator = torch.Generator().manual_seed(0)
    vocab = min(int(policy.model.get_input_embeddings().weight.shape[0]), 32000)
    ids = torch.randint(3, vocab, (rows, tokens), generator=generator).to(policy.device)
    policy.model.train()
    spent = []
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            policy.model(input_ids=ids, labels=ids).loss.backward()
            policy.model.zero_grad(set_to_none=True)
            spent.append(time.perf_counter() - start)
    finally:
        policy.model.eval()
    return spent


def profile_agent(
    agent: str, model: str, updates: int, overrides: dict[str, Any], env: str, env_kwargs: dict
) -> tuple[dict[Any, dict[str, float]], float, float]:
    """``(seconds per bucket and phase, anchor seconds (warm, median), first anchor seconds)``."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import train

    algorithm = get_algorithm(agent)
    clock = PhaseClock()
    patches = Patches(clock)
    captured: dict[str, Any] = {}
    _instrument(patches, algorithm, captured)
    try:
        with tempfile.TemporaryDirectory() as out:
            config = algorithm.config_class.preset(_preset(algorithm, env), **overrides)
            train(
                algorithm,
                env,
                model,
                total_steps=updates * config.batch_size,
                out=Path(out) / agent,
                preset=_preset(algorithm, env),
                overrides=overrides,
                env_kwargs=env_kwargs,
                progress=False,
            )
            clock.next_update()  # the time after the last update is not an update's
    finally:
        patches.restore()
    spent = anchor_seconds(captured["policy"])
    times = dict(clock.times)
    times["cold anchor"] = {
        "first": captured["cold_anchor"][0],
        "second": captured["cold_anchor"][1],
    }
    for bucket in times.values():
        bucket.pop("cold anchor", None)
    return times, statistics.median(spent[1:]), spent[0]


def _preset(algorithm: type, env: str) -> str:
    from agentbench_poad.rl.config import preset_for

    return preset_for(algorithm.config_class, env, "mini")


def report(agent: str, times: dict[Any, dict[str, float]], anchor: float) -> None:
    cold = times.get("cold anchor", {})
    updates = sorted(b for b in times if isinstance(b, int) and any(times[b].values()))
    first, warm = updates[0], updates[1:]
    setup = times.get("setup", {})

    def total(bucket: dict[str, float]) -> float:
        return sum(bucket.values())

    warm_mean = {p: statistics.fmean(times[u].get(p, 0.0) for u in warm) for p in PHASES}
    print(
        f"\n{agent}: anchor (plain forward+backward, 8 x 64 tokens) {anchor:.3f} s; "
        f"before update 1 (model load, setup): {total(setup):.1f} s = "
        f"{total(setup) / anchor:.0f} anchors"
    )
    head = f"{'phase':26s} | {'first update':>22s} | {'warm update (mean of ' + str(len(warm)) + ')':>26s}"
    setup_phases = ", ".join(f"{k} {v:.1f} s" for k, v in setup.items() if v >= 0.05)
    print(f"  before update 1: {setup_phases}")
    if cold:
        print(
            f"  the process's first forward+backward (before training): {cold['first']:.3f} s, "
            f"its second {cold['second']:.3f} s: lazy initialisation "
            f"{cold['first'] - cold['second']:+.3f} s, paid once (not in any update below)"
        )
    print(head)
    print("-" * len(head))
    first_total, warm_total = total(times[first]), total(warm_mean)
    for phase in PHASES:
        a, b = times[first].get(phase, 0.0), warm_mean[phase]
        if a == 0.0 and b == 0.0:
            continue
        print(
            f"{phase:26s} | {100 * a / first_total:5.1f} % {a / anchor:7.1f} x {a:5.1f}s | "
            f"{100 * b / warm_total:5.1f} % {b / anchor:7.1f} x {b:6.2f}s"
        )
    print(
        f"{'total':26s} | {100.0:5.1f} % {first_total / anchor:7.1f} x {first_total:5.1f}s | "
        f"{100.0:5.1f} % {warm_total / anchor:7.1f} x {warm_total:6.2f}s"
    )
    print(
        f"ratio: first update / warm update {first_total / warm_total:.2f}; warm update = "
        f"{warm_total / anchor:.1f} anchors (x: multiples of the anchor; s: seconds, for reading)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model (default: see above)")
    parser.add_argument("--agents", default="poad,twosome,grpo", help="comma-separated agents")
    parser.add_argument("--env", default="Overcooked-TomatoSalad-v0")
    parser.add_argument("--updates", type=int, default=6, help="updates per agent (>= 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny random model at a smoke-test size (seconds)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE", help="config override"
    )
    parser.add_argument(
        "--tree",
        default=None,
        help="profile the package of another checkout (e.g. a git worktree of a landed commit)",
    )
    args = parser.parse_args(argv)
    if args.tree:
        from side_by_side import _map_tree

        _map_tree(Path(args.tree))
    if args.threads:
        torch.set_num_threads(args.threads)
    tiny = tempfile.TemporaryDirectory()
    if args.tiny and not args.model:
        from agentbench_poad.models import init_tiny_model

        model = str(init_tiny_model(Path(tiny.name) / "tiny", seed=0, num_layers=4))
        described = "tiny random model (--tiny)"
    else:
        model, described = resolve_model(args.model, tiny, num_layers=4)
    env_kwargs = {
        "max_episode_steps": TINY_MAX_EPISODE_STEPS if args.tiny else QUICKSTART_MAX_EPISODE_STEPS
    }
    import agentbench_poad

    print(f"package: {Path(agentbench_poad.__file__).parent}")
    print(
        f"model: {described}; {args.env} (max {env_kwargs['max_episode_steps']} steps); "
        f"{args.updates} updates per agent; threads {torch.get_num_threads()}"
    )
    for agent in args.agents.split(","):
        overrides: dict[str, Any] = dict(QUICKSTART_OVERRIDES)
        if args.tiny:
            overrides = {**TINY_OVERRIDES, "rollout_length": 6}
            if agent in ("grpo", "gigpo"):
                overrides["group_size"] = 2
        for item in args.set:
            name, _, value = item.partition("=")
            overrides[name] = value
        from agentbench_poad.baselines import get_algorithm

        config_class = get_algorithm(agent).config_class
        overrides = {
            **overrides,
            **config_class.coerce_overrides(
                {k: v for k, v in overrides.items() if isinstance(v, str)}
            ),
        }
        times, anchor, _ = profile_agent(
            agent, model, max(args.updates, 3), overrides, args.env, env_kwargs
        )
        report(agent, times, anchor)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
