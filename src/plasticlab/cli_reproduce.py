"""``plasticlab reproduce`` and ``plasticlab export``: the paper's studies, run, reported and
exported for ``docs/reproduction/`` in one resumable command."""

from __future__ import annotations

import argparse
import calendar
import json
import math
import os
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

STUDY_SCALES = {
    "best-random_label_mnist-adam": 0.5,
    "best-random_label_mnist-sgd": 0.5,
    "best-random_label_cifar-adam": 0.2,
    "field-random_label_mnist": 0.5,
    "reference-modes": 0.1,
}
"""The default ``--scale`` of studies too long to run at full length on a CPU (SPEC §3:
Random Label problems train 30,000 steps per task), the scale at which docs/reproduction ran
them; every other study runs at full length."""


def machine() -> dict:
    """Where a study ran: OS, processor, cores, Python and torch versions."""
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _sweep_args(args: argparse.Namespace, study: str, out: Path, scale: float) -> list[str]:
    argv = ["sweep", "--preset", study, "--out", str(out)]
    if scale != 1.0:
        argv += ["--scale", repr(scale)]
    if args.tasks is not None:
        argv += ["--tasks", str(args.tasks)]
    for flag, value in (("--data-dir", args.data_dir), ("--workers", args.workers),
                        ("--device", args.device)):
        if value is not None:
            argv += [flag, str(value)]
    return (argv + (["--compile"] if args.compile else [])
            + (["--no-progress"] if args.no_progress else []))


RUN_ONLY_FLAGS = {"--data-dir": 1, "--workers": 1, "--device": 1, "--compile": 0, "--no-progress": 0}
"""The sweep flags that change how a study runs, not what it trains (with how many values each
takes): two commands that differ only in these make the same results, so their sittings add up."""


def same_results(command: str, other: str) -> bool:
    """Whether two recorded ``plasticlab sweep …`` commands make the same results: the same
    preset, ``--out``, ``--scale`` and ``--tasks``, whatever their run-only flags
    (:data:`RUN_ONLY_FLAGS`)."""
    def what_it_trains(text: str) -> list[str]:
        words, kept = text.split(), []
        while words:
            word = words.pop(0)
            if word in RUN_ONLY_FLAGS:
                del words[:RUN_ONLY_FLAGS[word]]
            else:
                kept.append(word)
        return kept

    return what_it_trains(command) == what_it_trains(other)


UTC_FORMAT = "%Y-%m-%d %H:%M:%S UTC"  # a sitting's start and end in run.json


def _utc(seconds: float | None = None) -> str:
    """``seconds`` since the epoch (default: now) as run.json writes a time."""
    return time.strftime(UTC_FORMAT, time.gmtime(seconds))


def _write_record(path: Path, record: dict) -> None:
    """Write a study's run record, with its total wall time over the sittings recorded so far."""
    record["wall_time_s"] = round(sum(s.get("wall_time_s") or 0.0 for s in record["sittings"]), 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def _parse_utc(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, UTC_FORMAT)))


def progress_times(out: Path) -> list[float]:
    """When a sweep in ``out`` last made progress, as seconds since the epoch: each file it
    writes (a checkpoint at every task end, its plan and selection) and each run's start and
    end in its results store. Not the store's own files: reading them (``plasticlab status``,
    ``report``) changes their times too."""
    from .experiments.store import DB_NAME, ResultStore

    times = [f.stat().st_mtime for f in (out.rglob("*") if out.is_dir() else [])
             if f.is_file() and not f.name.startswith(DB_NAME)]
    if (out / DB_NAME).is_file():
        with ResultStore(out) as store:
            times += [datetime.fromisoformat(t).timestamp() for t in store.attempt_times()]
    return times


