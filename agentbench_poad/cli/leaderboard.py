"""``agentbench-poad leaderboard add | list | show | verify | report``."""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from agentbench_poad.cli._common import add_command, die


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "leaderboard",
        "manage run records and build the published board",
        "Run records live as JSON files in the store (default: the package's\n"
        "leaderboard/results/, committed and reviewed in pull requests).\n\n"
        "  agentbench-poad leaderboard add agentbench-runs/eval/*.json\n"
        "  agentbench-poad leaderboard add --run runs/poad-seed0 --run runs/poad-seed1\n"
        "  agentbench-poad leaderboard list\n"
        "  agentbench-poad leaderboard verify Overcooked-TomatoSalad-v0__oracle\n"
        "  agentbench-poad leaderboard report --out site/",
    )
    p.add_argument("--store", help="records folder (default: the package's results/)")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    sub = p.add_subparsers(title="leaderboard commands", metavar="ACTION")

    a = sub.add_parser("add", help="add record files, or make a record from training runs")
    a.add_argument("records", nargs="*", help="record JSON files (from `evaluate --out`)")
    a.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="a training run dir; repeat for several training seeds",
    )
    a.add_argument("--episodes", type=int, default=10, help="with --run: episodes per run")
    a.add_argument("--env", help="with --run: evaluate on this id (generalisation rows)")
    a.add_argument(
        "--stochastic",
        action="store_true",
        help="with --run: sample actions (the paper's VirtualHome protocol)",
    )
    a.add_argument("--name", help="with --run: agent name on the board")
    a.add_argument("--timeout", type=float, default=60.0, help="per-action deadline (s)")
    a.add_argument(
        "--batch-size",
        type=int,
        help="with --run: episodes played in lockstep (default: all of a seed's, as "
        "the learning curve plays them; lower it to save accelerator memory)",
    )
    a.add_argument("--replace", action="store_true", help="replace a record with the same id")
    a.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    a.set_defaults(func=run_add)

    ls = sub.add_parser("list", help="list the records of the store")
    ls.add_argument("--env", help="only this env id")
    ls.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    ls.set_defaults(func=run_list)

    s = sub.add_parser("show", help="show one record")
    s.add_argument("record_id", help="record id (see `list`) or a record file")
    s.add_argument("--json", action="store_true", help="print the whole record as JSON")
    s.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    s.set_defaults(func=run_show)

    v = sub.add_parser(
        "verify",
        help="re-run a sample of a record's episodes; exit 1 if the "
        "score does not reproduce within its standard error",
    )
    v.add_argument("record_id", nargs="+", help="record id(s) or record file(s)")
    v.add_argument("--episodes-per-seed", type=int, default=3, help="episodes to replay per seed")
    v.add_argument("--max-seeds", type=int, help="replay only the first N seeds")
    v.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    v.set_defaults(func=run_verify)

    r = sub.add_parser("report", help="write the Markdown + self-contained HTML board")
    r.add_argument("--out", default="agentbench-runs/report", help="output folder")
    r.add_argument("--paper", help="paper results JSON (default: the package's)")
    r.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    r.set_defaults(func=run_report)
    from agentbench_poad.leaderboard.report.results_tables import add_parser as _tables

    _tables(sub)  # `leaderboard results-tables` (docs/results.md's generated tables)


def _store(args: argparse.Namespace):
    return getattr(args, "store", None)


def _load(args: argparse.Namespace) -> list[dict]:
    from agentbench_poad.leaderboard.records import load_records

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(_store(args))
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return records


