"""The prefix forest (scoring trees packed as one trie per row) and the slot head (log-probs and
entropies with a backward that skips idle rows) against plain computations written here.

* the forest's layout: every tree's elements sit where a plain loop over its token prefixes puts
  them, see exactly their prefix, share a slot exactly when their prefixes are equal within a
  row, and rows keep to their budget;
* :func:`slot_log_probs`: values and gradients (hidden states and, when it trains, the LM head)
  equal autograd's through ``log_softmax(hidden @ weight.T)``;
* scoring on the tiny model: log-probs and their gradients through the forest (whole model or
  cached lower layers, several row budgets) equal one plain forward per prompt + candidate.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from agentbench_poad.models import init_tiny_model  # noqa: E402
from agentbench_poad.rl.action_scoring import ActionScoring  # noqa: E402
from agentbench_poad.rl.policy import LMPolicy  # noqa: E402
from agentbench_poad.rl.prefix_forest import build_forest  # noqa: E402
from agentbench_poad.rl.slot_head import slot_log_probs  # noqa: E402

# Prompts over a tiny alphabet after one BOS share prefixes often, as Overcooked's do.
prompt_strategy = st.lists(st.integers(3, 5), min_size=0, max_size=6).map(lambda t: [1, *t])
candidates_strategy = st.lists(
    st.lists(st.integers(3, 6), min_size=1, max_size=4), min_size=1, max_size=4
)
trees_strategy = st.lists(st.tuples(prompt_strategy, candidates_strategy), min_size=1, max_size=6)


def _elements(prompt: list[int], trie) -> list[tuple[int, ...]]:
    """Each element's token prefix (prompt tokens, then trie nodes), by a plain loop."""
    prefixes = [tuple(prompt[: q + 1]) for q in range(len(prompt))]
    tokens, parents, _ = trie
    for node, token in enumerate(tokens):
        chain, at = [token], parents[node]
        while at >= 0:
            chain.append(tokens[at])
            at = parents[at]
        prefixes.append(tuple(prompt) + tuple(reversed(chain)))
    return prefixes


@settings(max_examples=80, deadline=None)
@given(trees=trees_strategy, row_tokens=st.sampled_from([1, 5, 12, 40, 256]))
def test_forest_puts_every_element_at_its_prefix(trees, row_tokens):
    prompts = [p for p, _ in trees]
    tries, _ = ActionScoring._candidate_tries([c for _, c in trees], keep_last=True)
    forest = build_forest(prompts, tries, row_tokens=row_tokens, pad_id=0)
    rows, width = forest.ids.shape
    prefix_at: dict[tuple[int, int], tuple[int, ...]] = {}
    trees_in_row: dict[int, set[int]] = {}
    all_prefixes = [e for prompt, trie in zip(prompts, tries) for e in _elements(prompt, trie)]
    for i, (prompt, trie) in enumerate(zip(prompts, tries)):
        prefixes = _elements(prompt, trie)
        assert len(forest.where[i]) == len(prefixes)
        slot_of = {}
        for prefix, (r, c) in zip(prefixes, forest.where[i]):
            trees_in_row.setdefault(r, set()).add(i)
            assert prefix_at.setdefault((r, c), prefix) == prefix  # one slot, one prefix
            slot_of[prefix] = c
            assert int(forest.ids[r, c]) == prefix[-1]
            assert int(forest.positions[r, c]) == len(prefix) - 1
            seen = {int(x) for x in forest.allowed[r, c].nonzero()}
            assert seen == {slot_of[prefix[:n]] for n in range(1, len(prefix) + 1)}
            assert all_prefixes[int(forest.source[r, c])] == prefix  # states of this prefix
    for r in range(rows):
        used = {c for (row, c) in prefix_at if row == r}
        assert used == set(range(len(used)))  # used slots first, then padding
        distinct = {p for (row, _), p in prefix_at.items() if row == r}
        assert len(distinct) == len(used)  # equal prefixes in a row share one slot
        assert len(used) <= row_tokens or len(trees_in_row[r]) == 1
        for c in range(len(used), width):  # padding sees itself only
            assert forest.allowed[r, c].nonzero().flatten().tolist() == [c]


