"""Tests of the embedded results store and the run manifest."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import WITHOUT_PACKAGE_IMPORTS
from plasticlab.experiments import manifest as manifest_module
from plasticlab.experiments.manifest import build_manifest, from_other_code, trains_as_this_code
from plasticlab.experiments.store import DB_NAME, SCHEMA_VERSION, ResultStore, SchemaVersionError, StoreError

CONFIG = {
    "problem": "permuted_mnist",
    "method": "l2_init",
    "params": {"strength": 0.01},
    "optimizer": "adam",
    "lr": 0.001,
    "tasks": 3,
    "steps_per_task": 625,
    "batch_size": 16,
}

METRICS = {
    "online_accuracy": [0.91, 0.88, 0.86],
    "srank": [[40.0, 31.5], [39.0, 30.25], [38.5, 29.0]],
}

SUMMARY = {"total_online_accuracy": 0.8833333333333333}


def _manifest(seed: int = 0) -> dict:
    """A manifest as the engine would write it (plain dict, no git lookups needed)."""
    return {"seed": seed, "start_time": "2024-01-01T00:00:00+00:00"}


def _started(store: ResultStore, config: dict = CONFIG, seed: int = 0) -> str:
    """Start a run of ``config`` and ``seed`` and return its id."""
    run_id = ResultStore.run_id(config, seed)
    store.start_run(run_id, {**config, "seed": seed}, _manifest(seed))
    return run_id


class _FailOnRunsUpdate:
    """A connection wrapper that calls ``hook`` instead of executing the final UPDATE of attempts.

    finish_run writes the metrics first and flips the status last, so this interrupts it in
    the middle of its transaction, after the metric rows were inserted.
    """

    def __init__(self, conn: sqlite3.Connection, hook) -> None:
        self._conn = conn
        self._hook = hook

    def execute(self, sql: str, *args):
        if sql.strip().startswith("UPDATE attempts"):
            self._hook()
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._conn, name)


# -- run ids ------------------------------------------------------------------------------


def test_run_id_is_stable_16_hex_and_ignores_key_order_and_config_seed():
    run_id = ResultStore.run_id(CONFIG, 3)
    assert re.fullmatch(r"[0-9a-f]{16}", run_id)
    assert ResultStore.run_id(dict(reversed(list(CONFIG.items()))), 3) == run_id
    # The seed is an argument; a 'seed' key inside the config does not change the id.
    assert ResultStore.run_id({**CONFIG, "seed": 99}, 3) == run_id


def test_run_id_is_a_pinned_constant_in_a_fresh_process():
    # Pinned value, computed in another interpreter (hash randomisation differs there): if
    # this changes, every existing store's finished runs would be re-run by the next sweep.
    code = (
        WITHOUT_PACKAGE_IMPORTS + "from plasticlab.experiments.store import ResultStore;"
        f"print(ResultStore.run_id({CONFIG!r}, 3))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fa6534d2426554b8"
    assert ResultStore.run_id(CONFIG, 3) == "fa6534d2426554b8"


def test_run_id_changes_with_seed_and_with_any_config_value():
    base = ResultStore.run_id(CONFIG, 0)
    assert ResultStore.run_id(CONFIG, 1) != base
    assert ResultStore.run_id({**CONFIG, "lr": 0.0010000000000000002}, 0) != base
    assert ResultStore.run_id({**CONFIG, "params": {"strength": 0.1}}, 0) != base
    assert ResultStore.run_id({**CONFIG, "method": "l2"}, 0) != base


def test_run_id_rejects_non_integer_seed():
    with pytest.raises(TypeError):
        ResultStore.run_id(CONFIG, 1.5)  # type: ignore[arg-type]


# -- lifecycle ----------------------------------------------------------------------------


def test_store_creates_directory_and_database(tmp_path):
    out = tmp_path / "a" / "b"
    with ResultStore(out) as store:
        assert store.path == out / DB_NAME
        assert store.path.is_file()
        mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_finish_round_trips_metrics_including_list_valued_ones(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store, seed=7)
        assert store.status(run_id) == "running"
        store.finish_run(run_id, SUMMARY, METRICS, manifest_update={"steps_per_s": 123.0})

    with ResultStore(tmp_path) as store:  # reopened: the data is on disk
        assert store.status(run_id) == "finished"
        assert store.is_finished(run_id)
        assert store.task_metrics(run_id) == METRICS
        (run,) = store.runs()
        assert run["run_id"] == run_id
        assert run["seed"] == 7
        assert run["config"] == {**CONFIG, "seed": 7}
        assert run["summary"] == SUMMARY
        assert run["error"] is None
        assert run["manifest"]["steps_per_s"] == 123.0
        assert run["manifest"]["start_time"] == "2024-01-01T00:00:00+00:00"
        assert run["manifest"]["end_time"].endswith("+00:00")


def test_finish_accepts_numpy_values_and_missing_tasks(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        metrics = {
            "acc": np.array([0.5, 0.25], dtype=np.float32),
            "srank": [None, np.array([3.0, 2.0])],
        }
        store.finish_run(run_id, {"total": np.float32(0.375)}, metrics)
        assert store.task_metrics(run_id) == {"acc": [0.5, 0.25], "srank": [None, [3.0, 2.0]]}
        assert store.runs()[0]["summary"] == {"total": 0.375}


def test_nan_metric_is_stored_and_read_back(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.finish_run(run_id, {"loss": float("nan")}, {"loss": [1.0, float("inf")]})
        assert store.task_metrics(run_id)["loss"] == [1.0, float("inf")]


def test_runs_filters_by_status(tmp_path):
    with ResultStore(tmp_path) as store:
        finished = _started(store, seed=0)
        store.finish_run(finished, SUMMARY, METRICS)
        failed = _started(store, seed=1)
        store.fail_run(failed, "boom")
        running = _started(store, seed=2)

        assert [r["run_id"] for r in store.runs()] == [finished, failed, running]
        assert [r["run_id"] for r in store.runs("finished")] == [finished]
        assert [r["run_id"] for r in store.runs(status="failed")] == [failed]
        assert [r["run_id"] for r in store.runs("running")] == [running]
        with pytest.raises(ValueError):
            store.runs("done")


def test_started_but_unfinished_run_reads_as_running_from_a_second_store(tmp_path):
    # The first store is never closed and never finishes the run: as if its process died.
    first = ResultStore(tmp_path)
    run_id = _started(first)

    with ResultStore(tmp_path) as second:
        assert second.status(run_id) == "running"
        assert not second.is_finished(run_id)
        assert second.task_metrics(run_id) == {}
        assert second.runs("finished") == []
    first.close()


def test_unknown_run_has_no_status(tmp_path):
    with ResultStore(tmp_path) as store:
        assert store.status("0" * 16) is None
        assert not store.is_finished("0" * 16)
        with pytest.raises(KeyError):
            store.task_metrics("0" * 16)
        with pytest.raises(KeyError):
            store.finish_run("0" * 16, SUMMARY, METRICS)
        with pytest.raises(KeyError):
            store.fail_run("0" * 16, "boom")


def test_failing_run_records_its_error(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        try:
            raise RuntimeError("diverged at task 3")
        except RuntimeError:
            import traceback

            store.fail_run(run_id, traceback.format_exc())
        assert store.status(run_id) == "failed"
        assert not store.is_finished(run_id)
        (run,) = store.runs("failed")
        assert "RuntimeError: diverged at task 3" in run["error"]
        assert "Traceback" in run["error"]
        assert run["summary"] is None
        assert "end_time" in run["manifest"]


def test_restarting_a_failed_run_clears_its_error(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.fail_run(run_id, "boom")
        _started(store)
        (run,) = store.runs()
        assert run["status"] == "running"
        assert run["error"] is None
        store.finish_run(run_id, SUMMARY, METRICS)
        assert store.is_finished(run_id)


def test_restarting_a_finished_run_keeps_its_results_until_the_new_attempt_finishes(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.finish_run(run_id, SUMMARY, METRICS)
        _started(store)  # a re-run: a second attempt
        assert store.status(run_id) == "finished"
        assert store.task_metrics(run_id) == METRICS
        assert store.runs()[0]["summary"] == SUMMARY
        assert [a["status"] for a in store.attempts(run_id)] == ["finished", "running"]
        store.fail_run(run_id, "boom")  # the new attempt fails: the old results still count
        assert store.task_metrics(run_id) == METRICS
        assert [a["status"] for a in store.attempts(run_id)] == ["finished", "failed"]


def test_the_newest_finished_attempt_counts(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.finish_run(run_id, SUMMARY, METRICS)
        _started(store)
        store.finish_run(run_id, {"total_online_accuracy": 0.5}, {"online_accuracy": [0.5]})
        (run,) = store.runs()
        assert run["summary"] == {"total_online_accuracy": 0.5}
        assert run["attempts"] == 2 and run["attempt"] == store.attempts(run_id)[-1]["attempt"]
        assert store.task_metrics(run_id) == {"online_accuracy": [0.5]}
        assert len(store.to_dataframe("tasks")) == 1


def test_an_attempt_left_running_by_a_killed_process_becomes_interrupted_when_the_next_starts(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        _started(store)
        first, second = store.attempts(run_id)
        assert first["status"] == "interrupted" and "stopped" in first["error"]
        assert second["status"] == "running"
        store.interrupt_run(run_id, "SIGINT")
        assert store.status(run_id) == "interrupted"
        assert store.runs("interrupted")[0]["error"] == "SIGINT"


def test_runs_made_by_other_code_are_found(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest_module, "code_identity", lambda: "plasticlab 9.9")
    manifest_module.trains_as_this_code.cache_clear()
    with ResultStore(tmp_path) as store:
        old = ResultStore.run_id(CONFIG, 0)
        store.start_run(old, CONFIG, _manifest(0), code="plasticlab 9.8")
        store.finish_run(old, SUMMARY, METRICS)
        new = ResultStore.run_id(CONFIG, 1)
        store.start_run(new, CONFIG, _manifest(1), code="plasticlab 9.9")
        store.finish_run(new, SUMMARY, METRICS)
        assert [r["run_id"] for r in from_other_code(store.runs("finished"))] == [old]
    manifest_module.trains_as_this_code.cache_clear()


@pytest.fixture
def package_history(tmp_path, monkeypatch):
    """A git repository with a package directory ``pkg/`` and three commits — the package
    written, then a docs-only change, then a change to the package — standing in for
    plasticlab's own checkout (whose history a shallow clone may lack): ``{"first", "docs",
    "package"}`` → commit. The code running now is the docs-only commit's."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                              check=True, capture_output=True, text=True).stdout.strip()

    def commit(path: str, text: str) -> str:
        (repo / path).write_text(text)
        git("add", "-A")
        git("commit", "-q", "-m", path)
        return git("rev-parse", "HEAD")

    git("init", "-q")
    commits = {"first": commit("pkg/a.py", "x = 1\n"), "docs": commit("README.md", "docs\n"),
               "package": commit("pkg/a.py", "x = 2\n")}
    monkeypatch.setattr(manifest_module, "_PACKAGE_DIR", repo / "pkg")
    monkeypatch.setattr(manifest_module, "code_identity", lambda: f"git:{commits['docs']}")
    manifest_module.trains_as_this_code.cache_clear()
    yield commits
    manifest_module.trains_as_this_code.cache_clear()


