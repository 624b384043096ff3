"""Exact speed techniques of the LM policy and the PPO update give the plain path's numbers.

Each optimised path is compared with the plain one on the tiny model (or the toy PPO policy of
``test_rl_ppo``): the frozen lower-layer cache of ``lora_layers`` (log-probs, entropies,
gradients, critic features, whole POAD updates) and the length-sorted policy chunks of
``max_chunk_tokens`` (gradients, chunk partition).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.models import init_tiny_model  # noqa: E402
from agentbench_poad.rl.config import PPOConfig  # noqa: E402
from agentbench_poad.rl.policy import LMPolicy  # noqa: E402
from agentbench_poad.rl.ppo import (  # noqa: E402
    PPOBatch,
    PPOSettings,
    accumulate_policy_gradients,
    normalize_advantages,
    policy_chunks,
)
from tests.fixtures_rl import play_rollout, tiny_model_dir  # noqa: E402,F401
from tests.test_rl_ppo import TinyPolicy, make_batch  # noqa: E402

WORDS = ["pick", "up", "the", "tomato", "chop", "serve", "dish", "bowl", "walk", "to", "board"]


@pytest.fixture(scope="module")
def deep_model_dir(tmp_path_factory):
    """A tiny model with 4 layers, so "top 1 / top 2 adapted layers" leaves layers below."""
    return init_tiny_model(tmp_path_factory.mktemp("deep"), seed=0, hidden_size=32, num_layers=4)


def _perturbed(policy: LMPolicy, seed: int = 0, scale: float = 0.2) -> LMPolicy:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return policy


@pytest.fixture(scope="module", params=[1, 3])
def top_policy(request, deep_model_dir):
    """LoRA on the top 1 or 3 of 4 layers, non-zero adapter weights."""
    return _perturbed(LMPolicy(deep_model_dir, lora_layers=request.param))


def _plain(policy: LMPolicy):
    """Context: the same policy running the whole model (no reuse of lower-layer states, no
    memoised scores or critic features)."""

    class _Plain:
        def __enter__(self):
            policy.reuse_lower_layers = False
            policy.memoize = False

        def __exit__(self, *exc):
            policy.reuse_lower_layers = True
            policy.memoize = True

    return _Plain()


def _grads_of(policy: LMPolicy, prompts, actions):
    """(log_probs, entropy, grads of a weighted sum) of token_log_probs."""
    policy.model.zero_grad(set_to_none=True)
    scored = policy.token_log_probs(prompts, actions)
    weights = torch.linspace(0.5, 1.5, scored.log_probs.numel()).reshape(scored.log_probs.shape)
    ((scored.log_probs * weights).sum() - 0.3 * scored.entropy.sum()).backward()
    grads = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad(set_to_none=True)
    return scored.log_probs.detach(), scored.entropy.detach(), scored.mask, grads


samples_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=0, max_size=9).map(" ".join),
        st.lists(st.integers(3, 200), min_size=0, max_size=5),
    ),
    min_size=1,
    max_size=4,
)


def test_lora_layers_adapts_only_the_top_layers(deep_model_dir):
    policy = LMPolicy(deep_model_dir, lora_layers=2)
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all(".layers.2." in n or ".layers.3." in n for n in names)
    assert policy.first_adapted_layer == 2
    with pytest.raises(ValueError, match="lora_layers must be an int in"):
        LMPolicy(deep_model_dir, lora_layers=5)
    with pytest.raises(ValueError, match="needs LoRA adapters"):
        LMPolicy(deep_model_dir, lora=None, lora_layers=1)


# Like a PPO minibatch: few distinct observations, the same or prefix-sharing actions again and
# again (each distinct prompt then runs once, its actions as a trie after it).
repeated_samples_strategy = st.lists(
    st.tuples(
        st.sampled_from(["", "tomato", "walk to the board", "chop chop the tomato dish"]),
        st.lists(st.integers(3, 6) | st.integers(3, 200), min_size=0, max_size=5),
    ),
    min_size=1,
    max_size=10,
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(samples=samples_strategy | repeated_samples_strategy, warm=st.booleans())
def test_cached_lower_layers_give_the_same_log_probs_and_gradients(top_policy, samples, warm):
    prompts = [f"You see {p}." for p, _ in samples]
    actions = [a for _, a in samples]
    assume(any(actions))  # an all-empty batch has nothing to differentiate
    top_policy.clear_frozen_cache()
    if warm:  # the states come from an earlier pass (e.g. the rollout), not this batch
        top_policy.critic_features(prompts[::-1], actions[::-1])
    with _plain(top_policy):
        expected = _grads_of(top_policy, prompts, actions)
    got = _grads_of(top_policy, prompts, actions)
    assert torch.equal(expected[2], got[2])
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)
    assert len(expected[3]) == len(got[3]) > 0
    for g, e in zip(got[3], expected[3]):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompt_words=st.lists(st.lists(st.sampled_from(WORDS), max_size=8), min_size=1, max_size=3),
    seed=st.integers(0, 10_000),
)
def test_critic_features_from_cached_lower_states_equal_the_plain_path(
    top_policy, prompt_words, seed
):
    prompts = [" ".join(["Kitchen:", *w]) for w in prompt_words]
    offered = [
        ["pick up the tomato", "chop", "serve the dish now", "wait"][: 2 + i % 3]
        for i in range(len(prompts))
    ]
    top_policy.clear_frozen_cache()
    samples = top_policy.act(prompts, offered, generator=torch.Generator().manual_seed(seed))
    tokens = [s.token_ids for s in samples]
    reused, mask = top_policy.critic_features(prompts, tokens)
    # The critic's sequences went through the lower layers once each, and were kept.
    assert set(top_policy._frozen_cache) == {
        tuple(top_policy.encode_prompt(p) + t) for p, t in zip(prompts, tokens)
    }
    with _plain(top_policy):
        plain, plain_mask = top_policy.critic_features(prompts, tokens)
        prompt_only, _ = top_policy.critic_features(prompts)
    assert torch.equal(mask, plain_mask)
    torch.testing.assert_close(reused, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        top_policy.critic_features(prompts)[0], prompt_only, atol=1e-5, rtol=1e-5
    )


def _one_forward_per_candidate(policy: LMPolicy, prompt_ids, tokens):
    ids = torch.tensor([prompt_ids + tokens])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()
    log_probs = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
    return log_probs.gather(-1, ids[0, len(prompt_ids) :, None])[:, 0]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    groups=st.lists(
        st.tuples(
            st.integers(1, 30),
            # A small alphabet makes candidates share prefixes (the trie) or repeat.
            st.lists(
                st.lists(st.integers(3, 6) | st.integers(3, 200), max_size=6),
                min_size=1,
                max_size=7,
            ),
        ),
        min_size=1,
        max_size=3,
    ),
    plain=st.booleans(),
)
def test_packed_candidate_scoring_equals_one_forward_per_candidate(top_policy, groups, plain):
    """Both scoring paths: the whole model over a shared KV cache (``plain``) and the top
    layers from the cached lower states of the (prompt, candidates) tree."""
    prompt_ids = [
        [1] + [(7 * i + 3 * n) % 200 + 3 for n in range(length)]
        for i, (length, _) in enumerate(groups)
    ]
    candidates = [cands for _, cands in groups]
    assume(any(c for group in candidates for c in group))
    with torch.no_grad():
        if plain:
            with _plain(top_policy):
                scored = top_policy._score_group(prompt_ids, candidates)
        else:
            scored = top_policy._score_group(prompt_ids, candidates)
    for p, group, log_probs in zip(prompt_ids, candidates, scored):
        assert log_probs.shape[0] == len(group)
        for k, tokens in enumerate(group):
            torch.testing.assert_close(
                log_probs[k, : len(tokens)],
                _one_forward_per_candidate(top_policy, p, tokens),
                atol=1e-5,
                rtol=1e-5,
            )
            assert torch.all(log_probs[k, len(tokens) :] == 0)


def test_act_is_unchanged_by_lora_layers_reuse(top_policy):
    prompts = ["Kitchen: a tomato", "Kitchen: a bowl and a board here"]
    offered = [["pick up the tomato", "chop"], ["walk to the board", "serve", "take the bowl"]]
    top_policy.clear_frozen_cache()
    with _plain(top_policy):
        plain = top_policy.act(prompts, offered, generator=torch.Generator().manual_seed(3))
    assert not top_policy._frozen_cache  # nothing is captured on the plain path
    reused = top_policy.act(prompts, offered, generator=torch.Generator().manual_seed(3))
    for a, b in zip(plain, reused):
        assert (a.index, a.token_ids) == (b.index, b.token_ids)
        assert a.token_log_probs == pytest.approx(b.token_log_probs, abs=1e-6)


def test_cached_scoring_trees_stay_exact_while_the_adapters_train(deep_model_dir):
    """The tree cache holds frozen states only: after the adapters move, act() and TWOSOME's
    candidate log-probs (and their gradients) from it still equal the plain path's."""
    policy = LMPolicy(deep_model_dir, lora_layers=2)
    prompts = ["Kitchen: a tomato", "Kitchen: a bowl and a board here", "Kitchen: a tomato"]
    offered = [
        ["pick up the tomato", "chop"],
        ["walk to the board", "serve", "take the bowl"],
        ["pick up the tomato", "chop"],
    ]
    policy.clear_frozen_cache()
    policy.act(prompts, offered, generator=torch.Generator().manual_seed(0))
    assert len(policy._tree_cache) == 2  # one tree per distinct (prompt, offered actions)
    for seed in range(3):  # "training": the adapters change, the cached trees stay valid
        _perturbed(policy, seed=seed, scale=0.3)
        results = []
        for reuse in (False, True):
            policy.reuse_lower_layers = reuse
            policy.model.zero_grad(set_to_none=True)
            log_policy = policy.candidate_log_probs(prompts, offered)
            weights = torch.linspace(0.2, 1.0, sum(lp.numel() for lp in log_policy))
            (torch.cat(log_policy) * weights).sum().backward()
            grads = [p.grad.clone() for p in policy.trainable_parameters()]
            samples = policy.act(prompts, offered, generator=torch.Generator().manual_seed(seed))
            results.append((torch.cat(log_policy).detach(), grads, samples))
        (plain_lp, plain_grads, plain_samples), (lp, grads, samples) = results
        torch.testing.assert_close(lp, plain_lp, atol=1e-5, rtol=1e-5)
        for g, e in zip(grads, plain_grads):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
        for a, b in zip(plain_samples, samples):
            assert (a.index, a.token_ids) == (b.index, b.token_ids)
            assert a.candidate_log_probs == pytest.approx(b.candidate_log_probs, abs=1e-5)
    assert len(policy._tree_cache) == 2  # every later pass read the cached trees


