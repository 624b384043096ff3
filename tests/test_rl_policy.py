"""Tests of agentbench_poad.rl.policy on the tiny random model (CPU)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from agentbench_poad.agents import Agent  # noqa: E402
from agentbench_poad.models import LoraSettings  # noqa: E402
from agentbench_poad.rl.policy import (  # noqa: E402
    ActionSample,
    GenerationSettings,
    LMPolicy,
)
from tests.fixtures_rl import tiny_model_dir  # noqa: E402, F401

PROMPT = "You are in the kitchen. There is a tomato on the table. Your next action is to"
ACTIONS = [
    "pick up the tomato",
    "serve nothing",
    "walk to the first cutting board",
    "chop",
    "put the tomato in the bowl",
]
OTHER_PROMPT = "Hi."
OTHER_ACTIONS = ["turn on the TV", "sit on the sofa now please", "grab the chips"]
CODE_PROMPT = "def build_model(x_train, y_train):\n    "


def _perturb_lora(policy: LMPolicy, seed: int = 0, scale: float = 0.2) -> None:
    """Give the adapter non-zero weights (peft initialises B = 0, a no-op adapter)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):  # noqa: F811
    policy = LMPolicy(tiny_model_dir)
    _perturb_lora(policy)
    return policy


def _full_forward_log_probs(policy: LMPolicy, prompt: str, action_ids: list[int]) -> list[float]:
    """Reference: one plain forward of prompt + action, no cache, no padding."""
    prompt_ids = policy.encode_prompt(prompt)
    ids = torch.tensor([prompt_ids + action_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits.float()
    log_probs = torch.log_softmax(logits[0], dim=-1)
    return [log_probs[len(prompt_ids) - 1 + j, t].item() for j, t in enumerate(action_ids)]


def test_lora_wraps_q_and_v_and_trains_only_the_adapter(policy):
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert any("q_proj" in n for n in names) and any("v_proj" in n for n in names)
    assert not any("k_proj" in n or "o_proj" in n for n in names)
    # 2 layers x 2 modules x (A: r x H + B: H x r) with r = 8, H = 64.
    assert sum(p.numel() for p in policy.trainable_parameters()) == 2 * 2 * (8 * 64 + 64 * 8)
    assert policy.hidden_size == 64


def test_building_a_policy_leaves_the_global_rng_alone(tiny_model_dir):  # noqa: F811
    state = torch.random.get_rng_state()
    LMPolicy(tiny_model_dir)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_encode_action_is_the_in_context_suffix(policy):
    ids = policy.encode_action(PROMPT, "pick up the tomato")
    full = policy.tokenizer(PROMPT + " pick up the tomato")["input_ids"]
    assert policy.encode_prompt(PROMPT) + ids == full
    assert policy.tokenizer.decode(ids) == " pick up the tomato"


def test_shared_prefix_scoring_matches_one_forward_per_candidate(policy):
    # Candidates have different token counts (5 .. 32 tokens), so padding is exercised.
    prompt_ids = policy.encode_prompt(PROMPT)
    candidates = [policy.encode_action(PROMPT, a) for a in ACTIONS]
    assert len({len(c) for c in candidates}) == len(candidates)
    with torch.no_grad():
        (log_probs,) = policy._score_group([prompt_ids], [candidates])
    assert log_probs.shape == (len(ACTIONS), max(len(c) for c in candidates))
    for k, ids in enumerate(candidates):
        expected = torch.tensor(_full_forward_log_probs(policy, PROMPT, ids))
        torch.testing.assert_close(log_probs[k, : len(ids)], expected, atol=1e-4, rtol=0)
        assert torch.all(log_probs[k, len(ids) :] == 0)


def test_shared_prefix_scoring_of_several_prompts_in_one_batch(policy):
    # Prompts of different lengths share one batch: the short prompts' pad slots sit between
    # their tokens and their candidates' tokens and must be invisible.
    prompts = [OTHER_PROMPT, PROMPT, CODE_PROMPT]
    action_lists = [OTHER_ACTIONS, ACTIONS, ["x = 1", "model = None  # placeholder"]]
    with torch.no_grad():
        scored = policy._score_group(
            [policy.encode_prompt(p) for p in prompts],
            [
                [policy.encode_action(p, a) for a in actions]
                for p, actions in zip(prompts, action_lists)
            ],
        )
    for prompt, actions, log_probs in zip(prompts, action_lists, scored):
        assert log_probs.shape[0] == len(actions)
        for k, action in enumerate(actions):
            ids = policy.encode_action(prompt, action)
            expected = torch.tensor(_full_forward_log_probs(policy, prompt, ids))
            torch.testing.assert_close(log_probs[k, : len(ids)], expected, atol=1e-4, rtol=0)
            assert torch.all(log_probs[k, len(ids) :] == 0)


def test_grouping_by_cache_budget_does_not_change_results(tiny_model_dir):  # noqa: F811
    whole = LMPolicy(tiny_model_dir)
    split = LMPolicy(tiny_model_dir, score_batch_tokens=1)  # one prompt per forward
    _perturb_lora(whole, seed=5)
    _perturb_lora(split, seed=5)
    prompts, action_lists = [PROMPT, OTHER_PROMPT], [ACTIONS, OTHER_ACTIONS]
    with torch.no_grad():
        for a, b in zip(
            whole.candidate_log_probs(prompts, action_lists),
            split.candidate_log_probs(prompts, action_lists),
        ):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="score_batch_tokens"):
        LMPolicy(tiny_model_dir, score_batch_tokens=0)


@pytest.mark.parametrize("normalization", ["word", "token", "sum"])
def test_normalisations_and_action_distribution(tiny_model_dir, normalization):  # noqa: F811
    policy = LMPolicy(tiny_model_dir, normalization=normalization)
    _perturb_lora(policy, seed=1)
    totals, n_tokens = [], []
    for action in ACTIONS:
        ids = policy.encode_action(PROMPT, action)
        totals.append(sum(_full_forward_log_probs(policy, PROMPT, ids)))
        n_tokens.append(len(ids))
    divisor = {
        "word": [len(a.split()) for a in ACTIONS],
        "token": n_tokens,
        "sum": [1] * len(ACTIONS),
    }[normalization]
    scores = torch.tensor([t / d for t, d in zip(totals, divisor)])
    expected = torch.log_softmax(scores, dim=0)
    with torch.no_grad():
        got = policy.candidate_log_probs([PROMPT], [ACTIONS])[0]
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    sample = policy.act([PROMPT], [ACTIONS], greedy=True)[0]
    assert sample.index == int(torch.argmax(expected))
    assert sample.text == ACTIONS[sample.index]
    assert sample.log_prob == pytest.approx(float(expected[sample.index]), abs=1e-4)


def test_unknown_normalisation_is_rejected(tiny_model_dir):  # noqa: F811
    with pytest.raises(ValueError, match="normalization"):
        LMPolicy(tiny_model_dir, normalization="bytes")


def test_restricted_act_sample_fields_match_rescoring(policy):
    generator = torch.Generator().manual_seed(0)
    samples = policy.act([PROMPT, OTHER_PROMPT], [ACTIONS, OTHER_ACTIONS], generator=generator)
    assert len(samples) == 2
    for sample, prompt, actions in zip(samples, [PROMPT, OTHER_PROMPT], [ACTIONS, OTHER_ACTIONS]):
        assert isinstance(sample, ActionSample)
        assert sample.text == actions[sample.index]
        assert sample.token_ids == policy.encode_action(prompt, sample.text)
        assert sample.token_log_probs == pytest.approx(
            _full_forward_log_probs(policy, prompt, sample.token_ids), abs=1e-4
        )
        with torch.no_grad():
            categorical = policy.candidate_log_probs([prompt], [actions])[0]
        assert sample.log_prob == pytest.approx(float(categorical[sample.index]), abs=1e-4)
        assert sample.candidate_log_probs == pytest.approx(categorical.tolist(), abs=1e-4)


def test_restricted_sampling_follows_the_categorical_and_the_generator(tiny_model_dir):  # noqa: F811
    policy = LMPolicy(tiny_model_dir, normalization="token")
    _perturb_lora(policy, seed=2, scale=1.0)
    actions = ACTIONS[:3]
    with torch.no_grad():
        probs = policy.candidate_log_probs([PROMPT], [actions])[0].exp()
    draws = 200
    generator = torch.Generator().manual_seed(123)
    picks = [policy.act([PROMPT], [actions], generator=generator)[0].index for _ in range(draws)]
    freqs = torch.bincount(torch.tensor(picks), minlength=len(actions)).float() / draws
    # 4 standard errors of a binomial proportion: deterministic under the seed, and a real
    # check that sampling follows softmax(scores).
    tolerance = 4 * torch.sqrt(probs * (1 - probs) / draws) + 1e-3
    assert torch.all((freqs - probs).abs() <= tolerance), (freqs, probs)
    again = torch.Generator().manual_seed(123)
    replay = [policy.act([PROMPT], [actions], generator=again)[0].index for _ in range(20)]
    assert replay == picks[:20]


def test_token_log_probs_match_full_forward_and_carry_grad(policy):
    prompts = [PROMPT, OTHER_PROMPT, CODE_PROMPT]
    actions = [
        policy.encode_action(PROMPT, ACTIONS[2]),
        policy.encode_action(OTHER_PROMPT, OTHER_ACTIONS[0]),
        [5, 9, 200, 2],
    ]
    result = policy.token_log_probs(prompts, actions)
    width = max(len(a) for a in actions)
    assert result.log_probs.shape == result.entropy.shape == result.mask.shape == (3, width)
    assert result.log_probs.dtype == torch.float32 and result.mask.dtype == torch.bool
    for row, (prompt, ids) in enumerate(zip(prompts, actions)):
        n = len(ids)
        assert result.mask[row].tolist() == [True] * n + [False] * (width - n)
        expected = torch.tensor(_full_forward_log_probs(policy, prompt, ids))
        torch.testing.assert_close(result.log_probs[row, :n].detach(), expected, atol=1e-4, rtol=0)
        assert torch.all(result.log_probs[row, n:] == 0) and torch.all(result.entropy[row, n:] == 0)
    # Entropy of the full-vocabulary distribution at the first action position of row 2.
    prompt_ids = policy.encode_prompt(CODE_PROMPT)
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([prompt_ids])).logits[0, -1].float()
    dist = torch.distributions.Categorical(logits=logits)
    assert float(result.entropy[2, 0].detach()) == pytest.approx(float(dist.entropy()), abs=1e-4)
    # Gradients reach the adapter, and only the adapter.
    policy.model.zero_grad(set_to_none=True)
    (result.log_probs.sum() + result.entropy.sum()).backward()
    grads = [p.grad for p in policy.trainable_parameters()]
    assert all(g is not None for g in grads) and any(float(g.abs().sum()) > 0 for g in grads)
    frozen = [p for p in policy.model.parameters() if not p.requires_grad]
    assert frozen and all(p.grad is None for p in frozen)
    policy.model.zero_grad(set_to_none=True)


