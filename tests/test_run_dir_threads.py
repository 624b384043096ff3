"""A run records torch's thread count per session, and resuming under another count warns
(agentbench_poad/rl/run_dir.py): exact resume holds only where float reductions keep their order."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentbench_poad.rl.run_dir import THREADS_KEY, RunDirectory, warn_if_threads_differ

sessions_st = st.lists(
    st.one_of(st.fixed_dictionaries({}), st.fixed_dictionaries({THREADS_KEY: st.integers(1, 4)})),
    max_size=5,
)


@given(sessions_st, st.integers(1, 4))
def test_the_warning_follows_the_last_recorded_count(sessions, threads):
    last = None
    for session in sessions:  # plain restatement: the newest session that recorded a count
        if THREADS_KEY in session:
            last = session[THREADS_KEY]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_threads_differ(sessions, threads, "run")
    assert bool(caught) == (last is not None and last != threads)
    if caught:
        assert f"OMP_NUM_THREADS={last}" in str(caught[0].message)


def test_each_session_records_its_thread_count(tmp_path):
    spec = {"agent": "poad", "env_id": "E", "env_kwargs": {}, "model": "m", "seed": 0}
    spec["algorithm"] = {"lr": 1e-3}
    RunDirectory(tmp_path / "run").open(spec, resume=False)
    (session,) = json.loads((tmp_path / "run" / "config.json").read_text())["code_sessions"]
    assert session[THREADS_KEY] == torch.get_num_threads()
    with pytest.warns(RuntimeWarning, match="torch thread"):
        warn_if_threads_differ([session], session[THREADS_KEY] + 1, tmp_path / "run")
