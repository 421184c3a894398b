"""A results directory as tables (plasticlab.experiments.tables, ``plasticlab tables``): the same
tables from a store and from its export, CSV and Parquet that read back as written."""

from __future__ import annotations

import builtins

import pandas as pd
import pytest

from plasticlab.cli import main
from plasticlab.experiments.export import export_results
from plasticlab.experiments.run_tables import write_frame
from plasticlab.experiments.store import ResultStore
from plasticlab.experiments.tables import results_frame, write_tables

CONFIG = {"problem": "permuted_mnist", "method": "l2_init", "params": {"strength": 0.01},
          "optimizer": "adam", "lr": 0.001, "tasks": 3, "steps_per_task": 625, "batch_size": 16,
          "problem_params": {"classes": [0, 1, 2]}}
METRICS = {"online_accuracy": [0.91, 0.88, 0.86], "srank": [[40, 31], [39, 30], [38, 29]],
           "accuracy_row": [[0.9], [0.8, 0.85], [0.7, 0.75, 0.8]]}


@pytest.fixture
def store_dir(tmp_path):
    """A store with two finished runs and a failed one."""
    with ResultStore(tmp_path / "out") as store:
        for seed in (0, 1):
            run_id = ResultStore.run_id(CONFIG, seed)
            store.start_run(run_id, {**CONFIG, "seed": seed}, {"seed": seed})
            store.finish_run(run_id, {"total_online_accuracy": 0.88 + seed / 100}, METRICS)
        failed = ResultStore.run_id({**CONFIG, "method": "l2"}, 0)
        store.start_run(failed, {**CONFIG, "method": "l2", "seed": 0}, {"seed": 0})
        store.fail_run(failed, "boom")
    return tmp_path / "out"


def test_a_list_valued_metric_is_one_row_an_entry_indexed_and_a_number_has_no_index(store_dir):
    tasks = results_frame(store_dir, "tasks")
    seed0 = tasks[tasks["seed"] == 0]
    assert seed0[seed0["metric"] == "srank"][["task", "index", "value"]].values.tolist() == [
        [0, 0, 40.0], [0, 1, 31.0], [1, 0, 39.0], [1, 1, 30.0], [2, 0, 38.0], [2, 1, 29.0]]
    row = seed0[(seed0["metric"] == "accuracy_row") & (seed0["task"] == 2)]
    assert row["index"].tolist() == [0, 1, 2] and row["value"].tolist() == [0.7, 0.75, 0.8]
    assert seed0[seed0["metric"] == "online_accuracy"]["index"].isna().all()
    assert len(tasks) == 2 * (3 + 6 + 6)  # the failed run has no metrics


def test_an_export_gives_the_tables_of_its_store_for_the_finished_runs(store_dir, tmp_path):
    export_results(store_dir, tmp_path / "export", all_metrics=True)
    from_store, from_export = results_frame(store_dir, "tasks"), results_frame(tmp_path / "export", "tasks")
    pd.testing.assert_frame_equal(from_export, from_store)
    runs = results_frame(store_dir, "runs")
    finished = runs[runs["status"] == "finished"].reset_index(drop=True)
    exported = results_frame(tmp_path / "export", "runs")
    assert exported["run_id"].tolist() == finished["run_id"].tolist()
    for column in ("seed", "method", "param.strength", "lr", "total_online_accuracy", "code"):
        assert exported[column].tolist() == finished[column].tolist(), column


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_the_written_tables_read_back_as_the_frames(store_dir, tmp_path, fmt):
    written = write_tables(store_dir, tmp_path / "tables", fmt)
    assert {kind: rows for kind, (_, rows) in written.items()} == {"runs": 3, "tasks": 30}
    read = pd.read_csv if fmt == "csv" else pd.read_parquet
    tasks = read(written["tasks"][0])
    expected = results_frame(store_dir, "tasks")
    if fmt == "csv":
        tasks["index"] = tasks["index"].astype("Int64")
    pd.testing.assert_frame_equal(tasks, expected)
    runs = read(written["runs"][0])
    assert runs["run_id"].tolist() == results_frame(store_dir, "runs")["run_id"].tolist()
    assert runs["problem_params.classes"].tolist() == ["[0, 1, 2]"] * 3  # a list as JSON text
    assert not list((tmp_path / "tables").glob("*.tmp"))


def test_plasticlab_tables_writes_both_tables_and_names_them(store_dir, tmp_path, capsys):
    assert main(["tables", str(store_dir), "--format", "parquet"]) == 0
    out = capsys.readouterr().out
    assert f"runs: 3 rows → {store_dir / 'tables' / 'runs.parquet'}" in out
    assert f"tasks: 30 rows → {store_dir / 'tables' / 'tasks.parquet'}" in out
    assert main(["tables", str(tmp_path / "none"), "--to", str(tmp_path / "t")]) == 2
    assert "holds no results store" in capsys.readouterr().err


def test_parquet_without_pyarrow_says_how_to_get_it_and_a_table_needs_a_known_suffix(tmp_path, monkeypatch):
    frame = pd.DataFrame({"a": [1]})
    with pytest.raises(ValueError, match=r"\.csv or \.parquet, not '\.xlsx'"):
        write_frame(frame, tmp_path / "t.xlsx")
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.split(".")[0] == "pyarrow":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"pip install 'plasticlab\[tables\]'"):
        write_frame(frame, tmp_path / "t.parquet")
    assert not (tmp_path / "t.parquet").exists()


def test_a_folder_of_studies_gives_their_tables_one_after_another_named_by_study(store_dir, tmp_path):
    parent = tmp_path / "studies"
    export_results(store_dir, parent / "b" / "exported", all_metrics=True)
    export_results(store_dir, parent / "a", all_metrics=True)
    for kind in ("runs", "tasks"):
        frame = results_frame(parent, kind)
        assert frame.columns[0] == "study"
        one = results_frame(parent / "a", kind)
        assert frame["study"].tolist() == ["a"] * len(one) + ["b/exported"] * len(one)
        pd.testing.assert_frame_equal(frame[frame["study"] == "a"].drop(columns="study"), one)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="nor any folder below it that does"):
        results_frame(tmp_path / "empty")