def test_candidate_log_probs_gradients_match_full_forwards(tiny_model_dir):  # noqa: F811
    # TWOSOME trains through the shared-prefix path: its gradients must be those of the plain
    # computation (one forward per prompt + candidate).
    policy = LMPolicy(tiny_model_dir)
    _perturb_lora(policy, seed=6)
    assert policy._keep_logits  # logits only where needed, on this transformers version
    prompts, action_lists = [PROMPT, OTHER_PROMPT], [ACTIONS[:3], OTHER_ACTIONS]
    weights = torch.tensor([0.3, -1.0, 0.7])

    def loss_of(per_prompt):
        return sum((lp * weights[: len(lp)]).sum() for lp in per_prompt)

    params = policy.trainable_parameters()
    shared = torch.autograd.grad(loss_of(policy.candidate_log_probs(prompts, action_lists)), params)
    naive_scores = []
    for prompt, actions in zip(prompts, action_lists):
        prompt_ids = policy.encode_prompt(prompt)
        scores = []
        for action in actions:
            ids = policy.encode_action(prompt, action)
            logits = policy.model(input_ids=torch.tensor([prompt_ids + ids])).logits[0].float()
            log_probs = torch.log_softmax(logits[len(prompt_ids) - 1 : -1], dim=-1)
            total = log_probs.gather(-1, torch.tensor(ids)[:, None]).sum()
            scores.append(total / len(action.split()))
        naive_scores.append(torch.log_softmax(torch.stack(scores), dim=0))
    naive = torch.autograd.grad(loss_of(naive_scores), params)
    for g_shared, g_naive in zip(shared, naive):
        torch.testing.assert_close(g_shared, g_naive, atol=1e-4, rtol=1e-3)
    assert any(g.abs().sum().item() > 0 for g in naive)