def close_killed_sittings(sittings: list[dict], out: Path) -> None:
    """Close every sitting that was recorded as started but never ended (its process was
    killed, so nothing could record its end): it ended at the sweep's last progress in ``out``
    (:func:`progress_times`) before the next sitting started, and its wall time runs from its
    start to then."""
    progress = progress_times(out)
    starts = [_parse_utc(s["started"]) if "started" in s else None for s in sittings]
    for i, sitting in enumerate(sittings):
        if "ended" in sitting or starts[i] is None:
            continue
        until = next((t for t in starts[i + 1:] if t is not None), float("inf"))
        last = max((t for t in progress if starts[i] <= t < until), default=starts[i])
        sitting.update({"wall_time_s": round(last - starts[i], 1), "exit_code": None,
                        "ended": _utc(last),
                        "killed": "stopped without recording its end; closed at its sweep's "
                                  "last progress (a checkpoint, a run's start or end)"})


def reproduce_study(args: argparse.Namespace, study: str) -> int:
    """Sweep ``study`` (resuming), then write its report, export and run record under
    ``args.docs/study``; return the sweep's exit code (the report is written only after a
    sweep that finished every run). With ``args.dry_run``, only the sweep's plan."""
    from .cli import main
    from .cli_sweep import with_tasks
    from .experiments.export import EXPORT_NAME, export_files, export_results
    from .experiments.orchestrate import sweep_runs
    from .experiments.presets import get_preset
    from .experiments.store import ResultStore

    preset = get_preset(study)  # an unknown study is an error that lists the presets
    scale = args.scale if args.scale is not None else STUDY_SCALES.get(study, 1.0)
    out, docs = Path(args.out) / study, Path(args.docs) / study
    sweep = _sweep_args(args, study, out, scale)
    command = f"plasticlab {' '.join(sweep)}"  # the study's command: what its results are
    # A retrain (runs a fix changed, trained again) is a sitting of the same study.
    sweep += (["--rerun"] if args.rerun else []) + [w for f in args.only or [] for w in ("--only", f)]
    sitting_command = f"plasticlab {' '.join(sweep)}"  # with a retrain's flags
    print(f"reproduce {study}: {sitting_command}", file=sys.stderr)
    record_path = docs / "run.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    same_study = same_results(record.get("command", ""), command)
    if (docs / EXPORT_NAME).is_file() and not same_study:
        # a study's published results are replaced only on purpose
        problem = (f"{docs} holds the results of `{record.get('command', 'another command')}`; "
                   f"`{command}` would replace them when it finishes")
        if args.dry_run:
            print(f"reproduce {study}: note: {problem} (it needs --replace)", file=sys.stderr)
        elif not args.replace:
            raise ValueError(f"{problem}: pass --replace to replace them, or --docs another folder")
    if args.dry_run:  # the sweep's plan and time estimate; no record, no results, no report
        return main([*sweep, "--dry-run"])
    if not same_study:  # sittings of other results (scale, tasks, --out) do not add up
        record = {"sittings": []}
    record.update({"study": study, "scale": scale, "tasks": args.tasks, "command": command,
                   "machine": machine()})
    close_killed_sittings(record["sittings"], out)
    # This sitting is recorded before it trains: if it is killed (no signal handler runs), the
    # next sitting finds it open and closes it at its sweep's last progress.
    sitting = {"started": _utc(), "command": sitting_command}
    record["sittings"].append(sitting)
    _write_record(record_path, record)
    t0, code = time.perf_counter(), None
    try:
        code = main(sweep)
    finally:  # a sweep stopped by a signal ends here too (exit_code None)
        sitting.update({"wall_time_s": round(time.perf_counter() - t0, 1), "exit_code": code,
                        "ended": _utc()})
        _write_record(record_path, record)
    if code != 0:
        print(f"reproduce {study}: the sweep stopped (exit {code}); run the same command again "
              "to resume it", file=sys.stderr)
        return code
    # The results store may also hold the runs of this study at another scale or length.
    study_run_ids = {ResultStore.run_id(r.config.to_dict(), r.seed)
                     for r in sweep_runs(with_tasks(preset, args.tasks), out, scale)}
    runs = export_results(out, docs, run_ids=study_run_ids)
    if others := finished_elsewhere(out, study_run_ids):
        print(f"reproduce {study}: note: {out} also holds {others} finished run(s) of other commands "
              "(another --scale or --tasks); the export leaves them out", file=sys.stderr)
    files = ", ".join(f.name for f in export_files(docs))
    code = main(["report", str(docs), "--out", str(docs / "report"), "--formats", "png"])
    print(f"reproduce {study}: {runs} runs exported to {docs} ({files}); report in "
          f"{docs / 'report'}", file=sys.stderr)
    return code


