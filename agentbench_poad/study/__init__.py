"""A resumable study: a grid of (agent, env, seed) training runs and their evaluations.

A study is a small spec file (TOML or JSON, see ``studies/smollm2-cpu.toml`` and
``docs/study.md``)::

    [study]
    name = "smollm2-cpu"
    model = "smollm2-135m"          # a named model, a local directory or a hub id
    preset = "mini"                 # a key of every trained agent's Config.PRESETS
    seeds = [0, 1, 2]

    [study.total_steps]             # the env-step budget per task
    "Overcooked-TomatoSalad-v0" = 4096

    [eval]                          # the default evaluation protocol
    episodes = 10
    greedy = true

    [[group]]                       # one block of the grid
    agents = ["poad", "ntpo", "twosome"]
    envs = ["Overcooked-TomatoSalad-v0"]

    [[group]]
    label = "gw0.90"                # NTPO's gamma_w ablation: same cells, other overrides
    agents = ["ntpo"]
    envs = ["Overcooked-TomatoSalad-v0"]
    overrides = { gamma = 0.9 }

    [[group]]                       # evaluation only: an agent spec, no training
    agents = ["lm:smollm2-135m"]
    envs = ["Overcooked-TomatoSalad-v0"]

:func:`run_study` first checks the whole spec (unknown agent, env or preset, a duplicate cell,
a bad override: one error listing every problem, before any run starts), then

1. trains every cell (``<out>/runs/<env>/<agent>[__label]/seed<N>``): a finished run is skipped,
   an interrupted one resumes from its newest checkpoint (the trainer's exact resume: no logged
   step is lost or repeated), a new one starts;
2. evaluates each (group, agent, env) as soon as all its seeds are trained (evaluation-only
   agents after the training), on the training env or on
   the group's ``eval_envs`` (generalisation), and writes one leaderboard record per evaluation
   env into ``<records>`` (default ``<out>/records``) with each run's training wall time in
   ``training.run_wall_time_s``. A finished evaluation is skipped.

Cells run on an executor (``local`` or ``ray``, :mod:`agentbench_poad.executors`); a failed cell
is reported, retried, and does not stop the others. ``device="cuda"`` runs the same spec on a GPU.
``load_study(spec).select(["base-model"])`` keeps only the named groups (``study --group``).

The package: :mod:`~agentbench_poad.study.spec` reads and checks a spec (:func:`load_study`)
into the types of :mod:`~agentbench_poad.study.grid` (:mod:`~agentbench_poad.study.agents`: the
agents it names; :mod:`~agentbench_poad.study.seeds`: the seed rules);
:mod:`~agentbench_poad.study.plan` says what is done and what a run would do;
:mod:`~agentbench_poad.study.run` runs it (:func:`run_study`);
:mod:`~agentbench_poad.study.wall_time` counts each run's training wall time;
:mod:`~agentbench_poad.study.tuning` reads the tuning protocol (``[tuning]``) and
:mod:`~agentbench_poad.study.selection` chooses after it (``--select``).
"""

from __future__ import annotations

from agentbench_poad.study.grid import EvalTask, Study, TrainCell
from agentbench_poad.study.plan import cells_table, eval_done, run_state, study_files
from agentbench_poad.study.run import StudyResult, run_study
from agentbench_poad.study.selection import select_configs
from agentbench_poad.study.spec import load_study
from agentbench_poad.study.specfile import StudyError
from agentbench_poad.study.wall_time import WallTimeLog, run_update_time, run_wall_time

__all__ = [
    "EvalTask",
    "Study",
    "StudyError",
    "StudyResult",
    "TrainCell",
    "WallTimeLog",
    "cells_table",
    "eval_done",
    "load_study",
    "run_state",
    "run_study",
    "run_update_time",
    "run_wall_time",
    "select_configs",
    "study_files",
]
