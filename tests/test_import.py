"""``plasticlab import``: finished runs carried between results stores by their export, and
``reproduce``'s export refreshed after every ensemble — so that a study outlives its machine."""

from __future__ import annotations

import gzip
import json
import sqlite3
from datetime import datetime

import pytest

from plasticlab.cli import main
from plasticlab.experiments import export as export_module
from plasticlab.experiments.export import EXPORT_NAME, compact_metrics, export_files, read_export
from plasticlab.experiments.importer import ImportConflict, import_runs
from plasticlab.experiments.store import DB_NAME, ResultStore

TWO_ENSEMBLES = """
name = "tiny"
problem = "permuted_mnist"
methods = ["l2_init", "layer_norm"]
seeds = "0-1"
tasks = 2
steps_per_task = 10
[problem_params]
examples_per_task = 160
"""
"""Two ensembles (Layer Norm trains another network than L2 Init): one can finish alone."""


def _sweep(sweep, out, data_dir, *extra) -> None:
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--workers", "1",
                 "--executor", "inline", "--no-progress", *extra]) == 0


def _stored(out) -> dict[str, dict]:
    """Every run of a store as it holds it: its counting attempt's row, and its metrics as the
    store's own text (the JSON of each value), bit for bit."""
    with ResultStore(out) as store:
        runs = {r["run_id"]: r for r in store.runs()}
    db = sqlite3.connect(out / DB_NAME)
    for run in runs.values():
        run["metric_text"] = db.execute("SELECT metric, task, value FROM task_metrics WHERE attempt = ? "
                                        "ORDER BY metric, task", (run["attempt"],)).fetchall()
    db.close()
    return runs


KEPT = ("status", "config", "seed", "manifest", "summary", "code", "metric_text")


@pytest.fixture(scope="module")
def sweeps(data_dir, tmp_path_factory):
    """A two-ensemble sweep trained whole (``full``), and half of it (``half``: the L2 Init
    ensemble alone, as a sweep stopped after one ensemble leaves it)."""
    tmp = tmp_path_factory.mktemp("sweeps")
    sweep = tmp / "sweep.toml"
    sweep.write_text(TWO_ENSEMBLES)
    _sweep(sweep, tmp / "full", data_dir)
    _sweep(sweep, tmp / "half", data_dir, "--only", "method=l2_init")
    return sweep, tmp / "full", tmp / "half"


def test_half_a_sweep_exported_imported_and_finished_elsewhere_equals_the_whole_sweep(
        sweeps, data_dir, tmp_path, capsys):
    sweep, full, half = sweeps
    assert main(["export", str(half), "--to", str(tmp_path / "carried"), "--all-metrics"]) == 0
    fresh = tmp_path / "fresh"  # another machine: nothing but the export
    assert main(["import", str(tmp_path / "carried"), "--out", str(fresh)]) == 0
    assert "2 finished run(s) imported" in capsys.readouterr().out
    imported, before = _stored(fresh), _stored(half)
    assert set(imported) == set(before) and len(imported) == 2
    for rid, run in before.items():  # every field the store holds, exactly; one attempt each
        assert {k: imported[rid][k] for k in KEPT} == {k: run[k] for k in KEPT}
        assert imported[rid]["attempts"] == 1 and imported[rid]["error"] is None
    # the sweep there skips the imported runs and trains only the rest
    _sweep(sweep, fresh, data_dir)
    assert "4 runs (2 finished, 2 to run)" in capsys.readouterr().out
    finished, whole = _stored(fresh), _stored(full)
    assert set(finished) == set(whole) and len(finished) == 4
    for rid, run in whole.items():  # every run's metrics as the uninterrupted sweep's, bit for bit
        assert finished[rid]["status"] == "finished" and finished[rid]["attempts"] == 1
        assert finished[rid]["metric_text"] == run["metric_text"], rid
        assert finished[rid]["summary"]["total_online_accuracy"] == run["summary"]["total_online_accuracy"]
        assert finished[rid]["config"] == run["config"] and finished[rid]["code"] == run["code"]
    for rid in before:  # the imported runs were not trained again
        assert finished[rid]["manifest"] == before[rid]["manifest"]