def finished_elsewhere(out: Path, run_ids: set[str]) -> int:
    """How many finished runs the results store ``out`` holds beyond ``run_ids``."""
    from .experiments.store import ResultStore

    with ResultStore(out) as store:
        return len({r["run_id"] for r in store.runs(status="finished")} - run_ids)


def cmd_reproduce(args: argparse.Namespace) -> int:
    """``plasticlab reproduce``: :func:`reproduce_study` for each study in turn; stop at the first
    that does not finish and return its exit code."""
    for study in args.studies:
        code = reproduce_study(args, study)
        if code != 0:
            return code
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``plasticlab export``: write a results directory's finished runs as a gzipped JSON
    export (:func:`plasticlab.experiments.export.export_results`), and name its files."""
    from .experiments.export import EXPORT_NAME, export_files, export_results

    out = Path(args.to) if args.to else Path(args.dir) / "export"
    runs = export_results(args.dir, out)
    files = export_files(out if out.suffix == ".gz" else out / EXPORT_NAME)
    print(f"{runs} finished runs → {', '.join(map(str, files))}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """``plasticlab verify``: train the recorded ensembles of a results directory or export
    again for their first tasks (:mod:`plasticlab.experiments.verify`) and say, run by run,
    whether this code gives the recorded online accuracies; 1 when any differs."""
    import torch

    from .experiments.verify import choose, ensembles, recorded_runs, verify_ensemble

    if args.tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {args.tasks}")
    if args.members is not None and args.members < 1:
        raise ValueError(f"--members must be >= 1, got {args.members}")
    runs, accuracy = recorded_runs(args.dir)
    if not runs:
        raise ValueError(f"{args.dir} holds no finished run to verify")
    chosen = choose(ensembles(runs), every=args.all)
    print(f"verify {args.dir}: {len(chosen)} ensemble(s) of {len(runs)} finished runs trained again "
          f"for {args.tasks} task(s) each (device {args.device}, torch {torch.__version__})")
    differ = 0
    for members in chosen:
        check = verify_ensemble(members, accuracy, args.tasks, data_dir=args.data_dir, device=args.device,
                                limit=args.members)
        trained = f" ({check.trained} member(s) trained again)" if args.members else ""
        if check.same:
            print(f"  same       {check.label}: {check.compared} run(s), {check.tasks} task(s), "
                  f"recorded by {check.code} on {check.device}{trained}")
            continue
        differ += len(check.mismatches)
        print(f"  DIFFERENT  {check.label}: {len(check.mismatches)} of {check.compared} run(s), "
              f"recorded by {check.code} on {check.device}{trained}")
        for m in check.mismatches:
            print(f"    run {m.run_id} ({m.method}, seed {m.seed}): task {m.task} recorded {m.recorded!r}, "
                  f"now {m.now!r}")
    return _conclude(differ, f"{differ} run(s) differ: this code does not give their recorded numbers (a "
                             "run recorded by other code, another device or more threads may; "
                             "docs/member-independence.md)",
                     "every run checked gives its recorded online accuracy, bit for bit")


def cmd_compare(args: argparse.Namespace) -> int:
    """``plasticlab compare A B``: the runs both directories hold (same config but for the number of
    tasks, same seed; :mod:`plasticlab.experiments.compare`) and whether each has the same online
    accuracy on every task both ran, bit for bit; 1 when any differs. With ``--statistical``,
    each method is judged by its paired difference instead (:func:`_statistical_verdicts`)."""
    from .experiments.compare import shared_runs

    pairs, only_a, only_b = shared_runs(args.a, args.b)
    if not pairs:
        raise ValueError(f"{args.a} and {args.b} hold no run in common (the same config but for the "
                         f"number of tasks, and the same seed; {only_a} and {only_b} finished runs): "
                         "compare two runs of one study, or studies that share a configuration")
    print(f"compare {args.a} (A) and {args.b} (B): {len(pairs)} run(s) in both, {only_a} only in A, "
          f"{only_b} only in B")
    groups: dict[str, list] = {}
    for pair in pairs:
        groups.setdefault(pair.label, []).append(pair)
    if args.statistical:
        return _statistical_verdicts(groups)
    for label, group in groups.items():
        parted = [p for p in group if not p.same]
        if not parted:
            print(f"  same       {label}: {len(group)} run(s), {_task_span(group)} task(s)")
            continue
        print(f"  DIFFERENT  {label}: {len(parted)} of {len(group)} run(s)")
        for p in parted:
            print(f"    seed {p.seed} (run {p.run_a} in A, {p.run_b} in B): task {p.task}: {p.a!r} in A, "
                  f"{p.b!r} in B")
    differ = sum(not p.same for p in pairs)
    return _conclude(differ, f"{differ} run(s) differ (`plasticlab verify DIR` says which one this code "
                             "gives)",
                     "every run in both has the same online accuracy on every task both ran, bit for bit")


def _conclude(differ: int, differ_line: str, same_line: str) -> int:
    """Print a checking command's last line, and return its exit code: 1 when something differs."""
    print(differ_line if differ else same_line)
    return 1 if differ else 0


