"""Turn training runs (``agentbench_poad.rl.trainer.train`` run dirs) into run records.

``record_from_runs([run_dir, ...])`` reads each run's ``config.json``, its learning curve
(``learning_curve.json``, else the ``eval_return`` entries of ``metrics.jsonl``) and, for
open-action envs, ``best_code.json``; it then evaluates the last checkpoint of every run with the
protocol (one run = one seed of the record, the run's training seed) and writes one record. Runs
of several training seeds of the same agent/env/model are combined; the learning curve is their
mean with a standard-error band (:mod:`~agentbench_poad.leaderboard.curves`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.config_source import without_spec_path
from agentbench_poad.leaderboard.curves import (  # noqa: F401 - the CURVE_X names re-exported
    CURVE_X_GRID,
    CURVE_X_MEAN_STEP,
    combine_curves,
    read_learning_curve,
)
from agentbench_poad.leaderboard.records import RecordError
from agentbench_poad.leaderboard.runs import resolve_run, stored_run_path
from agentbench_poad.registration import env_facts
from agentbench_poad.rl.config import IMPLIED_WHEN_ABSENT

#: How the best code found during training is labelled in records and reports.
BEST_CODE_LABEL = "best code found during training (not the final policy)"


def read_run_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise RecordError(
            f"{run_dir} is not a training run dir (no config.json); make one "
            "with `agentbench-poad train` or agentbench_poad.rl.trainer.train()"
        )
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{path} is not valid JSON ({exc.msg}); the run dir is corrupt") from exc


#: metrics.jsonl keys of the KL guard's count per update, and the names runs logged before
#: issue 27 used for them.
_POLICY_STEP_KEYS = {
    "policy_steps_taken": "policy_steps",
    "policy_steps_skipped": "skipped_kl",
}


def read_policy_steps(run_dir: Path) -> dict[str, int | None]:
    """Policy steps PPO took and the KL guard skipped over a run (sums over its updates).

    ``{"policy_steps_taken": n, "policy_steps_skipped": m}``; a count is None when the run's
    metrics do not log it (or there are no metrics).
    """
    metrics = Path(run_dir) / "metrics.jsonl"
    sums: dict[str, int | None] = dict.fromkeys(_POLICY_STEP_KEYS)
    if not metrics.exists():
        return sums
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict):
            continue
        for key, old_key in _POLICY_STEP_KEYS.items():
            value = row.get(key, row.get(old_key))
            if isinstance(value, (int, float)):
                sums[key] = (sums[key] or 0) + int(value)
    return sums


def _summed_policy_steps(run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The record's ``training`` fields of the KL guard: totals over runs and per seed run."""
    counts = [read_policy_steps(r) for r in run_dirs]
    out: dict[str, Any] = {}
    for key in _POLICY_STEP_KEYS:
        values = [c[key] for c in counts]
        out[key] = None if any(v is None for v in values) else sum(v for v in values if v)
    taken, skipped = out["policy_steps_taken"], out["policy_steps_skipped"]
    total = None if taken is None or skipped is None else taken + skipped
    out["policy_steps_skipped_fraction"] = skipped / total if total else None
    return out


#: The update safeguards every agent shares (docs/agents.md, "Stable updates"): a record says
#: which ones its runs used, and whether they were the package's defaults.
SAFEGUARD_FIELDS = (
    "dual_clip",
    "normalize_advantages",
    "normalize_over",
    "advantage_std_floor",
    "skip_signal_free",
)
#: Safeguard fields added after records existed, with the value every earlier run used: a run
#: config that lacks one ran with that value (its record's ``safeguards`` then omit it, so the
#: records made before it existed recompute unchanged).
ADDED_SAFEGUARD_FIELDS = IMPLIED_WHEN_ABSENT


def algorithm_defaults(algorithm_source: dict[str, Any] | None) -> Any:
    """The default config of the algorithm a run names (its ``algorithm_source``).

    A built-in algorithm's own config class (GRPO and GiGPO leave per-minibatch re-normalisation
    off by definition: their advantages are normalised within groups); for any other run, one
    made before ``algorithm_source`` existed or a user's algorithm (whose module is not imported
    here), the shared :class:`~agentbench_poad.rl.config.PPOConfig` defaults.

    The spec is looked up in the package's table of built-in algorithms
    (:func:`~agentbench_poad.leaderboard.loadable.builtin_algorithm`), never imported: a run's
    or record's spec is data (``agentbench_poad.x/evil.py:X`` names a file to import).
    """
    from agentbench_poad.leaderboard.loadable import builtin_algorithm
    from agentbench_poad.rl.config import PPOConfig

    builtin = builtin_algorithm((algorithm_source or {}).get("spec"))
    # a built-in renamed since the run, or a user's algorithm: the shared defaults
    return builtin.config_class() if builtin is not None else PPOConfig()


