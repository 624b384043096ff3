"""The leaderboard of agentbench-poad (import name ``agentbench_poad.leaderboard``).

* :func:`evaluate` -- score any agent (``act(observation, available_actions) -> str``) on
  registered ids under the evaluation protocol (:class:`EvaluationPlan` says what to score,
  :class:`Provenance` where the agent came from); returns schema-validated run records
  (:mod:`.protocol`, which plays every episode with :mod:`agentbench_poad.evaluation`);
* :mod:`.records` -- the run-record store: atomic, validated writes and reads
  (schema in :mod:`.schema`);
* :func:`record_from_runs` -- training run dirs to a record (:mod:`.from_run`);
* :func:`verify_record` -- re-run a sample of a record's episodes (:mod:`.verify`);
* :func:`build_report` -- Markdown + self-contained HTML board (:mod:`.report`).

Committed records live in ``leaderboard/results/``; ``docs/leaderboard.md`` says how to submit.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "evaluate": "agentbench_poad.leaderboard.protocol",
    "evaluate_plan": "agentbench_poad.leaderboard.protocol",
    "EvaluationPlan": "agentbench_poad.leaderboard.protocol",
    "Provenance": "agentbench_poad.leaderboard.protocol",
    "load_records": "agentbench_poad.leaderboard.records",
    "read_record": "agentbench_poad.leaderboard.records",
    "write_record": "agentbench_poad.leaderboard.records",
    "add_record": "agentbench_poad.leaderboard.records",
    "RecordError": "agentbench_poad.leaderboard.schema",
    "validate_record": "agentbench_poad.leaderboard.schema",
    "RECORD_SCHEMA": "agentbench_poad.leaderboard.schema",
    "record_from_runs": "agentbench_poad.leaderboard.from_run",
    "verify_record": "agentbench_poad.leaderboard.verify",
    "build_report": "agentbench_poad.leaderboard.report",
    "load_paper_results": "agentbench_poad.leaderboard.report",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentbench_poad.leaderboard' has no attribute {name!r}")
