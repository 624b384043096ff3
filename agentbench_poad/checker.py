"""``check_text_env``: gymnasium's ``check_env`` plus the text-environment contract.

Run it on every new environment (the test-suite runs it over the whole registry)::

    import gymnasium as gym
    from agentbench_poad import check_text_env

    check_text_env(gym.make("Overcooked-TomatoSalad-v0"))
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Text
from gymnasium.utils.env_checker import check_env

#: Open-action environments get these actions unless the caller passes its own.
DEFAULT_OPEN_ACTIONS: tuple[str, ...] = ("pass", "")
INVALID_ACTION = "this action does not exist #42"
#: What a hostile agent might send (issue 33): NUL and other control characters, an ANSI escape,
#: a bidi override, a lone surrogate (invalid UTF-8 decoded with ``surrogateescape``), a
#: non-character, an emoji and a long line. The next observation must still be in the space
#: and every text of ``info`` in the charset.
ADVERSARIAL_ACTION = (
    "\x00\x07\x1b[2J\u202e\u2066\udc80\ufffe\U0001f600 hostile"
    + "\x00" * 64
    + "x" * 20_000
    + "\r\n\x0b\x0c\x7f\x85"
)


class TextEnvCheckError(AssertionError):
    """Raised by :func:`check_text_env` with a message naming the broken rule."""


def _fail(message: str) -> None:
    raise TextEnvCheckError(message)


def _rollout(
    env: gym.Env,
    seed: int,
    max_steps: int,
    choose: Callable[[np.random.Generator, str, list[str] | None], str],
) -> list[tuple[Any, ...]]:
    """Reset with ``seed`` and step with actions drawn from a generator seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    observation, info = env.reset(seed=seed)
    trace: list[tuple[Any, ...]] = [("reset", observation, _avail(info))]
    _check_observation(env, observation, info, where=f"reset(seed={seed})")
    for t in range(max_steps):
        action = choose(rng, observation, _avail(info))
        observation, reward, terminated, truncated, info = env.step(action)
        where = f"step {t} (seed {seed}, action {action!r})"
        _check_observation(env, observation, info, where=where)
        if not isinstance(reward, (int, float)) or not math.isfinite(reward):
            _fail(f"{where}: reward must be a finite float, got {reward!r}")
        if "action_valid" not in info:
            _fail(f"{where}: info must carry 'action_valid'")
        trace.append((action, observation, float(reward), terminated, truncated, _avail(info)))
        if terminated or truncated:
            break
    return trace


def _check_invalid_action_is_noop(env: gym.Env, seed: int, max_steps: int) -> None:
    """The same valid actions after an unavailable one give the same trajectory as without it."""

    def valid_rollout(prefix_invalid: bool) -> list[tuple[Any, ...]]:
        rng = np.random.default_rng(seed + 1)
        observation, info = env.reset(seed=seed)
        if prefix_invalid:
            observation, _, _, _, info = env.step(INVALID_ACTION)
        trace = []
        for _ in range(max_steps):
            actions = _avail(info) or []
            action = actions[int(rng.integers(len(actions)))]
            observation, reward, terminated, truncated, info = env.step(action)
            trace.append((action, observation, reward, terminated, _avail(info)))
            if terminated or truncated:
                break
        return trace

    without, with_invalid = valid_rollout(False), valid_rollout(True)
    # A time limit counted by a wrapper may cut the second rollout one step earlier.
    n = min(len(without), len(with_invalid))
    if without[:n] != with_invalid[:n]:
        diff = next(i for i in range(n) if without[i] != with_invalid[i])
        _fail(
            "an unavailable action must be a no-op, but the valid actions after it lead elsewhere "
            f"(step {diff}):\n  without: {without[diff]!r}\n  after:   {with_invalid[diff]!r}"
        )


