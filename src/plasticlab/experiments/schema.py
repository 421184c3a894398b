"""The results store's schema: its tables, its version, the migration of older stores, and how
values are stored (JSON text).

:class:`~plasticlab.experiments.store.ResultStore` runs :func:`prepare` once per opening,
inside its first write transaction, so a store is either fully initialised (or migrated) or
not at all. The tables:

- ``runs``: one row per run, its identity (run id, config, seed);
- ``attempts``: one row per training of a run: status, code identity, manifest, summary, error;
- ``task_metrics``: an attempt's metrics, one row per (metric, task), the value as JSON text;
- ``counting`` (a view): the attempt that counts for each run — its newest finished one, else
  its newest.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

__all__ = ["SCHEMA_VERSION", "STATUSES", "dumps", "json_default", "loads", "prepare"]

#: Version of the schema this code writes. Bump it (and add a migration to :func:`prepare`)
#: whenever a table or column changes meaning.
SCHEMA_VERSION = 2

#: The states an attempt (and so a run) can be in. 'interrupted': stopped by a signal or a
#: kill; its checkpoint (if any) resumes it.
STATUSES = ("running", "finished", "failed", "interrupted")

# Executed one by one inside a single transaction (not with executescript, which commits
# first), so a store is either fully initialised or not at all.
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS schema_version (
        version INTEGER NOT NULL
    )
    """,
    # One row per run: its identity. Its results live in its attempts.
    """
    CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        config TEXT NOT NULL,  -- JSON
        seed   INTEGER
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS attempts (
        attempt  INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id   TEXT NOT NULL REFERENCES runs (run_id),
        status   TEXT NOT NULL
                 CHECK (status IN ('running', 'finished', 'failed', 'interrupted')),
        code     TEXT,           -- what trained it: git commit or plasticlab version
        manifest TEXT NOT NULL,  -- JSON
        summary  TEXT,           -- JSON, set by finish_run
        error    TEXT            -- traceback or reason, set by fail_run / interrupt_run
    )
    """,
    "CREATE INDEX IF NOT EXISTS attempts_by_run ON attempts (run_id, status)",
    # value is JSON text so a metric can be a float or a list of floats (srank per layer).
    """
    CREATE TABLE IF NOT EXISTS task_metrics (
        attempt INTEGER NOT NULL REFERENCES attempts (attempt) ON DELETE CASCADE,
        task    INTEGER NOT NULL CHECK (task >= 0),
        metric  TEXT NOT NULL,
        value   TEXT NOT NULL,
        PRIMARY KEY (attempt, metric, task)
    ) WITHOUT ROWID
    """,
    # The attempt that counts for each run: its newest finished one, else its newest.
    """
    CREATE VIEW IF NOT EXISTS counting AS
    SELECT r.rowid AS run_order, r.run_id, r.config, r.seed, a.attempt, a.status, a.code,
           a.manifest, a.summary, a.error,
           (SELECT COUNT(*) FROM attempts WHERE run_id = r.run_id) AS attempts
    FROM runs AS r JOIN attempts AS a ON a.attempt = COALESCE(
        (SELECT MAX(attempt) FROM attempts WHERE run_id = r.run_id AND status = 'finished'),
        (SELECT MAX(attempt) FROM attempts WHERE run_id = r.run_id))
    """,
)

# Schema 1 kept one row per run (status, manifest, summary, error in it) and metrics by run.
_MIGRATE_1_TO_2 = (
    "ALTER TABLE runs RENAME TO runs_v1",
    "ALTER TABLE task_metrics RENAME TO task_metrics_v1",
    "DROP INDEX IF EXISTS runs_by_status",
    *_SCHEMA[1:],
    "INSERT INTO runs (rowid, run_id, config, seed) SELECT rowid, run_id, config, seed FROM runs_v1",
    """
    INSERT INTO attempts (attempt, run_id, status, code, manifest, summary, error)
    SELECT rowid, run_id, status, NULL, manifest, summary, error FROM runs_v1
    """,
    """
    INSERT INTO task_metrics (attempt, task, metric, value)
    SELECT r.rowid, m.task, m.metric, m.value FROM task_metrics_v1 AS m JOIN runs_v1 AS r USING (run_id)
    """,
    "DROP TABLE task_metrics_v1",
    "DROP TABLE runs_v1",
    "UPDATE schema_version SET version = 2",
)


def prepare(db: sqlite3.Connection) -> int | None:
    """Create the schema on a new database, or migrate an older one in place; return the
    version the database had (None when it was new).

    Call it inside a write transaction, so that the whole of it is committed or none. A version
    above :data:`SCHEMA_VERSION` is returned untouched: the caller refuses the database.
    """
    exists = db.execute("SELECT name FROM sqlite_master WHERE name = 'schema_version'").fetchone()
    version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] if exists else None
    if version is None:
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    elif version == 1:
        for statement in _MIGRATE_1_TO_2:
            db.execute(statement)
    return version


def json_default(obj: Any) -> Any:
    """Encode numpy scalars/arrays and torch tensors as plain numbers and lists.

    Metrics computed on tensors come back as numpy or torch values; accepting them here spares
    every caller a conversion, and ``tolist()`` is exact (float32 -> Python float is exact).
    """
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    raise TypeError(
        f"object of type {type(obj).__name__} is not JSON serializable "
        "(results, configs and manifests must be plain numbers, strings, lists and dicts)"
    )


def dumps(obj: Any) -> str:
    """JSON text for storage. NaN/inf are allowed: a diverged run's loss is a real result."""
    return json.dumps(obj, default=json_default, allow_nan=True)


def loads(text: str | None) -> Any:
    """Decode stored JSON text; None stays None."""
    return None if text is None else json.loads(text)