def _task_span(group) -> str:
    tasks = sorted({p.tasks for p in group})
    return f"{tasks[0]}" if len(tasks) == 1 else f"{tasks[0]}–{tasks[-1]}"


def _statistical_verdicts(groups: dict[str, list]) -> int:
    """Per method: dₛ = total online accuracy in A − in B over the tasks both ran, for each seed
    s both hold; the mean of dₛ with a percentile-bootstrap interval over seeds, at 95 % for all
    methods together (each at 1 − 0.05/methods, Bonferroni). A method whose interval excludes 0
    differs; 1 when one does. Pairs with a diverged task are left out, and said so; a method
    with fewer than two seeds left gets no verdict."""
    from .report.stats import bootstrap_ci

    confidence = 1 - 0.05 / len(groups)
    differ = 0
    for label, group in groups.items():
        kept = [p for p in group if math.isfinite(p.total_a) and math.isfinite(p.total_b)]
        left = f"; {len(group) - len(kept)} with a diverged task left out" if len(kept) < len(group) else ""
        if len(kept) < 2:
            print(f"  —          {label}: {len(kept)} run(s) without a diverged task{left}: too few "
                  "seeds for an interval")
            continue
        d = bootstrap_ci([100 * (p.total_a - p.total_b) for p in kept], confidence=confidence)
        mean_a = 100 * math.fsum(p.total_a for p in kept) / len(kept)
        mean_b = 100 * math.fsum(p.total_b for p in kept) / len(kept)
        consistent = d.lo <= 0 <= d.hi
        differ += not consistent
        print(f"  {'consistent' if consistent else 'DIFFERENT ':10s} {label}: {len(kept)} run(s), "
              f"{_task_span(kept)} task(s): A − B = {d.point:+.2f} points [{d.lo:+.2f}, {d.hi:+.2f}] "
              f"(A {mean_a:.2f} %, B {mean_b:.2f} %); {sum(p.same for p in kept)} the same bit for "
              f"bit{left}")
    print(f"intervals: percentile bootstrap over seeds, {100 * confidence:.4g} % each, 95 % for the "
          f"{len(groups)} method(s) together")
    return _conclude(differ, f"{differ} method(s) differ: their interval excludes 0",
                     "every method's interval holds 0: A and B agree within the spread of their seeds")