def safeguards_are_default(
    settings: dict[str, Any], algorithm_source: dict[str, Any] | None
) -> bool:
    """Whether the safeguard ``settings`` (:data:`SAFEGUARD_FIELDS`) are the defaults of the
    algorithm the run names (:func:`algorithm_defaults`)."""
    defaults = algorithm_defaults(algorithm_source)
    return all(settings.get(k) == getattr(defaults, k) for k in SAFEGUARD_FIELDS) and all(
        settings.get(k, implied) == getattr(defaults, k)
        for k, implied in ADDED_SAFEGUARD_FIELDS.items()
    )


def _safeguards(configs: Sequence[dict[str, Any]], run_dirs: Sequence[Path]) -> dict[str, Any]:
    """The record's ``training`` fields of the shared update rule and the budget actually used:
    the guard kind, the safeguard settings (None for runs made before they existed), whether
    they are the defaults, and the env steps each run used (its last metrics line)."""
    from agentbench_poad.rl.run_dir import RunDirectory

    algorithm = configs[0].get("algorithm") or {}
    settings = {k: algorithm.get(k) for k in SAFEGUARD_FIELDS}
    settings.update({k: algorithm[k] for k in ADDED_SAFEGUARD_FIELDS if k in algorithm})
    known = all(k in algorithm for k in SAFEGUARD_FIELDS)
    used: dict[str, int | None] = {}
    for config, run in zip(configs, run_dirs):
        lines = RunDirectory(run).read_metrics()
        steps = lines[-1].get("env_steps") if lines else None
        used[str(config.get("seed"))] = int(steps) if steps is not None else None
    return {
        "guard": configs[0].get("guard", "shared"),
        "safeguards": settings if known else None,
        "safeguards_default": (
            safeguards_are_default(settings, configs[0].get("algorithm_source")) if known else None
        ),
        "env_steps_used": used,
    }


def _curve_label(run_dirs: Sequence[str | Path]) -> str:
    """What the runs' learning-curve points are: greedy or sampled evaluations (the config's
    ``eval_greedy``; runs written before that field existed evaluated greedily)."""
    modes = {
        bool(read_run_config(Path(r)).get("algorithm", {}).get("eval_greedy", True))
        for r in run_dirs
    }
    if modes == {True}:
        return "greedy evaluation return"
    if modes == {False}:
        return "sampled evaluation return"
    return "evaluation return (greedy and sampled runs)"


