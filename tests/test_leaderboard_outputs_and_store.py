"""Every output escapes, and the store survives bad files (issue 64, items 4 and 5).

Hostile text in records (quotes, tags, Markdown links and images, bare URLs, terminal escape
sequences) goes through the real report builder and the real CLI; the Markdown is rendered by a
real CommonMark renderer (markdown-it-py) and the HTML parsed by the standard library's parser.
Bad store files are real files: a FIFO, a symlink to ``/dev/zero``, a sparse 40 MB file, deep
nesting, non-finite and huge numbers, ids with ``/`` and newlines. The cases that could hang or
eat memory on a reader without these limits run in a child process under a memory cap and a
timeout, so a regression fails the test instead of stalling the suite.
"""

from __future__ import annotations

import copy
import html.parser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentbench_poad.cli import main
from agentbench_poad.leaderboard import evaluate
from agentbench_poad.leaderboard.record_file import MAX_DEPTH, SAFE_ID, check_ids
from agentbench_poad.leaderboard.records import (
    RecordWarning,
    add_record,
    load_records,
    write_json_atomic,
)
from agentbench_poad.leaderboard.report import build_report
from agentbench_poad.leaderboard.schema import RecordError
from tests.test_leaderboard_toys import CORRIDOR_ID, make_corridor_oracle

LINK = "[click me](javascript:alert(1))"
IMAGE = "![pixel](https://tracker.example/p.png)"
BARE = "https://evil.example/x and www.evil.example and me@evil.example"
RAW_HTML = '<img src=x onerror="alert(2)"><a href="https://evil.example">a</a>'
ESCAPED_AWAY = "\\](javascript:alert(3))"  # the text's own escape must not re-open a link
TERMINAL = "\x1b[2J\x1b[31mred\rforged\nline\x07\u202eevil"


@pytest.fixture(scope="module")
def record():
    return evaluate(make_corridor_oracle, CORRIDOR_ID, seeds=[0, 1], episodes=2)[0]


def hostile(record: dict) -> dict:
    """``record`` with hostile text in the fields the report and ``show`` print."""
    bad = copy.deepcopy(record)
    bad["agent"]["version"] = f"{LINK} {IMAGE} {BARE} {RAW_HTML} [x{ESCAPED_AWAY}"
    bad["notes"] = f"{LINK} {IMAGE}"
    bad["command"] = f"{BARE} {LINK}"
    bad["model"]["base"] = f"{IMAGE} {TERMINAL}"
    bad["hardware"]["platform"] = f"{RAW_HTML} {TERMINAL}"
    return bad


# -- HTML: text, attributes and SVG --------------------------------------------------------
class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_an_env_id_and_agent_name_reach_the_html_only_as_text(tmp_path, record):
    bad = hostile(record)
    bad["env"]["id"] = 'Evil"><script>alert(1)</script><svg onload="alert(4)">/x-v0'
    bad["agent"]["name"] = '"><img src=y onerror=alert(5)>'
    bad["record_id"] = "evil"
    md, page = build_report([record, bad], tmp_path / "report")
    parser = Tags()
    parser.feed(page.read_text(encoding="utf-8"))
    names = {tag for tag, _ in parser.tags}
    assert not names & {"script", "img", "a", "iframe", "object", "embed"}, names
    for tag, attrs in parser.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
    charts = [attrs["data-chart"] for tag, attrs in parser.tags if "data-chart" in attrs]
    assert f"iqm-{bad['env']['id']}" in charts  # the attribute holds the id, as data
    # the chart files keep to the report's folder, with plain names
    files = sorted(p.relative_to(tmp_path / "report") for p in (tmp_path / "report").rglob("*"))
    for path in files:
        assert re.fullmatch(r"[A-Za-z0-9._/-]+", str(path)), path
    assert all(p.parent in (Path("."), Path("charts")) for p in files)


