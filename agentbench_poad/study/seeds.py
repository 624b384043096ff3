"""The seed rules of a tuned study: a group evaluates on seeds its tuning never trained on, and on
seeds no earlier study beside its spec evaluated on (per task). Tuning seeds may be shared
across studies; evaluation seeds may not (docs/study.md, "Tuning")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentbench_poad.study.specfile import StudyError, read_spec
from agentbench_poad.study.tuning import Tuning

__all__ = [
    "check_evaluation_seeds",
    "check_fresh_seeds",
    "check_group_seeds",
    "earlier_evaluation_seeds",
    "evaluation_seeds",
]

#: ``(spec file name, env id -> seeds)`` of each study spec beside a spec
EarlierSeeds = Sequence[tuple[str, dict[str, set[int]]]]


def evaluation_seeds(
    group: dict[str, Any], default_eval: dict[str, Any], seeds: Sequence[int]
) -> dict[str, set[int]]:
    """Env id -> the seeds a spec group evaluates on: its seeds (a trained agent is evaluated on
    its training seeds) and its evaluation protocol's, on its envs and its ``eval_envs``."""
    protocol = {**default_eval, **(group.get("eval") or {})}
    found = {int(s) for s in [*seeds, *(protocol.get("seeds") or [])]}
    envs = [*(group.get("envs") or []), *(group.get("eval_envs") or [])]
    return {str(env): set(found) for env in envs}


def earlier_evaluation_seeds(path: Path) -> list[tuple[str, dict[str, set[int]]]]:
    """The evaluation seeds of every other study spec beside ``path`` (``*.toml`` and
    ``*.json`` in its folder, e.g. ``studies/``): ``(spec file name, env id -> seeds)``. A
    file that does not read as a spec with ``[[group]]`` blocks is no study and is skipped."""
    found = []
    for other in sorted([*path.parent.glob("*.toml"), *path.parent.glob("*.json")]):
        if other.resolve() == path.resolve():
            continue
        try:
            spec = read_spec(other)
        except (StudyError, OSError, UnicodeDecodeError):
            continue
        groups = spec.get("group") if isinstance(spec, dict) else None
        if not isinstance(groups, list):
            continue
        head = spec.get("study") if isinstance(spec.get("study"), dict) else {}
        default_eval = spec.get("eval") if isinstance(spec.get("eval"), dict) else {}
        by_env: dict[str, set[int]] = {}
        for group in groups:
            if not isinstance(group, dict):
                continue
            try:
                seeds = [int(s) for s in group.get("seeds", head.get("seeds", [0]))]
                for env, env_seeds in evaluation_seeds(group, default_eval, seeds).items():
                    by_env.setdefault(env, set()).update(env_seeds)
            except (TypeError, ValueError, AttributeError):
                continue  # a malformed group: that spec's own load names it
        found.append((other.name, by_env))
    return found


def check_evaluation_seeds(
    tuning: Tuning, where: str, seeds: Iterable[int], problems: list[str]
) -> None:
    """An evaluation group's seeds must be disjoint from the tuning seeds."""
    overlap = sorted(set(seeds) & tuning.seeds)
    if overlap:
        whose = f" of {tuning.where} on {tuning.task}" if tuning.entry else ""
        problems.append(
            f"{where}: evaluation seeds {overlap} are tuning seeds{whose}; evaluate on seeds the "
            f"tuning never saw (tuning seeds: {sorted(tuning.seeds)})"
        )


def check_fresh_seeds(
    where: str,
    group: dict[str, Any],
    default_eval: dict[str, Any],
    seeds: Sequence[int],
    earlier: EarlierSeeds,
    problems: list[str],
) -> None:
    """A tuned study evaluates on seeds no earlier study evaluated on, per task: each overlap
    with another spec beside it is a problem naming the spec, the task and the seeds. (Tuning
    seeds may be shared across studies; evaluation seeds may not.)"""
    for env, mine in evaluation_seeds(group, default_eval, seeds).items():
        for name, by_env in earlier:
            overlap = sorted(mine & by_env.get(env, set()))
            if overlap:
                problems.append(
                    f"{where}: evaluation seeds {overlap} on {env} were evaluation seeds of "
                    f"the study {name}; evaluate on seeds no earlier study looked at"
                )


def check_group_seeds(
    where: str,
    group: dict[str, Any],
    default_eval: dict[str, Any],
    seeds: Sequence[int],
    tunings: Sequence[Tuning],
    tuning: Tuning | None,
    earlier: EarlierSeeds,
    problems: list[str],
) -> None:
    """Both rules for one group of a spec with tuning protocols (``tunings``; ``tuning`` is the
    one that tunes this group, if any). With a single protocol every group is checked against
    it, whatever its task; with several, against its own protocol and each protocol that tunes
    on a task the group evaluates."""
    eval_seeds = {*seeds, *(group.get("eval", {}).get("seeds", []) or [])}
    if len(tunings) == 1:
        check_evaluation_seeds(tunings[0], where, eval_seeds, problems)
    else:
        tasks = {*(group.get("envs") or []), *(group.get("eval_envs") or [])}
        for other in tunings:
            if other is tuning or other.task in tasks:
                check_evaluation_seeds(other, where, eval_seeds, problems)
    check_fresh_seeds(where, group, default_eval, seeds, earlier, problems)
