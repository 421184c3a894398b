"""Runs as tables: the store's DataFrames and every CSV file of runs that plasticlab writes.

One place decides how a run becomes a row — its config flattened into columns
(:func:`flatten_config`), its containers written as JSON text (:func:`csv_cell`) — for both
writers: :meth:`ResultStore.export_csv <plasticlab.experiments.store.ResultStore.export_csv>`
(through pandas, :func:`write_frame_csv`) and a report's ``runs.csv`` (the standard library's
csv module, so a report needs no pandas: :func:`write_runs_csv`). Both write to a temporary name
and rename it, so a reader never sees a half-written file.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .schema import dumps

if TYPE_CHECKING:  # pandas is optional: imported lazily where it is needed.
    import pandas

__all__ = ["csv_cell", "flatten_config", "import_pandas", "runs_frame", "store_task_records",
           "task_records", "tasks_frame", "write_frame", "write_frame_csv", "write_runs_csv"]

#: The columns of the long per-task table (:func:`tasks_frame`).
TASK_COLUMNS = ["run_id", "seed", "problem", "method", "task", "metric", "index", "value"]


def flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Config keys as flat DataFrame columns: ``params`` -> ``param.<name>``, dicts dotted.

    ``seed`` is dropped: the store's own seed column is authoritative.
    """
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping):
            for key, sub in value.items():
                walk(f"{prefix}.{key}", sub)
        else:
            flat[prefix] = value

    for key, value in config.items():
        if key == "seed":
            continue
        walk("param" if key == "params" else str(key), value)
    return flat


def csv_cell(value: Any) -> Any:
    """A cell as CSV wants it: containers as JSON text, so the file parses back unambiguously;
    everything else as is."""
    if isinstance(value, (list, tuple, dict)):
        return dumps(value)
    return value


def import_pandas() -> Any:
    """Import pandas, or fail with a message saying what needs it and how to get it."""
    try:
        import pandas
    except ImportError as exc:  # pragma: no cover - pandas is installed in the test env
        raise ImportError(
            "pandas is required for results as tables (ResultStore.to_dataframe, export_csv, "
            "plasticlab tables); install it with `pip install 'plasticlab[tables]'`"
        ) from exc
    return pandas


def runs_frame(pd: Any, runs: Sequence[dict]) -> pandas.DataFrame:
    """One row per run (as :meth:`ResultStore.runs <plasticlab.experiments.store.ResultStore.runs>`
    gives them); see :meth:`~plasticlab.experiments.store.ResultStore.to_dataframe`."""
    head = ["run_id", "status", "seed"]
    tail = ["start_time", "end_time", "error", "code"]
    records: list[dict[str, Any]] = []
    config_cols: dict[str, None] = {}  # ordered sets: first-seen column order
    summary_cols: dict[str, None] = {}
    for run in runs:
        config_cols.update(dict.fromkeys(flatten_config(run["config"])))
    taken = set(head) | set(tail) | set(config_cols)
    for run in runs:
        record: dict[str, Any] = {"run_id": run["run_id"], "status": run["status"]}
        record["seed"] = run["seed"]
        record.update(flatten_config(run["config"]))
        for key, value in (run["summary"] or {}).items():
            col = f"summary.{key}" if key in taken else str(key)
            summary_cols[col] = None
            record[col] = value
        record["start_time"] = (run.get("manifest") or {}).get("start_time")
        record["end_time"] = (run.get("manifest") or {}).get("end_time")
        record["error"] = run.get("error")
        record["code"] = run.get("code")  # the code that trained it (git:<commit>, a version)
        records.append(record)
    columns = head + list(config_cols) + list(summary_cols) + tail
    return pd.DataFrame.from_records(records, columns=columns)


def _numbers(value: Any) -> Iterable[tuple[int | None, Any]]:
    """A metric's value at one task as ``(index, number)`` pairs: a single number at index None,
    a list (srank per hidden layer, an accuracy row over earlier tasks) one pair per entry."""
    if isinstance(value, list | tuple):
        return list(enumerate(value))
    return [(None, value)]


