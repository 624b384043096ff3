"""Bring a committed record up to what records state today (``leaderboard backfill``).

* ``model.base_weights`` / ``model.adapters``: the content hashes
  (:mod:`agentbench_poad.leaderboard.provenance`), computed from the model cache and the runs
  root. The adapter of a committed record is the committed run's final adapter: the files the
  record's agent loads.
* ``scores.mean_discounted_return`` / ``scores.discounted_return_stderr``: the discounted return
  over seeds, from the episodes.
* ``training.safeguards_default``: whether the runs' update safeguards are the defaults of
  the algorithm they name (``training.algorithm``), not of PPO's shared config: GRPO and GiGPO
  leave per-minibatch re-normalisation off by definition (records made before this rule said
  "non-default" for them).
* ``training.best_code``: the best code found during training, from the runs'
  ``best_code.json``, where a record lacks it (records a study wrote from a worker whose
  directory was not the runs root missed it).
* ``model.adapter_files`` (an ``adapter`` agent kwarg's files) and ``env.dataset`` (a
  DataSciCoding dataset's content digest), :mod:`agentbench_poad.leaderboard.loadable`.
* With ``replay_discounted``: a record of a *deterministic* agent whose episodes log no
  discounted return is replayed in full (every episode of every seed); each replayed episode
  must reproduce its return, score, success, length and failure exactly, and then its
  discounted return (under the env's protocol discount) is stored with the seed's mean and
  ``protocol.discount``. A record that does not reproduce is left unchanged (error).

Backfill imports nothing a record names: a run's algorithm is looked up among the built-in
algorithms only (:func:`~agentbench_poad.leaderboard.loadable.builtin_algorithm`), and a replay
resolves what it loads with :func:`~agentbench_poad.leaderboard.loadable.record_loads`, refusing
a user agent's code (``verify`` runs that, after hashing it).

Nothing else of the record changes; the record is validated and rewritten atomically, and
its derived numbers must recompute (:func:`~agentbench_poad.leaderboard.recompute.check_derived`)
before and after.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from agentbench_poad.leaderboard.records import write_record
from agentbench_poad.leaderboard.schema import RecordError


def backfill_record(record: dict[str, Any], *, replay_discounted: bool = False) -> list[str]:
    """Add what ``record`` lacks and rewrite its file (``record["_path"]``); returns the changes.

    Raises:
        RecordError: the record's numbers do not recompute, a hash cannot be computed (a missing
            run or weight file), or a replay differs from the record.
    """
    from agentbench_poad.leaderboard.provenance import attach_hashes, record_runs
    from agentbench_poad.leaderboard.recompute import check_derived, discounted_summary
    from agentbench_poad.leaderboard.runs import resolve_run

    path = Path(record["_path"])
    original = {k: v for k, v in record.items() if not k.startswith("_")}
    from agentbench_poad.leaderboard.loadable import check_record_names

    check_record_names(original)  # a record handed in as a dict was not read through the store
    updated = copy.deepcopy(original)
    updated["_path"] = str(path)  # locates the record's checkout (an adapter, a replay's agent)
    run_dirs = {s: resolve_run(r) for s, r in (record_runs(updated) or {}).items()}
    check_derived(updated, run_dirs=run_dirs)
    changes: list[str] = []

    def hashes() -> tuple[Any, ...]:
        model = updated["model"]
        fields = ("base_weights", "adapters", "adapter_files")
        return (*(model.get(k) for k in fields), updated["env"].get("dataset"))

    before = hashes()
    attach_hashes(updated)
    if hashes() != before:
        changes.append("hashes")
    if replay_discounted and _lacks_discounted(updated):  # the replay checks the hashes
        _replay_discounted(updated)
        changes.append("discounted returns replayed")
    training = updated.get("training") or {}
    if training.get("safeguards") is not None:  # judged against the run's algorithm's defaults
        from agentbench_poad.leaderboard.from_run import safeguards_are_default

        default = safeguards_are_default(training["safeguards"], training.get("algorithm"))
        if training.get("safeguards_default") is not default:
            training["safeguards_default"] = default
            changes.append("update-rule default")
    if training and training.get("best_code") is None and run_dirs:
        from agentbench_poad.leaderboard.from_run import best_code_of_runs

        # Records made by a study's workers missed it: the runs were looked up by their stored
        # (runs-root relative) path from the worker's directory.
        if (best := best_code_of_runs(run_dirs)) is not None:
            training["best_code"] = best
            changes.append("best code during training")
    summary = discounted_summary(updated["scores"]["per_seed"])
    if any(updated["scores"].get(k, object()) != v for k, v in summary.items()):
        updated["scores"].update(summary)
        changes.append("discounted-return summary")
    updated.pop("_path")
    check_derived(updated, run_dirs=run_dirs)
    if updated != original:
        write_record(path, updated)
    return changes


def _lacks_discounted(record: dict[str, Any]) -> bool:
    return any(
        e.get("discounted_return") is None
        for s in record["scores"]["per_seed"]
        for e in s["episodes"]
    )


def _replay_discounted(record: dict[str, Any]) -> None:
    """Replay every episode (deterministic agents only) and store its discounted return."""
    from agentbench_poad.evaluation import EvaluationRequest, env_discount, evaluate_cell
    from agentbench_poad.leaderboard.verify import is_deterministic

    rid = record["record_id"]
    if not is_deterministic(record):
        raise RecordError(
            f"{rid}: a sampled agent's episodes cannot be replayed exactly, so their discounted "
            "returns cannot be backfilled; re-create the record"
        )
    from agentbench_poad.leaderboard.loadable import record_loads

    # What the replay loads, resolved and checked as verify does; user code is refused here:
    # backfill runs the package's agents only (issue 64).
    loads = record_loads(record, user_code=False)
    loads.check_contents(record)
    env_id = loads.env_id
    discount = record["protocol"].get("discount") or env_discount(env_id)
    if discount is None:
        raise RecordError(f"{rid}: {env_id} has no protocol discount to compute returns with")
    config = record["config"]
    for seed in record["scores"]["per_seed"]:
        request = EvaluationRequest(
            agent=loads.agent_spec,
            env_id=env_id,
            seed=int(seed["seed"]),
            episodes=int(record["protocol"]["episodes_per_seed"]),
            agent_kwargs=loads.agent_kwargs,
            env_kwargs=loads.env_kwargs,
            action_timeout=config.get("action_timeout_s"),
            batch_size=record["protocol"].get("batch_size"),
            discount=discount,
        )
        replayed = evaluate_cell(request).episodes
        for stored, episode in zip(seed["episodes"], replayed, strict=True):
            played = {
                "return": episode.episode_return,
                "score": episode.score,
                "success": episode.success,
                "length": episode.length,
                "failed": episode.failed,
            }
            for key, value in played.items():
                want = stored.get(key, stored["return"]) if key == "score" else stored[key]
                if (
                    abs(float(value) - float(want)) > 1e-9
                    if isinstance(value, float)
                    else value != want
                ):
                    raise RecordError(
                        f"{rid}: seed {seed['seed']} episode {stored['index']} does not replay "
                        f"exactly ({key} {want!r} recorded, {value!r} replayed); its discounted "
                        "return cannot be backfilled -- re-create the record"
                    )
            stored["discounted_return"] = episode.discounted_return
        values = [e["discounted_return"] for e in seed["episodes"]]
        seed["mean_discounted_return"] = float(sum(values) / len(values))
    record["protocol"]["discount"] = discount
