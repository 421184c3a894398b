"""A compact, text-only export of a results directory: what a report needs, nothing else.

``results.sqlite`` grows with every attempt, checkpoint reference and manifest detail; a study
committed to a repository (``docs/reproduction/``) needs only its finished runs — config, seed,
summary, manifest — with their per-task metrics, and the selection protocol's choices. That is
one gzipped JSON file, :data:`EXPORT_NAME` (in parts past :data:`PART_BYTES`), which
:func:`plasticlab.report.data.load_results` reads in place of a store (``plasticlab report
DIR`` works on either).

Only the metrics a report reads are exported (:func:`reported_metric`): online accuracies
and the accuracy matrix exactly; the measurements the report draws (weight magnitude, ranks,
dead and dormant fractions, gradient norm, test accuracy), at task ends and every N steps, to
:data:`MEASUREMENT_DIGITS` significant digits — the precision of the float32 networks they are
measured on (a float32 carries 7.2 decimal digits). The rest of what a store holds (the
per-layer weight magnitudes and unit fractions, a method's own measurements) stays in the
store — unless the export is made with ``all_metrics`` (``plasticlab export --all-metrics``):
then every metric of the store, exactly, and part 1 says ``"all_metrics": true``. That is the
export for moving finished runs to another results store (:mod:`.importer`); readers of the
compact form read it too.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from .orchestrate import SELECTION_FILE
from .recording import STEP_PREFIX
from .store import DB_NAME, ResultStore
from .sweep import consecutive_pieces

EXPORT_NAME = "results.json.gz"
FORMAT = "plasticlab-export/1"
RUN_KEYS = ("run_id", "status", "config", "seed", "manifest", "summary", "code")
PART_BYTES = 1_500_000
"""The most bytes one file of an export takes: a larger export is written as parts of whole
runs (``results.json.gz``, ``results.2.json.gz``, …), so that every file stays well within a
repository's limit on a tracked file (2 MB here)."""
MEASUREMENT_DIGITS = 7
"""Significant digits of the exported measurements (online accuracies: every digit)."""
EXACT_METRICS = ("online_accuracy", "accuracy_matrix", "online_squared_error")  # the last: a regression's
REPORTED_MEASUREMENTS = ("weight_magnitude", "srank", "effective_rank", "dead_fraction",
                         "dormant_fraction", "grad_norm", "task_test_accuracy",
                         # the optional ones (--measure), where the runs have them
                         "effective_lr", "feature_norm", "feature_variance", "active_fraction",
                         "approximate_rank", "feature_rank", "matrix_rank", "hessian_top_eigenvalue",
                         "churn", "prediction_churn", "zero_grad_ratio", "distance_to_init")
"""The measurements ``plasticlab report`` draws (:data:`plasticlab.report.data.INTERNALS`,
which labels each): the export keeps these, and :data:`EXACT_METRICS`."""


def rounded(value, digits: int):
    """``value`` (a number or nested lists of them) with every float to ``digits`` significant
    digits (NaN and infinities as they are)."""
    spec = f".{digits}g"
    if isinstance(value, float):
        return float(format(value, spec))
    if isinstance(value, list):
        # a list's floats are rounded here, not by a call each: exports hold millions of them
        return [float(format(v, spec)) if type(v) is float else rounded(v, digits) for v in value]
    return value


def reported_metric(name: str) -> bool:
    """Whether ``plasticlab report`` reads the per-task metric ``name``: the online accuracy,
    the accuracy matrix, and the internals it draws (:data:`REPORTED_MEASUREMENTS`), at task
    ends or every N steps (``steps.<name>``, with ``steps.step``)."""
    name = name.removeprefix(STEP_PREFIX)
    return name in EXACT_METRICS or name in REPORTED_MEASUREMENTS or name == "step"


def compact_metrics(metrics: dict[str, list]) -> dict[str, list]:
    """A run's per-task metrics as the export keeps them: those a report reads
    (:func:`reported_metric`), :data:`EXACT_METRICS` exactly, the rest to
    :data:`MEASUREMENT_DIGITS` significant digits."""
    return {name: values if name in EXACT_METRICS else rounded(values, MEASUREMENT_DIGITS)
            for name, values in metrics.items() if reported_metric(name)}