def test_one_tree_is_its_prompt_then_its_trie():
    prompt = [1, 4, 4, 5]
    tries, _ = ActionScoring._candidate_tries([[[3, 6], [3, 4, 5], [6]]], keep_last=True)
    forest = build_forest([prompt], tries, row_tokens=1, pad_id=0)
    assert forest.where[0] == [(0, c) for c in range(len(prompt) + len(tries[0][0]))]
    assert forest.ids[0].tolist() == prompt + tries[0][0]


@settings(max_examples=40, deadline=None)
@given(
    slots=st.integers(1, 6),
    reads=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10)), min_size=1, max_size=12),
    idle=st.lists(st.booleans(), min_size=6, max_size=6),
    train_head=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_slot_head_equals_autograd(slots, reads, idle, train_head, seed):
    generator = torch.Generator().manual_seed(seed)
    reads = [(r % slots, t) for r, t in reads]
    rows = torch.tensor([r for r, _ in reads])
    targets = torch.tensor([t for _, t in reads])
    hidden = torch.randn(slots, 4, generator=generator)
    weight = torch.randn(11, 4, generator=generator)
    # Upstream gradients, all zero on the idle rows (what a token-level loss leaves).
    up_reads = torch.randn(len(reads), generator=generator) * torch.tensor(
        [0.0 if idle[r] else 1.0 for r, _ in reads]
    )
    up_entropy = torch.randn(slots, generator=generator) * torch.tensor(
        [0.0 if idle[s] else 1.0 for s in range(slots)]
    )
    results = []
    for fused in (True, False):
        h = hidden.clone().requires_grad_()
        w = weight.clone().requires_grad_(train_head)
        if fused:
            picked, entropy = slot_log_probs(h, w, rows, targets)
        else:
            log_p = torch.log_softmax(h @ w.T, dim=-1)
            picked = log_p[rows, targets]
            entropy = -(log_p.exp() * log_p).sum(dim=-1)
        ((picked * up_reads).sum() + (entropy * up_entropy).sum()).backward()
        results.append((picked.detach(), entropy.detach(), h.grad, w.grad))
    (picked, entropy, grad_h, grad_w), (e_picked, e_entropy, e_grad_h, e_grad_w) = results
    torch.testing.assert_close(picked, e_picked)
    torch.testing.assert_close(entropy, e_entropy)
    torch.testing.assert_close(grad_h, e_grad_h, atol=1e-5, rtol=1e-4)
    if train_head:
        torch.testing.assert_close(grad_w, e_grad_w, atol=1e-5, rtol=1e-4)
    else:
        assert grad_w is None and e_grad_w is None


@pytest.fixture(scope="module")
def deep_policy(tmp_path_factory):
    """4 layers, LoRA on the top 2, non-zero adapter weights."""
    path = init_tiny_model(tmp_path_factory.mktemp("forest"), seed=0, hidden_size=32, num_layers=4)
    policy = LMPolicy(path, lora_layers=2)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    return policy


