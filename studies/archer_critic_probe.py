"""Does an ArCHer run's critic still give credit? Units alive; its advantage against returns.

ArCHer's actor follows ``A = min(Q1, Q2)(s, a) − min(V1, V2)(s)`` from an off-policy TD critic
(baselines/archer.py). Its heads are bias-free ReLU MLPs; a unit that is off on every input gets
no gradient and never comes back, and a head whose units all die outputs 0 everywhere, so the
advantage turns into a state-only constant that per-minibatch normalisation blows up into noise.
This script reads a run's checkpoint (policy adapter, critics and replay buffer; ``agent.pt``
must still be there) and reports, on the transitions of its replay buffer:

* per head, the hidden units positive on at least one transition (of the head's width);
* ``corr(Q − V, G − V)``: the advantage against the discounted Monte Carlo return ``G``
  minus the same ``V``, over the transitions whose episode ended (terminally) inside the
  buffer. Episodes are re-linked by matching each transition's next observation with a later
  transition's observation a few rows on (the buffer stores steps time-major, env-minor), so two
  envs in the same text at the same step can swap: an approximation, fine for a diagnostic;
* the within-observation correlation: both centred per observation text, so only the ranking of
  actions at one state counts (what the actor uses).

Then it trains fresh critics for each ``--lr`` offline on that buffer as it grew during the run
(``--samples-per-update`` per update of ``num_envs × rollout_length`` new transitions, in the
run's ``critic_updates`` steps, same targets, target network and clip) and reports the same for
each. docs/agents.md ("Its own critic lr on CPU") quotes its output on the first Tomato Salad
board run (critic lr 1e-3)::

    python studies/archer_critic_probe.py \\
        runs/archer-board/runs/Overcooked-TomatoSalad-v0/archer/seed0 --lr 1e-3 3e-4 1e-4

It measures; the critic lr it suggests still has to show in a training run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np


def load_agent(run_dir: Path, checkpoint: str | None):
    """The run's ArCHer agent (policy with its adapter, critics, buffer) at ``checkpoint``."""
    import torch

    from agentbench_poad.baselines.archer import Archer, ArcherConfig
    from agentbench_poad.rl.trainer import build_policy, latest_checkpoint

    spec = json.loads((run_dir / "config.json").read_text())
    if spec.get("agent") != "archer":
        sys.exit(f"{run_dir} is a {spec.get('agent')!r} run; this probe reads archer runs")
    path = run_dir / "checkpoints" / checkpoint if checkpoint else latest_checkpoint(run_dir)
    if path is None or not (path / "agent.pt").exists():
        sys.exit(
            f"{path or run_dir} has no agent.pt (the critics and the buffer): pick a checkpoint "
            "that kept it (--checkpoint update_NNNNNN), or train the run again"
        )
    fields = {f.name for f in dataclasses.fields(ArcherConfig)}
    config = ArcherConfig.from_dict({k: v for k, v in spec["algorithm"].items() if k in fields})
    policy = build_policy(config, spec["model"], seed=spec["seed"])
    agent = Archer(config, policy, seed=spec["seed"])
    policy.load_adapter(path / "adapter")
    agent.load_state_dict(torch.load(path / "agent.pt", weights_only=True))
    return agent, config, path.name


def monte_carlo_returns(items, gamma: float, window: int) -> np.ndarray:
    """Discounted return of each transition whose episode ends terminally in the buffer (NaN
    elsewhere), episodes re-linked by next observation within ``window`` rows."""
    n = len(items)
    successor = [-1] * n
    taken: set[int] = set()
    for i, t in enumerate(items):
        if t.done or t.next_observation is None:
            continue
        for j in range(i + 1, min(n, i + 1 + window)):
            if j not in taken and items[j].observation == t.next_observation:
                successor[i] = j
                taken.add(j)
                break
    returns = np.full(n, np.nan)
    for i in range(n - 1, -1, -1):  # successors come later, so they are already known
        t = items[i]
        if t.done:
            returns[i] = t.reward
        elif successor[i] >= 0 and not np.isnan(returns[successor[i]]):
            returns[i] = t.reward + gamma * returns[successor[i]]
    return returns


def _corr(x, y) -> float | None:
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None  # a constant has no correlation (a dead head gives one)
    return float(np.corrcoef(x, y)[0, 1])


