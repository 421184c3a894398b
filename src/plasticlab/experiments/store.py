"""The embedded results store: one SQLite database per output directory.

``<out>/results.sqlite`` holds every run of an experiment directory: its config, seed,
manifest, status, summary and per-task metrics. There is no server; the standard library's
``sqlite3`` is the only dependency (pandas only for the DataFrame/CSV exports).

This module holds the store's lifecycle of runs and its queries; the tables, their version and
migration live in :mod:`~plasticlab.experiments.schema`, and how runs become DataFrame and CSV
rows in :mod:`~plasticlab.experiments.run_tables`.

Guarantees, and why they hold:

- **Nothing half-recorded.** A run's metrics, its summary and its status ``'finished'`` are
  written in one transaction (:meth:`ResultStore.finish_run`). SQLite's journal makes that
  transaction all-or-nothing even if the process is killed or the machine loses power in the
  middle, so a reader sees either the finished run with all its metrics or a run that is
  still ``'running'`` with none.
- **Re-running a sweep skips finished runs.** Run ids are content hashes of (config, seed)
  (:meth:`ResultStore.run_id`), so the same run planned again gets the same id and
  :meth:`ResultStore.is_finished` tells the planner to skip it.
- **Nothing finished is ever destroyed.** Every training of a run is an *attempt* with its own
  status, manifest, summary and metrics. Starting a run again adds an attempt and deletes
  nothing; the run's results are those of its newest finished attempt (or, when none has
  finished, its newest attempt). An attempt left ``'running'`` by a killed process is marked
  ``'interrupted'`` when the next attempt starts.
- **Which code made a result is recorded.** Each attempt stores the code identity
  (:func:`~plasticlab.experiments.manifest.code_identity`: the git commit of the training
  code, or the plasticlab version), kept in each run's ``"code"``;
  :func:`~plasticlab.experiments.manifest.from_other_code` finds results made by other code
  than the running one. An attempt that resumes a checkpoint lists, in its manifest's
  ``sittings``, every sitting that trained the run and the first task each trained, so a run
  resumed across code versions is not credited to the last one alone.
- **One writer, many readers.** The database is in WAL mode, so ``plasticlab report`` (or a
  notebook) can read while the sweep driver writes. Only one process should write: with
  several executors the driver collects results and is the only writer.
"""

from __future__ import annotations

import hashlib
import json
import operator
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .manifest import utc_now
from .oserrors import storage_error
from .run_tables import import_pandas, runs_frame, store_task_records, tasks_frame, write_frame_csv
from .schema import SCHEMA_VERSION, STATUSES, dumps, json_default, loads, prepare

if TYPE_CHECKING:  # pandas is optional: imported lazily where it is needed.
    import pandas

__all__ = ["DB_NAME", "SCHEMA_VERSION", "ResultStore", "SchemaVersionError", "StoreError", "STATUSES"]

#: File name of the database inside an output directory.
DB_NAME = "results.sqlite"
CHECKPOINTS = "checkpoints"
"""The results folder's subfolder for the checkpoints of the runs and ensembles in flight."""


class StoreError(ValueError):
    """A results store that cannot be used; the message names the file and what to do."""


class SchemaVersionError(StoreError):
    """The database was written with a schema this version of plasticlab does not know."""