def _per_candidate(policy: LMPolicy, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """log p(token j | prompt, tokens < j) from one plain forward of prompt + candidate."""
    ids = torch.tensor([prompt + tokens])
    logits = policy.model(input_ids=ids).logits[0].float()
    log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return log_probs.gather(-1, ids[0, len(prompt) :, None])[:, 0]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    trees=trees_strategy,
    row_tokens=st.sampled_from([1, 12, 256]),
    reuse=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_forest_scoring_and_its_gradients_equal_one_forward_per_candidate(
    deep_policy, trees, row_tokens, reuse, seed
):
    prompts = [p for p, _ in trees]
    candidates = [c for _, c in trees]
    assume(len({(tuple(p), str(c)) for p, c in trees}) == len(trees))
    weights = torch.rand(
        sum(len(t) for c in candidates for t in c), generator=torch.Generator().manual_seed(seed)
    )
    deep_policy.forest_row_tokens = row_tokens
    deep_policy.reuse_lower_layers = reuse
    deep_policy.clear_frozen_cache()
    results = []
    try:
        for forest in (True, False):
            deep_policy.model.zero_grad(set_to_none=True)
            if forest:
                scored = deep_policy._score_group(prompts, candidates)
                flat = torch.cat(
                    [lp[k, : len(t)] for lp, c in zip(scored, candidates) for k, t in enumerate(c)]
                )
            else:
                flat = torch.cat([_per_candidate(deep_policy, p, t) for p, c in trees for t in c])
            (flat * weights).sum().backward()
            grads = [p.grad.clone() for p in deep_policy.trainable_parameters()]
            results.append((flat.detach(), grads))
    finally:
        deep_policy.forest_row_tokens = 256
        deep_policy.reuse_lower_layers = True
    (got, got_grads), (expected, expected_grads) = results
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    prompt_words=st.lists(
        st.lists(st.sampled_from(["a", "tomato", "bowl"]), max_size=5), min_size=1, max_size=3
    ),
    seed=st.integers(0, 1000),
    reuse=st.booleans(),
)
def test_critic_features_from_scoring_trees_equal_the_plain_path(
    deep_policy, prompt_words, seed, reuse
):
    """The features read from a prompt's scoring tree (every offered action in one frozen pass)
    equal the plain path's, one forward of the frozen model per prompt + action."""
    prompts = [" ".join(["Kitchen:", *w]) for w in prompt_words]
    offered = [
        ["pick up the tomato", "chop", "serve the dish now"][: 1 + i % 3]
        for i in range(len(prompts))
    ]
    deep_policy.reuse_lower_layers = reuse
    deep_policy.clear_frozen_cache()
    try:
        samples = deep_policy.act(prompts, offered, generator=torch.Generator().manual_seed(seed))
        tokens = [s.token_ids for s in samples]
        from_trees, mask = deep_policy.critic_features(prompts, tokens, available_actions=offered)
        assert any(k[0] == "tree" for k in deep_policy._feature_cache)  # read from the trees
        prompt_only, _ = deep_policy.critic_features(prompts, available_actions=offered)
        deep_policy.memoize = False
        plain, plain_mask = deep_policy.critic_features(prompts, tokens)
        plain_prompt, _ = deep_policy.critic_features(prompts)
    finally:
        deep_policy.memoize = True
        deep_policy.reuse_lower_layers = True
    assert torch.equal(mask, plain_mask)
    torch.testing.assert_close(from_trees, plain, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(prompt_only, plain_prompt, atol=1e-5, rtol=1e-5)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    read=st.lists(st.integers(0, 2 * 9 - 1), min_size=1, max_size=6, unique=True),
    seed=st.integers(0, 1000),
)
def test_top_layer_at_the_read_rows_equals_the_whole_layer(deep_policy, read, seed):
    """The top layer's query and output projections and MLP run at the read positions only:
    the final states there, and the adapters' gradients through them, are the plain pass's."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 200, (2, 9), generator=generator)
    rows = torch.tensor(read)
    weights = torch.randn(len(read), 32, generator=generator)
    results = []
    for at_rows in (True, False):
        deep_policy.model.zero_grad(set_to_none=True)
        decoder = deep_policy._hf_model().get_decoder()
        if at_rows:
            with deep_policy._top_layer_at(rows):
                states = decoder(input_ids=ids).last_hidden_state
        else:
            states = decoder(input_ids=ids).last_hidden_state
        picked = states.reshape(-1, states.shape[-1])[rows]
        (picked * weights).sum().backward()
        results.append(
            (picked.detach(), [p.grad.clone() for p in deep_policy.trainable_parameters()])
        )
    (got, got_grads), (expected, expected_grads) = results
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(got_grads, expected_grads):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    assert type(decoder.layers[-1].mlp).__name__ != "_AtRows"  # restored