def test_candidate_log_probs_carry_grad(policy):
    policy.model.zero_grad(set_to_none=True)
    log_probs = policy.candidate_log_probs([PROMPT, OTHER_PROMPT], [ACTIONS, OTHER_ACTIONS])
    assert [lp.shape for lp in log_probs] == [(len(ACTIONS),), (len(OTHER_ACTIONS),)]
    for lp in log_probs:
        assert lp.requires_grad
        assert lp.detach().exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    entropy = sum(-(lp.exp() * lp).sum() for lp in log_probs)
    (log_probs[0][1] + entropy).backward()
    assert any(float(p.grad.abs().sum()) > 0 for p in policy.trainable_parameters())
    policy.model.zero_grad(set_to_none=True)


def test_open_actions_log_probs_match_rescoring(tiny_model_dir):  # noqa: F811
    settings = GenerationSettings(
        temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=12, stop_strings=(), stop_patterns=()
    )
    policy = LMPolicy(tiny_model_dir, generation=settings)
    _perturb_lora(policy, seed=3)
    prompts = [CODE_PROMPT, OTHER_PROMPT, PROMPT]  # different lengths: padded in one batch
    generator = torch.Generator().manual_seed(7)
    samples = policy.act(prompts, [None, None, None], generator=generator)
    assert len(samples) == 3
    for sample, prompt in zip(samples, prompts):
        assert sample.index == -1
        assert 1 <= len(sample.token_ids) <= 12
        assert len(sample.token_log_probs) == len(sample.token_ids)
        assert sample.text == policy.tokenizer.decode(sample.token_ids, skip_special_tokens=True)
        # Stored log-probs are under the untempered LM: exactly what a re-score gives.
        assert sample.token_log_probs == pytest.approx(
            _full_forward_log_probs(policy, prompt, sample.token_ids), abs=1e-4
        )
        assert sample.log_prob == pytest.approx(math.fsum(sample.token_log_probs), abs=1e-6)
        assert sample.sampling_log_probs is not None
        assert len(sample.sampling_log_probs) == len(sample.token_ids)
    rescored = policy.token_log_probs(prompts, [s.token_ids for s in samples])
    for row, sample in enumerate(samples):
        n = len(sample.token_ids)
        assert rescored.log_probs[row, :n].tolist() == pytest.approx(
            sample.token_log_probs, abs=1e-4
        )
    # Same generator seed, same actions.
    replay = policy.act(prompts, [None] * 3, generator=torch.Generator().manual_seed(7))
    assert [s.token_ids for s in replay] == [s.token_ids for s in samples]