def _canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, floats as their shortest exact repr.

    ``json`` writes floats with ``float.__repr__``, which round-trips exactly, so two configs
    hash equal only if their numbers are bit-identical. Note that ``1`` and ``1.0`` differ.
    """
    return json.dumps(
        obj,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=True,
        default=json_default,
    )


class ResultStore:
    """The results database of one output directory, ``<out_dir>/results.sqlite``.

    Opening creates the directory, the database and its schema as needed. Use it as a context
    manager (or call :meth:`close`). Only one process should write to a store at a time;
    any number may read.

    Lifecycle of a run: :meth:`start_run` (status ``'running'``), then either
    :meth:`finish_run` (``'finished'``, with metrics) or :meth:`fail_run` (``'failed'``,
    with the traceback). A process killed in between leaves the run ``'running'``.
    """

    #: The sqlite file.
    path: Path

    def __init__(self, out_dir: str | os.PathLike) -> None:
        """Open (creating if needed) the store in ``out_dir``.

        Raises :class:`SchemaVersionError` if the database was written by a newer plasticlab,
        and :class:`StoreError` naming the file if it is not a readable SQLite database.
        """
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / DB_NAME
        self._conn: sqlite3.Connection | None = None
        try:
            # isolation_level=None: no implicit transactions; every write below says exactly
            # where its transaction begins and ends. timeout: a reader holding the file briefly
            # (checkpoint) makes the writer wait instead of failing.
            self._conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._configure()
            self._init_schema()
        except sqlite3.DatabaseError as exc:
            self.close()
            if (full_or_unwritable := storage_error(exc, self.path)) is not None:
                raise full_or_unwritable from exc
            raise StoreError(f"{self.path}: cannot open the results store ({exc}); move the file "
                             "away (or restore it from a backup), or use another output directory"
                             ) from exc
        except BaseException:
            self.close()
            raise

    # -- connection plumbing -------------------------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        """The open connection; a clear error instead of an AttributeError after close()."""
        if self._conn is None:
            raise RuntimeError(f"ResultStore({self.path.parent}) is closed")
        return self._conn

    def _configure(self) -> None:
        """Per-connection settings."""
        db = self._db
        # WAL: readers never block the writer nor see a half-written transaction.
        db.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit survives power loss too. Commits are rare (two per run), so the
        # extra fsync costs nothing measurable.
        db.execute("PRAGMA synchronous=FULL")
        # Off by default in SQLite; needed for ON DELETE CASCADE of a run's metrics.
        db.execute("PRAGMA foreign_keys=ON")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed if the block completes, rolled back otherwise.

        BEGIN IMMEDIATE takes the write lock up front, so a second writer waits (up to the
        timeout) at the start rather than failing halfway. BaseException: Ctrl-C in the
        middle must roll back too. A failed COMMIT (a full disk) rolls back as well, so the
        connection is left with no transaction open and the store as it was before. A full
        disk, a read-only store or an I/O error is raised as a
        :class:`~plasticlab.experiments.oserrors.StorageError` naming the file.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    # SQLite may already have rolled back (e.g. on disk full); the original
                    # error is the one worth reporting.
                    pass
            if isinstance(exc, sqlite3.OperationalError) and \
                    (full_or_unwritable := storage_error(exc, self.path)) is not None:
                raise full_or_unwritable from exc
            raise

    def _init_schema(self) -> None:
        """Create the schema on a new database; check the version of an existing one and
        migrate an older one in place (one transaction: all of it or none)."""
        with self._transaction() as db:
            version = prepare(db)
        if version is not None and version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path} was written by a newer plasticlab (schema version {version}; "
                f"this plasticlab reads up to version {SCHEMA_VERSION}). Upgrade plasticlab "
                "or write to another output directory."
            )

    def close(self) -> None:
        """Close the database. Safe to call more than once."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ResultStore:
        """Context-manager entry: the store itself."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Context-manager exit: close the store."""
        self.close()

    def __repr__(self) -> str:
        """``ResultStore('<path>')``."""
        return f"ResultStore({str(self.path)!r})"

    # -- identity ------------------------------------------------------------------------

    @staticmethod
    def run_id(config: dict, seed: int) -> str:
        """A stable id for (config, seed): the first 16 hex digits of a SHA-256.

        The hash is over the canonical JSON (sorted keys, exact float repr) of the config
        without its ``seed`` key, together with ``seed``: the same run planned twice -- in
        another process, on another day, with keys in another order -- gets the same id,
        and any change of a config value or of the seed gives another.
        """
        if not isinstance(config, Mapping):
            raise TypeError(f"config must be a dict, not {type(config).__name__}")
        if isinstance(seed, bool):
            raise TypeError("seed must be an int, not a bool")
        body = {k: v for k, v in config.items() if k != "seed"}
        # operator.index: accept numpy ints, reject floats like 1.5 that int() would truncate.
        text = _canonical_json([body, operator.index(seed)])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    # -- writing -------------------------------------------------------------------------

    def start_run(self, run_id: str, config: dict, manifest: dict, code: str | None = None) -> int:
        """Record that a new attempt at a run has started (status ``'running'``); its number.

        Adds the run (config, seed) if it is new, and an attempt; nothing of an earlier
        attempt is deleted. An earlier attempt still ``'running'`` belonged to a process that
        was killed (one writer per store): it becomes ``'interrupted'``. The seed column is
        taken from ``manifest['seed']`` (else ``config['seed']``); ``code`` identifies the code
        that trains (:func:`~plasticlab.experiments.manifest.code_identity`).
        """
        seed = manifest.get("seed", config.get("seed"))
        with self._transaction() as db:
            db.execute("INSERT INTO runs (run_id, config, seed) VALUES (?, ?, ?) ON CONFLICT (run_id) "
                       "DO NOTHING", (run_id, dumps(config), None if seed is None else int(seed)))
            db.execute("UPDATE attempts SET status = 'interrupted', error = ? WHERE run_id = ? AND "
                       "status = 'running'", ("the process training it stopped (killed?) before it "
                                              "finished; a later attempt took over", run_id))
            cursor = db.execute("INSERT INTO attempts (run_id, status, code, manifest) VALUES "
                                "(?, 'running', ?, ?)", (run_id, code, dumps(manifest)))
            return int(cursor.lastrowid)

    def _attempt(self, db: sqlite3.Connection, run_id: str, attempt: int | None) -> tuple[int, dict]:
        """The attempt (default: the run's newest) and its manifest; KeyError if none."""
        if attempt is None:
            row = db.execute("SELECT attempt, manifest FROM attempts WHERE run_id = ? "
                             "ORDER BY attempt DESC LIMIT 1", (run_id,)).fetchone()
        else:
            row = db.execute("SELECT attempt, manifest FROM attempts WHERE run_id = ? AND attempt = ?",
                             (run_id, attempt)).fetchone()
        if row is None:
            raise KeyError(f"run {run_id!r} is not in {self.path} (call start_run first)")
        return row[0], json.loads(row[1])

    def finish_run(
        self,
        run_id: str,
        summary: dict,
        task_metrics: dict[str, list],
        manifest_update: dict | None = None,
        attempt: int | None = None,
    ) -> None:
        """Record an attempt's results and mark it ``'finished'``, all in ONE transaction.

        ``attempt`` defaults to the run's newest. ``task_metrics`` maps a metric name to a list
        indexed by task; an entry may be a number, a list of numbers (e.g. srank per layer) or
        None (not measured on that task). ``summary`` is a dict of run-level results (e.g.
        ``total_online_accuracy``). ``manifest_update`` is merged into the stored manifest,
        and ``end_time`` (UTC, ISO 8601) is set. If anything fails, nothing of this call is
        stored and the attempt stays as it was (``'running'``).
        """
        # Encode before the transaction: a value that cannot be stored is the caller's bug
        # and should fail without ever taking the write lock.
        rows = _metric_rows(task_metrics)
        summary_text = dumps(summary)
        update = dict(manifest_update or {})

        with self._transaction() as db:
            number, manifest = self._attempt(db, run_id, attempt)
            manifest.update(update)
            manifest["end_time"] = update.get("end_time", utc_now())
            # Replace, not add to: a finish_run repeated for the same attempt must not mix two
            # sets of metrics.
            db.execute("DELETE FROM task_metrics WHERE attempt = ?", (number,))
            db.executemany(
                "INSERT INTO task_metrics (attempt, task, metric, value) VALUES (?, ?, ?, ?)",
                [(number, *row) for row in rows],
            )
            db.execute(
                "UPDATE attempts SET status = 'finished', summary = ?, manifest = ?, error = NULL "
                "WHERE attempt = ?",
                (summary_text, dumps(manifest), number),
            )

    def fail_run(self, run_id: str, error: str, attempt: int | None = None) -> None:
        """Mark an attempt (default: the run's newest) ``'failed'`` with the error text
        (typically the full traceback); ``end_time`` is set in its manifest. Earlier attempts
        are untouched. Raises KeyError if the run was never started."""
        self._end(run_id, "failed", error, attempt)

    def interrupt_run(self, run_id: str, reason: str, attempt: int | None = None) -> None:
        """Mark an attempt (default: the run's newest) ``'interrupted'``: stopped before it
        finished, resumable from its checkpoint; ``reason`` says by what."""
        self._end(run_id, "interrupted", reason, attempt)

    def _end(self, run_id: str, status: str, error: str, attempt: int | None) -> None:
        """End a running attempt as ``status``; an attempt that already ended is left as it is
        (a finished attempt never becomes failed or interrupted)."""
        with self._transaction() as db:
            number, manifest = self._attempt(db, run_id, attempt)
            if db.execute("SELECT status FROM attempts WHERE attempt = ?", (number,)).fetchone()[0] \
                    != "running":
                return
            manifest["end_time"] = utc_now()
            db.execute("DELETE FROM task_metrics WHERE attempt = ?", (number,))
            db.execute("UPDATE attempts SET status = ?, error = ?, summary = NULL, manifest = ? "
                       "WHERE attempt = ?", (status, str(error), dumps(manifest), number))

    def add_finished(self, runs: list[dict]) -> list[int]:
        """Add each of ``runs`` as a finished attempt that was trained elsewhere (an import:
        :mod:`~plasticlab.experiments.importer`), all in ONE transaction; their numbers.

        Each is a dict with ``run_id``, ``config``, ``seed``, ``manifest``, ``summary``,
        ``code`` (as :meth:`runs` gives them) and ``task_metrics`` (as :meth:`task_metrics`
        gives them), stored as given: unlike :meth:`finish_run`, no ``end_time`` is stamped. A
        run new to the store is added; an attempt of the run still ``'running'`` belonged to a
        killed process and becomes ``'interrupted'``, as when a new attempt starts.
        """
        encoded = [(r, dumps(r["config"]), dumps(r["manifest"]), dumps(r["summary"]),
                    _metric_rows(r["task_metrics"])) for r in runs]
        numbers = []
        with self._transaction() as db:
            for run, config, manifest, summary, rows in encoded:
                rid, seed = run["run_id"], run["seed"]
                db.execute("INSERT INTO runs (run_id, config, seed) VALUES (?, ?, ?) ON CONFLICT "
                           "(run_id) DO NOTHING", (rid, config, None if seed is None else int(seed)))
                db.execute("UPDATE attempts SET status = 'interrupted', error = ? WHERE run_id = ? "
                           "AND status = 'running'", ("the process training it stopped (killed?) "
                                                      "before it finished; an imported finished "
                                                      "attempt took over", rid))
                number = int(db.execute(
                    "INSERT INTO attempts (run_id, status, code, manifest, summary) VALUES "
                    "(?, 'finished', ?, ?, ?)", (rid, run["code"], manifest, summary)).lastrowid)
                db.executemany("INSERT INTO task_metrics (attempt, task, metric, value) VALUES "
                               "(?, ?, ?, ?)", [(number, *row) for row in rows])
                numbers.append(number)
        return numbers

    # -- reading -------------------------------------------------------------------------

    def status(self, run_id: str) -> str | None:
        """The status of the run's counting attempt (its newest finished one, else its
        newest): ``'running'``, ``'finished'``, ``'failed'`` or ``'interrupted'``; None if
        the run is unknown."""
        row = self._db.execute("SELECT status FROM counting WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else row[0]

    def is_finished(self, run_id: str) -> bool:
        """Whether the run has a finished attempt (so complete results): sweeps skip these."""
        return self.status(run_id) == "finished"

    def runs(self, status: str | None = None) -> list[dict]:
        """Every run (or those whose counting attempt has ``status``), in the order they were
        first started, each as its counting attempt: the newest finished one, else the newest.

        Each is a dict with keys ``run_id``, ``status``, ``config``, ``seed``, ``manifest``,
        ``summary`` (None unless finished), ``error`` (None unless failed or interrupted),
        ``attempt`` (its number), ``attempts`` (how many the run has) and ``code``.
        """
        sql = ("SELECT run_id, status, config, seed, manifest, summary, error, attempt, attempts, code "
               "FROM counting")
        params: tuple[str, ...] = ()
        if status is not None:
            if status not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES} or None, not {status!r}")
            sql += " WHERE status = ?"
            params = (status,)
        sql += " ORDER BY run_order"
        return [_run_row(row) for row in self._db.execute(sql, params)]

    def attempts(self, run_id: str) -> list[dict]:
        """Every attempt at the run, oldest first (keys as :meth:`runs`'s)."""
        rows = self._db.execute(
            "SELECT r.run_id, a.status, r.config, r.seed, a.manifest, a.summary, a.error, a.attempt, "
            "(SELECT COUNT(*) FROM attempts WHERE run_id = r.run_id), a.code FROM attempts AS a "
            "JOIN runs AS r USING (run_id) WHERE r.run_id = ? ORDER BY a.attempt", (run_id,))
        return [_run_row(row) for row in rows]

    def attempt_times(self) -> list[str]:
        """Every attempt's start and end time (UTC, ISO 8601), as its manifest records them:
        when the store last saw training begin or end, whoever reads it since."""
        times = []
        for (text,) in self._db.execute("SELECT manifest FROM attempts"):
            manifest = json.loads(text)
            times += [manifest[k] for k in ("start_time", "end_time") if manifest.get(k)]
        return times

    def running_attempts(self) -> list[dict]:
        """Every attempt still marked ``'running'`` (a sweep in progress, or a killed one)."""
        rows = self._db.execute(
            "SELECT r.run_id, a.status, r.config, r.seed, a.manifest, a.summary, a.error, a.attempt, "
            "(SELECT COUNT(*) FROM attempts WHERE run_id = r.run_id), a.code FROM attempts AS a "
            "JOIN runs AS r USING (run_id) WHERE a.status = 'running' ORDER BY a.attempt")
        return [_run_row(row) for row in rows]

    def task_metrics(self, run_id: str) -> dict[str, list]:
        """The run's per-task metrics (of its counting attempt): metric name -> list indexed
        by task.

        Values are decoded from JSON (numbers, lists of numbers, or None). A task missing
        for a metric reads as None. Empty for a run that has not finished; KeyError for a run
        that is not in the store.
        """
        db = self._db
        row = db.execute("SELECT attempt FROM counting WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise KeyError(f"run {run_id!r} is not in {self.path}")
        rows = db.execute(
            "SELECT metric, task, value FROM task_metrics WHERE attempt = ? ORDER BY metric, task",
            (row[0],),
        ).fetchall()
        out: dict[str, list] = {}
        for metric, task, value in rows:
            values = out.setdefault(metric, [])
            values.extend([None] * (task + 1 - len(values)))
            values[task] = json.loads(value)
        return out

    # -- export --------------------------------------------------------------------------

    def to_dataframe(self, kind: str = "runs") -> pandas.DataFrame:
        """The store as a pandas DataFrame.

        ``kind='runs'``: one row per run. Columns: ``run_id``, ``status``, ``seed``; the
        config keys flattened (``params`` as ``param.<name>``, other nested dicts as
        ``<key>.<sub>``; the config's own ``seed`` is dropped); the summary metrics (prefixed
        ``summary.`` only if a name clashes with another column); then ``start_time``,
        ``end_time``, ``error`` and ``code`` (what trained it: ``git:<commit>`` or a version).

        ``kind='tasks'``: long format, one number a row — per finished run, metric, task and,
        for a list-valued metric (srank per hidden layer), entry: columns ``run_id, seed,
        problem, method, task, metric, index, value``
        (:func:`~plasticlab.experiments.run_tables.tasks_frame`).
        """
        pd = import_pandas()
        if kind == "runs":
            return runs_frame(pd, self.runs())
        if kind == "tasks":
            return tasks_frame(pd, store_task_records(self._task_metric_rows()))
        raise ValueError(f"kind must be 'runs' or 'tasks', not {kind!r}")

    def _task_metric_rows(self) -> list[tuple]:
        """Every metric of every run's counting attempt as ``(run_id, seed, config, task,
        metric, value)`` (config and value as JSON text), in run order, then by metric and
        task."""
        # One query, so the frame is one consistent snapshot even while a writer commits.
        return self._db.execute(
            """
            SELECT c.run_id, c.seed, c.config, m.task, m.metric, m.value
            FROM task_metrics AS m JOIN counting AS c USING (attempt)
            ORDER BY c.run_order, m.metric, m.task
            """
        ).fetchall()

    def export_csv(self, path: str | os.PathLike, kind: str = "runs") -> Path:
        """Write :meth:`to_dataframe` (``kind``) to a CSV file; returns its path (Parquet, and
        exports as well as stores: :mod:`plasticlab.experiments.tables`).

        List- and dict-valued cells (a config's lists) are written as JSON text so the file
        parses back unambiguously. The file is written to a temporary name and renamed, so a
        reader never sees a half-written CSV.
        """
        return write_frame_csv(self.to_dataframe(kind), path)


def _metric_rows(task_metrics: dict[str, list]) -> list[tuple[int, str, str]]:
    """A run's per-task metrics as the store's rows ``(task, metric, value as JSON text)``; a
    TypeError for a metric that is not a list indexed by task."""
    rows: list[tuple[int, str, str]] = []
    for metric, values in task_metrics.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError(
                f"task metric {metric!r} must be a list indexed by task, "
                f"not {type(values).__name__}"
            )
        values = values.tolist() if hasattr(values, "tolist") else values
        rows.extend((task, str(metric), dumps(v)) for task, v in enumerate(values))
    return rows


def _run_row(row: tuple) -> dict:
    """A run (or attempt) row of the database as the dict :meth:`ResultStore.runs` returns."""
    run_id, status, config, seed, manifest, summary, error, attempt, attempts, code = row
    return {"run_id": run_id, "status": status, "config": json.loads(config), "seed": seed,
            "manifest": json.loads(manifest), "summary": loads(summary), "error": error,
            "attempt": attempt, "attempts": attempts, "code": code}