def test_logits_through_the_models_own_forward_equal_the_lm_head_at_the_slots(top_policy):
    """The path for models that post-process logits (scaling, soft-capping) gives the same
    numbers as the LM head applied at the read slots only, on a model that does neither."""
    prompts = ["Kitchen: a tomato", "Kitchen: a bowl", "Kitchen: a tomato"]
    offered = [["pick up the tomato", "chop"], ["serve", "take the bowl"], ["chop", "wait"]]
    tokens = [[5, 6, 7], [8], [5, 6, 9]]
    results = []
    for plain_head in (True, False):
        top_policy._plain_lm_head = plain_head
        try:
            with torch.no_grad():
                scored = top_policy.candidate_log_probs(prompts, offered)
                recomputed = top_policy.token_log_probs(prompts, tokens)
        finally:
            top_policy._plain_lm_head = True
        results.append((torch.cat(scored), recomputed.log_probs, recomputed.entropy))
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(0, 20),
    puts=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 12)), max_size=25),
)
def test_state_cache_keeps_the_most_recent_entries_within_its_budget(budget, puts):
    from agentbench_poad.rl.policy_model import _StateCache

    cache = _StateCache(budget)
    reference: list[tuple[int, int]] = []  # (key, rows), least recent first
    for key, rows in puts:
        if cache.get(key) is not None:  # a hit makes the entry the most recent
            reference.append(reference.pop([k for k, _ in reference].index(key)))
        cache.put(key, torch.zeros((rows, 2)))
        if key not in [k for k, _ in reference] and rows <= budget:
            reference.append((key, rows))
            while sum(r for _, r in reference) > budget:
                reference.pop(0)
        assert list(cache) == [k for k, _ in reference]
        assert cache.size == sum(r for _, r in reference) <= budget
    cache.clear()
    assert cache.size == 0 and len(cache) == 0


