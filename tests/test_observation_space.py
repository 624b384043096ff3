"""Observations stay inside their declared Text space whatever the agent writes (issue 33).

The one sanitiser is :func:`agentbench_poad.core.to_text`; these tests feed it (and the envs
that use it) what a hostile program or model would: NULs, invalid UTF-8, control and bidi
characters, lone surrogates and megabyte lines. Sandboxed programs run for real (process
backend; docker when its engine and image are there, with few examples).
"""

from __future__ import annotations

import html
import json
import re

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbench_poad import TextEnvCheckError, check_text_env
from agentbench_poad.checker import ADVERSARIAL_ACTION
from agentbench_poad.core import CHARSET, TRUNCATION_MARKER, text_space, to_text
from agentbench_poad.sandbox import Limits
from tests.test_core import CountingEnv

#: Any code point, lone surrogates included (what ``surrogateescape`` makes of invalid UTF-8).
ANY_CHAR = st.integers(0, 0x10FFFF).map(chr)
NASTY = st.sampled_from(
    ["\x00", "\x1b[2J", "\u202e", "\u2066", "\udc80", "\ufffe", "\U0001f600", "\x7f", "\x85"]
)
HOSTILE_TEXT = st.lists(st.one_of(ANY_CHAR, NASTY, st.text(max_size=5)), max_size=40).map("".join)
HOSTILE_BYTES = st.lists(
    st.one_of(
        st.binary(max_size=20),
        st.sampled_from([b"\x00" * 8, b"\xff\xfe", b"\xed\xa0\x80", "\u202e".encode(), b"\x1b[0m"]),
    ),
    max_size=10,
).map(b"".join)


def printable(text: str) -> bool:
    return set(text) <= set(CHARSET)


def info_texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*info_texts(k), *info_texts(v))]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in info_texts(v)]
    return []


def assert_inside(env: gym.Env, observation: str, info: dict) -> None:
    space = env.observation_space
    assert space.contains(observation), (
        len(observation),
        space.max_length,
        sorted({c for c in observation if c not in space.character_set})[:10],
    )
    for text in info_texts(info):
        assert printable(text), sorted({c for c in text if c not in CHARSET})[:10]


def plain_escape(text: str) -> str:
    """The reference spelling: characters outside the charset as Python's unicode_escape."""
    return "".join(c if c in CHARSET else c.encode("unicode_escape").decode("ascii") for c in text)


# -- the sanitiser -----------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(text=HOSTILE_TEXT, max_length=st.integers(0, 300))
def test_to_text_is_inside_the_space_and_visible(text, max_length):
    out = to_text(text, max_length)
    assert text_space(max_length).contains(out)
    expected = plain_escape(text)
    if len(expected) <= max_length:
        assert out == expected
    else:
        assert len(out) == max_length
        marker = TRUNCATION_MARKER if max_length >= 4 * len(TRUNCATION_MARKER) else ""
        keep = max_length - len(marker)
        head, tail = keep // 2, keep - keep // 2
        assert out == expected[:head] + marker + (expected[-tail:] if tail else "")


def test_to_text_spells_what_it_replaces():
    assert to_text("a\x00b\u202ec\udc80d\U0001f600") == "a\\x00b\\u202ec\\udc80d\\U0001f600"
    big = to_text("\x00" * 1_000_000 + "END", 2048)
    assert len(big) == 2048 and big.endswith("END") and TRUNCATION_MARKER in big


# -- the checker -------------------------------------------------------------------------------
class RawEchoEnv(CountingEnv):
    """Echoes the unavailable action into the observation without sanitising it."""

    def _step(self, action: str):
        observation, reward, terminated, truncated, info = super()._step(action)
        if not info["action_valid"]:
            observation = f'"{action[:50]}" is not available. ' + self._obs()
        return observation, reward, terminated, truncated, info


