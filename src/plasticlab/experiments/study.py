"""A study's bookkeeping for ``plasticlab reproduce``: the scale it runs at, the ``plasticlab
sweep`` command that makes its results, and its run record (``run.json``): where it ran and
its sittings, each with its command, start, end, wall time and exit code — a sitting killed
without recording its end closed at its sweep's last progress; and, while a sitting trains,
its export refreshed as each ensemble finishes, marked partial in the run record."""

from __future__ import annotations

import calendar
import json
import os
import platform
import sqlite3
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

STUDY_SCALES = {
    "best-random_label_mnist-adam": 0.5,
    "best-random_label_mnist-sgd": 0.5,
    "best-random_label_cifar-adam": 0.2,
    "best-random_label_cifar-sgd": 0.2,
    "field-random_label_mnist": 0.5,
    "field-toolkit-permuted_mnist": 0.2,
    "field-toolkit-random_label_mnist": 0.2,
    "reference-modes": 0.1,
    "reference-modes-random_label_mnist": 0.5,
    "reference-modes-random_label_cifar": 0.2,
}
"""The default ``--scale`` of studies too long to run at full length on a CPU (SPEC §3:
Random Label problems train 30,000 steps per task; the toolkit studies hold Wasserstein Init,
whose step is a sort of every weight tensor), the scale at which docs/reproduction ran them;
every other study runs at full length."""


def study_scale(study: str, scale: float | None = None) -> float:
    """The scale ``study`` runs at: ``scale`` if given, else its :data:`STUDY_SCALES` default,
    else 1 (full length)."""
    return scale if scale is not None else STUDY_SCALES.get(study, 1.0)


def machine() -> dict:
    """Where a study ran: OS, processor, cores, Python and torch versions."""
    import torch

    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def sweep_words(study: str, out: Path, scale: float, *, tasks: int | None = None,
                data_dir: str | None = None, workers: int | None = None, device: str | None = None,
                compile: bool = False, progress: bool = True, executor: str = "local",
                ray_address: str | None = None) -> list[str]:
    """The words after ``plasticlab`` of the sweep command that makes ``study``'s results in
    ``out``: what its run record names as its command."""
    words = ["sweep", "--preset", study, "--out", str(out)]
    if scale != 1.0:
        words += ["--scale", repr(scale)]
    if tasks is not None:
        words += ["--tasks", str(tasks)]
    for flag, value in (("--data-dir", data_dir), ("--workers", workers), ("--device", device),
                        ("--executor", None if executor == "local" else executor),
                        ("--ray-address", ray_address)):
        if value is not None:
            words += [flag, str(value)]
    return words + (["--compile"] if compile else []) + ([] if progress else ["--no-progress"])


def retrain_words(rerun: bool, only: list[str] | None) -> list[str]:
    """The words a retrain (``--rerun``, ``--only`` filters) adds to a sitting's command."""
    return (["--rerun"] if rerun else []) + [w for f in only or [] for w in ("--only", f)]


RUN_ONLY_FLAGS = {"--data-dir": 1, "--workers": 1, "--device": 1, "--compile": 0, "--no-progress": 0,
                  "--executor": 1, "--ray-address": 1}
"""The sweep flags that change how a study runs, not what it trains (with how many values each
takes): two commands that differ only in these make the same results, so their sittings add up."""


def same_results(command: str, other: str, *, anywhere: bool = False) -> bool:
    """Whether two recorded ``plasticlab sweep …`` commands make the same results: the same
    preset, ``--out``, ``--scale`` and ``--tasks``, whatever their run-only flags
    (:data:`RUN_ONLY_FLAGS`); with ``anywhere``, whatever their ``--out`` too (the same study,
    trained into another results folder: on another machine)."""
    ignored = {**RUN_ONLY_FLAGS, "--out": 1} if anywhere else RUN_ONLY_FLAGS

    def what_it_trains(text: str) -> list[str]:
        words, kept = text.split(), []
        while words:
            word = words.pop(0)
            if word in ignored:
                del words[:ignored[word]]
            else:
                kept.append(word)
        return kept

    return what_it_trains(command) == what_it_trains(other)