def test_importing_twice_adds_nothing_and_a_compact_export_keeps_what_a_report_reads(
        sweeps, tmp_path, capsys):
    _, _, half = sweeps
    assert main(["export", str(half), "--to", str(tmp_path / "compact")]) == 0
    out = tmp_path / "out"
    for _ in range(2):
        assert main(["import", str(tmp_path / "compact" / EXPORT_NAME), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "0 finished run(s) imported" in said and "2 already there with the same numbers" in said
    assert "a compact export" in said
    imported, before = _stored(out), _stored(half)
    with ResultStore(out) as store, ResultStore(half) as original:
        assert all(len(store.attempts(rid)) == 1 for rid in imported)
        for rid in before:
            assert store.task_metrics(rid) == compact_metrics(original.task_metrics(rid))
            assert "dead_fraction_per_layer" in original.task_metrics(rid)  # what it drops
    for rid, run in before.items():
        assert {k: imported[rid][k] for k in KEPT[:-1]} == {k: run[k] for k in KEPT[:-1]}
    # and its export is the half sweep's export, byte for byte
    assert main(["export", str(out), "--to", str(tmp_path / "again")]) == 0
    again, first = (tmp_path / d / EXPORT_NAME for d in ("again", "compact"))
    assert again.read_bytes() == first.read_bytes()


def _edited(src, dst, edit) -> None:
    """A copy of the export file ``src`` at ``dst`` with ``edit`` applied to its body."""
    with gzip.open(src, "rt") as f:
        body = json.load(f)
    edit(body)
    with gzip.open(dst, "wt") as f:
        json.dump(body, f)


def test_a_run_with_other_numbers_is_refused_in_one_line_and_nothing_is_imported(sweeps, tmp_path, capsys):
    _, full, half = sweeps
    assert main(["export", str(full), "--to", str(tmp_path / "whole")]) == 0
    src = tmp_path / "whole" / EXPORT_NAME
    with ResultStore(half) as store:
        held = store.runs()[0]["run_id"]

    def change(body):  # the run the half store holds, with another online accuracy on task 1
        body["task_metrics"][held]["online_accuracy"][1] += 1e-9

    _edited(src, tmp_path / "other.json.gz", change)
    out = tmp_path / "out"
    assert main(["import", str(half), "--out", str(out)]) == 0  # a results folder imports too
    capsys.readouterr()
    assert main(["import", str(tmp_path / "other.json.gz"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"plasticlab: error: run {held} (")
    assert "online_accuracy at task 1" in err and "nothing imported" in err
    with ResultStore(out) as store:  # the two new runs of that export were not added either
        assert len(store.runs()) == 2 and all(len(store.attempts(r["run_id"])) == 1 for r in store.runs())
    # timing is not a number of the run: the same run trained again, elsewhere, is the same
    _edited(src, tmp_path / "slower.json.gz",
            lambda body: body["runs"][0]["summary"].update(wall_time_s=1e6))
    assert len(import_runs([tmp_path / "slower.json.gz"], out).added[tmp_path / "slower.json.gz"]) == 2
    with pytest.raises(ImportConflict):  # two exports that disagree, into an empty folder
        import_runs([tmp_path / "other.json.gz", src], tmp_path / "empty")
    with ResultStore(tmp_path / "empty") as store:
        assert not store.runs()


def test_an_edited_run_and_other_files_are_refused(sweeps, tmp_path, capsys):
    _, _, half = sweeps
    assert main(["export", str(half), "--to", str(tmp_path / "e")]) == 0
    _edited(tmp_path / "e" / EXPORT_NAME, tmp_path / "edited.json.gz",
            lambda body: body["runs"][0]["config"].update(lr=0.5))
    assert main(["import", str(tmp_path / "edited.json.gz"), "--out", str(tmp_path / "out")]) == 2
    assert "is not that of its config and seed" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert main(["import", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "holds no export" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "e"), "--to", str(tmp_path / "x"), "--all-metrics"]) == 2


def test_an_export_in_parts_imports_whole_from_any_of_its_files(sweeps, tmp_path, monkeypatch):
    _, full, _ = sweeps
    monkeypatch.setattr(export_module, "PART_BYTES", 1)  # a part per run
    export_module.export_results(full, tmp_path / "parts", all_metrics=True)
    files = export_files(tmp_path / "parts")
    assert len(files) == 4
    report = import_runs([files[2], tmp_path / "parts"], tmp_path / "out")
    assert [len(ids) for ids in report.added.values()] == [4]  # one export, named twice
    with ResultStore(tmp_path / "out") as store, ResultStore(full) as original:
        assert [r["run_id"] for r in store.runs()] == [r["run_id"] for r in original.runs()]
        assert all(store.task_metrics(r["run_id"]) == original.task_metrics(r["run_id"])
                   for r in original.runs())


def _export_a_protocol_run(src, export) -> None:
    """A results folder ``src`` with one finished run and a protocol selection, exported to
    ``export``."""
    from plasticlab.experiments.orchestrate import SELECTION_FILE

    with ResultStore(src) as store:
        config = {"problem": "permuted_mnist", "method": "baseline", "lr": 0.001}
        rid = ResultStore.run_id(config, 0)
        store.start_run(rid, config, {"seed": 0}, code="git:abc")
        store.finish_run(rid, {"total_online_accuracy": 0.5}, {"online_accuracy": [0.4, 0.6]})
    (src / SELECTION_FILE).write_text(json.dumps({"sweep": "s", "selected": []}))
    export_module.export_results(src, export)


def test_a_protocol_exports_selection_is_kept_where_the_folder_has_none(tmp_path):
    from plasticlab.experiments.orchestrate import SELECTION_FILE

    out = tmp_path / "out"
    _export_a_protocol_run(tmp_path / "src", tmp_path / "e")
    import_runs([tmp_path / "e"], out)
    assert json.loads((out / SELECTION_FILE).read_text()) == {"sweep": "s", "selected": []}
    (out / SELECTION_FILE).write_text(json.dumps({"sweep": "other", "selected": []}))
    assert "differs" in import_runs([tmp_path / "e"], out).notes[0]
    runs, _, _ = read_export(tmp_path / "e" / EXPORT_NAME)
    with ResultStore(out) as store:  # kept as recorded: no end time stamped by the import
        assert store.runs()[0]["manifest"] == runs[0]["manifest"]


def test_a_sitting_killed_before_an_import_is_closed_at_its_runs_last_progress_not_at_the_import(tmp_path):
    # A study's machine is lost mid-sitting; the next machine imports the committed export and
    # reproduce closes the lost sitting at the folder's last progress — its checkpoints and its
    # runs' starts and ends — not at the import, which writes the selection's file.
    from plasticlab.experiments.orchestrate import SELECTION_FILE
    from plasticlab.experiments.study import close_killed_sittings, progress_times

    _export_a_protocol_run(tmp_path / "src", tmp_path / "e")

    def a_day_earlier(body):
        body["runs"][0]["manifest"].update(start_time="2026-11-29T18:30:00+00:00",
                                           end_time="2026-11-29T19:24:36+00:00")

    _edited(tmp_path / "e" / EXPORT_NAME, tmp_path / "e" / EXPORT_NAME, a_day_earlier)
    out = tmp_path / "out"
    import_runs([tmp_path / "e"], out)
    assert (out / SELECTION_FILE).is_file()
    assert max(progress_times(out)) == datetime.fromisoformat("2026-11-29T19:24:36+00:00").timestamp()
    sittings = [{"started": "2026-11-29 18:23:54 UTC"}]
    close_killed_sittings(sittings, out)
    assert sittings[0]["ended"] == "2026-11-29 19:24:36 UTC" and sittings[0]["wall_time_s"] == 3642.0


@pytest.mark.slow
def test_reproduce_refreshes_its_export_after_each_ensemble_and_another_machine_finishes_the_study(
        data_dir, tmp_path, monkeypatch, capsys):
    from plasticlab.experiments import study

    refreshed = []
    real = study.export_finished_so_far

    def spy(*args):
        runs = real(*args)
        docs, record_path = args[4], args[5]
        partial = json.loads(record_path.read_text())[study.PARTIAL_EXPORT]
        refreshed.append((runs, len(read_export(docs / EXPORT_NAME)[0]), partial["finished_runs"],
                          partial["planned_runs"]))
        return runs

    monkeypatch.setattr(study, "export_finished_so_far", spy)
    import plasticlab.cli.reproduce as reproduce_command

    monkeypatch.setattr(reproduce_command, "write_report", lambda *args: 0)  # not what is tested
    argv = ["reproduce", "lambda-sensitivity", "--scale", "0.004", "--tasks", "1", "--workers", "1",
            "--executor", "inline", "--data-dir", str(data_dir), "--no-progress"]
    here = [*argv, "--out", str(tmp_path / "results"), "--docs", str(tmp_path / "docs")]
    docs = tmp_path / "docs" / "lambda-sensitivity"
    # the first machine trains two of the three seeds (two ensembles), then is lost
    assert main([*here, "--only", "seed=0,1"]) == 0
    assert len(refreshed) == 2 and refreshed[0][0] < refreshed[1][0] == 24
    assert all(r[0] == r[1] == r[2] and r[3] == 36 for r in refreshed)
    record = json.loads((docs / "run.json").read_text())
    assert record[study.PARTIAL_EXPORT]["finished_runs"] == 24  # the study is not finished
    import shutil

    shutil.rmtree(tmp_path / "results")
    # the next machine, its results folder elsewhere: the same command, but for --out, imports
    # the committed export's runs first and finishes the study, its sittings kept
    elsewhere = [*argv, "--out", str(tmp_path / "elsewhere"), "--docs", str(tmp_path / "docs")]
    assert main(elsewhere) == 0
    said = capsys.readouterr().err
    assert "holds this study trained into another results folder" in said
    assert "24 finished run(s) imported into" in said
    assert len(refreshed) == 3 and refreshed[2][:3] == (36, 36, 36)
    record = json.loads((docs / "run.json").read_text())
    assert study.PARTIAL_EXPORT not in record and len(record["sittings"]) == 2
    assert str(tmp_path / "elsewhere") in record["command"]  # the study's command: where it is now
    assert str(tmp_path / "results") in record["sittings"][0]["command"]  # each sitting's: where it ran
    with gzip.open(docs / EXPORT_NAME, "rt") as f:  # the final export as it always was
        assert set(json.load(f)) == {"format", "runs", "task_metrics", "selection"}
    # every run as the study trained in one go gives it
    once = tmp_path / "once"
    assert main(["sweep", "--preset", "lambda-sensitivity", "--scale", "0.004", "--tasks", "1",
                 "--out", str(once), "--data-dir", str(data_dir), "--workers", "1", "--executor",
                 "inline", "--no-progress"]) == 0
    carried, metrics, _ = read_export(docs / EXPORT_NAME)
    with ResultStore(once) as store:
        whole = {r["run_id"]: r for r in store.runs()}
        assert {r["run_id"] for r in carried} == set(whole) and len(whole) == 36
        for run in carried:
            rid = run["run_id"]
            assert json.dumps(metrics[rid]) == json.dumps(compact_metrics(store.task_metrics(rid)))
            assert run["summary"]["total_online_accuracy"] == whole[rid]["summary"]["total_online_accuracy"]