@pytest.mark.skipif(manifest_module._git("--version") is None, reason="needs git (CI has it)")
def test_a_commit_that_left_the_package_as_it_is_trains_as_this_code(package_history):
    """A commit that changes only docs, tests or benchmarks does not make its parent's runs
    "other code"; a commit that changes the package does, and so do a commit the checkout
    lacks, a dirty tree and an unrecorded code."""
    first, docs, package = (package_history[k] for k in ("first", "docs", "package"))
    assert trains_as_this_code(f"git:{docs}")
    assert trains_as_this_code(f"git:{first}")  # the docs-only commit left the package as it was
    assert not trains_as_this_code(f"git:{package}")  # the package changed after
    assert not trains_as_this_code(f"git:{first}+dirty")
    assert not trains_as_this_code("git:" + "0" * 40)  # a commit this checkout lacks
    assert not trains_as_this_code(None) and not trains_as_this_code("plasticlab 0.1.0")


_SCHEMA_1 = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "INSERT INTO schema_version VALUES (1)",
    "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, config TEXT NOT NULL, "
    "seed INTEGER, manifest TEXT NOT NULL, summary TEXT, error TEXT)",
    "CREATE INDEX runs_by_status ON runs (status)",
    "CREATE TABLE task_metrics (run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE, "
    "task INTEGER NOT NULL, metric TEXT NOT NULL, value TEXT NOT NULL, "
    "PRIMARY KEY (run_id, metric, task)) WITHOUT ROWID",
)