class RawInfoEnv(CountingEnv):
    """Puts the raw action into info (the observation itself is sanitised)."""

    def _step(self, action: str):
        observation, reward, terminated, truncated, info = super()._step(action)
        return to_text(observation, 1000), reward, terminated, truncated, {**info, "echo": action}


@pytest.mark.parametrize(
    ("env_class", "needle"),
    [
        (RawEchoEnv, "adversarial action.*not in observation_space"),
        (RawInfoEnv, "info\\['echo'\\]"),
    ],
)
def test_the_checker_takes_an_adversarial_step(env_class, needle):
    with pytest.raises(TextEnvCheckError, match=needle):
        check_text_env(env_class(), skip_gymnasium_check=True)


# -- restricted-action families: the echo of a label that is not offered -----------------------
@pytest.mark.parametrize(
    "env_id",
    [
        "Overcooked-TomatoSalad-v0",
        "Overcooked-TomatoLettuceSalad-v0",
        "VirtualHome-FoodPreparation-v0",
        "VirtualHome-Entertainment-v0",
    ],
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(action=HOSTILE_TEXT, big=st.booleans(), steps=st.integers(0, 3))
def test_a_bad_action_keeps_the_observation_inside(env_id, action, big, steps):
    env = gym.make(env_id)
    observation, info = env.reset(seed=0)
    for _ in range(steps):  # somewhere in the episode, not only at reset
        observation, _, terminated, truncated, info = env.step(info["available_actions"][0])
        if terminated or truncated:
            observation, info = env.reset(seed=0)
    if big:
        action = action + "\x00" * 1_000_000 + action
    before = info["available_actions"]
    observation, _, terminated, _, info = env.step(action)
    assert not info["action_valid"] or action in before
    assert_inside(env, observation, info)
    assert "not available" in observation


def test_the_registry_envs_pass_the_adversarial_step():
    for env_id in ("Overcooked-TomatoSalad-v0", "VirtualHome-FoodPreparation-v0"):
        env = gym.make(env_id)
        observation, info = env.reset(seed=0)
        observation, _, _, _, info = env.step(ADVERSARIAL_ACTION)
        assert_inside(env, observation, info)
        assert "\\x00" in observation and "\\u202e" in observation


# -- DataSciCoding: whatever the sandboxed program writes or raises ----------------------------
LIMITS = Limits(wall_time_s=60.0, memory_mb=1024)
MEGABYTE_LINE = (
    "import os\nos.write(1, b'\\x00' * 1_000_000 + b'\\n')\nos.write(2, b'\\xff' * 1_000_000)"
)


def hostile_body(out: bytes, err: bytes, message: str, big: bool, how: str) -> str:
    lines = [
        "import os, sys",
        f"os.write(1, {out!r})",
        f"os.write(2, {err!r})",
    ]
    if big:
        lines += MEGABYTE_LINE.splitlines()[1:]
        message = message + "\x00" * 1_000_000
    if how == "raise":
        lines += [f"raise ValueError({message!r})", "model = None"]
    elif how == "exit":
        lines += [f"raise SystemExit({message!r})", "model = None"]
    elif how == "bad-model":
        lines.append(f"model = {message!r}")
    else:  # a program that works and still prints garbage
        lines += [
            "from sklearn.naive_bayes import GaussianNB",
            "model = GaussianNB()",
            "model.fit(x_train, y_train)",
        ]
    return "\n    ".join(lines)


def _sandbox_case(sandbox: str, out, err, message, big, how) -> None:
    env = gym.make("DataSciCoding-iris-v0", sandbox=sandbox, limits=LIMITS)
    env.reset(seed=0)
    body = hostile_body(out, err, message, big, how)
    observation, reward, terminated, _, info = env.step(body)
    assert_inside(env, observation, info)
    if how == "ok":
        assert terminated and reward > 0.5
    else:
        assert reward == -1.0 and info["sandbox_backend"] == sandbox


SANDBOX_CASE = {
    "out": HOSTILE_BYTES,
    "err": HOSTILE_BYTES,
    "message": HOSTILE_TEXT,
    "big": st.booleans(),
    "how": st.sampled_from(["raise", "exit", "bad-model", "ok"]),
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SANDBOX_CASE)
def test_sandbox_output_keeps_the_observation_inside_process(out, err, message, big, how):
    _sandbox_case("process", out, err, message, big, how)


@pytest.mark.docker
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SANDBOX_CASE)
def test_sandbox_output_keeps_the_observation_inside_docker(out, err, message, big, how):
    _sandbox_case("docker", out, err, message, big, how)


