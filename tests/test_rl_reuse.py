"""Work the policy does once and reuses gives the numbers of doing it afresh.

* The update's one-pass scoring (``token_log_probs`` with the offered actions): the chosen
  actions' log-probs, entropies and gradients equal the token pass's, and the categoricals equal
  ``candidate_log_probs`` (what the shared KL guard reads).
* The score memo of ``act``: under fixed weights a (prompt, offered actions) pair is scored once;
  any change of the weights, of the adapters' switch or of the mode scores afresh.
* The critic's frozen features: each (prompt, action) pair computed once, equal to computing it.

Layer calls are counted with forward hooks on the real model's decoder layers.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.models import init_tiny_model  # noqa: E402
from agentbench_poad.rl.policy import LMPolicy  # noqa: E402

WORDS = ["pick", "up", "the", "tomato", "chop", "serve", "dish", "bowl", "walk", "to", "board"]
ACTIONS = ["pick up the tomato", "chop", "serve the dish now", "wait", "walk to the board"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return init_tiny_model(tmp_path_factory.mktemp("reuse"), seed=0, hidden_size=32, num_layers=4)


def _perturbed(policy: LMPolicy, seed: int, scale: float = 0.2) -> LMPolicy:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return policy


@pytest.fixture(scope="module", params=[None, 1, 3])
def policy(request, model_dir):
    """LoRA on every layer, or on the top 1 or 3 of 4 (cached lower states); non-zero LoRA."""
    return _perturbed(LMPolicy(model_dir, lora_layers=request.param), seed=0)


class _LayerCalls:
    """Counts decoder-layer forwards of a policy's model (a forward hook on each layer)."""

    def __init__(self, policy: LMPolicy) -> None:
        self.calls = 0
        decoder = policy._hf_model().get_decoder()
        self.handles = [layer.register_forward_hook(self._count) for layer in decoder.layers]

    def _count(self, *_: object) -> None:
        self.calls += 1

    def __enter__(self) -> _LayerCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()


samples_strategy = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join),
        st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=4, unique=True),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=6,
)


def _weighted_backward(policy: LMPolicy, log_probs, entropy) -> list:
    weights = torch.linspace(0.5, 1.5, log_probs.numel()).reshape(log_probs.shape)
    policy.model.zero_grad(set_to_none=True)
    ((log_probs * weights).sum() - 0.3 * entropy.sum()).backward()
    grads = [p.grad.clone() for p in policy.trainable_parameters()]
    policy.model.zero_grad(set_to_none=True)
    return grads


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(samples=samples_strategy)
def test_one_pass_scoring_equals_the_token_pass_and_the_candidate_scoring(policy, samples):
    prompts = [f"Kitchen: {p}" for p, _, _ in samples]
    offered = [actions for _, actions, _ in samples]
    chosen = [actions[k % len(actions)] for _, actions, k in samples]
    tokens = [policy.encode_action(p, a) for p, a in zip(prompts, chosen)]
    policy.clear_frozen_cache()
    policy.act(prompts, offered)  # the rollout leaves its lower-layer states behind

    fused = policy.token_log_probs(prompts, tokens, available_actions=offered)
    plain = policy.token_log_probs(prompts, tokens)
    assert fused.candidate_log_probs is not None and plain.candidate_log_probs is None
    assert torch.equal(fused.mask, plain.mask)
    torch.testing.assert_close(fused.log_probs, plain.log_probs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused.entropy, plain.entropy, atol=1e-5, rtol=1e-5)
    got = _weighted_backward(policy, fused.log_probs, fused.entropy)
    expected = _weighted_backward(policy, plain.log_probs, plain.entropy)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        categoricals = policy.candidate_log_probs(prompts, offered)
    for g, e in zip(fused.candidate_log_probs, categoricals):
        torch.testing.assert_close(g.detach(), e, atol=1e-5, rtol=1e-5)


def test_one_pass_scoring_falls_back_when_an_action_is_not_offered(policy):
    prompts = ["Kitchen: a tomato", "Kitchen: a bowl"]
    offered = [["chop", "wait"], ["serve the dish now", "wait"]]
    tokens = [policy.encode_action(prompts[0], "chop"), [5, 6, 7]]  # not an offered action
    fallback = policy.token_log_probs(prompts, tokens, available_actions=offered)
    plain = policy.token_log_probs(prompts, tokens)
    assert fallback.candidate_log_probs is None
    torch.testing.assert_close(fallback.log_probs, plain.log_probs)