def test_open_sampling_log_probs_equal_lm_log_probs_without_processing(tiny_model_dir):  # noqa: F811
    settings = GenerationSettings(
        temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=6, stop_strings=(), stop_patterns=()
    )
    policy = LMPolicy(tiny_model_dir, generation=settings)
    sample = policy.act([CODE_PROMPT], [None], generator=torch.Generator().manual_seed(0))[0]
    assert sample.sampling_log_probs == pytest.approx(sample.token_log_probs, abs=1e-5)


def test_top_k_one_is_greedy(tiny_model_dir):  # noqa: F811
    settings = GenerationSettings(
        temperature=0.5, top_k=1, max_new_tokens=8, stop_strings=(), stop_patterns=()
    )
    policy = LMPolicy(tiny_model_dir, generation=settings)
    sampled = policy.act([CODE_PROMPT], [None], generator=torch.Generator().manual_seed(5))[0]
    greedy = policy.act([CODE_PROMPT], [None], greedy=True)[0]
    assert sampled.token_ids == greedy.token_ids
    assert sampled.sampling_log_probs == pytest.approx([0.0] * len(sampled.token_ids), abs=1e-6)
    assert greedy.sampling_log_probs is None


def test_generation_stops_before_a_stop_string_and_drops_it(tiny_model_dir):  # noqa: F811
    free = GenerationSettings(max_new_tokens=24, stop_strings=(), stop_patterns=())
    policy = LMPolicy(tiny_model_dir, generation=free)
    unconstrained = policy.act([CODE_PROMPT], [None], greedy=True)[0]
    text = unconstrained.text
    # Pick a stop string from the middle of what the model writes anyway.
    start = next(
        i
        for i in range(4, len(text) - 3)
        if text[i : i + 2].isprintable() and text.find(text[i : i + 2]) == i
    )
    stop = text[start : start + 2]
    policy.generation = GenerationSettings(
        max_new_tokens=24, stop_strings=(stop,), stop_patterns=()
    )
    stopped = policy.act([CODE_PROMPT], [None], greedy=True)[0]
    assert stop not in stopped.text
    assert text.startswith(stopped.text) and len(stopped.text) <= start
    assert stopped.token_ids == unconstrained.token_ids[: len(stopped.token_ids)]
    assert len(stopped.token_ids) < len(unconstrained.token_ids)
    assert stopped.text == policy.tokenizer.decode(stopped.token_ids, skip_special_tokens=True)
    assert stopped.token_log_probs == pytest.approx(
        unconstrained.token_log_probs[: len(stopped.token_ids)], abs=1e-5
    )


