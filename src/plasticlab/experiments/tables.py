"""A results directory as tables, from its results store or its compact export alike: its runs
(one row each) and their per-task metrics (one number a row), as pandas DataFrames, CSV or
Parquet files (``plasticlab tables``)::

    from plasticlab.experiments.tables import results_frame
    tasks = results_frame("docs/reproduction/best-permuted_mnist-adam", "tasks")
    tasks.query("metric == 'srank' and index == 1")        # the second hidden layer's srank

An export holds the finished runs and the metrics a report reads, rounded as it stores them
(``plasticlab export --all-metrics`` keeps every metric exactly); a store holds every run, with
its status, and every metric exactly. A folder that holds neither stands for every study under
it (``docs/reproduction``): their tables one after another, a first column ``study`` naming each.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from .export import DB_NAME, holds_results, read_results, study_folders
from .run_tables import import_pandas, runs_frame, task_records, tasks_frame, write_frame
from .store import ResultStore

if TYPE_CHECKING:
    import pandas

KINDS = ("runs", "tasks")
FORMATS = ("csv", "parquet")

__all__ = ["FORMATS", "KINDS", "results_frame", "write_tables"]


def results_frame(directory: str | os.PathLike, kind: str = "runs") -> pandas.DataFrame:
    """The runs (``kind="runs"``: :func:`~plasticlab.experiments.run_tables.runs_frame`) or the
    per-task metrics (``"tasks"``: :func:`~plasticlab.experiments.run_tables.tasks_frame`) of the
    results directory ``directory``: its store (``results.sqlite``) or, failing that, its export
    (``results.json.gz``); a folder holding neither, every study under it
    (:func:`~plasticlab.experiments.export.study_folders`), with a first column ``study``, the
    study's folder under ``directory``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    return _frames(directory, (kind,))[kind]


def write_tables(directory: str | os.PathLike, out: str | os.PathLike, fmt: str = "csv"
                 ) -> dict[str, tuple[Path, int]]:
    """Write ``runs.<fmt>`` and ``tasks.<fmt>`` (``fmt``: ``csv`` or ``parquet``) of the results
    directory ``directory`` into the folder ``out``, each atomically; kind → (path, rows). Each
    study is read once for both."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return {kind: (write_frame(frame, Path(out) / f"{kind}.{fmt}"), len(frame))
            for kind, frame in _frames(directory, KINDS).items()}


def _frames(directory: str | os.PathLike, kinds: tuple[str, ...]) -> dict[str, pandas.DataFrame]:
    """:func:`results_frame` of each of ``kinds``, reading each study once."""
    pd = import_pandas()
    if holds_results(directory) or not Path(directory).is_dir():
        return _study_frames(pd, directory, kinds)
    studies = study_folders([directory])
    if not studies:
        raise ValueError(f"{directory} holds no results store ({DB_NAME}) or export, nor any "
                         "folder below it that does")
    parts = [(str(study.relative_to(directory)), _study_frames(pd, study, kinds)) for study in studies]
    frames = {}
    for kind in kinds:
        frame = pd.concat([f[kind].assign(study=name) for name, f in parts], ignore_index=True)
        frames[kind] = frame[["study", *(c for c in frame.columns if c != "study")]]
    return frames


def _study_frames(pd, directory: str | os.PathLike, kinds: tuple[str, ...]) -> dict[str, pandas.DataFrame]:
    if (Path(directory) / DB_NAME).is_file():
        with ResultStore(directory) as store:
            return {kind: store.to_dataframe(kind) for kind in kinds}
    runs, metrics, _ = read_results(directory)
    build = {"runs": lambda: runs_frame(pd, runs),
             "tasks": lambda: tasks_frame(pd, task_records(runs, metrics))}
    return {kind: build[kind]() for kind in kinds}