def read_best_code(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / "best_code.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None
    code = data.get("code", data.get("action"))
    reward = data.get("reward")
    if code is None or reward is None:
        return None
    return {"label": BEST_CODE_LABEL, "reward": float(reward), "code": str(code)}


def best_code_of_runs(run_dirs: dict[str, Path]) -> dict[str, Any] | None:
    """The best code over runs (seed -> run dir): the highest reward, with its seed."""
    best = [b | {"seed": int(s)} for s, r in run_dirs.items() if (b := read_best_code(Path(r)))]
    return max(best, key=lambda b: b["reward"]) if best else None


def load_run_agent(runs: dict[str, str], seed: int, greedy: bool = True) -> Any:
    """Factory used by records of trained agents: the agent of the run trained with ``seed``."""
    from agentbench_poad.rl.trainer import load_agent

    try:
        run_dir = runs[str(seed)]
    except KeyError:
        raise RecordError(f"no training run for seed {seed} (runs: {sorted(runs)})") from None
    return load_agent(resolve_run_dir(run_dir), greedy=greedy)


def resolve_run_dir(run_dir: str | Path) -> Path:
    """A record's run path: absolute as written, or relative to the runs root
    (:mod:`agentbench_poad.leaderboard.runs`: ``--runs`` / ``$AGENTBENCH_POAD_RUNS`` / the
    checkout's ``runs/``)."""
    return resolve_run(run_dir)


def record_from_runs(
    run_dirs: Sequence[Path | str],
    *,
    episodes: int = 10,
    env_id: str | None = None,
    greedy: bool = True,
    action_timeout: float | None = 60.0,
    agent_name: str | None = None,
    command: str | None = None,
    progress: bool = False,
    out_dir: Path | str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Evaluate the final checkpoints of training runs and build one record.

    Args:
        run_dirs: run dirs of the same agent, env and base model (one per training seed).
        episodes: evaluation episodes per run.
        env_id: evaluate on this id instead of the training env (generalisation rows).
        greedy: act greedily (the paper's VirtualHome protocol samples: pass ``False``).
        action_timeout, agent_name, command, progress, out_dir: as in ``evaluate``.
        env_kwargs: ``gym.make`` arguments (default: the runs' own when evaluating on their
            training env, else none).
        config: extra configuration stored in the record.
        batch_size: episodes played in lockstep (default: all of a seed's, as the trainer's
            learning curve plays them, so the record matches the curve's last point).
    """
    from agentbench_poad.leaderboard.protocol import EvaluationPlan, Provenance, evaluate_plan

    run_dirs = [Path(r).resolve() for r in run_dirs]
    if not run_dirs:
        raise ValueError("record_from_runs needs at least one run dir")
    configs = [read_run_config(r) for r in run_dirs]
    first = configs[0]
    for key in ("agent", "env_id", "model"):
        values = {json.dumps(c.get(key), sort_keys=True, default=str) for c in configs}
        if len(values) > 1:
            raise RecordError(
                f"the runs differ in {key!r} ({sorted(values)}); a record "
                "combines runs of one agent, env and model only"
            )
    runs: dict[str, str] = {}
    local: dict[str, Path] = {}  # seed -> the run dir as given (``runs`` holds stored paths)
    for run_dir, cfg in zip(run_dirs, configs):
        seed = int(cfg.get("seed", len(runs)))
        if str(seed) in runs:
            raise RecordError(
                f"two runs share training seed {seed}: {runs[str(seed)]} and {run_dir}"
            )
        runs[str(seed)] = stored_run_path(run_dir)
        local[str(seed)] = Path(run_dir)
    train_env = first.get("env_id")
    eval_env = env_id or train_env
    if not eval_env:
        raise RecordError(f"{run_dirs[0]}/config.json names no env_id; pass env_id")
    if env_kwargs is None and eval_env == train_env:
        env_kwargs = dict(first.get("env_kwargs") or {})  # the env the runs trained on
    from agentbench_poad.leaderboard.loadable import check_env_id, check_env_kwargs

    # before any env id is looked up or made: a run's config is data, like a record (issue 64)
    where = f"{run_dirs[0]}/config.json"
    if train_env is not None:
        check_env_id(train_env, f"{where}: env_id", registered=True)
    check_env_id(eval_env, "the evaluation env id", registered=True)
    env_kwargs = check_env_kwargs(env_kwargs, f"{where}: env_kwargs")
    agent = str(agent_name or first.get("agent") or "agent")
    model = first.get("model")
    base_model = (
        model
        if isinstance(model, str)
        else (model or {}).get("name")
        if isinstance(model, dict)
        else None
    )
    if isinstance(model, str):  # before any model loads (a relative path of an older run)
        from agentbench_poad.models.reference import model_problem

        if problem := model_problem(model, where=f"the runs' model ({run_dirs[0]})"):
            raise RecordError(problem)
    curve = combine_curves([read_learning_curve(r) for r in run_dirs], y=_curve_label(run_dirs))
    best_code = best_code_of_runs(local)
    total_steps = first.get("total_steps")
    sources = {json.dumps(c.get("config_source"), sort_keys=True) for c in configs}
    specs = {str((c.get("config_source") or {}).get("spec")) for c in configs}
    unspelled = {
        json.dumps(without_spec_path(c.get("config_source")), sort_keys=True) for c in configs
    }
    if len(sources) > 1 and len(unspelled) == 1:
        raise RecordError(
            f"the runs name their study's spec by different paths ({sorted(specs)}): the same "
            "configuration, but a record combines runs of one config_source (a study resumed "
            "by another path than it started with, which `study` refuses before any run): set "
            "training.config_source.spec in the odd runs' config.json to the path the others name"
        )
    if len(sources) > 1:
        raise RecordError(
            "the runs were trained with configs from different sources "
            f"(config_source: {sorted(sources)}); a record combines runs of one configuration"
        )
    training = {
        "env_id": train_env,
        "runs": list(runs.values()),
        "total_steps": int(total_steps) if isinstance(total_steps, (int, float)) else None,
        "best_code": best_code,
        # The KL guard's count, summed over the runs' updates (docs/agents.md, "One KL guard").
        **_summed_policy_steps(run_dirs),
        **_safeguards(configs, [Path(r) for r in run_dirs]),
    }
    sessions = {str(c.get("seed", i)): c.get("code_sessions") for i, c in enumerate(configs)}
    if any(sessions.values()):  # the code each run trained with, session by session
        training["code_sessions"] = sessions
    if first.get("config_source") is not None:  # a study's tuning chose the config
        training["config_source"] = first["config_source"]
    if first.get("algorithm_source") is not None:  # the algorithm's class spec and its version
        training["algorithm"] = first["algorithm_source"]
    suffix = None
    if env_id and train_env and env_id != train_env:
        suffix = f"trainedon-{env_facts(str(train_env)).task}"
    plan = EvaluationPlan(
        agent="agentbench_poad.leaderboard.from_run:load_run_agent",
        env_ids=(eval_env,),
        seeds=tuple(int(s) for s in runs),
        episodes=episodes,
        agent_kwargs={"runs": runs, "greedy": greedy},
        env_kwargs=env_kwargs or {},
        action_timeout=action_timeout,
        batch_size=batch_size,
    )
    provenance = Provenance(
        agent_name=agent,
        base_model=base_model,
        adapter="LoRA (last checkpoint of each run)",
        greedy=greedy,
        learning_curve=curve if eval_env == train_env else None,
        training=training,
        config={"training_config": first, **(config or {})},
        command=command,
        record_suffix=suffix,
    )
    return evaluate_plan(plan, provenance, progress=progress, out_dir=out_dir)[0]
