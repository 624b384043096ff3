"""Property tests of the group-relative math (GRPO, GiGPO) against plain loops written here.

The loops use Python floats and dicts only (no NumPy), so they share no kernel with
agentbench_poad/rl/advantages.py. Equal returns must give exactly 0, anchor-state groups of one
step give 0 (GiGPO's fall-back: the step keeps its episode advantage), padded steps are never read
and truncated episodes sum to their last real step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentbench_poad.rl.advantages import (
    GROUP_NORMALIZATIONS,
    anchor_state_groups,
    discounted_step_returns,
    group_relative_advantages,
)

SETTINGS = settings(max_examples=60, deadline=None)
rewards_st = st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 3))


def loop_group_relative(groups, values, normalization, eps=1e-6):
    members = {}
    for g, v in zip(groups, values):
        members.setdefault(g, []).append(float(v))
    out = []
    for g, v in zip(groups, values):
        xs = members[g]
        if len(xs) == 1 or max(xs) == min(xs):
            out.append(0.0)
            continue
        mean = sum(xs) / len(xs)
        if normalization == "mean":
            out.append(float(v) - mean)
        else:
            std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
            out.append((float(v) - mean) / (std + eps))
    return out


def loop_step_returns(episode_rewards, gamma):
    returns = []
    for t in range(len(episode_rewards)):
        total = 0.0
        for k in range(t, len(episode_rewards)):
            total += gamma ** (k - t) * episode_rewards[k]
        returns.append(total)
    return returns


@st.composite
def grouped_values(draw):
    n = draw(st.integers(1, 30))
    groups = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    values = draw(st.lists(rewards_st, min_size=n, max_size=n))
    return groups, values


@SETTINGS
@given(grouped_values(), st.sampled_from(GROUP_NORMALIZATIONS))
def test_group_relative_matches_the_loop(data, normalization):
    groups, values = data
    got = group_relative_advantages(groups, values, normalization=normalization)
    want = loop_group_relative(groups, values, normalization)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@SETTINGS
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=5),
    rewards_st,
    st.sampled_from(GROUP_NORMALIZATIONS),
)
def test_equal_returns_give_exactly_zero(sizes, value, normalization):
    groups = [g for g, size in enumerate(sizes) for _ in range(size)]
    got = group_relative_advantages(groups, [value] * len(groups), normalization=normalization)
    assert (got == 0.0).all()


@SETTINGS
@given(grouped_values(), st.sampled_from(GROUP_NORMALIZATIONS))
def test_singleton_groups_fall_back_to_zero_and_groups_are_centred(data, normalization):
    groups, values = data
    got = group_relative_advantages(groups, values, normalization=normalization)
    for g in set(groups):
        members = [a for h, a in zip(groups, got) if h == g]
        if len(members) == 1:
            assert members[0] == 0.0  # GiGPO: an anchor state seen once has no step advantage
        assert abs(sum(members)) < 1e-6 * max(1, len(members))


def test_group_labels_may_be_any_hashable_and_bad_input_is_named():
    got = group_relative_advantages([("a", 1), ("a", 1), "b"], [1.0, 3.0, 7.0])
    np.testing.assert_allclose(got, [-1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6), 0])
    with pytest.raises(ValueError, match="normalization"):
        group_relative_advantages([0], [1.0], normalization="std")
    with pytest.raises(ValueError, match="group ids"):
        group_relative_advantages([0, 1], [1.0])
    with pytest.raises(ValueError, match="NaN or inf"):
        group_relative_advantages([0, 0], [1.0, float("nan")])


@st.composite
def padded_episodes(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6))
    episodes = [draw(st.lists(rewards_st, min_size=n, max_size=n)) for n in lengths]
    width = max(lengths) + draw(st.integers(0, 3))
    pad = draw(st.sampled_from([0.0, float("nan"), 1e300]))
    rewards = np.full((len(lengths), width), pad)
    mask = np.zeros((len(lengths), width), dtype=bool)
    for i, episode in enumerate(episodes):
        rewards[i, : len(episode)] = episode
        mask[i, : len(episode)] = True
    return episodes, rewards, mask


@SETTINGS
@given(padded_episodes(), st.floats(0, 1))
def test_discounted_step_returns_match_the_loop_and_ignore_pads(data, gamma):
    episodes, rewards, mask = data
    got = discounted_step_returns(rewards, mask, gamma)
    assert np.isfinite(got).all() and (got[~mask] == 0).all()
    for i, episode in enumerate(episodes):
        # A truncated episode is just a shorter row: its sum stops at its last real step.
        np.testing.assert_allclose(
            got[i, : len(episode)], loop_step_returns(episode, gamma), rtol=1e-9, atol=1e-9
        )


def test_discounted_step_returns_bad_input():
    with pytest.raises(ValueError, match="prefix"):
        discounted_step_returns([[1.0, 2.0]], [[False, True]], 0.9)
    with pytest.raises(ValueError, match="prefix"):
        discounted_step_returns([[1.0, 2.0]], [[False, False]], 0.9)
    with pytest.raises(ValueError, match="gamma"):
        discounted_step_returns([[1.0]], [[True]], 1.5)


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["kitchen", "counter", "plate"])),
        min_size=1,
        max_size=25,
    ),
    st.data(),
)
def test_gigpo_combination_matches_a_loop_over_episodes_and_anchor_states(steps, data):
    """A whole GiGPO advantage, built from the three functions, against one loop."""
    # Draw episodes: each (episode group, state) list above is split into episodes of a group.
    episodes = []  # (group, [(state, reward)])
    for group, state in steps:
        reward = data.draw(rewards_st)
        if episodes and episodes[-1][0] == group and data.draw(st.booleans()):
            episodes[-1][1].append((state, reward))
        else:
            episodes.append((group, [(state, reward)]))
    gamma, omega = 0.9, 1.0
    # The code under test.
    width = max(len(e) for _, e in episodes)
    rewards = np.zeros((len(episodes), width))
    mask = np.zeros(rewards.shape, dtype=bool)
    for i, (_, e) in enumerate(episodes):
        rewards[i, : len(e)] = [r for _, r in e]
        mask[i, : len(e)] = True
    episode_adv = group_relative_advantages(
        [g for g, _ in episodes], [sum(r for _, r in e) for _, e in episodes]
    )
    step_returns = discounted_step_returns(rewards, mask, gamma)[mask]
    anchors = anchor_state_groups(
        [g for g, e in episodes for _ in e], [s for _, e in episodes for s, _ in e]
    )
    got = np.repeat(episode_adv, [len(e) for _, e in episodes]) + omega * (
        group_relative_advantages(anchors, step_returns)
    )
    # The loop.
    totals = [sum(r for _, r in e) for _, e in episodes]
    want_episode = loop_group_relative([g for g, _ in episodes], totals, "mean_std")
    keys, returns, owners = [], [], []
    for i, (g, e) in enumerate(episodes):
        rs = loop_step_returns([r for _, r in e], gamma)
        for (state, _), ret in zip(e, rs):
            keys.append((g, state))
            returns.append(ret)
            owners.append(i)
    want_step = loop_group_relative(keys, returns, "mean_std")
    want = [want_episode[o] + omega * s for o, s in zip(owners, want_step)]
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_anchor_groups_split_by_episode_group():
    ids = anchor_state_groups([0, 0, 1, 0], ["s", "s", "s", "t"])
    assert ids[0] == ids[1] and ids[2] != ids[0] and len(set(ids.tolist())) == 3