def test_a_store_of_schema_1_is_migrated_with_every_result(tmp_path):
    conn = sqlite3.connect(tmp_path / DB_NAME)
    for statement in _SCHEMA_1:
        conn.execute(statement)
    conn.execute("INSERT INTO runs VALUES ('a', 'finished', ?, 0, ?, ?, NULL)",
                 (json.dumps(CONFIG), json.dumps(_manifest(0)), json.dumps(SUMMARY)))
    conn.execute("INSERT INTO runs VALUES ('b', 'failed', ?, 1, ?, NULL, 'boom')",
                 (json.dumps(CONFIG), json.dumps(_manifest(1))))
    conn.execute("INSERT INTO task_metrics VALUES ('a', 0, 'online_accuracy', '0.9')")
    conn.commit()
    conn.close()
    with ResultStore(tmp_path) as store:
        assert [(r["run_id"], r["status"], r["summary"], r["error"]) for r in store.runs()] == [
            ("a", "finished", SUMMARY, None), ("b", "failed", None, "boom")]
        assert store.task_metrics("a") == {"online_accuracy": [0.9]}
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(2,)]
    conn.close()


def test_finish_is_atomic_when_it_fails_midway(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)

        def explode():
            # Metrics are inserted by now, inside the open transaction.
            n = store._conn._conn.execute("SELECT COUNT(*) FROM task_metrics").fetchone()[0]
            assert n == 6
            raise OSError("disk full")

        real = store._conn
        store._conn = _FailOnRunsUpdate(real, explode)  # type: ignore[assignment]
        with pytest.raises(OSError, match="disk full"):
            store.finish_run(run_id, SUMMARY, METRICS)
        store._conn = real

        assert store.status(run_id) == "running"
        assert store.task_metrics(run_id) == {}
        assert store._db.execute("SELECT COUNT(*) FROM task_metrics").fetchone()[0] == 0
        assert store.runs()[0]["summary"] is None
        assert "end_time" not in store.runs()[0]["manifest"]

        # The store is still usable: the next finish succeeds.
        store.finish_run(run_id, SUMMARY, METRICS)
        assert store.task_metrics(run_id) == METRICS