def test_generation_stops_at_eos_and_keeps_it_as_a_token(tiny_model_dir):  # noqa: F811
    free = GenerationSettings(max_new_tokens=16, stop_strings=(), stop_patterns=())
    policy = LMPolicy(tiny_model_dir, generation=free)
    unconstrained = policy.act([CODE_PROMPT], [None], greedy=True)[0]
    assert len(unconstrained.token_ids) == 16  # ran to max_new_tokens
    # Declare the token the model writes 4th an end-of-sequence id (as a model's
    # generation_config may list several): generation must end right after it.
    eos = unconstrained.token_ids[3]
    first = unconstrained.token_ids.index(eos)
    policy.eos_token_ids = frozenset({eos})
    stopped = policy.act([CODE_PROMPT], [None], greedy=True)[0]
    assert stopped.token_ids == unconstrained.token_ids[: first + 1]
    assert stopped.token_log_probs == pytest.approx(
        unconstrained.token_log_probs[: first + 1], abs=1e-5
    )
    assert stopped.log_prob == pytest.approx(sum(stopped.token_log_probs), abs=1e-5)


def test_default_stop_rule_never_keeps_a_return_line(policy):
    settings = GenerationSettings()
    assert settings.find_stop("x = 1\n    return model") == len("x = 1\n")
    assert settings.find_stop("x = 1\nreturn model") == len("x = 1")  # literal "\nreturn"
    assert settings.find_stop("return model") == 0
    assert settings.find_stop("model = f(x)  # we return it later\n") is None
    assert settings.find_stop("    returned = 3\n") is None
    # A match that touches the end of the text is pending (could become "returned") ...
    assert settings.find_stop("x = 1\n    return") is None
    # ... unless generation is over.
    assert settings.find_stop("x = 1\n    return", final=True) == len("x = 1\n")
    body = "model = LogisticRegression()\n    model.fit(x_train, y_train)\n    return model\n"
    tokens = policy.tokenizer(body, add_special_tokens=False)["input_ids"]
    kept, text, stopped = policy._finish_open(tokens, final=False)
    assert stopped and "return" not in text
    assert text == "model = LogisticRegression()\n    model.fit(x_train, y_train)\n"
    assert policy.tokenizer.decode(kept) == text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 0},
        {"top_k": -1},
        {"top_p": 0},
        {"top_p": 1.5},
        {"max_new_tokens": 0},
        {"stop_strings": ("",)},
        {"stop_patterns": ("(",)},
    ],
)
def test_generation_settings_validation(kwargs):
    import re

    with pytest.raises((ValueError, re.error)):
        GenerationSettings(**kwargs)


def test_mixed_batch_keeps_order(policy):
    samples = policy.act(
        [PROMPT, CODE_PROMPT, OTHER_PROMPT],
        [ACTIONS, None, OTHER_ACTIONS],
        generator=torch.Generator().manual_seed(1),
    )
    assert samples[0].text in ACTIONS and samples[2].text in OTHER_ACTIONS
    assert samples[1].index == -1


