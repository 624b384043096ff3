"""Runs a study need not train: a configuration that only loosens the KL guard of a finished run.

``target_kl`` is read in one place of the update (:func:`agentbench_poad.rl.ppo.ppo_update`): a
minibatch whose guard KL exceeds it has its policy step discarded, and the update logs how many
it discarded (``policy_steps_skipped``). So when a finished run with ``target_kl = a`` skipped
no step in any update, the guard KL of every minibatch was at most ``a``; a run that differs
from it only by a looser guard (``b > a``, or none) takes every step the first one took, from
the same seed: it is the same run. A study then copies the finished run into the other run's
folder instead of training it again, writes the looser ``target_kl`` into the copy's
``config.json`` and leaves ``equivalent_to.json`` beside it, naming the run it copied and the
evidence (no skipped step in any of its updates).

This rests on training being deterministic for a given seed, which the tests check by training
such a pair both ways and comparing every logged number. Where one step of the finished run was
skipped, or its logs do not cover every update, the other run is trained as usual.

Only tuning runs are copied (the runs behind a record are always trained). A tuning grid over
``lr`` x ``target_kl`` whose runs never reach the tighter guard thus costs the runs of its
tighter column only: the selection rule still sees every configuration, and ties go to the
earlier one as before.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbench_poad.study.grid import TrainCell

#: The note a copied run carries.
NOTE = "equivalent_to.json"
#: Files of the finished run that are its own bookkeeping, not the run's results.
_NOT_COPIED = ("study_wall_time.json", NOTE)


@dataclass(frozen=True)
class Equivalent:
    """A finished run that the cell would repeat exactly."""

    source: str
    target_kl: float
    updates: int


def _identity(cell: TrainCell) -> tuple[Any, ...]:
    """Everything that must match between two runs but ``target_kl``."""
    overrides = {k: v for k, v in cell.overrides.items() if k != "target_kl"}
    return (
        cell.agent,
        cell.env_id,
        cell.seed,
        cell.total_steps,
        cell.model,
        cell.preset,
        json.dumps(overrides, sort_keys=True),
        json.dumps(cell.env_kwargs, sort_keys=True),
    )


def _looser(candidate: float | None, anchor: float | None) -> bool:
    """Whether a guard at ``candidate`` lets through every step a guard at ``anchor`` let through."""
    if anchor is None:
        return False  # a run without a guard says nothing about where its KL went
    return candidate is None or candidate > anchor


def is_tuning(cell: TrainCell) -> bool:
    """Tuning runs only: a run behind a record keeps its own training (and wall time)."""
    return cell.group == "tuning" or cell.group.startswith("tuning/")


def anchors_for(cell: TrainCell, cells: Iterable[TrainCell]) -> tuple[TrainCell, ...]:
    """The cells that ``cell`` would repeat if they never skipped a step: the same tuning run
    (same protocol) but a tighter ``target_kl``, the tightest first; none for other runs."""
    if not is_tuning(cell) or "target_kl" not in cell.overrides:
        return ()
    key = _identity(cell)
    mine = cell.overrides["target_kl"]
    found = [
        other
        for other in cells
        if other.run_dir != cell.run_dir
        and other.group == cell.group
        and "target_kl" in other.overrides
        and _identity(other) == key
        and _looser(mine, other.overrides["target_kl"])
    ]
    found.sort(key=lambda other: other.overrides["target_kl"])
    return tuple(found)


def guard_never_fired(run_dir: str | Path) -> Equivalent | None:
    """The finished run's evidence: its ``target_kl`` and update count when every update ``1..N``
    (``N`` its newest checkpoint's) is logged with no skipped policy step; else None."""
    from agentbench_poad.rl.run_dir import RunDirectory, latest_update, load_run_config

    try:
        updates = latest_update(run_dir)
        if updates is None:
            return None
        target_kl = load_run_config(run_dir)["algorithm"]["target_kl"]
        seen: set[int] = set()
        for row in RunDirectory(run_dir).read_metrics():
            if row["update"] is None or row["update"] > updates:
                continue  # a line logged past the checkpoint (a kill before it was saved)
            skipped = row.get("policy_steps_skipped")
            if not isinstance(skipped, (int, float)) or math.isnan(skipped) or skipped != 0:
                return None
            seen.add(int(row["update"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if target_kl is None or seen != set(range(1, updates + 1)):
        return None
    return Equivalent(str(run_dir), float(target_kl), updates)


def find_equivalent(
    anchors: Iterable[TrainCell], is_done: Callable[[TrainCell], bool]
) -> Equivalent | None:
    """The first finished anchor whose guard never fired (``is_done(cell)`` says finished)."""
    for anchor in anchors:
        if is_done(anchor):
            found = guard_never_fired(anchor.run_dir)
            if found is not None:
                return found
    return None


def copy_equivalent(found: Equivalent, cell: TrainCell) -> Path:
    """Copy the finished run into ``cell.run_dir`` (which must hold no run yet) with the cell's
    ``target_kl`` and a note; the folder appears complete or not at all."""
    target = Path(cell.run_dir)
    if (target / "config.json").exists():
        raise FileExistsError(f"{target} already holds a run; not overwriting it with a copy")
    staging = target.with_name(target.name + ".copying")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(found.source, staging, ignore=shutil.ignore_patterns(*_NOT_COPIED, "*.copying"))
    config_path = staging / "config.json"
    config = json.loads(config_path.read_text())
    config["algorithm"]["target_kl"] = cell.overrides["target_kl"]
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    note = {
        # relative to the copy, so the pair moves (and is committed) together
        "equivalent_to": os.path.relpath(Path(found.source).resolve(), target.resolve()),
        "reason": (
            f"the run with target_kl {found.target_kl} skipped no policy step in any of its "
            f"{found.updates} updates, so every minibatch's guard KL was at most "
            f"{found.target_kl}; with target_kl {cell.overrides['target_kl']} the guard would "
            "not have fired either, and training is deterministic for a seed: the same run"
        ),
        "target_kl": cell.overrides["target_kl"],
        "source_target_kl": found.target_kl,
        "updates": found.updates,
    }
    (staging / NOTE).write_text(json.dumps(note, indent=2) + "\n")
    if target.exists():  # an empty folder made for the run
        target.rmdir()
    staging.rename(target)
    return target