def test_frozen_cache_stays_within_its_token_budget(deep_model_dir):
    policy = LMPolicy(deep_model_dir, lora_layers=1, frozen_cache_tokens=60)
    prompts = [f"prompt number {i} " + "x" * (i * 3) for i in range(8)]
    for i in range(0, 8, 2):
        policy.critic_features(prompts[i : i + 2], [[5, 6, 7], [8]])
        assert policy._frozen_cache_size == sum(len(k) for k in policy._frozen_cache) <= 60
    assert policy._frozen_cache  # the most recent sequences are kept
    recent = tuple(policy.encode_prompt(prompts[7]) + [8])
    assert recent in policy._frozen_cache or len(recent) > 60
    expected = policy.critic_features(prompts[:2], [[5, 6, 7], [8]])[0]  # evicted: recomputed
    with _plain(policy):
        torch.testing.assert_close(
            policy.critic_features(prompts[:2], [[5, 6, 7], [8]])[0], expected, atol=1e-5, rtol=1e-5
        )
    policy.clear_frozen_cache()
    assert policy._frozen_cache_size == 0 and not policy._frozen_cache


# -- length-sorted chunks (max_chunk_tokens) ------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=30), budget=st.integers(1, 400))
def test_policy_chunks_partition_the_minibatch_within_the_budget(sizes, budget):
    batch = make_batch(size=len(sizes))
    batch.sizes = torch.tensor(sizes)
    chunks = policy_chunks(batch, PPOSettings(max_chunk_tokens=budget))
    flat = sorted(i for c in chunks for i in c.tolist())
    assert flat == list(range(len(sizes)))  # every sample exactly once
    for chunk in chunks:
        longest = max(sizes[i] for i in chunk.tolist())
        assert len(chunk) == 1 or len(chunk) * longest <= budget
    # Without sizes (or without a budget) the paper's equal split is kept.
    batch.sizes = None
    assert len(policy_chunks(batch, PPOSettings(max_chunk_tokens=budget, grad_accum_steps=2))) == (
        min(2, len(sizes))
    )