@pytest.mark.parametrize("sandbox", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_issue_33_program(sandbox):
    """Reads NUL-separated text (as /proc/*/environ is) and raises it: escaped, not echoed raw."""
    body = (
        "data = b'PATH=/bin\\x00SECRET=\\xff\\xfe\\x00' * 3\n"
        "    raise RuntimeError(data.decode('utf-8', 'surrogateescape'))\n"
        "    model = None"
    )
    env = gym.make("DataSciCoding-iris-v0", sandbox=sandbox, limits=LIMITS)
    env.reset(seed=0)
    observation, _, _, _, info = env.step(body)
    assert_inside(env, observation, info)
    assert "PATH=/bin\\x00SECRET=\\udcff\\udcfe\\x00" in info["failure_message"]


# -- records and the report --------------------------------------------------------------------
class HostileCoder:
    """An open-action agent whose code holds everything a JSON/HTML reader dislikes (its name
    cannot: an unsafe agent name is refused before any episode, tests/test_agent_name_checked_early.py)."""

    name = "hostile-coder"

    def reset(self, seed=None):
        pass

    def act(self, observation, available_actions):
        return ADVERSARIAL_ACTION[:200] + "\nmodel = None"


_FORBIDDEN_IN_HTML = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def test_records_and_the_report_stay_valid_utf8(tmp_path):
    from agentbench_poad.leaderboard import evaluate
    from agentbench_poad.leaderboard.records import write_record
    from agentbench_poad.leaderboard.report import build_report

    record = evaluate(
        HostileCoder,
        "DataSciCoding-iris-v0",
        seeds=[0],
        episodes=1,
        action_timeout=None,
        env_kwargs={"sandbox": "process", "limits": LIMITS, "max_episode_steps": 1},
    )[0]
    path = write_record(tmp_path / "records" / f"{record['record_id']}.json", record)
    raw = path.read_bytes()
    text = raw.decode("utf-8")  # strict
    assert not _FORBIDDEN_IN_HTML.search(text)
    assert json.loads(text) == json.loads(json.dumps(record))
    md, page = build_report([json.loads(text)], tmp_path / "report")
    for out in (md, page):
        rendered = out.read_bytes().decode("utf-8")  # strict: no lone surrogates
        assert not _FORBIDDEN_IN_HTML.search(rendered), _FORBIDDEN_IN_HTML.search(rendered)
    assert "<script>" not in page.read_text(encoding="utf-8").replace(html.escape("<script>"), "")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=HOSTILE_TEXT, description=HOSTILE_TEXT, big=st.booleans())
def test_dataset_names_and_values_keep_the_observation_inside(name, description, big):
    """A user's dataset (its name, description, feature names) reaches the prompt escaped."""
    import numpy as np

    from agentbench_poad.environments.datascicoding.datasets.dataset import Dataset
    from agentbench_poad.environments.datascicoding.env import DataSciCodingEnv

    rng = np.random.default_rng(0)
    dataset = Dataset(
        name=name or "x",
        description=description + ("\u202e" * 100_000 if big else ""),
        X=rng.normal(size=(20, 2)),
        y=np.arange(20) % 2,
        feature_names=(name, description[:10]),
        source=f"csv:{name}",
    )
    env = DataSciCodingEnv(dataset, sandbox="process", limits=LIMITS)
    observation, info = env.reset(seed=0)
    assert_inside(env, observation, info)
    observation, _, _, _, info = env.step("this is ( not python" + description)
    assert_inside(env, observation, info)