def report(critic, everything, items, returns) -> dict:
    """Units alive per head on all transitions; correlations on those with a return."""
    import torch

    joint = torch.cat([everything["states"], everything["pairs"]], dim=-1)
    alive = {
        name: head.active_units(x)
        for name, head, x in (
            ("Q1", critic.q1, joint),
            ("Q2", critic.q2, joint),
            ("V1", critic.v1, everything["states"]),
            ("V2", critic.v2, everything["states"]),
        )
    }
    with torch.no_grad():
        q = critic.q(everything["states"], everything["pairs"]).min(dim=0).values.double()
        v = critic.v(everything["states"]).min(dim=0).values.double()
    known = ~np.isnan(returns)
    advantage, baseline, g = (q - v).numpy()[known], v.numpy()[known], returns[known]
    groups: dict[str, list[int]] = {}
    for k, i in enumerate(np.flatnonzero(known)):
        groups.setdefault(items[i].observation, []).append(k)
    centred_a, centred_g = [], []
    for rows in groups.values():
        if len(rows) > 1:
            centred_a += list(advantage[rows] - advantage[rows].mean())
            centred_g += list(g[rows] - g[rows].mean())
    return {
        "alive": alive,
        "advantage_std": float((q - v).std()) if len(q) > 1 else 0.0,
        "corr": _corr(advantage, g - baseline),
        "within": _corr(centred_a, centred_g),
        "n": int(known.sum()),
    }


def fresh_critic(agent, config, tables, items, lr: float, samples: int, seed: int):
    """A new critic trained on the buffer as it grew: per update of ``num_envs ×
    rollout_length`` new transitions, ``samples`` draws in ``config.critic_updates`` steps."""
    import torch

    from agentbench_poad.baselines.archer import ArcherCritic, td_step
    from agentbench_poad.rl.critic import TargetCritic
    from agentbench_poad.rl.ppo import make_adamw

    critic = ArcherCritic(
        agent.policy.hidden_size,
        config.critic_hidden_sizes,
        generator=torch.Generator().manual_seed(seed),
    )
    target = TargetCritic(critic, tau=config.tau)
    optimizer = make_adamw(list(critic.parameters()), lr)
    rng = np.random.default_rng(seed)
    per_update = config.num_envs * config.rollout_length
    steps = max(1, config.critic_updates)
    batch = max(1, samples // steps)
    for upto in range(per_update, len(items) + per_update, per_update):
        for _ in range(steps):
            draw = [items[i] for i in rng.integers(0, min(upto, len(items)), batch)]
            td_step(
                critic,
                target,
                optimizer,
                tables.batch(draw),
                gamma=config.gamma,
                max_grad_norm=config.max_grad_norm,
            )
    return critic


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Needs the run's agent.pt (ArCHer's critics and replay buffer).",
    )
    parser.add_argument("run", type=Path, help="an archer run directory (train --agent archer)")
    parser.add_argument("--checkpoint", help="update_NNNNNN (default: the newest)")
    parser.add_argument(
        "--lr", type=float, nargs="*", default=[1e-3, 3e-4, 1e-4], help="fresh critics' lrs"
    )
    parser.add_argument(
        "--samples-per-update",
        type=int,
        default=None,
        help="critic samples per update for the fresh critics (default: the run's "
        "critic_updates x critic_batch_size)",
    )
    parser.add_argument("--seed", type=int, default=0, help="fresh critics' init and draws")
    args = parser.parse_args(argv)
    if not (args.run / "config.json").exists():
        parser.error(f"{args.run} is not a run directory (no config.json)")

    import torch

    from agentbench_poad.baselines.archer import _FeatureTables

    torch.set_num_threads(1)
    agent, config, checkpoint = load_agent(args.run, args.checkpoint)
    items = list(agent.replay.items)
    if not items:
        sys.exit(f"{args.run} {checkpoint}: the replay buffer is empty")
    returns = monte_carlo_returns(items, config.gamma, window=4 * config.num_envs + 8)
    print(
        f"{args.run} {checkpoint}: {len(items)} transitions, {int((~np.isnan(returns)).sum())} "
        f"with a Monte Carlo return (episodes that ended in the buffer)",
        flush=True,
    )
    tables = _FeatureTables(agent, items)
    everything = tables.batch(items)
    samples = args.samples_per_update or config.critic_updates * config.critic_batch_size
    rows = [
        (
            f"the run's critic (lr {config.critic_lr:g})",
            report(agent.utterance_critic, everything, items, returns),
        )
    ]
    for lr in args.lr:
        critic = fresh_critic(agent, config, tables, items, lr, samples, args.seed)
        rows.append((f"fresh, lr {lr:g}", report(critic, everything, items, returns)))
    print(
        "| critic | units alive (Q1, Q2, V1, V2) | std(Q − V) | corr(Q − V, G − V) | "
        "within-observation corr | n |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        alive = ", ".join(f"{a}/{t}" for a, t in r["alive"].values())
        print(
            f"| {name} | {alive} | {r['advantage_std']:.4f} | {_fmt(r['corr'])} | "
            f"{_fmt(r['within'])} | {r['n']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