# -- Markdown: links, images, raw HTML ---------------------------------------------------
def rendered_markdown(md_text: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(md_text)


def test_links_images_and_html_from_records_do_not_pass_into_report_md(tmp_path, record):
    md, _ = build_report([record, hostile(record)], tmp_path / "report")
    text = md.read_text(encoding="utf-8")
    page = rendered_markdown(text)
    parser = Tags()
    parser.feed(page)
    assert not [attrs for tag, attrs in parser.tags if tag == "a"]  # no link at all
    images = [attrs["src"] for tag, attrs in parser.tags if tag == "img"]
    assert images and all(src.startswith("charts/") for src in images), images  # ours only
    assert "<script" not in page and "onerror" not in [a for _, t in parser.tags for a in t]
    # bare URLs (which GitHub links by itself) sit in code spans, shown as written
    for url in ("https://evil.example/x", "www.evil.example", "me@evil.example"):
        assert f"<code>{url}</code>" in page, url
    assert "click me](javascript:alert(1))" in page  # the text is still there, as text


@pytest.mark.parametrize(
    "text",
    [LINK, IMAGE, f"[a]{ESCAPED_AWAY}", "[ref]\n\n[ref]: https://evil.example", "<https://e.x>"],
)
def test_md_text_leaves_no_link_for_a_renderer(text):
    from agentbench_poad.leaderboard.report.common import md_text

    page = rendered_markdown(md_text(text))
    assert "<a " not in page and "<img" not in page, page


# -- terminals ----------------------------------------------------------------------------
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def test_show_prints_no_control_characters(tmp_path, record, capsys):
    path = write_json_atomic(tmp_path / "hostile.json", hostile(record))
    assert main(["leaderboard", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert not CONTROL.search(out), CONTROL.search(out)
    assert "\\x1b[2J" in out and "\\rforged\\nline" in out  # shown, escaped
    lines = out.splitlines()
    assert sum(line.startswith("model ") for line in lines) == 1  # no forged line
    assert not [line for line in lines if line.startswith("line")]


def test_list_prints_no_control_characters_from_bad_files(tmp_path, record, capsys):
    store = tmp_path / "store"
    add_record(record, store)
    (store / "bad\x1b[2Jname.json").write_text("{")
    assert main(["leaderboard", "--store", str(store), "list"]) == 0
    captured = capsys.readouterr()
    assert record["record_id"] in captured.out
    assert "bad\\x1b[2Jname.json" in captured.err
    assert not CONTROL.search(captured.out + captured.err)


# -- ids ----------------------------------------------------------------------------------
UNSAFE_IDS = ["a/b", "a\nb", "ok\n", "..", ".hidden", "-x", "x y", "a\x1bb", "é", "a" * 201, ""]


@pytest.mark.parametrize("value", UNSAFE_IDS)
@pytest.mark.parametrize("field", [("record_id",), ("env", "id"), ("agent", "name")])
def test_add_refuses_unsafe_ids(tmp_path, record, field, value):
    bad = copy.deepcopy(record)
    target = bad
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    with pytest.raises(RecordError, match="not a safe id|does not match"):
        add_record(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_safe_ids_are_exactly_the_alphabet():
    alphabet = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    for text in ["Overcooked-TomatoSalad-v0", "ntpo-gw0.95", "a", "9", "x" * 200, *UNSAFE_IDS]:
        expect = (0 < len(text) <= 200 and text[0].isascii() and text[0].isalnum()) and set(
            text
        ) <= alphabet
        assert bool(SAFE_ID.fullmatch(text)) == expect, text


def test_every_committed_record_has_safe_ids():
    from agentbench_poad.leaderboard.records import DEFAULT_STORE, history_store

    for folder in (DEFAULT_STORE, history_store()):
        for path in folder.rglob("*.json"):
            check_ids(json.loads(path.read_text()), source=str(path))


# -- the store survives bad files ---------------------------------------------------------
def bad_files(store: Path, record: dict) -> dict[str, str]:
    """Write one bad file of each kind into ``store``: name -> what the warning says."""
    text = json.dumps(record)
    number = json.dumps(record["wall_time_s"])
    assert text.count(f'"wall_time_s": {number}') == 1

    def with_wall_time(value: str) -> str:
        return text.replace(f'"wall_time_s": {number}', f'"wall_time_s": {value}')

    (store / "nan.json").write_text(with_wall_time("NaN"))
    (store / "inf.json").write_text(with_wall_time("-Infinity"))
    (store / "overflow.json").write_text(with_wall_time("1e999"))
    (store / "huge-int.json").write_text(with_wall_time("9" * 5000))
    (store / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    deep_object = '{"a": ' * (MAX_DEPTH + 5) + "1" + "}" * (MAX_DEPTH + 5)
    (store / "deep-object.json").write_text(deep_object)
    (store / "device.json").symlink_to("/dev/zero")
    os.mkfifo(store / "fifo.json")
    (store / "folder.json").mkdir()
    with open(store / "big.json", "wb") as fh:  # sparse: 40 MB that take no disk
        fh.write(b"{")
        fh.truncate(40 << 20)
    slash = copy.deepcopy(record)
    slash["env"]["id"] = "Evil/Env-v0"
    slash["record_id"] = "slash"
    (store / "slash.json").write_text(json.dumps(slash))
    newline = copy.deepcopy(record)
    newline["record_id"] = "odd\n"  # a regex "$" lets a final newline through
    (store / "newline.json").write_text(json.dumps(newline))
    return {
        "nan.json": "NaN",
        "inf.json": "Infinity",
        "overflow.json": "out of range",
        "huge-int.json": "5,000 digits",
        "deep.json": "deeper",
        "deep-object.json": "deeper",
        "device.json": "symlink",
        "fifo.json": "not a regular file",
        "folder.json": "not a regular file",
        "big.json": "41,943,040 bytes",
        "slash.json": "env.id",
        "newline.json": "record_id",
    }


def test_load_records_skips_each_bad_file_with_a_warning(tmp_path, record):
    store = tmp_path / "store"
    add_record(record, store)
    expected = bad_files(store, record)
    with pytest.warns(RecordWarning) as caught:
        records = load_records(store)
    assert [r["record_id"] for r in records] == [record["record_id"]]
    messages = [str(w.message) for w in caught]
    for name, why in expected.items():
        mine = [m for m in messages if f"{name}:" in m]
        assert len(mine) == 1 and why in mine[0], (name, mine)


#: The CLI in a child process with its address space capped (a reader that slurped /dev/zero
#: would hit the cap and crash, not take the machine's memory) and a timeout (a FIFO hang).
CAPPED_CLI = (
    "import resource, sys\n"
    "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
    "from agentbench_poad.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("command", [["list"], ["report", "--out", "REPORT"]])
def test_list_and_report_warn_and_go_on_past_every_bad_file(tmp_path, record, command):
    store = tmp_path / "store"
    add_record(record, store)
    expected = bad_files(store, record)
    command = [str(tmp_path / "report") if c == "REPORT" else c for c in command]
    done = subprocess.run(
        [sys.executable, "-c", CAPPED_CLI, "leaderboard", "--store", str(store), *command],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning: skipping")]
    for name in expected:
        assert sum(f"{name}:" in line for line in warned) == 1, (name, warned)
    if command[0] == "list":
        assert record["record_id"] in done.stdout
    else:
        assert (tmp_path / "report" / "report.html").exists()
