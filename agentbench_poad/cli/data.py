"""``agentbench-poad data``: the DataSciCoding datasets (list, fetch, import, info).

Examples::

    agentbench-poad data list
    agentbench-poad data fetch airlines            # OpenML; needs the network
    agentbench-poad data import airlines airlines.csv
    agentbench-poad data info airlines

The cache lives in ``$AGENTBENCH_POAD_CACHE`` or ``~/.cache/agentbench-poad/datasets``;
``--cache-dir`` overrides both.
"""

from __future__ import annotations

import argparse
import sys

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "data",
        "list, fetch, import and inspect the DataSciCoding datasets",
        __doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    sub = p.add_subparsers(title="data commands", metavar="DATA_COMMAND")

    def with_cache(q):
        q.add_argument(
            "--cache-dir",
            default=None,
            help="dataset cache (default: $AGENTBENCH_POAD_CACHE or "
            "~/.cache/agentbench-poad/datasets)",
        )
        return q

    q = with_cache(add_command(sub, "list", "list the datasets, their sources and cache state"))
    q.set_defaults(func=run_list)

    q = with_cache(add_command(sub, "fetch", "download a dataset from its source into the cache"))
    q.add_argument(
        "name",
        help="a name from `agentbench-poad data list`, or 'all' (every OpenML and Kaggle dataset)",
    )
    q.set_defaults(func=run_fetch)

    q = with_cache(
        add_command(
            sub,
            "import",
            "prune a local CSV with a dataset's recipe and store it in the cache",
            "Prune FILE.csv exactly as `data fetch` prunes the downloaded table, and cache it.\n"
            "For OpenML datasets the CSV holds the features and the target column (named as on\n"
            "OpenML, else --target, else the last column); for Kaggle datasets it is the file the\n"
            "competition or dataset ships (e.g. train.csv).",
        )
    )
    q.add_argument("name", help="a name from `agentbench-poad data list`")
    q.add_argument("file", help="the CSV file")
    q.add_argument(
        "--target",
        default=None,
        help="the label column of FILE (default: the source's name for it, else the last column)",
    )
    q.set_defaults(func=run_import)

    q = with_cache(add_command(sub, "info", "rows, features, classes, balance, source, cache"))
    q.add_argument("name", help="a name from `agentbench-poad data list`")
    q.set_defaults(func=run_info)


def run_list(args: argparse.Namespace) -> int:
    from agentbench_poad.environments.datascicoding.datasets import (
        DATASETS,
        CacheCorrupt,
        read_cache,
    )

    rows = []
    for spec in DATASETS.values():
        if spec.offline:
            state = "bundled"
        else:
            try:
                state = "cached" if read_cache(spec, args.cache_dir) is not None else "missing"
            except CacheCorrupt:
                state = "corrupt"
        shape = (
            f"{spec.shape[0] if spec.shape[0] is not None else '<=' + str(spec.max_rows)}"
            f"x{spec.shape[1]}"
        )
        rows.append(
            (spec.name, spec.source.label, shape, str(spec.n_classes), state, spec.description)
        )
    header = ("name", "source", "shape", "classes", "cache", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    from agentbench_poad.environments.datascicoding.datasets import (
        DATASETS,
        DatasetUnavailable,
        cache_paths,
        fetch_dataset,
        get_spec,
    )

    if args.name == "all":
        failed = 0
        for spec in DATASETS.values():
            if not spec.offline:
                code = run_fetch(argparse.Namespace(name=spec.name, cache_dir=args.cache_dir))
                failed += code != 0
        return 1 if failed else 0
    try:
        spec = get_spec(args.name)
        dataset = fetch_dataset(spec.name, cache_dir=args.cache_dir)
    except KeyError as exc:
        return die(exc.args[0])
    except (DatasetUnavailable, ValueError) as exc:
        return die(str(exc), code=1)
    where = (
        "bundled with scikit-learn (not cached)"
        if spec.offline
        else str(cache_paths(spec.name, args.cache_dir)[0])
    )
    print(_summary(spec.name, dataset, where))
    return 0


def _summary(name: str, dataset, where) -> str:  # noqa: ANN001
    """One line: shape, classes and where the dataset lives."""
    return (
        f"{name}: {dataset.shape[0]} rows x {dataset.shape[1]} features, "
        f"{dataset.n_classes} classes -> {where}"
    )


def run_import(args: argparse.Namespace) -> int:
    from agentbench_poad.cli._common import check_file
    from agentbench_poad.environments.datascicoding.datasets import (
        cache_paths,
        get_spec,
        import_csv,
    )

    try:
        spec = get_spec(args.name)
        if error := check_file(args.file, "FILE"):
            return die(error, code=1)
        dataset = import_csv(spec.name, args.file, cache_dir=args.cache_dir, target=args.target)
    except KeyError as exc:
        return die(exc.args[0])
    except FileNotFoundError as exc:
        return die(f"{exc.filename}: no such file", code=1)
    except Exception as exc:  # noqa: BLE001 - a malformed CSV: say what and where
        return die(
            f"could not import {args.file} as {args.name}: {type(exc).__name__}: {exc}", code=1
        )
    if spec.offline:
        print(f"{spec.name} is bundled with scikit-learn; the CSV was pruned but not cached")
    else:
        print(_summary(spec.name, dataset, cache_paths(spec.name, args.cache_dir)[0]))
    return 0


def run_info(args: argparse.Namespace) -> int:
    from agentbench_poad.environments.datascicoding.datasets import (
        DatasetUnavailable,
        cache_paths,
        get_spec,
        load_dataset,
    )

    try:
        spec = get_spec(args.name)
        dataset = load_dataset(spec.name, cache_dir=args.cache_dir, download=False)
    except KeyError as exc:
        return die(exc.args[0])
    except DatasetUnavailable as exc:
        return die(str(exc), code=1)
    counts = dataset.class_counts
    total = max(sum(counts), 1)
    balance = ", ".join(f"{k}: {c} ({100 * c / total:.1f}%)" for k, c in enumerate(counts))
    cache = (
        "none (bundled with scikit-learn)"
        if spec.offline
        else str(cache_paths(spec.name, args.cache_dir)[0])
    )
    lines = [
        ("name", spec.name),
        ("env id", spec.env_id),
        ("description", spec.description),
        ("rows", str(dataset.shape[0])),
        ("features", str(dataset.shape[1])),
        ("classes", str(dataset.n_classes)),
        ("class balance", balance),
        ("source", f"{spec.source.label} ({spec.source.describe()})"),
        ("loaded from", dataset.source),
        ("cache path", cache),
    ]
    if spec.note:
        lines.append(("note", spec.note))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    from agentbench_poad.cli import main

    sys.exit(main(["data", *sys.argv[1:]]))