def _fresh_act(policy: LMPolicy, prompts, offered, seed: int):
    policy.memoize = False
    try:
        return policy.act(prompts, offered, generator=torch.Generator().manual_seed(seed))
    finally:
        policy.memoize = True


def _same_samples(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        assert (x.index, x.token_ids) == (y.index, y.token_ids)
        assert x.candidate_log_probs == pytest.approx(y.candidate_log_probs, abs=1e-5)
        assert x.token_log_probs == pytest.approx(y.token_log_probs, abs=1e-5)


def test_act_scores_a_pair_once_under_fixed_weights(policy):
    prompts = ["Kitchen: a tomato", "Kitchen: a bowl", "Kitchen: a tomato"]
    offered = [["chop", "wait"], ["serve the dish now", "walk to the board"], ["chop", "wait"]]
    policy.clear_frozen_cache()
    first = policy.act(prompts, offered, generator=torch.Generator().manual_seed(1))
    with _LayerCalls(policy) as layers:
        again = policy.act(prompts[::-1], offered[::-1], generator=torch.Generator().manual_seed(1))
    assert layers.calls == 0
    _same_samples(again[::-1][:1], first[2:])  # the same pair, the same categorical
    _same_samples(
        policy.act(prompts, offered, generator=torch.Generator().manual_seed(4)),
        _fresh_act(policy, prompts, offered, seed=4),
    )


def test_the_score_memo_forgets_when_weights_adapters_or_mode_change(policy):
    prompts, offered = ["Kitchen: a tomato and a board"], [["chop", "pick up the tomato"]]
    policy.clear_frozen_cache()
    before = policy.act(prompts, offered)[0].candidate_log_probs
    _perturbed(policy, seed=7, scale=0.5)  # an optimiser step changes weights in place
    with _LayerCalls(policy) as layers:
        after = policy.act(prompts, offered, generator=torch.Generator().manual_seed(0))
    assert layers.calls > 0
    assert after[0].candidate_log_probs != pytest.approx(before, abs=1e-6)
    _same_samples(after, _fresh_act(policy, prompts, offered, seed=0))
    if policy.lora is not None:
        with policy.model.disable_adapter():
            base = policy.act(prompts, offered, generator=torch.Generator().manual_seed(0))
            _same_samples(base, _fresh_act(policy, prompts, offered, seed=0))
        assert base[0].candidate_log_probs != pytest.approx(after[0].candidate_log_probs, abs=1e-6)
    policy.model.train()
    try:
        with _LayerCalls(policy) as layers:
            policy.act(prompts, offered)
        assert layers.calls > 0  # never memoised in train mode
    finally:
        policy.model.eval()
    with _LayerCalls(policy) as layers:
        policy.candidate_log_probs(prompts, offered)  # with gradients: always computed
    assert layers.calls > 0


def test_the_score_memo_keeps_the_most_recent_pairs(model_dir):
    policy = LMPolicy(model_dir, lora_layers=2)
    policy.score_memo_entries = 2
    for word in ("tomato", "bowl", "board"):
        policy.act([f"Kitchen: a {word}"], [["chop", "wait"]])
    assert [prompt for prompt, _ in policy._score_memos] == ["Kitchen: a bowl", "Kitchen: a board"]


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(samples=samples_strategy, prompts_only=st.booleans())
def test_critic_features_are_computed_once_and_equal_computing_them(policy, samples, prompts_only):
    prompts = [f"Kitchen: {p}" for p, _, _ in samples]
    tokens = None
    if not prompts_only:
        tokens = [policy.encode_action(p, a[k % len(a)]) for p, (_, a, k) in zip(prompts, samples)]
    policy.clear_frozen_cache()
    policy.memoize = False
    try:
        expected, expected_mask = policy.critic_features(prompts, tokens)
    finally:
        policy.memoize = True
    assert not policy._feature_cache
    first, _ = policy.critic_features(prompts, tokens)
    with _LayerCalls(policy) as layers:
        again, mask = policy.critic_features(prompts, tokens)
    assert layers.calls == 0
    assert torch.equal(mask, expected_mask)
    torch.testing.assert_close(first, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(again, first)