def export_results(directory: str | Path, out: str | Path, run_ids: Collection[str] | None = None,
                   all_metrics: bool = False) -> int:
    """Write the finished runs of ``directory`` — a results store with its ``selection.json``,
    or an export (:func:`read_results` reads either) — to ``out`` (a file, or a folder that gets
    :data:`EXPORT_NAME`), in parts past :data:`PART_BYTES`; return how many runs. ``run_ids``:
    only those runs (a study's own, where the store holds other sweeps' runs too).
    ``all_metrics``: every metric the store holds, exactly, instead of the compact ones
    (:func:`compact_metrics`); ``directory`` must then be a store.

    Exporting an export writes it again in this plasticlab's parts and precision, which change
    no run's numbers; ``out`` may be the export itself, which is read whole before anything is
    written. Each file is written beside its place and renamed into it, so a reader (a copy, a
    commit) finds the previous file or the new one whole, never half of one."""
    directory, out = Path(directory), Path(out)
    if out.is_dir() or out.suffix != ".gz":
        out = out / EXPORT_NAME
    runs, metrics, selection = exported(directory, run_ids, all_metrics)
    parts = _parts(out, runs, metrics, selection, {"all_metrics": True} if all_metrics else {})
    out.parent.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(parts, start=1):
        path = part_path(out, i)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    stale = len(parts) + 1
    while part_path(out, stale).is_file():  # the parts of an earlier, larger export
        part_path(out, stale).unlink()
        stale += 1
    return len(runs)


def exported(directory: str | Path, run_ids: Collection[str] | None = None, all_metrics: bool = False
             ) -> tuple[list[dict], dict[str, dict], dict | None]:
    """What :func:`export_results` writes of ``directory`` (same arguments): the finished runs,
    their metrics (compact, or ``all_metrics`` exactly) and the selection — before the JSON
    that :func:`read_export` reads them back from (a JSON round trip of this is what it gives)."""
    directory = Path(directory)
    if all_metrics and not (directory / DB_NAME).is_file():
        raise ValueError(f"{directory} holds no results store ({DB_NAME}): an export with every "
                         "metric is made from the store that holds them")
    return exported_from(read_results(directory, run_ids), directory, run_ids, all_metrics)


def exported_from(results: tuple[list[dict], dict[str, dict], dict | None], directory: str | Path,
                  run_ids: Collection[str] | None = None, all_metrics: bool = False
                  ) -> tuple[list[dict], dict[str, dict], dict | None]:
    """:func:`exported` of ``results``, what :func:`read_results` read from ``directory`` (runs,
    metrics, selection), which it leaves as they were (the exact metrics' lists are shared)."""
    rows, metrics, selection = results
    runs = [{k: r[k] for k in RUN_KEYS} for r in rows
            if r["status"] == "finished" and (run_ids is None or r["run_id"] in run_ids)]
    keep = (lambda m: m) if all_metrics else compact_metrics
    metrics = {r["run_id"]: keep(metrics[r["run_id"]]) for r in runs}
    selection_path = Path(directory) / SELECTION_FILE
    if selection is None and selection_path.is_file():  # a store keeps its selection beside it
        selection = json.loads(selection_path.read_text())
    return runs, metrics, selection


def part_path(path: Path, part: int) -> Path:
    """Where part ``part`` of the export ``path`` is: ``path`` itself for part 1, else the
    same name with the part's number after its stem (``results.2.json.gz``)."""
    if part == 1:
        return path
    stem, _, suffixes = path.name.partition(".")
    return path.with_name(f"{stem}.{part}.{suffixes}")