def register(sub) -> None:
    """Add ``reproduce``, ``export``, ``verify`` and ``compare`` to the ``plasticlab`` parser."""
    rp = sub.add_parser("reproduce", help="run the paper's studies (presets), resumable, and write "
                                          "their reports and exports for docs/reproduction/")
    rp.add_argument("studies", nargs="+", metavar="STUDY", help="preset names (`plasticlab presets`)")
    rp.add_argument("--out", default="results/reproduction",
                    help="results directories, one per study (default results/reproduction)")
    rp.add_argument("--docs", default="docs/reproduction",
                    help="where each study's report, export and run record go (default docs/reproduction)")
    rp.add_argument("--scale", type=float,
                    help="shorten every run (default: full length, except "
                         + ", ".join(f"{k} {v}" for k, v in STUDY_SCALES.items()) + ")")
    rp.add_argument("--tasks", type=int, help="run every study with this many tasks (steps per task "
                                             "unchanged): a shorter study, said so in its run record")
    rp.add_argument("--data-dir", dest="data_dir")
    rp.add_argument("--workers", type=int)
    rp.add_argument("--device")
    rp.add_argument("--compile", action="store_true",
                    help="the compiled training step where it applies (sweep --compile)")
    rp.add_argument("--no-progress", action="store_true")
    rp.add_argument("--replace", action="store_true",
                    help="replace a study's results under --docs that another command (another "
                         "--scale, --tasks or --out) made; without it, that is an error before anything "
                         "trains")
    rp.add_argument("--rerun", action="store_true",
                    help="train finished runs again (sweep --rerun; with --only, the runs a fix "
                         "changed): a sitting of the same study, its results replaced when it ends")
    rp.add_argument("--only", action="append", metavar="KEY=VALUE[,VALUE…]",
                    help="train only the matching runs (sweep --only); repeatable")
    rp.add_argument("--dry-run", action="store_true",
                    help="print each study's sweep command, plan and time estimate (after "
                         "`plasticlab bench`); writes nothing")
    rp.set_defaults(func=cmd_reproduce)

    ex = sub.add_parser("export", help="the finished runs of a results directory as one compact "
                                       "file that `plasticlab report` reads")
    ex.add_argument("dir", help="a results directory: a store, or an export to write again in "
                                "this plasticlab's form")
    ex.add_argument("--to", help="a folder or a .json.gz file (default DIR/export/)")
    ex.set_defaults(func=cmd_export)

    ve = sub.add_parser("verify", help="train recorded runs again for their first tasks and check "
                                       "that this code gives their online accuracies, bit for bit")
    ve.add_argument("dir", help="a results directory or a study's folder under docs/reproduction")
    ve.add_argument("--tasks", type=int, default=1, help="tasks to train and compare (default 1)")
    ve.add_argument("--all", action="store_true",
                    help="every ensemble (default: the first of each method and optimizer)")
    ve.add_argument("--members", type=int,
                    help="check only the first N runs of each ensemble, trained again on their own, "
                         "where member k of an ensemble is seed k alone to the bit (CPU, one thread, "
                         "Adam, SGD or UPGD); elsewhere the whole ensemble is trained (default: all runs)")
    ve.add_argument("--data-dir", dest="data_dir")
    ve.add_argument("--device", default="cpu", help="where to train (default cpu: the recorded "
                                                   "numbers are exact there)")
    ve.set_defaults(func=cmd_verify)

    co = sub.add_parser("compare", help="the runs two results directories both hold (same config "
                                        "and seed): the same online accuracy on every task both ran?")
    co.add_argument("a", metavar="A", help="a results directory or a study's folder under docs/reproduction")
    co.add_argument("b", metavar="B", help="another")
    co.add_argument("--statistical", action="store_true",
                    help="judge each method by the paired difference of its runs' total online "
                         "accuracy (A − B per seed) and its bootstrap interval, not bit for bit: for "
                         "runs from another device, thread count or torch; exit 1 when an interval "
                         "excludes 0")
    co.set_defaults(func=cmd_compare)
