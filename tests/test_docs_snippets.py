"""The ```python blocks of README.md and docs/**/*.md run, so the docs cannot drift from the code.

Each block runs as its own script (a fresh interpreter, working directory a temporary folder) and
must exit 0. A block that needs more than this machine offers says so in an HTML comment on the
line right before its fence (invisible on GitHub):

* ``<!-- snippet: skip REASON -->``: never run here (e.g. a 7B model on a GPU); REASON is shown;
* ``<!-- snippet: docker -->``: runs when a Docker engine and the sandbox image are there (the
  ``docker`` marker of the suite: the image is built once, or the block is skipped with why);
* ``<!-- snippet: smollm2 -->``: runs when SmolLM2-135M is in the model cache
  (``agentbench-poad model fetch smollm2-135m``), else skipped.

Blocks inside Markdown lists may be indented; the fence's indentation is removed. A block that
needs a name from an earlier block must define it again: every block stands alone, as a reader
copies it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!--\s*snippet:\s*(?P<kind>[a-z0-9-]+)\s*(?P<reason>.*?)\s*-->$")
KINDS = ("skip", "docker", "smollm2")


class Snippet(NamedTuple):
    path: str  # relative to the repository
    line: int  # of the opening fence
    code: str
    kind: str | None  # a KINDS entry, or None: always runs
    reason: str


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def extract(path: Path, root: Path = ROOT) -> list[Snippet]:
    """The ```python blocks of one Markdown file, with the marker before each (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    snippets = []
    i = 0
    while i < len(lines):
        fence = lines[i]
        stripped = fence.lstrip()
        if stripped.startswith("```python"):
            indent = len(fence) - len(stripped)
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            body = textwrap.dedent("\n".join(line[indent:] for line in lines[i + 1 : end]))
            kind, reason = None, ""
            before = lines[i - 1].strip() if i else ""
            if (match := MARKER.match(before)) is not None:
                kind, reason = match["kind"], match["reason"]
                if kind not in KINDS:
                    raise ValueError(
                        f"{path.relative_to(root)}:{i}: unknown snippet marker {kind!r} "
                        f"(one of {', '.join(KINDS)})"
                    )
            snippets.append(Snippet(str(path.relative_to(root)), i + 1, body + "\n", kind, reason))
            i = end
        i += 1
    return snippets


def _params():
    for path in doc_files():
        for snippet in extract(path):
            marks = [pytest.mark.docker] if snippet.kind == "docker" else []
            yield pytest.param(snippet, marks=marks, id=f"{snippet.path}:{snippet.line}")


def _smollm2_cached() -> bool:
    """Asked through the CLI, which answers without loading the model."""
    done = subprocess.run(
        [sys.executable, "-m", "agentbench_poad.cli", "model", "info", "smollm2-135m"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode == 0


@pytest.mark.parametrize("snippet", list(_params()))
def test_doc_snippet_runs(snippet: Snippet, tmp_path):
    if snippet.kind == "skip":
        pytest.skip(f"marked in the doc: {snippet.reason or 'no reason given'}")
    if snippet.kind == "smollm2" and not _smollm2_cached():
        pytest.skip("SmolLM2-135M is not cached (agentbench-poad model fetch smollm2-135m)")
    script = tmp_path / "snippet.py"
    script.write_text(snippet.code, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{snippet.path}:{snippet.line} failed:\n{snippet.code}\n--- stderr\n{done.stderr[-3000:]}"
    )


def test_every_doc_has_its_snippets_found():
    """The extractor sees the blocks (a broken fence would silently drop the rest of a file)."""
    found = {s.path for path in doc_files() for s in extract(path)}
    assert {"README.md", "docs/sandbox.md", "docs/envs/overcooked.md"} <= found


def test_markers_are_on_the_line_before_the_fence(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n\n<!-- snippet: skip needs a GPU -->\n```python\nraise SystemExit(1)\n```\n\n"
        "- item\n\n  ```python\n  x = 1\n  ```\n",
        encoding="utf-8",
    )
    first, second = extract(doc, root=tmp_path)
    assert (first.kind, first.reason, first.line) == ("skip", "needs a GPU", 4)
    assert (second.kind, second.code) == (None, "x = 1\n")


def test_every_cited_reference_anchor_exists():
    """Code and docs cite anchors of ``docs/reference.md``; each one must be on that page."""
    page = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    anchors = set(re.findall(r'<a id="([a-z0-9-]+)"></a>', page))
    cited: dict[str, str] = {}
    for folder in (
        "agentbench_poad",
        "environments",
        "baselines",
        "leaderboard",
        "studies",
        "benchmarks",
        "tests",
        "docs",
    ):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".md", ".toml") or "runs" in path.parts:
                continue
            for anchor in re.findall(r"reference\.md#([a-z0-9-]+)", path.read_text("utf-8")):
                cited.setdefault(anchor, str(path.relative_to(ROOT)))
    for extra in ("README.md", "leaderboard/paper_results.json"):
        for anchor in re.findall(r"reference\.md#([a-z0-9-]+)", (ROOT / extra).read_text()):
            cited.setdefault(anchor, extra)
    missing = {anchor: where for anchor, where in cited.items() if anchor not in anchors}
    assert cited and not missing, f"anchors cited but not in docs/reference.md: {missing}"
