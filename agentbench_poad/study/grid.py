"""What a checked study spec is: its training cells, its evaluation tasks and the
:class:`Study` that holds them (:func:`~agentbench_poad.study.spec.load_study` builds it)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentbench_poad.study.specfile import StudyError
from agentbench_poad.study.tuning import Tuning

__all__ = ["EvalTask", "Study", "TrainCell"]


@dataclass(frozen=True)
class TrainCell:
    """One training run of the grid (picklable: it travels to Ray workers)."""

    agent: str
    env_id: str
    seed: int
    total_steps: int
    model: str
    preset: str | None
    overrides_json: str
    label: str
    run_dir: str
    env_kwargs_json: str = "{}"
    #: the spec group the cell comes from (its ``name``, or ``#N`` for the N-th unnamed group)
    group: str = ""
    #: a tuned group's ``training.config_source`` (JSON; "" for untuned cells)
    config_source_json: str = ""

    @property
    def overrides(self) -> dict[str, Any]:
        return json.loads(self.overrides_json)

    @property
    def env_kwargs(self) -> dict[str, Any]:
        return json.loads(self.env_kwargs_json)


@dataclass(frozen=True)
class EvalTask:
    """One evaluation: trained runs (``run_dirs``) or an untrained agent spec, on one env."""

    key: str
    env_id: str
    episodes: int
    greedy: bool
    eval_dir: str
    records_dir: str
    run_dirs: tuple[str, ...] = ()
    agent: str | None = None
    agent_name: str | None = None
    seeds: tuple[int, ...] = ()
    action_timeout: float | None = 60.0
    study: str = ""
    agent_kwargs_json: str = "{}"
    #: gym.make arguments of an evaluation-only agent (trained runs use their own, as trained)
    env_kwargs_json: str = "{}"
    #: the spec group the evaluation comes from (see :attr:`TrainCell.group`)
    group: str = ""
    #: the spec file the task was read from (for the record's command)
    spec: str = ""
    #: the group is exploratory (too few seeds for verdicts): its records say so
    #: (``config.study.exploratory``) and the board labels their rows "[exploratory]"
    exploratory: bool = False

    @property
    def command(self) -> str:
        """The command that (re)makes this task's record."""
        out = Path(self.eval_dir).parent.parent
        return (
            f"agentbench-poad study {self.spec or 'SPEC'} --out {out} --records "
            f"{self.records_dir} --group {self.group or '#1'}  # evaluation {self.key}"
        )


@dataclass
class Study:
    """A checked spec: its training cells and evaluation tasks."""

    name: str
    out: Path
    records: Path
    cells: list[TrainCell]
    evals: list[EvalTask]
    needs: dict[str, list[str]] = field(default_factory=dict)
    """Eval key -> run dirs that must be trained first."""
    groups: list[str] = field(default_factory=list)
    """The spec's group names, in order (``#N`` for the N-th unnamed group)."""
    tuning: Tuning | None = None
    """The spec's tuning protocol (:mod:`agentbench_poad.study.tuning`) when it has exactly
    one (its ``[tuning]`` table or a single ``[[tuning]]`` entry), else None: see
    :attr:`tunings`."""
    pending: list[str] = field(default_factory=list)
    """Tuned ``"group: agent"`` pairs waiting for ``--select`` (they have no cells yet); a pair
    of a ``[[tuning]]`` entry ends in ``" (tuning protocol '<name>')"``."""
    spec_path: str = ""
    runs_per_gpu: int = 1
    """Runs that share one GPU under ``--executor ray --device cuda`` (``[study] runs_per_gpu``;
    each run asks Ray for ``1 / runs_per_gpu`` of a GPU; docs/scale-out.md)."""
    tunings: list[Tuning] = field(default_factory=list)
    """Every tuning protocol of the spec, in spec order (empty without tuning)."""
    pending_steps: list[tuple[str, str, int]] = field(default_factory=list)
    """``(group, env id, env steps)`` of every tuned pair waiting for ``--select``: its seeds
    times its budget, the training it will add (``study --dry-run`` estimates its time)."""
    unchecked: list[tuple[str, str]] = field(default_factory=list)
    """``(group, agent spec)`` of every agent whose code was not imported
    (``load_study(..., import_agents=False)``: ``study --dry-run``, ``--files``): its cells and
    evaluations are not in this study."""

    def select(self, groups: Sequence[str]) -> Study:
        """The study restricted to the named groups' cells and evaluations.

        A name that is not a group but the prefix of some (``tuning`` for the groups
        ``tuning/<name>`` of several ``[[tuning]]`` entries) selects every group under it.

        Raises:
            StudyError: a name that is neither one of :attr:`groups` nor a prefix of one.
        """
        chosen: set[str] = set()
        unknown = []
        for name in groups:
            under = (
                [name]
                if name in self.groups
                else [g for g in self.groups if g.startswith(name.rstrip("/") + "/")]
            )
            if not under:
                unknown.append(name)
            chosen.update(under)
        if unknown:
            raise StudyError(
                f"study {self.name} has no group(s) {unknown}; its groups are {self.groups}"
            )
        evals = [t for t in self.evals if t.group in chosen]
        return dataclasses.replace(
            self,
            cells=[c for c in self.cells if c.group in chosen],
            evals=evals,
            needs={t.key: self.needs[t.key] for t in evals if t.key in self.needs},
            groups=[g for g in self.groups if g in chosen],
            pending=[p for p in self.pending if p.split(":")[0] in chosen],
            pending_steps=[w for w in self.pending_steps if w[0] in chosen],
            unchecked=[u for u in self.unchecked if u[0] in chosen],
        )