UTC_FORMAT = "%Y-%m-%d %H:%M:%S UTC"  # a sitting's start and end in run.json


def utc(seconds: float | None = None) -> str:
    """``seconds`` since the epoch (default: now) as run.json writes a time."""
    return time.strftime(UTC_FORMAT, time.gmtime(seconds))


def parse_utc(text: str) -> float:
    """A time as run.json writes it (:func:`utc`), in seconds since the epoch."""
    return float(calendar.timegm(time.strptime(text, UTC_FORMAT)))


def read_record(path: Path) -> dict:
    """The run record at ``path`` (empty when there is none yet)."""
    return json.loads(path.read_text()) if path.is_file() else {}


def write_record(path: Path, record: dict) -> None:
    """Write a study's run record, with its total wall time over the sittings recorded so far."""
    record["wall_time_s"] = round(sum(s.get("wall_time_s") or 0.0 for s in record["sittings"]), 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def open_sitting(path: Path, record: dict, command: str) -> dict:
    """Add a sitting of ``command`` starting now to ``record`` and write the record to ``path``;
    the sitting, for :func:`close_sitting`."""
    # Recorded before it trains: if it is killed (no signal handler runs), the next sitting
    # finds it open and closes it at its sweep's last progress (close_killed_sittings).
    sitting = {"started": utc(), "command": command}
    record["sittings"].append(sitting)
    write_record(path, record)
    return sitting


def close_sitting(path: Path, record: dict, sitting: dict, wall_time_s: float,
                  exit_code: int | None) -> None:
    """Record the end of ``sitting`` (now), its wall time and exit code (None: stopped by an
    exception), and write ``record`` to ``path``."""
    sitting.update({"wall_time_s": round(wall_time_s, 1), "exit_code": exit_code, "ended": utc()})
    write_record(path, record)


def progress_times(out: Path) -> list[float]:
    """When a sweep in ``out`` last made progress, as seconds since the epoch: each checkpoint
    it writes (at task ends and every ``--checkpoint-every`` seconds) and each run's start and
    end in its results store. Nothing else in the folder: the store's own files change when
    they are read (``plasticlab status``, ``report``), the lock when the next command takes the
    folder (before it closes the sittings a killed one left), and ``plasticlab import`` writes
    the selection, which a sweep writes as its grid's last run ends."""
    from .store import CHECKPOINTS, DB_NAME, ResultStore

    checkpoints = out / CHECKPOINTS
    times = [f.stat().st_mtime for f in (checkpoints.iterdir() if checkpoints.is_dir() else [])
             if f.is_file()]
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
    starts = [parse_utc(s["started"]) if "started" in s else None for s in sittings]
    for i, sitting in enumerate(sittings):
        if "ended" in sitting or starts[i] is None:
            continue
        until = next((t for t in starts[i + 1:] if t is not None), float("inf"))
        last = max((t for t in progress if starts[i] <= t < until), default=starts[i])
        sitting.update({"wall_time_s": round(last - starts[i], 1), "exit_code": None,
                        "ended": utc(last),
                        "killed": "stopped without recording its end; closed at its sweep's "
                                  "last progress (a checkpoint, a run's start or end)"})


def study_run_ids(preset: dict, tasks: int | None, out: Path, scale: float) -> set[str]:
    """The run ids of the study ``preset`` (with ``tasks``, at ``scale``) in ``out``: the
    results store may also hold the runs of this study at another scale or length."""
    from .orchestrate import sweep_runs
    from .store import ResultStore
    from .workflow import with_tasks

    return {ResultStore.run_id(r.config.to_dict(), r.seed)
            for r in sweep_runs(with_tasks(preset, tasks), out, scale)}


def finished_elsewhere(out: Path, run_ids: set[str]) -> int:
    """How many finished runs the results store ``out`` holds beyond ``run_ids``."""
    from .store import ResultStore

    with ResultStore(out) as store:
        return len({r["run_id"] for r in store.runs(status="finished")} - run_ids)


PARTIAL_EXPORT = "partial_export"
"""The run record's key, present while the study's export under ``--docs`` holds only the runs
finished so far (:func:`export_finished_so_far`): how many, of how many planned, and when."""


def planned_run_count(preset: dict, tasks: int | None, out: Path, scale: float) -> int:
    """How many runs the study ``preset`` makes in all: its grid and, for a protocol study, its
    evaluation — before the selection, one configuration per problem, optimizer and method of
    the grid (as :func:`~.protocol.select_best` picks them) on each evaluation seed."""
    from .orchestrate import SELECTION_FILE, protocol_seeds, sweep_runs
    from .workflow import with_tasks

    runs = sweep_runs(with_tasks(preset, tasks), out, scale)
    seeds = protocol_seeds(preset)
    if seeds is None or (out / SELECTION_FILE).is_file():
        return len(runs)
    groups = {(r.config.problem, r.config.optimizer, r.config.method) for r in runs}
    return len(runs) + len(groups) * len(seeds)


def export_finished_so_far(preset: dict, tasks: int | None, out: Path, scale: float, docs: Path,
                           record_path: Path, record: dict) -> int:
    """Write the export of the study's runs finished so far in ``out`` to ``docs``, and mark it
    partial in its run record (:data:`PARTIAL_EXPORT`: finished and planned runs, when); how
    many runs it holds. The export's files are those the study's final export will replace."""
    from .export import export_results

    runs = export_results(out, docs, run_ids=study_run_ids(preset, tasks, out, scale))
    _mark_partial(record, runs, planned_run_count(preset, tasks, out, scale))
    write_record(record_path, record)
    return runs


def _mark_partial(record: dict, runs: int, planned: int) -> None:
    """Say in ``record`` that the study's export holds ``runs`` of its ``planned`` runs."""
    record[PARTIAL_EXPORT] = {
        "finished_runs": runs, "planned_runs": planned, "written": utc(),
        "note": "the export holds the runs finished so far: reproduce refreshes it as each "
                "ensemble finishes, and the sitting that finishes the study writes the final "
                "export and removes this note; `plasticlab import` carries these runs to another "
                "results folder"}


def export_after_each_ensemble(preset: dict, tasks: int | None, out: Path, scale: float,
                               docs: Path, record_path: Path, record: dict,
                               warn: Callable[[str], None] | None = None) -> Callable[[Any], None]:
    """The callback (an executor's ``on_done``) that refreshes the study's partial export as
    each ensemble whose runs were recorded finishes (:func:`export_finished_so_far`), so that
    the export carries the study at most one ensemble behind. An export that cannot be written
    is said through ``warn`` (default: on stderr) and the sweep goes on."""
    def warn_on_stderr(text: str) -> None:
        print(text, file=sys.stderr)

    def on_done(job: Any) -> None:
        if job.error is not None or not job.records:  # nothing new finished
            return
        try:
            export_finished_so_far(preset, tasks, out, scale, docs, record_path, record)
        except (OSError, ValueError, sqlite3.Error) as exc:
            (warn or warn_on_stderr)(f"plasticlab: warning: could not refresh the export in {docs} "
                                     f"({exc}); the sweep goes on, and the final export is written "
                                     "when it finishes")

    return on_done


def final_export_written(record_path: Path, record: dict, runs: int, planned: int) -> None:
    """A sitting's last export is written, holding ``runs`` of the study's ``planned`` runs: its
    run record says it is partial while it holds fewer (a sitting with ``--only``), else no
    longer."""
    if runs < planned:
        _mark_partial(record, runs, planned)
    elif record.pop(PARTIAL_EXPORT, None) is None:
        return
    write_record(record_path, record)