@settings(max_examples=25, deadline=None)
@given(size=st.integers(2, 16), seed=st.integers(0, 1000), budget=st.integers(1, 40))
def test_length_sorted_chunks_give_the_same_gradient(size, seed, budget):
    policy = TinyPolicy(seed=seed % 7)
    batch = make_batch(size=size, seed=seed, policy=policy)
    with torch.no_grad():
        policy.w.add_(0.05)
    generator = torch.Generator().manual_seed(seed)
    batch.sizes = torch.randint(1, 12, (size,), generator=generator)
    advantages = normalize_advantages(batch.advantages, batch.mask)
    results = []
    for chunking in (PPOSettings(), PPOSettings(max_chunk_tokens=budget)):
        policy.zero_grad()
        stats = accumulate_policy_gradients(batch, advantages, policy.evaluate, chunking)
        results.append((policy.w.grad.clone(), stats))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-6, rtol=1e-5)
    for key in ("policy_loss", "entropy", "approx_kl"):
        assert results[1][1][key] == pytest.approx(results[0][1][key], abs=1e-6)


def test_select_keeps_sizes():
    batch = make_batch(size=5)
    batch.sizes = torch.tensor([5, 4, 3, 2, 1])
    assert batch.select(torch.tensor([4, 0])).sizes.tolist() == [1, 5]
    assert isinstance(batch.select(torch.tensor([1])), PPOBatch)


# -- config ---------------------------------------------------------------------------------------


