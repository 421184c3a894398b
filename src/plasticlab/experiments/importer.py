"""Finished runs carried into a results store from exports: ``plasticlab import``.

A study's results store lives in its ``--out`` folder; a machine lost mid-study takes it with
it. Its export (:mod:`.export`: ``plasticlab export``, or the one ``plasticlab reproduce``
refreshes under ``--docs`` after every ensemble) is a small file that travels — committed,
copied, mailed. :func:`import_runs` puts an export's finished runs back into a results store,
a new one or one that holds part of the study already, so that a ``sweep`` or ``reproduce``
pointed at it trains only the rest.

What an imported run keeps, exactly: its id, config, seed, manifest (code, machine, times,
ensemble, sittings …), summary, code identity and every per-task metric the export holds —
every metric of its store with an export made with ``all_metrics``
(``plasticlab export --all-metrics``), else the compact ones
(:func:`~.export.compact_metrics`: online accuracies and the accuracy matrix exactly, the
measurements a report draws to 7 significant digits). What it lacks: the metrics a compact
export leaves out and their last digits, and the run's other attempts (failed, interrupted, or
finished earlier) with their error texts: it arrives as one finished attempt, numbered anew.

Importing is all or nothing, and safe to repeat: a run the store already holds finished with
the same numbers (:func:`first_difference`) is left as it is; one with other numbers is a
conflict (:class:`ImportConflict`), and then nothing is imported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .export import EXPORT_NAME, RUN_KEYS, compact_metrics, export_contents, part_path
from .lock import writer_lock
from .orchestrate import SELECTION_FILE
from .schema import dumps
from .store import DB_NAME, ResultStore

__all__ = ["ImportConflict", "ImportReport", "Source", "first_difference", "import_runs",
           "read_source"]

TIMING_KEYS = ("wall_time_s", "steps_per_second", "measure_time_s", "ensemble_members")
"""Summary values that say how a run was trained (how fast, in how large an ensemble), not what
it gave: two trainings of one run with the same numbers differ in these."""


class ImportConflict(ValueError):
    """A run to import is already finished in the store with other numbers: one line naming it;
    nothing was imported."""


@dataclass
class Source:
    """One export (or results store) to import from: where it is (``path``: its first file, or
    the store's folder), its finished ``runs`` and their ``metrics``, its protocol
    ``selection``, and whether it holds every metric of its store (``all_metrics``) or the
    compact ones."""

    path: Path
    runs: list[dict]
    metrics: dict[str, dict]
    selection: dict | None
    all_metrics: bool


@dataclass
class ImportReport:
    """What an import did, per source (in the order given): the runs added (``added``: source
    path → run ids) and those the store already held finished with the same numbers
    (``held``), the sources that are compact exports (``compact``: their runs lack the metrics
    such an export leaves out), and notes to tell (the selection kept)."""

    added: dict[Path, list[str]] = field(default_factory=dict)
    held: dict[Path, list[str]] = field(default_factory=dict)
    compact: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_source(path: str | Path) -> Source:
    """The finished runs that ``path`` holds: an export — its first file
    (``results.json.gz``), any of its parts (``results.2.json.gz``: the whole export it belongs
    to), or the folder holding it — or a results folder with its store (every metric, exactly).
    A ValueError names the path when it is none of these."""
    path = Path(path)
    if path.is_dir() and (path / DB_NAME).is_file():
        with ResultStore(path) as store:
            rows = store.runs(status="finished")
            metrics = {r["run_id"]: store.task_metrics(r["run_id"]) for r in rows}
        selection_path = path / SELECTION_FILE
        selection = json.loads(selection_path.read_text()) if selection_path.is_file() else None
        return Source(path, [{k: r[k] for k in RUN_KEYS} for r in rows], metrics, selection, True)
    if path.is_dir():
        if not (path / EXPORT_NAME).is_file():
            raise ValueError(f"{path} holds no export ({EXPORT_NAME}) and no results store "
                             f"({DB_NAME}); give an export's file or folder (what `plasticlab "
                             "export` or `plasticlab reproduce` wrote), or a results folder")
        path = path / EXPORT_NAME
    elif not path.is_file():
        raise ValueError(f"{path} does not exist; give an export's file or folder, or a results folder")
    path = _first_part(path)
    contents = export_contents(path)
    return Source(path, contents.runs, contents.metrics, contents.selection, contents.all_metrics)


def _first_part(path: Path) -> Path:
    """The first file of the export that ``path`` is a file of: ``path`` itself, or for a
    further part (``results.2.json.gz``) the file its number is taken out of."""
    stem, _, rest = path.name.partition(".")
    number, _, suffixes = rest.partition(".")
    if number.isdigit() and suffixes:
        first = path.with_name(f"{stem}.{suffixes}")
        if part_path(first, int(number)) == path and first.is_file():
            return first
    return path


def _check(source: Source) -> None:
    """A ValueError naming the source's first run that is not a finished run as the store
    keeps it: a key missing, no metrics, or an id that is not its config's and seed's."""
    for run in source.runs:
        missing = [k for k in RUN_KEYS if k not in run]
        rid = run.get("run_id")
        if missing or run["status"] != "finished" or rid not in source.metrics:
            what = f"lacks {', '.join(missing)}" if missing else (
                f"is {run['status']}, not finished" if run["status"] != "finished" else
                "has no per-task metrics")
            raise ValueError(f"{source.path}: run {rid} {what}; re-export it with `plasticlab export DIR`")
        if ResultStore.run_id(run["config"], run["seed"]) != rid:
            raise ValueError(f"{source.path}: run {rid}'s id is not that of its config and seed "
                             f"({ResultStore.run_id(run['config'], run['seed'])}): the file was "
                             "edited or damaged; re-export it from its results store")


def _text(value) -> str:
    """``value`` as canonical JSON text: equal numbers give equal text, NaN included."""
    return json.dumps(json.loads(dumps(value)), sort_keys=True, allow_nan=True)


def first_difference(summary: dict, metrics: dict, other_summary: dict, other_metrics: dict
                     ) -> str | None:
    """Where two finished runs' numbers differ first, in words; None when they are the same.

    The numbers are the summary's results (not :data:`TIMING_KEYS`) and the per-task metrics as
    an export keeps them (:func:`~.export.compact_metrics`), of the keys and metrics both hold:
    an export made with every metric and a compact one of the same run have the same numbers.
    """
    for key in sorted(set(summary) & set(other_summary) - set(TIMING_KEYS)):
        if _text(summary[key]) != _text(other_summary[key]):
            return f"{key} {summary[key]!r} vs {other_summary[key]!r}"
    mine, theirs = compact_metrics(metrics), compact_metrics(other_metrics)
    for name in sorted(set(mine) & set(theirs)):
        a, b = mine[name], theirs[name]
        if _text(a) == _text(b):
            continue
        for task, (x, y) in enumerate(zip(a, b, strict=False)):  # lengths: below
            if _text(x) != _text(y):
                return f"{name} at task {task}: {x!r} vs {y!r}"
        return f"{name}: {len(a)} vs {len(b)} entries"
    return None


def _label(run: dict) -> str:
    """A run as a conflict names it: its id, method, problem, step size and seed."""
    c = run["config"]
    return f"{run['run_id']} ({c.get('method')} {c.get('problem')} lr={c.get('lr')} seed {run['seed']})"


def _sort(sources: Sequence[Source], store: ResultStore, out: Path) -> tuple[list[dict], ImportReport]:
    """The runs to add (each once, in the sources' order, with its ``task_metrics``) and the
    report of what is held already; an :class:`ImportConflict` on the first run with other
    numbers than the finished run the store (or an earlier source) holds."""
    report, chosen, conflicts = ImportReport(), {}, []
    finished = {r["run_id"]: r for r in store.runs(status="finished")}
    for source in sources:
        added, held = report.added.setdefault(source.path, []), report.held.setdefault(source.path, [])
        for run in source.runs:
            rid, metrics = run["run_id"], source.metrics[run["run_id"]]
            there = chosen.get(rid) or finished.get(rid)
            if there is None:
                chosen[rid] = {**{k: run[k] for k in RUN_KEYS}, "task_metrics": metrics,
                               "source": source.path}
                added.append(rid)
                continue
            held_metrics = there["task_metrics"] if rid in chosen else store.task_metrics(rid)
            difference = first_difference(run["summary"], metrics, there["summary"], held_metrics)
            if difference is None:
                held.append(rid)
            else:
                where = f"{there['source']}" if rid in chosen else f"its finished run in {out}"
                conflicts.append(f"run {_label(run)} of {source.path} has other numbers than "
                                 f"{where} ({difference})")
    if conflicts:
        more = f" (and {len(conflicts) - 1} more run(s))" if len(conflicts) > 1 else ""
        raise ImportConflict(f"{conflicts[0]}{more}; nothing imported: import into an empty "
                             "folder to keep both")
    return [{k: v for k, v in run.items() if k != "source"} for run in chosen.values()], report


def _keep_selection(sources: Sequence[Source], out: Path) -> list[str]:
    """Write the first source's protocol selection to ``out/selection.json`` where there is
    none (the export of a store exported from this folder keeps it); the notes to tell."""
    selection = next((s.selection for s in sources if s.selection is not None), None)
    if selection is None:
        return []
    path = out / SELECTION_FILE
    if not path.is_file():
        path.write_text(json.dumps(selection, indent=2))
        return []
    if json.loads(path.read_text()) != selection:
        return [f"kept {path}: it differs from the imported selection (a protocol sweep selects "
                "again from its grid's finished runs before its evaluation)"]
    return []


def import_runs(paths: Sequence[str | Path], out: str | Path, *, lock: bool = True) -> ImportReport:
    """Add the finished runs of the exports (or results folders) ``paths`` to the results store
    in ``out`` (created if need be), as finished attempts that keep their ids, configs,
    manifests, summaries, code and metrics exactly; and the protocol's selection where ``out``
    has none. All or nothing: a run ``out`` already holds finished with the same numbers is
    left as it is (so importing twice adds nothing); one with other numbers is an
    :class:`ImportConflict` and nothing is imported. ``out`` is held (its lock) meanwhile;
    ``lock=False``: without it (``--no-lock``)."""
    sources = [read_source(p) for p in paths]
    for source in sources:
        _check(source)
    out = Path(out)
    with writer_lock(out, enabled=lock), ResultStore(out) as store:
        runs, report = _sort(sources, store, out)
        store.add_finished(runs)
        report.notes += _keep_selection(sources, out)
    report.compact = [s.path for s in sources if not s.all_metrics]
    return report