def run_add(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, add_record, read_record

    if not args.records and not args.run:
        return die("give record files to add, or --run RUN_DIR")
    try:
        for path in args.records:
            record = read_record(path)
            print(f"added {add_record(record, _store(args), replace=args.replace)}")
        if args.run:
            from agentbench_poad.leaderboard.from_run import record_from_runs

            record = record_from_runs(
                args.run,
                episodes=args.episodes,
                env_id=args.env,
                greedy=not args.stochastic,
                action_timeout=args.timeout or None,
                agent_name=args.name,
                command=_add_run_command(args),
                progress=True,
                batch_size=args.batch_size,
            )
            print(f"added {add_record(record, _store(args), replace=args.replace)}")
    except (RecordError, ValueError) as exc:
        return die(str(exc))
    return 0


def _add_run_command(args: argparse.Namespace) -> str:
    """The `leaderboard add --run` command, rebuilt from the options (in-process calls too)."""
    import shlex

    parts = ["agentbench-poad", "leaderboard", "add"]
    for run in args.run:
        parts += ["--run", run]
    parts += ["--episodes", str(args.episodes)]
    if args.env:
        parts += ["--env", args.env]
    if args.stochastic:
        parts.append("--stochastic")
    if args.name:
        parts += ["--name", args.name]
    if args.batch_size:
        parts += ["--batch-size", str(args.batch_size)]
    return " ".join(shlex.quote(p) for p in parts)


def run_list(args: argparse.Namespace) -> int:
    records = [r for r in _load(args) if not args.env or r["env"]["id"] == args.env]
    if not records:
        print("no records" + (f" for {args.env}" if args.env else ""))
        return 0
    width = max(len(r["record_id"]) for r in records)
    for r in sorted(records, key=lambda r: (r["env"]["id"], -r["scores"]["mean"])):
        sc = r["scores"]
        print(
            f"{r['record_id']:<{width}}  {sc['metric']:<9} {sc['mean']:9.4f} ± "
            f"{sc['stderr']:.4f}  success {sc['success_rate']:.3f}  "
            f"{len(sc['per_seed'])}×{r['protocol']['episodes_per_seed']}"
        )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, find_record

    try:
        record = find_record(args.record_id, _store(args))
    except RecordError as exc:
        return die(str(exc))
    record.pop("_path", None)
    if args.json:
        print(json.dumps(record, indent=1))
        return 0
    sc = record["scores"]
    sw = record["software"]
    print(f"record     {record['record_id']}")
    print(f"env        {record['env']['id']} (v{record['env']['version']})")
    print(
        f"agent      {record['agent']['name']} {record['agent']['version']}"
        f"  spec={record['agent']['spec']}"
    )
    print(f"model      base={record['model']['base']} adapter={record['model']['adapter']}")
    print(
        f"score      {sc['metric']} {sc['mean']:.4f} ± {sc['stderr']:.4f}; success "
        f"{sc['success_rate']:.3f} ± {sc['success_rate_stderr']:.3f}"
    )
    for s in sc["per_seed"]:
        print(
            f"  seed {s['seed']:>4}: score {s['score']:.4f}  success {s['success_rate']:.3f}"
            f"  failed {s.get('failed_episodes', 0)}/{len(s['episodes'])}"
        )
    best = (record.get("training") or {}).get("best_code")
    if best:
        print(f"best code  {best['label']}: reward {best['reward']:.4f}")
    print(
        f"protocol   {record['protocol']['episodes_per_seed']} episodes/seed, "
        f"{record['protocol']['reset_seed_rule']}"
    )
    print(f"made by    {record['command']}")
    print(
        f"provenance {sw['package_version']} git {sw['git_commit']} on "
        f"{record['hardware']['platform']}, {record['wall_time_s']:.1f}s, {record['created_at']}"
    )
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, find_record
    from agentbench_poad.leaderboard.verify import verify_record

    status = 0
    for record_id in args.record_id:
        try:
            record = find_record(record_id, _store(args))
            result = verify_record(
                record, episodes_per_seed=args.episodes_per_seed, max_seeds=args.max_seeds
            )
        except RecordError as exc:
            return die(str(exc))
        print(result.summary())
        status = status or (0 if result.reproduced else 1)
    return status


def run_report(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.report import build_report, load_paper

    records = _load(args)
    try:
        paper = load_paper(args.paper)
    except (OSError, ValueError) as exc:
        return die(str(exc))
    md, page = build_report(records, args.out, paper_results=paper)
    print(f"wrote {md}")
    print(f"wrote {page}")
    return 0