def _info_texts(value: Any) -> list[str]:
    """Every str inside an info value (lists, tuples and dicts walked)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_info_texts(k), *_info_texts(v))]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _info_texts(v)]
    return []


def _check_adversarial_step(env: gym.Env, seed: int) -> None:
    """After :data:`ADVERSARIAL_ACTION` the observation is in the space and info is printable."""
    env.reset(seed=seed)
    observation, reward, _, _, info = env.step(ADVERSARIAL_ACTION)
    where = "the step after an adversarial action (NUL, bidi, surrogate, 20k characters)"
    _check_observation(env, observation, info, where=where)
    if not isinstance(reward, (int, float)) or not math.isfinite(reward):
        _fail(f"{where}: reward must be a finite float, got {reward!r}")
    charset = env.observation_space.character_set
    for key, value in info.items():
        for text in _info_texts(value):
            bad = sorted({c for c in text if c not in charset})
            if bad:
                _fail(
                    f"{where}: info[{key!r}] holds characters outside the charset {bad[:10]!r}; "
                    "pass texts that come from the agent through agentbench_poad.core.to_text"
                )


def _avail(info: dict[str, Any]) -> list[str] | None:
    actions = info.get("available_actions", "<missing>")
    if actions == "<missing>":
        _fail("info must carry 'available_actions' (a list of str, or None in open-action envs)")
    return None if actions is None else list(actions)


def _check_observation(env: gym.Env, observation: Any, info: dict[str, Any], where: str) -> None:
    if not isinstance(observation, str):
        _fail(f"{where}: observation must be a str, got {type(observation).__name__}")
    if not env.observation_space.contains(observation):
        bad = sorted({c for c in observation if c not in env.observation_space.character_set})
        _fail(
            f"{where}: observation is not in observation_space "
            f"(length {len(observation)}, characters outside the charset: {bad[:10]!r})"
        )
    actions = info.get("available_actions")
    if actions is None:
        return
    if not isinstance(actions, list) or not actions:
        _fail(f"{where}: available_actions must be a non-empty list, got {actions!r}")
    for a in actions:
        if not isinstance(a, str) or not env.action_space.contains(a):
            _fail(f"{where}: available action {a!r} is not a str in action_space")
    if len(set(actions)) != len(actions):
        _fail(f"{where}: available_actions has duplicates: {actions!r}")


def check_text_env(
    env: gym.Env,
    *,
    seeds: Sequence[int] = (0, 1),
    max_steps: int = 30,
    open_actions: Sequence[str] = DEFAULT_OPEN_ACTIONS,
    skip_gymnasium_check: bool = False,
) -> None:
    """Check ``env`` against gymnasium's API and the text-environment contract.

    Args:
        env: the environment, usually from ``gym.make``.
        seeds: seeds of the determinism check; each is rolled out twice.
        max_steps: steps per rollout.
        open_actions: actions tried in open-action environments (``available_actions is None``).
        skip_gymnasium_check: skip ``gymnasium.utils.env_checker.check_env`` (tests that run it
            separately).

    Raises:
        TextEnvCheckError: naming the first rule the environment breaks.
    """
    unwrapped = env.unwrapped
    for name in ("observation_space", "action_space"):
        if not isinstance(getattr(unwrapped, name), Text):
            _fail(f"{name} must be gymnasium.spaces.Text, got {getattr(unwrapped, name)!r}")

    if not skip_gymnasium_check:
        with warnings.catch_warnings():
            # check_env warns about the (expected) text spaces having no bounds.
            warnings.simplefilter("ignore", UserWarning)
            check_env(unwrapped, skip_render_check=True)

    def choose(rng: np.random.Generator, _obs: str, actions: list[str] | None) -> str:
        pool = actions if actions is not None else list(open_actions)
        return pool[int(rng.integers(len(pool)))]

    for seed in seeds:
        first = _rollout(env, seed, max_steps, choose)
        second = _rollout(env, seed, max_steps, choose)
        if first != second:
            diff = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
            _fail(
                f"not deterministic under seed {seed}: rollouts differ at position {diff}:\n"
                f"  first:  {first[diff]!r}\n  second: {second[diff]!r}"
            )

    # Type errors and unavailable actions.
    observation, info = env.reset(seed=seeds[0])
    for bad in (0, None, b"bytes", ["list"]):
        try:
            env.step(bad)  # type: ignore[arg-type]
        except TypeError:
            continue
        _fail(f"step({bad!r}) must raise TypeError")
    available = _avail(info)
    if available is not None:
        observation2, reward, terminated, truncated, info2 = env.step(INVALID_ACTION)
        if info2.get("action_valid") is not False:
            _fail("an unavailable action must set info['action_valid'] = False")
        penalty = getattr(unwrapped, "invalid_action_penalty", None)
        if penalty is not None and not math.isclose(reward, penalty, abs_tol=1e-9):
            _fail(f"an unavailable action must give invalid_action_penalty={penalty}, got {reward}")
        if _avail(info2) != available and not (terminated or truncated):
            _fail("an unavailable action must be a no-op, but available_actions changed")
        if "not available" not in observation2 and INVALID_ACTION not in observation2:
            _fail("after an unavailable action the next observation must say why")
        if not (terminated or truncated):
            _check_invalid_action_is_noop(env, seeds[0], max_steps)
    _check_adversarial_step(env, seeds[0])
    render_mode = getattr(unwrapped, "render_mode", None)
    if render_mode == "ansi" and not isinstance(env.render(), str):
        _fail("render() in 'ansi' mode must return a str")