def test_bad_batches_are_rejected(policy):
    with pytest.raises(ValueError, match="available_actions"):
        policy.act([PROMPT], [ACTIONS, ACTIONS])
    with pytest.raises(ValueError, match="empty list"):
        policy.act([PROMPT], [[]])
    with pytest.raises(TypeError, match="list of strings"):
        policy.act(PROMPT, [ACTIONS])


def test_critic_features_read_real_tokens_with_the_adapter_disabled(policy):
    actions = [[10, 11, 12], [20]]
    features, mask = policy.critic_features([PROMPT, OTHER_PROMPT], actions)
    assert features.shape == (2, 4, 64) and features.dtype == torch.float32
    assert mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert not features.requires_grad
    # Reference: the frozen base model's final hidden states, one sequence at a time.
    for row, (prompt, ids) in enumerate(zip([PROMPT, OTHER_PROMPT], actions)):
        prompt_ids = policy.encode_prompt(prompt)
        with torch.no_grad(), policy.model.disable_adapter():
            hidden = (
                policy.model(input_ids=torch.tensor([prompt_ids + ids]), output_hidden_states=True)
                .hidden_states[-1][0]
                .float()
            )
        expected = hidden[len(prompt_ids) - 1 : len(prompt_ids) + len(ids)]
        torch.testing.assert_close(features[row, : len(ids) + 1], expected, atol=1e-5, rtol=0)
        assert torch.all(features[row, len(ids) + 1 :] == 0)


def test_critic_value_does_not_depend_on_batch_padding(policy):
    alone, _ = policy.critic_features([OTHER_PROMPT])
    batched, mask = policy.critic_features([OTHER_PROMPT, PROMPT, CODE_PROMPT])
    assert alone.shape == (1, 1, 64) and batched.shape == (3, 1, 64) and mask.all()
    torch.testing.assert_close(batched[0], alone[0], atol=1e-5, rtol=0)
    with_actions, _ = policy.critic_features([OTHER_PROMPT, PROMPT], [[], [1, 2, 3, 4, 5]])
    torch.testing.assert_close(with_actions[0, 0], alone[0, 0], atol=1e-5, rtol=0)
    from agentbench_poad.rl.critic import ActionCritic

    critic = ActionCritic(policy.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert float(critic(alone)[0]) == pytest.approx(float(critic(batched)[0]), abs=1e-5)


def test_critic_features_ignore_the_adapter(tiny_model_dir):  # noqa: F811
    policy = LMPolicy(tiny_model_dir)
    before, _ = policy.critic_features([PROMPT], [[3, 4]])
    logits_before = policy.token_log_probs([PROMPT], [[3, 4]]).log_probs.detach()
    _perturb_lora(policy, seed=9, scale=1.0)
    after, _ = policy.critic_features([PROMPT], [[3, 4]])
    logits_after = policy.token_log_probs([PROMPT], [[3, 4]]).log_probs.detach()
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)
    assert not torch.allclose(logits_after, logits_before, atol=1e-4)


def test_half_precision_base_keeps_fp32_adapter(tiny_model_dir):  # noqa: F811
    policy = LMPolicy(tiny_model_dir, dtype="bfloat16")
    adapter = policy.trainable_parameters()
    assert adapter and all(p.dtype == torch.float32 for p in adapter)
    frozen = [p for p in policy.model.parameters() if not p.requires_grad]
    assert all(p.dtype == torch.bfloat16 for p in frozen)
    result = policy.token_log_probs([PROMPT], [policy.encode_action(PROMPT, ACTIONS[0])])
    assert result.log_probs.dtype == torch.float32
    result.log_probs.sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in adapter)
    features, _ = policy.critic_features([PROMPT])
    assert features.dtype == torch.float32
    sample = policy.act([PROMPT], [ACTIONS], greedy=True)[0]
    assert sample.text in ACTIONS


def test_save_and_load_adapter_round_trip(policy, tiny_model_dir, tmp_path):  # noqa: F811
    directory = policy.save_adapter(tmp_path / "adapter")
    assert (directory / "adapter_config.json").exists()
    fresh = LMPolicy(tiny_model_dir)
    ids = [policy.encode_action(PROMPT, ACTIONS[1])]
    with torch.no_grad():
        expected = policy.token_log_probs([PROMPT], ids).log_probs
        before = fresh.token_log_probs([PROMPT], ids).log_probs
        assert not torch.allclose(before, expected, atol=1e-4)
        fresh.load_adapter(directory)
        after = fresh.token_log_probs([PROMPT], ids).log_probs
    torch.testing.assert_close(after, expected, atol=1e-6, rtol=0)
    assert all(p.dtype == torch.float32 for p in fresh.trainable_parameters())
    with pytest.raises(FileNotFoundError, match="save_adapter"):
        fresh.load_adapter(tmp_path / "missing")