def test_finish_is_atomic_when_the_process_is_killed_midway(tmp_path):
    # A real kill: the child dies with os._exit (no cleanup, no commit) in the middle of the
    # finish_run transaction, after the metric rows were inserted.
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_store import CONFIG, METRICS, SUMMARY, _FailOnRunsUpdate, _started
        from plasticlab.experiments.store import ResultStore

        store = ResultStore({str(tmp_path)!r})
        run_id = _started(store)
        store._conn = _FailOnRunsUpdate(store._conn, lambda: os._exit(3))
        store.finish_run(run_id, SUMMARY, METRICS)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr

    with ResultStore(tmp_path) as store:
        run_id = ResultStore.run_id(CONFIG, 0)
        assert store.status(run_id) == "running"
        assert store.task_metrics(run_id) == {}


def test_unstorable_metric_value_is_rejected_before_anything_is_written(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        with pytest.raises(TypeError):
            store.finish_run(run_id, SUMMARY, {"acc": [0.5], "bad": [object()]})
        with pytest.raises(TypeError):
            store.finish_run(run_id, SUMMARY, {"acc": 0.5})  # type: ignore[dict-item]
        assert store.status(run_id) == "running"
        assert store.task_metrics(run_id) == {}


# -- schema -------------------------------------------------------------------------------


def test_database_of_newer_schema_version_is_refused(tmp_path):
    ResultStore(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    with pytest.raises(SchemaVersionError, match="newer plasticlab"):
        ResultStore(tmp_path)


def test_reopening_keeps_a_single_schema_version_row(tmp_path):
    ResultStore(tmp_path).close()
    ResultStore(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    conn.close()


def test_non_sqlite_file_is_an_error_naming_it(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(StoreError, match=f"{DB_NAME}.*move the file away"):
        ResultStore(tmp_path)


def test_closed_store_says_so(tmp_path):
    store = ResultStore(tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        store.status("x")


# -- export -------------------------------------------------------------------------------


@pytest.fixture
def filled_store(tmp_path):
    """A store with two finished runs (two seeds) and one failed run."""
    store = ResultStore(tmp_path / "out")
    for seed in (0, 1):
        run_id = _started(store, seed=seed)
        store.finish_run(run_id, SUMMARY, METRICS)
    failed = _started(store, {**CONFIG, "method": "l2"}, seed=0)
    store.fail_run(failed, "boom")
    yield store
    store.close()


def test_runs_dataframe_has_flattened_config_and_summary_columns(filled_store):
    df = filled_store.to_dataframe()
    assert len(df) == 3
    assert list(df.columns) == [
        "run_id",
        "status",
        "seed",
        "problem",
        "method",
        "param.strength",
        "optimizer",
        "lr",
        "tasks",
        "steps_per_task",
        "batch_size",
        "total_online_accuracy",
        "start_time",
        "end_time",
        "error",
        "code",
    ]
    assert list(df["seed"]) == [0, 1, 0]
    assert list(df["status"]) == ["finished", "finished", "failed"]
    assert df["param.strength"].tolist() == [0.01] * 3
    assert df.loc[0, "total_online_accuracy"] == SUMMARY["total_online_accuracy"]
    assert df.loc[2, "error"] == "boom"


def test_summary_key_clashing_with_a_config_column_is_prefixed(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.finish_run(run_id, {"lr": 0.5, "status": "x"}, {})
        df = store.to_dataframe()
        assert df.loc[0, "lr"] == CONFIG["lr"]
        assert df.loc[0, "summary.lr"] == 0.5
        assert df.loc[0, "summary.status"] == "x"
        assert df.loc[0, "status"] == "finished"


def test_tasks_dataframe_is_long_format_one_number_a_row(filled_store):
    df = filled_store.to_dataframe("tasks")
    assert list(df.columns) == ["run_id", "seed", "problem", "method", "task", "metric", "index", "value"]
    # 2 finished runs x (3 tasks of accuracy + 3 tasks x 2 layers of srank); the failed run has none.
    assert len(df) == 18
    assert set(df["method"]) == {"l2_init"}
    acc = df[(df["seed"] == 1) & (df["metric"] == "online_accuracy")]
    assert acc["task"].tolist() == [0, 1, 2]
    assert acc["index"].isna().all()
    assert acc["value"].tolist() == METRICS["online_accuracy"]
    srank = df[(df["seed"] == 0) & (df["metric"] == "srank")]
    assert srank["index"].tolist() == [0, 1] * 3  # the hidden layer
    assert srank["value"].tolist() == [v for per_layer in METRICS["srank"] for v in per_layer]
    assert str(df["value"].dtype) == "float64"


def test_empty_store_exports_empty_frames_with_columns(tmp_path):
    with ResultStore(tmp_path) as store:
        assert store.to_dataframe().empty
        assert "run_id" in store.to_dataframe().columns
        assert list(store.to_dataframe("tasks").columns)[0] == "run_id"
        with pytest.raises(ValueError):
            store.to_dataframe("nope")


def test_csv_export_writes_runs_and_tasks(filled_store, tmp_path):
    runs_csv = filled_store.export_csv(tmp_path / "csv" / "runs.csv")
    assert runs_csv == tmp_path / "csv" / "runs.csv"
    with runs_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    assert float(rows[0]["param.strength"]) == 0.01
    assert float(rows[0]["total_online_accuracy"]) == SUMMARY["total_online_accuracy"]

    tasks_csv = filled_store.export_csv(tmp_path / "tasks.csv", kind="tasks")
    with tasks_csv.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 18
    srank = [(r["index"], float(r["value"])) for r in rows if r["metric"] == "srank"]
    assert srank[:2] == [("0", METRICS["srank"][0][0]), ("1", METRICS["srank"][0][1])]
    assert {r["index"] for r in rows if r["metric"] == "online_accuracy"} == {""}
    assert not list(tmp_path.glob("*.tmp"))


# -- manifest -----------------------------------------------------------------------------


def test_manifest_has_all_keys_string_versions_and_valid_git_commit():
    config = {**CONFIG, "seed": 5}
    manifest = build_manifest(config, 5, "cpu", 1)
    assert set(manifest) >= {
        "config",
        "seed",
        "versions",
        "git_commit",
        "git_dirty",
        "host",
        "platform",
        "device",
        "threads",
        "start_time",
    }
    assert manifest["config"] == config
    assert manifest["config"] is not config
    assert manifest["seed"] == 5
    assert manifest["device"] == "cpu"
    assert manifest["threads"] == 1
    assert set(manifest["versions"]) == {"plasticlab", "torch", "numpy", "python"}
    assert all(isinstance(v, str) and v for v in manifest["versions"].values())
    commit = manifest["git_commit"]
    assert commit is None or re.fullmatch(r"[0-9a-f]{40}", commit)
    assert manifest["git_dirty"] in (None, True, False)
    if commit is None:
        assert manifest["git_dirty"] is None
    assert manifest["start_time"].endswith("+00:00")
    json.dumps(manifest)  # storable as is


def test_manifest_git_fields_are_none_without_git(monkeypatch):
    monkeypatch.setenv("PATH", "")  # no git executable to be found
    manifest = build_manifest(CONFIG, 0, "cpu", 1)
    assert manifest["git_commit"] is None
    assert manifest["git_dirty"] is None


def test_manifest_round_trips_through_the_store(tmp_path):
    manifest = build_manifest({**CONFIG, "seed": 2}, 2, "cpu", 4)
    with ResultStore(tmp_path) as store:
        run_id = ResultStore.run_id(CONFIG, 2)
        store.start_run(run_id, manifest["config"], manifest)
        store.finish_run(run_id, SUMMARY, METRICS)
        (run,) = store.runs()
    assert run["seed"] == 2
    assert {k: v for k, v in run["manifest"].items() if k != "end_time"} == manifest
    assert run["manifest"]["end_time"] >= manifest["start_time"]


def test_a_finished_attempt_never_becomes_failed_or_interrupted(tmp_path):
    with ResultStore(tmp_path) as store:
        run_id = _started(store)
        store.finish_run(run_id, SUMMARY, METRICS)
        store.fail_run(run_id, "late error")
        store.interrupt_run(run_id, "late signal")
        (attempt,) = store.attempts(run_id)
        assert attempt["status"] == "finished" and attempt["error"] is None
        assert store.task_metrics(run_id) == METRICS


@pytest.mark.skipif(manifest_module._git("--version") is None, reason="needs git (CI has it)")
def test_status_names_only_the_runs_of_other_package_code(tmp_path, package_history, capsys):
    from plasticlab.cli import main

    now, same, other = (package_history[k] for k in ("docs", "first", "package"))
    out = tmp_path / "out"
    with ResultStore(out) as store:
        for seed, code in enumerate((f"git:{same}", f"git:{other}")):
            run_id = ResultStore.run_id(CONFIG, seed)
            store.start_run(run_id, CONFIG, _manifest(seed), code=code)
            store.finish_run(run_id, SUMMARY, METRICS)
    assert main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    assert (f"1 finished run(s) were trained by other code than this plasticlab (git:{now}): "
            f"1 by git:{other}") in text
