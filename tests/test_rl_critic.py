"""Tests of agentbench_poad.rl.critic: value heads, token/action critics, target network."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from agentbench_poad.rl.critic import ActionCritic, TargetCritic, TokenCritic, ValueHead  # noqa: E402


def test_value_head_architecture_is_the_references():
    head = ValueHead(4096)
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [
        (4096, 1024),
        (1024, 512),
        (512, 1),
    ]
    assert all(m.bias is None for m in linears)
    assert sum(isinstance(m, torch.nn.ReLU) for m in head.modules()) == 2
    assert (
        sum(p.numel() for p in head.parameters()) == 4_719_104
    )  # docs/reference.md#models-and-critic
    assert all(p.dtype == torch.float32 for p in head.parameters())


def test_value_head_custom_sizes_and_validation():
    head = ValueHead(8, (4,))
    assert [p.shape for p in head.parameters()] == [(4, 8), (1, 4)]
    assert ValueHead(8, ()).net[0].weight.shape == (1, 8)
    with pytest.raises(ValueError, match="positive"):
        ValueHead(8, (0,))


def test_value_head_seeded_init_is_deterministic():
    a = ValueHead(16, (8, 4), generator=torch.Generator().manual_seed(0))
    b = ValueHead(16, (8, 4), generator=torch.Generator().manual_seed(0))
    c = ValueHead(16, (8, 4), generator=torch.Generator().manual_seed(1))
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert any(not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))
    # Same distribution as nn.Linear's default: uniform within +-1/sqrt(fan_in).
    assert float(a.net[0].weight.detach().abs().max()) <= 1 / 16**0.5 + 1e-6


def test_value_head_computes_the_mlp_in_float32():
    head = ValueHead(6, (5, 3), generator=torch.Generator().manual_seed(0))
    x = torch.randn(2, 4, 6, generator=torch.Generator().manual_seed(1))
    w1, w2, w3 = (m.weight for m in head.net if isinstance(m, torch.nn.Linear))
    expected = (torch.relu(torch.relu(x @ w1.T) @ w2.T) @ w3.T).squeeze(-1)
    torch.testing.assert_close(head(x), expected)
    out = head(x.to(torch.bfloat16))
    assert out.dtype == torch.float32 and out.shape == (2, 4)


def test_token_critic_shapes():
    critic = TokenCritic(6, (5,), generator=torch.Generator().manual_seed(0))
    features = torch.randn(3, 7, 6)
    values = critic(features)
    assert values.shape == (3, 7)
    # Position j only depends on the features at j.
    changed = features.clone()
    changed[:, 4] += 1.0
    diff = (critic(changed) - values).abs()
    assert diff[:, 4].max().item() > 0 and diff[:, [0, 1, 2, 3, 5, 6]].max().item() == 0
    with pytest.raises(ValueError, match=r"\(B, L \+ 1, H\)"):
        critic(torch.randn(3, 6))


def test_action_critic_accepts_both_layouts():
    critic = ActionCritic(6, (5,), generator=torch.Generator().manual_seed(0))
    features = torch.randn(4, 1, 6)
    values = critic(features)
    assert values.shape == (4,)
    torch.testing.assert_close(critic(features[:, 0]), values)
    # With action positions present, the prompt's position 0 is the one that counts.
    longer = torch.cat([features, torch.randn(4, 3, 6)], dim=1)
    torch.testing.assert_close(critic(longer), values)
    with pytest.raises(ValueError, match="ActionCritic"):
        critic(torch.randn(6))


def test_critics_train():
    critic = TokenCritic(4, (8,), generator=torch.Generator().manual_seed(0))
    features = torch.randn(5, 3, 4, generator=torch.Generator().manual_seed(2))
    targets = torch.randn(5, 3, generator=torch.Generator().manual_seed(3))
    optimiser = torch.optim.Adam(critic.parameters(), lr=1e-2)
    first = None
    for _ in range(100):
        loss = ((critic(features) - targets) ** 2).mean()
        first = loss.item() if first is None else first
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert loss.item() < 0.5 * first


def test_target_critic_polyak_update():
    online = ActionCritic(4, (3,), generator=torch.Generator().manual_seed(0))
    target = TargetCritic(online, tau=0.25)
    assert all(not p.requires_grad for p in target.parameters())
    assert sum(1 for _ in target.parameters()) == sum(1 for _ in online.parameters())
    start = [p.detach().clone() for p in target.parameters()]
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    target.update()
    for s, t, o in zip(start, target.parameters(), online.parameters()):
        torch.testing.assert_close(t, 0.75 * s + 0.25 * o)
    features = torch.randn(2, 4)
    assert target(features).shape == (2,)
    assert not target(features).requires_grad
    full = TargetCritic(online, tau=1.0)
    with torch.no_grad():
        for p in online.parameters():
            p.mul_(2.0)
    full.update()
    for t, o in zip(full.parameters(), online.parameters()):
        assert torch.equal(t, o)
    with pytest.raises(ValueError, match="tau"):
        TargetCritic(online, tau=0.0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12),  # rows
    st.integers(1, 9),  # input width
    st.lists(st.integers(1, 7), min_size=0, max_size=2),  # hidden widths
    st.integers(0, 2**31 - 1),
    st.floats(-3.0, 3.0),  # shift: from most units on to most units off
)
def test_active_units_match_a_plain_loop(rows, width, hidden, seed, shift):
    """A unit counts as alive when its pre-activation is > 0 on at least one row."""
    head = ValueHead(width, hidden, generator=torch.Generator().manual_seed(seed))
    features = torch.randn(rows, width, generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        head.net[0].weight.sub_(shift / width)
    alive, total = head.active_units(features)
    if not hidden:
        assert (alive, total) == (0, 0)
        return
    weight = head.net[0].weight.tolist()
    expected = 0
    for unit in range(hidden[0]):
        on = False
        for row in features.tolist():
            pre = sum(w * x for w, x in zip(weight[unit], row))
            on = on or pre > 0
        expected += on
    assert total == hidden[0]
    assert alive == expected