def test_load_adapter_with_other_rank_fails_clearly(tiny_model_dir, tmp_path):  # noqa: F811
    other = LMPolicy(tiny_model_dir, lora=LoraSettings(r=4))
    directory = other.save_adapter(tmp_path / "r4")
    policy = LMPolicy(tiny_model_dir)
    with pytest.raises((ValueError, RuntimeError)):
        policy.load_adapter(directory)


def test_full_finetuning_without_lora(tiny_model_dir, tmp_path):  # noqa: F811
    policy = LMPolicy(tiny_model_dir, lora=None)
    n_all = sum(p.numel() for p in policy.model.parameters())
    assert sum(p.numel() for p in policy.trainable_parameters()) == n_all
    # The frozen critic backbone is not part of the trainable module tree.
    assert sum(p.numel() for p in policy.parameters()) == n_all
    before, _ = policy.critic_features([PROMPT])
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.mul_(1.5)
    after, _ = policy.critic_features([PROMPT])
    torch.testing.assert_close(after, before, atol=1e-6, rtol=0)
    ids = [[4, 5, 6]]
    with torch.no_grad():
        expected = policy.token_log_probs([PROMPT], ids).log_probs
    saved = policy.save_adapter(tmp_path / "full")
    fresh = LMPolicy(tiny_model_dir, lora=None)
    fresh.load_adapter(saved)
    with torch.no_grad():
        torch.testing.assert_close(
            fresh.token_log_probs([PROMPT], ids).log_probs, expected, atol=1e-6, rtol=0
        )


def test_as_agent_implements_the_protocol(policy):
    agent = policy.as_agent(greedy=True)
    assert isinstance(agent, Agent)
    action = agent.act(PROMPT, ACTIONS)
    assert action == policy.act([PROMPT], [ACTIONS], greedy=True)[0].text
    assert agent.act_batch([PROMPT, OTHER_PROMPT], [ACTIONS, OTHER_ACTIONS])[1] in OTHER_ACTIONS
    code = agent.act(CODE_PROMPT, None)
    assert isinstance(code, str)
    sampler = policy.as_agent(greedy=False, seed=3)
    first = [sampler.act(PROMPT, ACTIONS) for _ in range(5)]
    sampler.reset(seed=3)
    assert [sampler.act(PROMPT, ACTIONS) for _ in range(5)] == first


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_policy_matches_cpu(tiny_model_dir):  # noqa: F811
    cpu = LMPolicy(tiny_model_dir, device="cpu")
    gpu = LMPolicy(tiny_model_dir, device="cuda")
    _perturb_lora(cpu, seed=4)
    _perturb_lora(gpu, seed=4)
    assert gpu.device.type == "cuda"
    with torch.no_grad():
        expected = cpu.candidate_log_probs([PROMPT], [ACTIONS])[0]
        got = gpu.candidate_log_probs([PROMPT], [ACTIONS])[0]
    torch.testing.assert_close(got.cpu(), expected, atol=1e-3, rtol=0)
    features, _ = gpu.critic_features([PROMPT], [[1, 2]])
    assert features.device.type == "cuda"
    generator = torch.Generator().manual_seed(0)  # a CPU generator drives a CUDA model
    sample = gpu.act([CODE_PROMPT, PROMPT], [None, ACTIONS], generator=generator)
    rescored = gpu.token_log_probs([CODE_PROMPT], [sample[0].token_ids]).log_probs
    assert rescored.device.type == "cuda"
    assert rescored[0, : len(sample[0].token_ids)].tolist() == pytest.approx(
        sample[0].token_log_probs, abs=1e-3
    )
    auto = LMPolicy(tiny_model_dir, device="auto", dtype="auto")
    assert auto.device.type == "cuda"
    assert all(p.dtype == torch.float32 for p in auto.trainable_parameters())
