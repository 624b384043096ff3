"""benchmarks/compile_probe.py --smoke: eager against torch.compile on a tiny random Llama.

The smoke run compiles one variant (inductor's C++ build of a decoder layer's forward and
backward, about 40-60 s on two busy cores), hence ``slow``. It checks the plumbing: the run
exits 0 and either prints a parsable ratio line whose differences against eager are float
rounding, or says in one line why inductor cannot compile here.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: ``ratio: <variant> eager <ms> ms / compiled <ms> ms per pass = <ratio> (...); max abs diff
#: states <d>, grads <d>``
RATIO_LINE = re.compile(
    r"^ratio: (?P<variant>\S+) eager (?P<eager>[\d.]+) ms / compiled (?P<compiled>[\d.]+) ms "
    r"per pass = (?P<ratio>[\d.]+) .*max abs diff states (?P<states>\S+), grads (?P<grads>\S+)$",
    re.MULTILINE,
)


def run_smoke(tmp_path, *options: str) -> str:
    """``compile_probe.py --smoke`` on one thread with its own inductor cache; its stdout."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "compile_probe.py"),
            "--smoke",
            "--threads",
            "1",
            "--cache-dir",
            str(tmp_path / "inductor"),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_compile_probe_smoke(tmp_path):
    out = run_smoke(tmp_path, "--repeats", "2")
    assert re.search(r"^eager: [\d.]+ ms per pass", out, re.MULTILINE), out[-2000:]
    if "inductor unavailable:" in out:  # no compiler here: one line says why, eager figures stay
        (line,) = [x for x in out.splitlines() if x.startswith("inductor unavailable:")]
        assert len(line) > len("inductor unavailable: ")
        return
    match = RATIO_LINE.search(out)
    assert match is not None, out[-2000:]
    assert match["variant"] == "layers-dyn"
    assert float(match["eager"]) > 0 and float(match["compiled"]) > 0
    assert float(match["ratio"]) > 0
    for name in ("states", "grads"):
        diff = float(match[name])
        assert math.isfinite(diff) and diff < 1e-3, (name, diff, out[-2000:])
    assert "recompile-limit hits 0" in out


def test_compile_probe_plumbing_with_dynamo_only(tmp_path):
    """The same script with ``--backend eager`` (dynamo traces the passes, generates no code):
    the capture, the interleaved timing and the comparison run in seconds on every test run,
    and a traced-only stack equals eager to rounding."""
    out = run_smoke(tmp_path, "--backend", "eager", "--repeats", "1", "--variants", "stack-dyn")
    match = RATIO_LINE.search(out)
    assert match is not None, out[-2000:]
    assert match["variant"] == "stack-dyn"
    assert float(match["eager"]) > 0 and float(match["compiled"]) > 0
    for name in ("states", "grads"):
        assert float(match[name]) < 1e-5, (name, out[-2000:])