def _gzipped(body: dict, name: str) -> bytes:
    """``body`` as the gzipped JSON of the file ``name`` (which gzip's header records)."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    buffer = io.BytesIO()
    # mtime=0: the same results give the same bytes, so a re-export changes nothing in git
    with gzip.GzipFile(name, "wb", fileobj=buffer, mtime=0) as f:
        f.write(text.encode("utf-8"))
    return buffer.getvalue()


def _parts(out: Path, runs: list[dict], metrics: dict, selection: dict | None,
           marks: dict) -> list[bytes]:
    """The export's files: the fewest parts of consecutive whole runs (sizes within one run of
    each other) whose every file fits in :data:`PART_BYTES`. Part 1 also holds the selection,
    the number of parts when there are several, and ``marks`` (``all_metrics``)."""
    for count in range(1, max(len(runs), 1) + 1):
        parts = []
        for i, chunk in enumerate(consecutive_pieces(runs, count)):
            body = {"format": FORMAT, "runs": chunk,
                    "task_metrics": {r["run_id"]: metrics[r["run_id"]] for r in chunk}}
            if i == 0:
                body["selection"] = selection
                body |= marks
                if count > 1:
                    body["parts"] = count
            else:
                body["part"] = i + 1
            parts.append(_gzipped(body, part_path(out, i + 1).name))
        if max(len(p) for p in parts) <= PART_BYTES:
            break
    return parts


def _read_part(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"{path}: missing, a part of this export; re-export it with "
                         "`plasticlab export DIR`")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, EOFError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable plasticlab export ({e}); re-export it with "
                         "`plasticlab export DIR`") from None
    if body.get("format") != FORMAT:
        raise ValueError(f"{path}: export format {body.get('format')!r}, this plasticlab reads {FORMAT!r}")
    return body


def export_files(path: str | Path) -> list[Path]:
    """The files of the export ``path`` (a file, or a folder with :data:`EXPORT_NAME`): part 1
    and every further part it names — all of them to commit, copy or delete together."""
    path = Path(path)
    path = path / EXPORT_NAME if path.is_dir() else path
    return [part_path(path, i) for i in range(1, _read_part(path).get("parts", 1) + 1)]


@dataclass
class ExportContents:
    """What an export holds: its finished ``runs`` (dicts of :data:`RUN_KEYS`), their per-task
    ``metrics`` (run id → metric name → list), the protocol's ``selection`` (None: none), whether
    it holds ``all_metrics`` of its store (else the compact ones) and its ``files``."""

    runs: list[dict]
    metrics: dict[str, dict]
    selection: dict | None
    all_metrics: bool
    files: list[Path]


def export_contents(path: str | Path) -> ExportContents:
    """Everything the export file ``path`` (part 1) holds, with every further part it names
    (:func:`part_path`), which must all be there."""
    path = Path(path)
    first = _read_part(path)
    runs, metrics = list(first["runs"]), dict(first["task_metrics"])
    files = [path]
    for i in range(2, first.get("parts", 1) + 1):
        files.append(part_path(path, i))
        body = _read_part(files[-1])
        if body.get("part") != i:
            raise ValueError(f"{part_path(path, i)}: holds part {body.get('part')} of an export, "
                             f"not part {i} of {path}; re-export it with `plasticlab export DIR`")
        runs += body["runs"]
        metrics |= body["task_metrics"]
    return ExportContents(runs, metrics, first.get("selection"), bool(first.get("all_metrics")), files)


def export_selection(path: str | Path) -> dict | None:
    """The protocol's selection the export ``path`` (a file, or the folder holding
    ``results.json.gz``) records, as ``selection.json`` holds it; None where it records none.
    Reads part 1 alone, where the selection is."""
    path = Path(path)
    return _read_part(path / EXPORT_NAME if path.is_dir() else path).get("selection")


def read_export(path: str | Path) -> tuple[list[dict], dict[str, dict], dict | None]:
    """The finished runs, their per-task metrics and the selection of an export file — with
    every further part it names (:func:`part_path`), which must all be there."""
    contents = export_contents(path)
    return contents.runs, contents.metrics, contents.selection


def holds_results(directory: str | Path) -> bool:
    """Whether ``directory`` itself holds a results store or a study export (not only a folder
    below it): what :func:`read_results` reads."""
    directory = Path(directory)
    return (directory / DB_NAME).is_file() or (directory / EXPORT_NAME).is_file()


def study_folders(paths: Iterable[str | Path]) -> list[Path]:
    """Every folder under ``paths`` (each a study folder or a parent of some, at any depth)
    holding a study export (``results.json.gz``) or a results store (``results.sqlite``), each
    once, in the order of ``paths`` and by name under each."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise ValueError(f"{path}: not a folder (give a study folder or a folder of them)")
        hits = {p.parent for name in (EXPORT_NAME, DB_NAME) for p in path.rglob(name)}
        found += sorted(hits - set(found))
    return found


def read_results(directory: str | Path, run_ids: Collection[str] | None = None
                 ) -> tuple[list[dict], dict[str, dict], dict | None]:
    """A results directory's runs, the finished runs' per-task metrics (run id → metric name →
    per-task list) and the protocol's selection as an export records it: from its results store
    (every run, whatever its status; no selection) or, failing that, from its compact export
    (its finished runs). ``run_ids``: read the store's metrics of those runs only (an export's
    come whole). A ValueError names the directory when it holds neither."""
    directory = Path(directory)
    if (directory / DB_NAME).is_file():
        with ResultStore(directory) as store:
            rows = store.runs()
            metrics = {r["run_id"]: store.task_metrics(r["run_id"]) for r in rows
                       if r["status"] == "finished" and (run_ids is None or r["run_id"] in run_ids)}
        return rows, metrics, None
    if (directory / EXPORT_NAME).is_file():
        return read_export(directory / EXPORT_NAME)
    raise ValueError(f"{directory} holds no results store ({DB_NAME}) and no export ({EXPORT_NAME}); "
                     "give the --out directory of a `plasticlab run` or `plasticlab sweep`, or a "
                     "study's folder under docs/reproduction")

