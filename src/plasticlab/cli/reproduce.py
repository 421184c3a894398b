"""``plasticlab reproduce``: the paper's studies swept, exported and reported for
``docs/reproduction/`` in one resumable command, each sitting kept in the study's run record
(:mod:`plasticlab.experiments.study`)."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from ..experiments.executor import EXECUTORS
from ..experiments.importer import import_runs
from ..experiments.study import (
    STUDY_SCALES,
    close_killed_sittings,
    close_sitting,
    export_after_each_ensemble,
    final_export_written,
    finished_elsewhere,
    machine,
    open_sitting,
    planned_run_count,
    read_record,
    retrain_words,
    same_results,
    study_run_ids,
    study_scale,
    sweep_words,
)
from ..experiments.workflow import SweepRequest
from .common import add_checkpoint_every, add_lock_option, run_guarded, writing_into
from .import_ import import_lines
from .report import write_report
from .sweep import run_sweep


def reproduce_study(args: argparse.Namespace, study: str) -> int:
    """Sweep ``study`` (resuming), then write its report, export and run record under
    ``args.docs/study``; return the sweep's exit code (the report is written only after a
    sweep that finished every run). With ``args.dry_run``, only the sweep's plan. The study's
    results folder is held (its lock) from its sitting's start to its report."""
    with ExitStack() as hold:
        return _reproduce_study(args, study, hold)


def _reproduce_study(args: argparse.Namespace, study: str, hold: ExitStack) -> int:
    """:func:`reproduce_study`, holding the study's results folder in ``hold`` before it
    writes anything."""
    from ..experiments.export import EXPORT_NAME, export_files, export_results
    from ..experiments.presets import get_preset

    preset = get_preset(study)  # an unknown study is an error that lists the presets
    scale = study_scale(study, args.scale)
    out, docs = Path(args.out) / study, Path(args.docs) / study
    words = sweep_words(study, out, scale, tasks=args.tasks, data_dir=args.data_dir,
                        workers=args.workers, device=args.device, compile=args.compile,
                        progress=not args.no_progress, executor=args.executor,
                        ray_address=args.ray_address)
    command = f"plasticlab {' '.join(words)}"  # the study's command: what its results are
    # A retrain (runs a fix changed, trained again) is a sitting of the same study.
    sitting_command = f"plasticlab {' '.join(words + retrain_words(args.rerun, args.only))}"
    print(f"reproduce {study}: {sitting_command}", file=sys.stderr)
    record_path = docs / "run.json"
    record = read_record(record_path)
    same_study = same_results(record.get("command", ""), command)
    # the same study trained into another --out (a machine lost, its results folder with it):
    # it goes on from its export, its sittings kept
    moved = (not same_study and (docs / EXPORT_NAME).is_file()
             and same_results(record.get("command", ""), command, anywhere=True))
    if moved:
        print(f"reproduce {study}: {docs} holds this study trained into another results folder "
              f"(`{record['command']}`): its export's finished runs "
              f"{'would be' if args.dry_run else 'are'} imported into {out} first, and the study "
              "goes on there", file=sys.stderr)
        same_study = True
    if (docs / EXPORT_NAME).is_file() and not same_study:
        # a study's published results are replaced only on purpose
        problem = (f"{docs} holds the results of `{record.get('command', 'another command')}`; "
                   f"`{command}` would replace them when it finishes")
        if args.dry_run:
            print(f"reproduce {study}: note: {problem} (it needs --replace)", file=sys.stderr)
        elif not args.replace:
            raise ValueError(f"{problem}: pass --replace to replace them, or --docs another folder")
    request = _sweep_request(args, study, out, scale)
    if args.dry_run:  # the sweep's plan and time estimate; no record, no results, no report
        return run_guarded(run_sweep, request)
    hold.enter_context(writing_into(out, args.no_lock))  # the sweep inside holds it too
    if moved:
        for line in import_lines(import_runs([docs], out, lock=not args.no_lock), out):
            print(f"reproduce {study}: {line}", file=sys.stderr)
    if not same_study:  # sittings of other results (scale, tasks, --out) do not add up
        record = {"sittings": []}
    record.update({"study": study, "scale": scale, "tasks": args.tasks, "command": command,
                   "machine": machine()})
    close_killed_sittings(record["sittings"], out)
    sitting = open_sitting(record_path, record, sitting_command)
    # the export under --docs carries the study, at most one ensemble behind, if the machine dies
    request.on_ensemble_done = export_after_each_ensemble(preset, args.tasks, out, scale, docs,
                                                          record_path, record)
    t0, code = time.perf_counter(), None
    try:
        code = run_guarded(run_sweep, request)
    finally:  # a sweep stopped by an exception ends here too (exit_code None)
        close_sitting(record_path, record, sitting, time.perf_counter() - t0, code)
    if code != 0:
        print(f"reproduce {study}: the sweep stopped (exit {code}); run the same command again "
              "to resume it", file=sys.stderr)
        return code
    run_ids = study_run_ids(preset, args.tasks, out, scale)
    runs = export_results(out, docs, run_ids=run_ids)
    final_export_written(record_path, record, runs, planned_run_count(preset, args.tasks, out, scale))
    if others := finished_elsewhere(out, run_ids):
        print(f"reproduce {study}: note: {out} also holds {others} finished run(s) of other commands "
              "(another --scale or --tasks); the export leaves them out", file=sys.stderr)
    files = ", ".join(f.name for f in export_files(docs))
    code = run_guarded(write_report, str(docs), str(docs / "report"), "png")
    print(f"reproduce {study}: {runs} runs exported to {docs} ({files}); report in "
          f"{docs / 'report'}", file=sys.stderr)
    return code


def _sweep_request(args: argparse.Namespace, study: str, out: Path, scale: float) -> SweepRequest:
    """The sweep of ``study`` that :func:`reproduce_study` runs: the command its run record
    names (:func:`plasticlab.experiments.study.sweep_words`) with a retrain's flags."""
    return SweepRequest(preset=study, tasks=args.tasks, out=out, scale=None if scale == 1.0 else scale,
                        only=args.only, workers=args.workers,
                        device="cpu" if args.device is None else args.device,
                        data_dir=args.data_dir, rerun=args.rerun, dry_run=args.dry_run,
                        compile=args.compile, progress=not args.no_progress,
                        checkpoint_every=args.checkpoint_every, executor=args.executor,
                        ray_address=args.ray_address)


def cmd_reproduce(args: argparse.Namespace) -> int:
    """``plasticlab reproduce``: :func:`reproduce_study` for each study in turn; stop at the first
    that does not finish and return its exit code."""
    for study in args.studies:
        code = reproduce_study(args, study)
        if code != 0:
            return code
    return 0


def register(sub) -> None:
    """Add ``reproduce`` to the ``plasticlab`` parser."""
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
    rp.add_argument("--data-dir", dest="data_dir",
                    help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    rp.add_argument("--workers", type=int, help="worker processes (default one per core)")
    rp.add_argument("--executor", default="local", choices=EXECUTORS,
                    help="where the ensembles train (sweep --executor): local worker processes, "
                         "interleaved in this process, a Ray cluster, or inline in this process")
    rp.add_argument("--ray-address", dest="ray_address", help="Ray cluster (default $RAY_ADDRESS)")
    rp.add_argument("--device", help="cpu | cuda | cuda:N (default cpu)")
    rp.add_argument("--compile", action="store_true",
                    help="the compiled training step where it applies (sweep --compile)")
    rp.add_argument("--no-progress", action="store_true", help="no progress bar (a log, a pipe)")
    add_checkpoint_every(rp)
    add_lock_option(rp)
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
