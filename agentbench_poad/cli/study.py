"""``agentbench-poad study SPEC``: run or continue a grid of training runs and evaluations."""

from __future__ import annotations

import argparse
import sys

from agentbench_poad.cli._common import (
    add_command,
    check_at_least,
    check_device,
    check_file,
    check_model,
    die,
    first_error,
)


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "study",
        "run or continue a study: a grid of (agent, env, seed) training runs + evaluations",
        "Train every (agent, env, seed) cell of a study spec (TOML or JSON; see "
        "studies/smollm2-cpu.toml and docs/study.md), then evaluate each trained agent and "
        "write leaderboard records.\n"
        "Re-running the same command skips what is done and resumes what was interrupted "
        "(exactly: no logged step is lost or repeated). The whole spec is checked first: an "
        "unknown agent, env or preset, or a duplicate cell, stops it before any run starts.",
    )
    p.add_argument("spec", help="the study spec (.toml or .json)")
    p.add_argument("--out", help="folder of the runs (default: study-runs/<study name>)")
    p.add_argument("--records", help="folder of the records (default: <out>/records)")
    p.add_argument(
        "--device", help="torch device of every run, e.g. cuda (default: the config's, cpu)"
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="run the cells here one after another, or as Ray tasks "
        '(pip install "agentbench-poad[ray]"; docs/scale-out.md)',
    )
    p.add_argument("--address", help="with --executor ray: an existing cluster's address")
    p.add_argument(
        "--env-executor",
        choices=("local", "ray"),
        help="where each run's environments live (default: the config's, local)",
    )
    p.add_argument(
        "--max-retries",
        type=int,
        default=1,
        help="re-runs of a failed cell before it is reported as failed",
    )
    p.add_argument(
        "--max-updates",
        type=int,
        help="stop each run after this many updates in this call (resumable)",
    )
    p.add_argument(
        "--group",
        action="append",
        metavar="NAME",
        help="only this spec group's cells and evaluations (repeatable; a group without a name "
        "is #N, its place in the spec); e.g. --group base-model to measure the base model "
        "before any training; a prefix selects the groups under it (--group tuning: every "
        "[[tuning]] entry's tuning/<name>). The whole spec is still checked",
    )
    p.add_argument("--no-eval", action="store_true", help="train only; evaluate later")
    p.add_argument(
        "--files",
        action="store_true",
        help="print the files to ship (commit, upload) so another machine can evaluate the "
        "finished runs, resume the unfinished ones exactly and skip the finished evaluations, "
        "e.g. git add -f $(agentbench-poad study SPEC --files); run nothing (an agent file or "
        "module the spec names is not imported: its files are not listed)",
    )
    p.add_argument(
        "--select",
        action="store_true",
        help="after the tuning runs: apply the spec's selection rule and write each agent's "
        "chosen configuration into the spec ([tuning.chosen]); run nothing",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the spec and list the cells with their state; run nothing (not even an "
        "agent file or module the spec names: such agents are listed unchecked)",
    )
    p.set_defaults(func=run_study_command)


def run_study_command(args: argparse.Namespace) -> int:
    from agentbench_poad.errors import DependencyNotInstalled
    from agentbench_poad.study import StudyError, cells_table, load_study, run_study

    error = first_error(
        check_file(args.spec, "SPEC"),
        check_at_least(args.max_retries, 0, "--max-retries"),
        check_at_least(args.max_updates, 1, "--max-updates"),
        # with Ray the cluster's GPUs count, not this machine's (RayExecutor checks them)
        check_device(args.device) if args.executor == "local" else None,
        "--address names a Ray cluster; add --executor ray"
        if args.address and args.executor != "ray" and args.env_executor != "ray"
        else None,
    )
    if error:
        return die(error)
    try:
        # --dry-run and --files run nothing, so they import no code the spec's agents name
        import_agents = args.select or not (args.dry_run or args.files)
        study = load_study(
            args.spec, out=args.out, records=args.records, import_agents=import_agents
        )
        if args.group:
            study = study.select(args.group)
    except StudyError as exc:
        return die(str(exc))
    if args.select:
        from agentbench_poad.study import select_configs
        from agentbench_poad.study.selection import select_all

        if study.tunings and not study.tunings[0].entry:  # the single [tuning] table
            try:
                selections = select_configs(study)
            except StudyError as exc:
                return die(str(exc))
            for s in selections:
                scores = ", ".join(f"{v:.4f}" for v in s.scores)
                print(
                    f"{s.agent}: config{s.index} {s.chosen}  (scores per configuration: {scores})"
                )
            print(f"wrote [tuning.chosen] into {args.spec}")
            return 0
        try:  # [[tuning]] entries: each protocol whose runs are complete
            done = select_all(study)
        except StudyError as exc:
            return die(str(exc))
        for name, selections in done.selections.items():
            for s in selections:
                scores = ", ".join(f"{v:.4f}" for v in s.scores)
                print(
                    f"{name}: {s.agent}: config{s.index} {s.chosen}  (scores per "
                    f"configuration: {scores})"
                )
        for name, why in done.incomplete.items():
            print(f"{name}: not complete yet, nothing chosen: {why}")
        if done.selections:
            print(
                f"wrote [tuning_chosen.<name>] for {sorted(done.selections)} into {args.spec}"
                if done.wrote
                else f"{args.spec} already holds these choices"
            )
        return 0 if done.selections else die("no tuning protocol has finished its runs yet")
    if args.files:
        from agentbench_poad.study import study_files

        for path in study_files(study):
            print(path)
        for group, agent in study.unchecked:
            print(
                f"note: agent {agent} [{group}] is not imported (--files runs no code a spec "
                "names), so the files of its runs and evaluations are not listed",
                file=sys.stderr,
            )
        return 0
    if not args.dry_run:  # a model path typo must not wait for the first run to load it
        error = first_error(
            *(check_model(model, "model") for model in sorted({c.model for c in study.cells})),
            *(
                check_model(task.agent[3:], "agent lm:")
                for task in study.evals
                if (task.agent or "").startswith("lm:")
            ),
        )
        if error:
            return die(error)
    if args.dry_run:
        for row in cells_table(study):
            if "run_dir" in row:
                copy = f" (a copy of {row['copy_of']})" if "copy_of" in row else ""
                print(
                    f"{row['state']:<8} train {row['agent']:<8} {row['env_id']} seed "
                    f"{row['seed']} ({row['total_steps']} steps) -> {row['run_dir']}{copy}  "
                    f"[{row['group']}]"
                )
            else:
                print(f"{row['state']:<8} eval  {row['key']}  [{row['group']}]")
        for pair in study.pending:
            print(f"{'wait':<8} tuned {pair} (no configuration chosen yet: --select)")
        for group, agent in study.unchecked:
            print(
                f"{'?':<8} agent {agent}: not imported, not checked (--dry-run runs no code a "
                f"spec names; a run imports and checks it before any cell)  [{group}]"
            )
        from agentbench_poad.study.plan import check_config_sources, study_progress

        for line in study_progress(study).lines():
            print(line)
        try:  # what the run itself would refuse before its first cell
            check_config_sources(study)
        except ValueError as exc:
            return die(f"this study would stop before any run: {exc}")
        return 0
    try:
        result = run_study(
            study,
            executor=args.executor,
            address=args.address,
            device=args.device,
            env_executor=args.env_executor,
            max_retries=args.max_retries,
            max_updates=args.max_updates,
            evaluate=not args.no_eval,
        )
    except (DependencyNotInstalled, ConnectionError, ValueError) as exc:
        return die(str(exc))
    print(
        f"study {study.name}: {len(result.trained)} runs trained, "
        f"{len(result.skipped_runs)} already done; {len(result.records)} records written, "
        f"{len(result.skipped_evals)} already done; {len(result.failed)} failed"
    )
    for path in result.records:
        print(f"record: {path}")
    if result.failed:
        return die(
            "failed: " + ", ".join(result.failed) + " (re-run the same command to retry)", code=1
        )
    return 0
