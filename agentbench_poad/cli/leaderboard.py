"""``agentbench-poad leaderboard add | list | show | verify | report``."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from agentbench_poad.cli._common import (
    add_command,
    check_at_least,
    check_env_id,
    check_file,
    check_run_dir,
    die,
    first_error,
)


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
        "  agentbench-poad leaderboard report --out site/\n\n"
        "Trained agents' records name their training runs relative to the runs root: --runs DIR,\n"
        "else $AGENTBENCH_POAD_RUNS, else the checkout's runs/ folder (the wheel ships no runs).",
    )
    p.add_argument("--store", help="records folder (default: the package's results/)")
    p.add_argument(
        "--runs",
        metavar="DIR",
        help="runs root that records' run paths are relative to (default: "
        "$AGENTBENCH_POAD_RUNS, else the checkout's runs/)",
    )
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
    a.add_argument(
        "--allow-dirty",
        action="store_true",
        help="add a record made from a git tree with uncommitted changes (refused otherwise); "
        "the record is marked (software.dirty_allowed) and the report flags it",
    )
    a.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    a.set_defaults(func=_runs_scoped(run_add))

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
        help="recompute a record's numbers, check its weight hashes, replay its episodes; "
        "exit 1 if a replay does not reproduce, 2 if a number or a hash differs",
        description="Verify imports and runs the record's agent code (a user agent's file, "
        "checked first against the sha256 the record states); nothing else a record names is "
        "imported. Review a record someone else made before verifying it: `leaderboard show ID "
        "--json` shows agent.spec and agent.source; read that file (docs/leaderboard.md, "
        "'Reviewing a submitted record'). --no-replay checks without importing or playing.",
    )
    v.add_argument("record_id", nargs="+", help="record id(s) or record file(s)")
    v.add_argument(
        "--episodes-per-seed", type=int, default=3, help="episodes to replay per seed (>= 1)"
    )
    v.add_argument("--max-seeds", type=int, help="replay only the first N seeds")
    v.add_argument(
        "--agent-root",
        metavar="DIR",
        help="the folder a user agent's file must lie in (default: the record's checkout: the "
        "nearest folder above the record holding .git or pyproject.toml)",
    )
    v.add_argument(
        "--trust-unhashed",
        action="store_true",
        help="run a user agent whose record states no hash of its source (agent.source); "
        "review the file first: verify imports and runs it",
    )
    v.add_argument(
        "--no-replay",
        action="store_true",
        help="check only: recompute the numbers, check every hash and what a replay would load "
        "(model, adapters, dataset), import and play nothing",
    )
    v.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    v.set_defaults(func=_runs_scoped(run_verify))

    b = sub.add_parser(
        "backfill",
        help="add content hashes, discounted-return summaries, the update-rule flag and the "
        "best code to existing records",
        description="Add to each record what this version of the record states: the sha256 of "
        "the base model's weights and of each seed's adapter files (from the model cache and the "
        "runs root), the discounted return over seeds, and whether the runs' update safeguards are "
        "the defaults of the algorithm they name, and a trained record's best code found during "
        "training where it lacks one (from the runs). With --replay-discounted, a record "
        "whose episodes log no discounted return (a deterministic agent) is replayed in full: "
        "every episode must reproduce exactly, and its discounted return is then stored.",
    )
    b.add_argument("record_id", nargs="*", help="record id(s) or file(s) (default: the store)")
    b.add_argument(
        "--replay-discounted",
        action="store_true",
        help="replay deterministic records without discounted returns to add them",
    )
    b.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    b.set_defaults(func=_runs_scoped(run_backfill))

    pr = sub.add_parser(
        "prune-runs",
        help="delete resume-only state (agent.pt, rng.pt, older checkpoints, tb/) of finished "
        "runs in the runs root",
    )
    pr.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    pr.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    pr.set_defaults(func=_runs_scoped(run_prune_runs))

    rt = sub.add_parser(
        "retire",
        help="take records off the board into history/<study>/ beside the store (kept, "
        "verifiable by path)",
        description="Move records out of the store, unchanged, into history/<their study>/ "
        "beside it (leaderboard/history/ for the package's board). The board and the results "
        "tables read the store only; `leaderboard verify history/<study>/<id>.json` still "
        "replays a retired record. Name records by id, or select them with --study; --trained "
        "keeps evaluation-only rows (base model, oracle, random) on the board.\n\n"
        "  agentbench-poad leaderboard retire --study smollm2-cpu --trained --dry-run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rt.add_argument("record_id", nargs="*", help="record id(s) or file(s) in the store")
    rt.add_argument("--study", help="every record of the store that this study made")
    rt.add_argument(
        "--trained", action="store_true", help="only records of trained agents (with runs)"
    )
    rt.add_argument("--dry-run", action="store_true", help="list what would move")
    rt.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    rt.set_defaults(func=run_retire)

    r = sub.add_parser("report", help="write the Markdown + self-contained HTML board")
    r.add_argument("--out", default="agentbench-runs/report", help="output folder")
    r.add_argument("--paper", help="paper results JSON (default: the package's)")
    r.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    r.set_defaults(func=run_report)
    from agentbench_poad.leaderboard.report.results_tables import add_parser as _tables

    _tables(sub)  # `leaderboard results-tables` (docs/results.md's generated tables)


def _store(args: argparse.Namespace):
    return getattr(args, "store", None)


def _use_runs_root(args: argparse.Namespace) -> None:
    """Apply ``--runs`` for this command (undone by :func:`_runs_scoped` when it returns)."""
    from agentbench_poad.leaderboard.runs import set_runs_root

    if getattr(args, "runs", None):
        set_runs_root(args.runs)


def _runs_scoped(command):
    """``command`` with ``--runs`` reset afterwards (in-process callers run several commands)."""

    def run(args: argparse.Namespace) -> int:
        from agentbench_poad.leaderboard.runs import set_runs_root

        try:
            return command(args)
        finally:
            set_runs_root(None)

    return run


def _tty(text: object) -> str:
    """``text`` as one safe terminal line: control characters (escape sequences, carriage
    returns, newlines, tabs), bidi overrides and lone surrogates shown as escapes (``\\x1b``),
    so a record's text cannot move the cursor, recolour, clear or forge lines of the output."""
    from agentbench_poad.core import display_text

    shown = display_text(str(text))
    return shown.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _load(args: argparse.Namespace) -> list[dict]:
    from agentbench_poad.leaderboard.records import load_records

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = load_records(_store(args))
    for w in caught:
        print(f"warning: {_tty(w.message)}", file=sys.stderr)
    return records