def test_speed_fields_default_to_the_paper_and_are_validated():
    config = PPOConfig()
    assert config.lora_layers is None and config.max_chunk_tokens is None
    assert config.ppo_settings().max_chunk_tokens is None
    assert PPOConfig(max_chunk_tokens=512).ppo_settings().max_chunk_tokens == 512
    parsed = PPOConfig.coerce_overrides({"lora_layers": "4", "max_chunk_tokens": "none"})
    assert parsed == {"lora_layers": 4, "max_chunk_tokens": None}
    for bad in (
        {"lora_layers": 0},
        {"max_chunk_tokens": 0},
        {"frozen_cache_tokens": -1},
        {"lora_layers": 2.0},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            PPOConfig(**bad)


# -- whole POAD updates ---------------------------------------------------------------------------


def _poad_pair(model_dir, **speed):
    from agentbench_poad.baselines.poad import POAD, POADConfig
    from agentbench_poad.rl.trainer import build_policy

    agents = []
    for options in ({}, speed):
        config = POADConfig(
            num_envs=2,
            rollout_length=3,
            epochs=2,
            num_minibatches=2,
            critic_hidden_sizes=(16,),
            target_kl=None,
            lr=1e-2,
            critic_lr=1e-2,
            lora_layers=2,
            **options,
        )
        policy = _perturbed(build_policy(config, model_dir, seed=0), scale=0.1)
        agents.append(POAD(config, policy, seed=0))
    return agents


def test_poad_update_with_cached_states_and_sorted_chunks_equals_the_plain_update(deep_model_dir):
    plain, fast = _poad_pair(deep_model_dir, max_chunk_tokens=64)
    plain.policy.reuse_lower_layers = False
    buffer, observations = play_rollout(fast, "Overcooked-TomatoSalad-v0")
    assert fast.policy._tree_cache  # the rollout left its trees' lower-layer states behind
    buffer.next_values = fast.bootstrap_values(observations)
    fast.compute_advantages(buffer)
    plain_buffer = copy.deepcopy(buffer)
    metrics = [
        agent.update(b, torch.Generator().manual_seed(5))
        for agent, b in ((plain, plain_buffer), (fast, buffer))
    ]
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-6)
    for a, b in zip(plain.policy.trainable_parameters(), fast.policy.trainable_parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    for a, b in zip(plain.critic.parameters(), fast.critic.parameters()):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


# -- the benchmark scripts run (smoke; no timing is asserted) ----------------------------------


@pytest.mark.parametrize(
    "script, args",
    [
        (
            "ppo_update.py",
            [
                "--num-envs",
                "2",
                "--rollout-length",
                "2",
                "--repeats",
                "1",
                "--lora-layers",
                "1",
                "--max-chunk-tokens",
                "256",
            ],
        ),
        ("action_scoring.py", ["--num-envs", "2", "--repeats", "1", "--lora-layers", "1"]),
        (
            "train_iteration.py",
            ["--num-envs", "2", "--rollout-length", "2", "--repeats", "1", "--lora-layers", "1"],
        ),
    ],
)
def test_speed_benchmarks_print_their_ratio(tiny_model_dir, script, args):  # noqa: F811
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [
            sys.executable,
            str(root / "benchmarks" / script),
            "--model",
            str(tiny_model_dir),
            "--threads",
            "1",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ratio:" in done.stdout and "goal" in done.stdout


@pytest.mark.parametrize(
    "script, args, expected",
    [
        # where one update's time goes, per phase, for a token-level and a group agent
        ("update_profile.py", ["--tiny", "--agents", "poad,grpo", "--updates", "3"], "ratio:"),
        # this tree against itself (no --landed: a smoke run makes no worktree), interleaved
        ("side_by_side.py", ["--tiny", "--agents", "poad", "--updates", "2"], "ratio:"),
    ],
)
def test_profile_and_side_by_side_run(tiny_model_dir, script, args, expected):  # noqa: F811
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / script), "--model", str(tiny_model_dir)]
        + ["--threads", "1", *args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout, done.stdout[-2000:]
    if script == "update_profile.py":  # every agent's table names the update's phases
        assert done.stdout.count("update: policy forward") == 2
        assert "first update" in done.stdout
    else:
        assert "same first-update metrics: True" in done.stdout


def test_phase_clock_charges_each_second_to_the_innermost_open_phase(monkeypatch):
    """update_profile.py's clock: nested phases take their own time from the outer one; a
    sealed phase keeps what runs inside it; time outside every phase is "rest"."""
    import importlib
    from pathlib import Path

    # the script imports its sibling _bench_model as a script does: its folder on the path, for
    # this test only (monkeypatch restores sys.path)
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    update_profile = importlib.import_module("update_profile")

    now = [0.0]
    monkeypatch.setattr(update_profile.time, "perf_counter", lambda: now[0])
    clock = update_profile.PhaseClock()
    clock.next_update()  # update 1
    now[0] += 1.0  # rest
    with clock.phase("rollout: scoring"):
        now[0] += 2.0
        with clock.phase("rollout: lower layers"):
            now[0] += 3.0
        now[0] += 4.0
    with clock.phase("update: policy forward"):  # sealed: the nested call stays its time
        now[0] += 5.0
        with clock.phase("rollout: scoring"):
            now[0] += 6.0
    clock.next_update()
    now[0] += 7.0
    clock.next_update()
    assert dict(clock.times[1]) == {
        "rest": 1.0,
        "rollout: scoring": 6.0,
        "rollout: lower layers": 3.0,
        "update: policy forward": 11.0,
    }
    assert dict(clock.times[2]) == {"rest": 7.0}