def task_records(runs: Sequence[dict], metrics: Mapping[str, Mapping[str, list]]) -> Iterable[tuple]:
    """The long table's rows (:data:`TASK_COLUMNS`) of ``runs`` from their per-task ``metrics``
    (run id → metric → per-task list, as an export or the store gives them): runs in order, then
    metrics by name, tasks, entries."""
    for run in runs:
        by_metric = metrics.get(run["run_id"])
        if not by_metric:
            continue
        config = run["config"]
        head = (run["run_id"], run["seed"], config.get("problem"), config.get("method"))
        for metric in sorted(by_metric):
            for task, value in enumerate(by_metric[metric]):
                for index, number in _numbers(value):
                    yield (*head, task, metric, index, number)


def store_task_records(rows: Iterable[tuple]) -> Iterable[tuple]:
    """The long table's rows from the store's ``(run_id, seed, config JSON, task, metric, value
    JSON)`` rows (each run's config decoded once, however many metrics it has)."""
    configs: dict[str, dict] = {}
    for run_id, seed, config_text, task, metric, value in rows:
        config = configs.get(run_id)
        if config is None:
            config = configs[run_id] = json.loads(config_text)
        head = (run_id, seed, config.get("problem"), config.get("method"), task, metric)
        for index, number in _numbers(json.loads(value)):
            yield (*head, index, number)


def tasks_frame(pd: Any, records: Iterable[tuple]) -> pandas.DataFrame:
    """The long per-task table, one number a row: columns :data:`TASK_COLUMNS` from
    :func:`task_records` or :func:`store_task_records`. ``index`` is the entry of a list-valued
    metric — the hidden layer of ``srank``, ``effective_rank`` and the ``*_per_layer`` metrics,
    the earlier task of ``accuracy_row`` — and empty (``<NA>``) for a single number."""
    frame = pd.DataFrame.from_records(list(records), columns=TASK_COLUMNS)
    frame["index"] = frame["index"].astype("Int64")
    frame["value"] = pd.to_numeric(frame["value"]).astype("float64")
    return frame


def _replace_atomically(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it to ``path``
    (creating its folder): a reader sees the old file or the whole new one, never half."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    write(tmp)
    os.replace(tmp, out)
    return out


def write_frame_csv(frame: pandas.DataFrame, path: str | os.PathLike) -> Path:
    """Write a DataFrame of runs (:func:`runs_frame`, :func:`tasks_frame`) to a CSV file,
    atomically, list- and dict-valued cells as JSON text (:func:`csv_cell`); returns its path."""
    for col in frame.columns:
        if frame[col].dtype == object:
            frame[col] = frame[col].map(csv_cell)
    return _replace_atomically(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_frame(frame: pandas.DataFrame, path: str | os.PathLike) -> Path:
    """Write a table of runs (:func:`runs_frame`, :func:`tasks_frame`) as its file name says:
    ``.csv`` (:func:`write_frame_csv`) or ``.parquet`` (needs pyarrow; a column holding lists or
    dicts — a config's list — as JSON text, as in the CSV), atomically; returns its path."""
    suffix = Path(path).suffix
    if suffix == ".csv":
        return write_frame_csv(frame, path)
    if suffix != ".parquet":
        raise ValueError(f"{path}: a table is written as .csv or .parquet, not {suffix or 'no suffix'!r}")
    try:
        import pyarrow  # noqa: F401 - pandas writes Parquet through it
    except ImportError:
        raise ImportError("writing Parquet needs pyarrow: pip install 'plasticlab[tables]' "
                          "(or write .csv)") from None
    frame = frame.copy()
    for col in frame.columns:
        if frame[col].dtype == object and frame[col].map(lambda v: isinstance(v, list | tuple | dict)).any():
            frame[col] = frame[col].map(lambda v: None if v is None else dumps(v))
    return _replace_atomically(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_runs_csv(runs: Sequence[dict], path: str | os.PathLike) -> Path:
    """One row per run — ``run_id``, ``status``, ``seed``, the config flattened (``params`` as
    ``param.<name>``, other nested dicts dotted), the summary metrics, ``code`` — written with
    the standard library's csv module (no pandas needed), atomically."""
    records, columns = [], {"run_id": None, "status": None, "seed": None}
    for run in runs:
        row = {"run_id": run["run_id"], "status": run["status"], "seed": run["seed"]}
        row |= flatten_config(run["config"])
        for key, value in (run.get("summary") or {}).items():
            row[key if key not in row else f"summary.{key}"] = value
        row["code"] = run.get("code")
        columns.update(dict.fromkeys(row))
        records.append(row)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows({k: csv_cell(v) for k, v in r.items()} for r in records)

    return _replace_atomically(path, write)