def run_add(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, add_record, read_record

    if not args.records and not args.run:
        return die("give record files to add, or --run RUN_DIR")
    error = first_error(  # before any record is added or any model loaded
        *(check_file(path, "RECORD") for path in args.records),
        *(check_run_dir(run) for run in args.run),
        check_env_id(args.env),
        check_at_least(args.episodes, 1, "--episodes"),
        check_at_least(args.timeout, 0, "--timeout"),
        check_at_least(args.batch_size, 1, "--batch-size"),
    )
    if error:
        return die(error)
    _use_runs_root(args)
    try:
        records = [read_record(path) for path in args.records]
        if args.run and not args.allow_dirty:
            _refuse_dirty_tree()
        for record in records:
            _ensure_hashes(record)
            added = add_record(
                record, _store(args), replace=args.replace, allow_dirty=args.allow_dirty
            )
            print(f"added {added}")
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
            added = add_record(
                record, _store(args), replace=args.replace, allow_dirty=args.allow_dirty
            )
            print(f"added {added}")
    except (RecordError, ValueError) as exc:
        return die(str(exc))
    return 0


def _refuse_dirty_tree() -> None:
    """``add --run`` makes a record from this tree: refuse before any work when it is dirty."""
    from agentbench_poad.leaderboard.records import DirtyTree, git_commit

    commit, dirty = git_commit()
    if dirty:
        raise DirtyTree(
            f"the git tree of this checkout has uncommitted changes (at {commit}), so a record "
            "made now could not be traced to its code; commit first, or pass --allow-dirty to "
            "make a record marked as dirty"
        )


def _ensure_hashes(record: dict) -> None:
    """A record file made before records carried hashes gets them now (from this machine)."""
    from agentbench_poad.leaderboard.provenance import attach_hashes

    model = record["model"]
    adapter = (record["config"].get("agent_kwargs") or {}).get("adapter")
    if (
        "base_weights" not in model
        or "adapters" not in model
        or (adapter and not model.get("adapter_files"))
    ):
        attach_hashes(record)


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
    ids = {id(r): _tty(r["record_id"]) for r in records}
    width = max(len(shown) for shown in ids.values())
    for r in sorted(records, key=lambda r: (r["env"]["id"], -r["scores"]["mean"])):
        sc = r["scores"]
        print(
            f"{ids[id(r)]:<{width}}  {_tty(sc['metric']):<9} {sc['mean']:9.4f} ± "
            f"{sc['stderr']:.4f}  success {sc['success_rate']:.3f}  "
            f"{len(sc['per_seed'])}×{r['protocol']['episodes_per_seed']}"
        )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, find_record

    try:
        record = find_record(args.record_id, _store(args))
    except RecordError as exc:
        return die(_tty(exc))
    record.pop("_path", None)
    if args.json:  # JSON escapes every control character (ensure_ascii)
        print(json.dumps(record, indent=1))
        return 0
    lines = _show_lines(record)
    for line in lines:
        print(_tty(line))  # every field of the record may hold a control character
    return 0


def _show_lines(record: dict) -> list[str]:
    """The lines of `leaderboard show` (raw: the caller escapes them)."""
    out: list[str] = []
    sc = record["scores"]
    sw = record["software"]
    out.append(f"record     {record['record_id']}")
    out.append(f"env        {record['env']['id']} (v{record['env']['version']})")
    out.append(
        f"agent      {record['agent']['name']} {record['agent']['version']}"
        f"  spec={record['agent']['spec']}"
    )
    source = record["agent"].get("source")
    if source:
        out.append(f"source     {source['file']} sha256 {source['sha256']}")
    out.append(f"model      base={record['model']['base']} adapter={record['model']['adapter']}")
    weights = record["model"].get("base_weights")
    if weights:
        out.append(f"weights    {weights['digest']} sha256 {weights['sha256']}")
    for seed, adapter in sorted((record["model"].get("adapters") or {}).items()):
        out.append(f"  seed {seed:>4}: {adapter['run']} ({adapter['checkpoint']})")
    out.append(
        f"score      {sc['metric']} {sc['mean']:.4f} ± {sc['stderr']:.4f}; success "
        f"{sc['success_rate']:.3f} ± {sc['success_rate_stderr']:.3f}"
    )
    for s in sc["per_seed"]:
        out.append(
            f"  seed {s['seed']:>4}: score {s['score']:.4f}  success {s['success_rate']:.3f}"
            f"  failed {s.get('failed_episodes', 0)}/{len(s['episodes'])}"
        )
    best = (record.get("training") or {}).get("best_code")
    if best:
        out.append(f"best code  {best['label']}: reward {best['reward']:.4f}")
    out.append(
        f"protocol   {record['protocol']['episodes_per_seed']} episodes/seed, "
        f"{record['protocol']['reset_seed_rule']}"
    )
    out.append(f"made by    {record['command']}")
    out.append(
        f"provenance {sw['package_version']} git {sw['git_commit']}"
        f"{' (dirty tree)' if sw.get('git_dirty') else ''} on "
        f"{record['hardware']['platform']}, {record['wall_time_s']:.1f}s, {record['created_at']}"
    )
    return out


def run_verify(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import RecordError, find_record
    from agentbench_poad.leaderboard.verify import verify_record

    error = first_error(
        check_at_least(args.episodes_per_seed, 1, "--episodes-per-seed"),
        check_at_least(args.max_seeds, 1, "--max-seeds"),
    )
    if error:  # before any record is replayed (a replay loads its model)
        return die(error)
    _use_runs_root(args)
    status = 0
    for record_id in args.record_id:
        try:
            record = find_record(record_id, _store(args))
            result = verify_record(
                record,
                episodes_per_seed=args.episodes_per_seed,
                max_seeds=args.max_seeds,
                agent_root=args.agent_root,
                trust_unhashed=args.trust_unhashed,
                replay=not args.no_replay,
            )
        except RecordError as exc:
            return die(str(exc))
        print(result.summary())
        status = status or (0 if result.reproduced else 1)
    return status


def run_backfill(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.backfill import backfill_record
    from agentbench_poad.leaderboard.records import RecordError, find_record, iter_record_files

    _use_runs_root(args)
    targets = args.record_id or [str(p) for p in iter_record_files(_store(args))]
    try:
        for target in targets:
            record = find_record(target, _store(args))
            changes = backfill_record(record, replay_discounted=args.replay_discounted)
            print(f"{record['record_id']}: {', '.join(changes) if changes else 'up to date'}")
    except RecordError as exc:
        return die(str(exc))
    return 0


def run_prune_runs(args: argparse.Namespace) -> int:
    import shutil

    from agentbench_poad.leaderboard.runs import (
        RunsNotFound,
        resume_only_files,
        runs_root,
        training_runs,
    )

    _use_runs_root(args)
    try:
        root = runs_root()
    except RunsNotFound as exc:
        return die(str(exc))
    total = 0
    for run in training_runs(root):
        for path in resume_only_files(run):
            files = list(path.rglob("*")) if path.is_dir() else [path]
            size = sum(f.stat().st_size for f in files if f.is_file())
            total += size
            print(f"{'would delete' if args.dry_run else 'deleted'} {path} ({size:,} bytes)")
            if not args.dry_run:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    print(f"{'would free' if args.dry_run else 'freed'} {total:,} bytes in {root}")
    return 0


def run_retire(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.records import (
        RecordError,
        find_record,
        history_path,
        move_to_history,
        record_study,
    )

    if not args.record_id and not args.study:
        return die("name the records to retire, or select them with --study NAME")
    from agentbench_poad.leaderboard.records import store_path

    try:
        chosen = [find_record(r, _store(args)) for r in args.record_id]
    except RecordError as exc:
        return die(str(exc))
    store = store_path(_store(args)).resolve()
    outside = [r["_path"] for r in chosen if store not in Path(r["_path"]).resolve().parents]
    if outside:
        return die(f"{outside[0]} is not in the store {store}; only the board's records retire")
    if args.study:
        records = _load(args)
        studies = sorted({s for r in records if (s := record_study(r))})
        if args.study not in studies:
            return die(
                f"no record of the store was made by study {args.study!r}; its studies: "
                f"{', '.join(studies) or 'none'}"
            )
        chosen += [r for r in records if record_study(r) == args.study]
    if args.trained:
        chosen = [r for r in chosen if (r.get("training") or {}).get("runs")]
    studies = {str(r["_path"]): record_study(r) for r in chosen}
    targets = {path: history_path(path, study) for path, study in studies.items()}
    taken = [t for t in targets.values() if t.exists()]
    if taken:  # checked first: a retirement moves all of its records or none
        return die(
            f"the history already holds {len(taken)} of these record(s), e.g. {taken[0]}; "
            "move them away first"
        )
    for path, target in targets.items():
        if args.dry_run:
            print(f"would move {path} -> {target}")
        else:
            print(f"moved {path} -> {move_to_history(path, studies[path])}")
    print(f"{'would retire' if args.dry_run else 'retired'} {len(targets)} record(s)")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from agentbench_poad.leaderboard.report import build_report, load_paper

    if error := check_file(args.paper, "--paper"):
        return die(error)
    records = _load(args)
    try:
        paper = load_paper(args.paper)
    except (OSError, ValueError) as exc:
        return die(str(exc))
    md, page = build_report(records, args.out, paper_results=paper)
    print(f"wrote {md}")
    print(f"wrote {page}")
    return 0
