"""``plasticlab export`` and ``plasticlab reproduce``: a study's compact export reports exactly
as its results store does, and reproduce sweeps, exports and reports in one resumable command."""

from __future__ import annotations

import gzip
import json

import pytest

from plasticlab.cli import main
from plasticlab.experiments.export import EXPORT_NAME, export_results, read_export
from plasticlab.experiments.store import ResultStore
from test_report_build import results_dir  # noqa: F401  (a fixture: a store with known curves)


def _tables(report_md: str) -> str:
    """The report without its header lines (which name the directory and the time)."""
    return report_md[report_md.index("## Contents"):]


def test_a_report_from_the_export_equals_the_report_from_the_store(results_dir, tmp_path):  # noqa: F811
    runs = export_results(results_dir, tmp_path / "export")
    with ResultStore(results_dir) as store:
        assert runs == len(store.runs("finished"))
    assert main(["report", str(results_dir), "--out", str(tmp_path / "a"), "--formats", "png"]) == 0
    assert main(["report", str(tmp_path / "export"), "--out", str(tmp_path / "b"), "--formats", "png"]) == 0
    a, b = ((tmp_path / d / "report.md").read_text() for d in ("a", "b"))
    assert _tables(a) == _tables(b)
    assert not (tmp_path / "export" / "results.sqlite").exists()  # reading never makes a store


def test_an_export_of_some_runs_reads_the_metrics_of_those_runs_only(results_dir, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    with ResultStore(results_dir) as store:
        chosen = {r["run_id"] for r in store.runs("finished")[:2]}
    read = []
    real = ResultStore.task_metrics
    monkeypatch.setattr(ResultStore, "task_metrics", lambda self, rid: read.append(rid) or real(self, rid))
    assert export_results(results_dir, tmp_path / "export", run_ids=chosen) == 2
    assert set(read) == chosen and len(read) == 2
    assert {r["run_id"] for r in read_export(tmp_path / "export" / EXPORT_NAME)[0]} == chosen


def test_the_export_is_deterministic_text_and_refuses_other_files(results_dir, tmp_path):  # noqa: F811
    export_results(results_dir, tmp_path / "one")
    export_results(results_dir, tmp_path / "two")
    one, two = ((tmp_path / d / EXPORT_NAME).read_bytes() for d in ("one", "two"))
    assert one == two
    body = json.loads(gzip.decompress(one))
    assert body["format"] == "plasticlab-export/1" and all(r["status"] == "finished" for r in body["runs"])
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="bad.json.gz: not a readable plasticlab export"):
        read_export(tmp_path / "bad.json.gz")


@pytest.mark.slow
def test_reproduce_sweeps_exports_reports_and_resumes(data_dir, tmp_path, capsys, monkeypatch):
    # one task a run (--tasks 1; the scale alone gives 2, 3 at 0.006): each task's test accuracy
    # over 10,000 images for ensembles of 12 took most of this test's training
    argv = ["reproduce", "lambda-sensitivity", "--scale", "0.004", "--tasks", "1", "--out",
            str(tmp_path / "results"), "--docs", str(tmp_path / "docs"), "--workers", "1", "--executor",
            "inline", "--data-dir", str(data_dir), "--no-progress"]
    docs = tmp_path / "docs" / "lambda-sensitivity"
    docs.mkdir(parents=True)  # a record of another command (another scale): not added up
    (docs / "run.json").write_text(json.dumps({"command": "plasticlab sweep --preset x --scale 0.5",
                                               "sittings": [{"wall_time_s": 99.0}]}))
    assert main(argv) == 0
    sittings = json.loads((docs / "run.json").read_text())["sittings"]
    assert len(sittings) == 1 and "--executor inline" in sittings[0]["command"]  # how it ran
    runs, _, _ = read_export(docs / EXPORT_NAME)
    assert len(runs) == 36  # 2 step sizes × 6 λ × 3 seeds
    assert (docs / "report" / "report.md").is_file() and list((docs / "report" / "figures").glob("*.png"))
    assert not (docs / "results.sqlite").exists()
    record = json.loads((docs / "run.json").read_text())
    assert record["scale"] == 0.004 and record["command"].startswith("plasticlab sweep --preset")
    # the figures were checked above: the reports of the commands below are built for their
    # text alone (drawing each one's eleven figures again was half of this test)
    from plasticlab.report import build

    real_build = build.build_report
    monkeypatch.setattr(build, "build_report", lambda *a, formats, **kw: real_build(*a, formats=(), **kw))
    # resumes (nothing left to train) with another run-only flag: the same results, one more sitting
    assert main([a for a in argv if a != "--no-progress"]) == 0
    sittings = json.loads((docs / "run.json").read_text())["sittings"]
    assert len(sittings) == 2 and "--no-progress" not in sittings[1]["command"]
    # a retrain of some runs (after a fix) is a sitting of the same study, said so in its command
    from plasticlab.experiments.study import same_results

    study_command = json.loads((docs / "run.json").read_text())["command"]
    assert main([*argv, "--rerun", "--only", "seed=0", "--only", "lr=1e-3"]) == 0
    record = json.loads((docs / "run.json").read_text())
    assert "--rerun" not in record["command"] and same_results(record["command"], study_command)
    assert len(record["sittings"]) == 3
    assert record["sittings"][2]["command"].endswith("--rerun --only seed=0 --only lr=1e-3")
    assert len(read_export(docs / EXPORT_NAME)[0]) == 36
    # another command (another length) would replace these results: refused before it trains
    exported = (docs / EXPORT_NAME).read_bytes()
    shorter = [*argv, "--tasks", "2", "--out", str(tmp_path / "other")]
    capsys.readouterr()
    assert main(shorter) == 2
    assert "--replace" in capsys.readouterr().err and not (tmp_path / "other").exists()
    assert (docs / EXPORT_NAME).read_bytes() == exported
    assert main([*shorter, "--replace"]) == 0
    record = json.loads((docs / "run.json").read_text())
    assert "--tasks 2" in record["command"] and len(record["sittings"]) == 1
    # the study at another scale in the same results store: its export holds its own runs only
    other_scale = [a if a != "0.004" else "0.006" for a in argv]
    capsys.readouterr()
    assert main([*other_scale, "--replace"]) == 0
    assert "also holds 36 finished run(s) of other commands" in capsys.readouterr().err
    runs, _, _ = read_export(docs / EXPORT_NAME)
    assert len(runs) == 36 and {r["config"]["steps_per_task"] for r in runs} == {4}
    with pytest.raises(SystemExit):
        main(["reproduce"])
    assert main(["reproduce", "no-such-study", "--docs", str(tmp_path / "d")]) == 2
    assert "unknown preset 'no-such-study'" in capsys.readouterr().err


def test_a_sweeps_runs_are_its_grid_and_the_evaluation_of_what_it_selected_from_that_grid(tmp_path):
    from plasticlab.experiments.orchestrate import protocol_seeds, sweep_runs, write_selection
    from plasticlab.experiments.presets import get_preset

    preset = get_preset("main-permuted_mnist-adam")
    grid = sweep_runs(preset, tmp_path, 0.01)
    assert grid and len({r.seed for r in grid}) == 3  # no selection yet: the grid alone
    chosen = grid[0].config.to_dict()
    write_selection(tmp_path, {("permuted_mnist", "adam", chosen["method"]): {
        "score": 0.5, "seeds": [0, 1, 2], "candidates": 4, "config": chosen}}, "main", [100, 101])
    runs = sweep_runs(preset, tmp_path, 0.01)
    assert runs[:len(grid)] == grid and [r.seed for r in runs[len(grid):]] == protocol_seeds(preset)
    assert all(r.config.to_dict() == chosen for r in runs[len(grid):])
    # the selection of the same study at another scale is not this sweep's
    assert sweep_runs(preset, tmp_path, 0.02) == sweep_runs(get_preset("main-permuted_mnist-adam"),
                                                             tmp_path / "none", 0.02)


def test_commands_that_differ_only_in_how_they_run_make_the_same_results():
    from plasticlab.experiments.study import same_results

    command = "plasticlab sweep --preset ablation --out r/ablation --tasks 100"
    assert same_results(command, f"{command} --data-dir d --workers 2 --device cpu --compile --no-progress")
    assert same_results(command, f"{command} --executor ray --ray-address 10.0.0.1:6379")
    assert same_results("plasticlab sweep --preset init --workers 2 --out r/init", "plasticlab sweep "
                        "--preset init --out r/init --workers 1")
    for other in ("--tasks 50", "--tasks 100 --scale 0.5", "--tasks 100 --seeds 1"):
        assert not same_results(command, command.replace("--tasks 100", other))
    assert not same_results(command, command.replace("r/ablation", "s/ablation"))
    assert not same_results(command, "")


def test_a_dry_run_prints_each_studys_plan_and_writes_nothing(tmp_path, capsys):
    argv = ["reproduce", "init", "best-random_label_cifar-adam", "--dry-run", "--workers", "2",
            "--out", str(tmp_path / "results"), "--docs", str(tmp_path / "docs")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "sweep init → " in captured.out and "grid: 30 runs" in captured.out
    # the CIFAR study at its default scale, said in the sweep command it would run
    assert "--preset best-random_label_cifar-adam" in captured.err and "--scale 0.2" in captured.err
    assert "sweep best-random_label_cifar-adam (scale 0.2) → " in captured.out
    assert not (tmp_path / "results").exists() and not (tmp_path / "docs").exists()
    # published results of another command: the dry run says the real one would need --replace
    (tmp_path / "docs" / "init").mkdir(parents=True)
    (tmp_path / "docs" / "init" / EXPORT_NAME).write_bytes(b"")
    assert main(argv) == 0
    assert "would replace them when it finishes (it needs --replace)" in capsys.readouterr().err


def test_tasks_sets_every_runs_tasks_and_keeps_steps_per_task():
    from plasticlab.experiments.presets import get_preset
    from plasticlab.experiments.sweep import expand
    from plasticlab.experiments.workflow import with_tasks

    runs = expand(with_tasks(get_preset("forgetting"), 3))
    assert {r.config.tasks for r in runs} == {3} and {r.config.steps_per_task for r in runs} == {625}
    varied = with_tasks({"variants": [{"tasks": 7}, {"lr": 1e-3}], "tasks": 5}, 2)
    assert varied["tasks"] == 2 and varied["variants"] == [{"tasks": 2}, {"lr": 1e-3}]
    with pytest.raises(ValueError, match="--tasks must be >= 1"):
        with_tasks(get_preset("forgetting"), 0)


def test_the_synthetic_official_format_files_run_5_plus_1_cifar_and_continual_imagenet(tmp_path, capsys):
    import subprocess
    import sys

    from conftest import REPO

    subprocess.run([sys.executable, str(REPO / "examples" / "synthetic_official_data.py"),
                    str(tmp_path / "data")], check=True, capture_output=True)
    for problem, batch in (("five_plus_one_cifar", "10"), ("continual_imagenet", "100")):
        assert main(["run", "--problem", problem, "--method", "l2_init", "--tasks", "2",
                     "--steps-per-task", "5", "--batch-size", batch, "--seeds", "0-1", "--data-dir",
                     str(tmp_path / "data"), "--out", str(tmp_path / problem), "--no-progress"]) == 0
    assert "continual_imagenet · l2_init" in capsys.readouterr().out


def test_the_export_keeps_online_accuracy_exact_and_measurements_to_float32_precision(
        results_dir, tmp_path):  # noqa: F811
    import math

    from plasticlab.experiments.export import MEASUREMENT_DIGITS

    export_results(results_dir, tmp_path / "export")
    _, exported, _ = read_export(tmp_path / "export" / EXPORT_NAME)
    with ResultStore(results_dir) as store:
        for run_id, metrics in exported.items():
            stored = store.task_metrics(run_id)
            assert metrics["online_accuracy"] == stored["online_accuracy"]
            for a, b in zip(metrics["weight_magnitude"], stored["weight_magnitude"], strict=True):
                assert math.isclose(a, b, rel_tol=10.0 ** (1 - MEASUREMENT_DIGITS))


def test_the_export_keeps_the_metrics_a_report_reads_and_no_other(results_dir, tmp_path):  # noqa: F811
    from plasticlab.experiments.export import EXACT_METRICS, REPORTED_MEASUREMENTS
    from plasticlab.report.data import INTERNALS

    assert set(REPORTED_MEASUREMENTS) == set(INTERNALS)  # every internal the report draws
    export_results(results_dir, tmp_path / "export")
    _, exported, _ = read_export(tmp_path / "export" / EXPORT_NAME)
    with ResultStore(results_dir) as store:
        stored = {name for run_id in exported for name in store.task_metrics(run_id)}
    kept = {name for metrics in exported.values() for name in metrics}
    assert "weight_magnitude_per_layer" in stored and "weight_magnitude_per_layer" not in kept
    assert kept == {n for n in stored if n in INTERNALS or n in EXACT_METRICS}


def test_a_large_export_is_written_in_parts_of_whole_runs_and_read_back_whole(
        results_dir, tmp_path, monkeypatch):  # noqa: F811
    from plasticlab.experiments import export

    whole = tmp_path / "whole"
    export_results(results_dir, whole)
    one_part = (whole / EXPORT_NAME).read_bytes()
    monkeypatch.setattr(export, "PART_BYTES", len(one_part) * 4 // 5)
    split = tmp_path / "split"
    assert export_results(results_dir, split) == len(read_export(whole / EXPORT_NAME)[0])
    files = sorted(p.name for p in split.iterdir())
    assert files == ["results.2.json.gz", "results.json.gz"]
    assert export.export_files(split) == [split / "results.json.gz", split / "results.2.json.gz"]
    assert all((split / name).stat().st_size <= export.PART_BYTES for name in files)
    assert read_export(split / EXPORT_NAME) == read_export(whole / EXPORT_NAME)
    from plasticlab.report.build import build_report

    build_report(split, tmp_path / "r", formats=())
    build_report(whole, tmp_path / "w", formats=())
    assert _tables((tmp_path / "r" / "report.md").read_text()) == \
        _tables((tmp_path / "w" / "report.md").read_text())
    (split / "results.2.json.gz").unlink()  # a part missing: an error that names it
    with pytest.raises(ValueError, match=r"results\.2\.json\.gz: missing, a part of this export"):
        read_export(split / EXPORT_NAME)
    # a re-export that fits in one file removes the parts of the earlier one
    (split / "results.2.json.gz").write_bytes(b"")
    monkeypatch.setattr(export, "PART_BYTES", len(one_part))
    export_results(results_dir, split)
    assert [p.name for p in split.iterdir()] == [EXPORT_NAME]
    assert (split / EXPORT_NAME).read_bytes() == one_part


def test_an_export_exported_again_is_the_same_export_and_can_be_rewritten_in_place(
        results_dir, tmp_path, monkeypatch, capsys):  # noqa: F811
    """`plasticlab export` reads an export as it reads a store, so an export made by an older
    plasticlab (more metrics, other parts) is written again in today's form without its store;
    the export itself may be the target: it is read whole before anything is written."""
    from plasticlab.experiments import export

    (results_dir / "selection.json").write_text(json.dumps({"chosen": "l2_init"}))
    first = tmp_path / "first"
    export_results(results_dir, first)
    assert main(["export", str(first), "--to", str(tmp_path / "again")]) == 0
    assert "finished runs → " in capsys.readouterr().out
    assert (tmp_path / "again" / EXPORT_NAME).read_bytes() == (first / EXPORT_NAME).read_bytes()
    assert read_export(first / EXPORT_NAME)[2] == {"chosen": "l2_init"}

    whole = read_export(first / EXPORT_NAME)
    # `exported` is what an export writes, read back (the reproduction pages' check uses it)
    for directory in (results_dir, first):
        assert json.loads(json.dumps(export.exported(directory))) == list(whole)
    monkeypatch.setattr(export, "PART_BYTES", (first / EXPORT_NAME).stat().st_size * 4 // 5)
    assert main(["export", str(first), "--to", str(first)]) == 0
    assert [p.name for p in export.export_files(first)] == ["results.json.gz", "results.2.json.gz"]
    assert read_export(first / EXPORT_NAME) == whole


def test_a_killed_sitting_is_closed_at_its_sweeps_last_progress(tmp_path):
    import os
    import time
    from datetime import datetime, timezone

    from plasticlab.experiments.store import DB_NAME, ResultStore
    from plasticlab.experiments.study import close_killed_sittings

    out = tmp_path / "results"
    (out / "checkpoints").mkdir(parents=True)
    t0 = 1_700_000_000  # a sitting killed 700 s in, after a checkpoint and a finished run

    def iso(t):
        return datetime.fromtimestamp(t, timezone.utc).isoformat()

    with ResultStore(out) as store:
        store.start_run("r", {"method": "baseline"}, {"start_time": iso(t0 + 10)})
        store.finish_run("r", {}, {}, manifest_update={"end_time": iso(t0 + 700)})
    for name, at in (("checkpoints/a.ckpt", t0 + 600), ("checkpoints/b.ckpt", t0 + 5000),
                     (DB_NAME, t0 + 3000)):  # the store read (and so touched) at t0 + 3000
        if not (out / name).exists():
            (out / name).write_text("x")
        os.utime(out / name, (at, at))

    def utc(t):
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))

    sittings = [{"wall_time_s": 50.0, "ended": "2023-01-01 00:00 UTC"},  # an older record: kept
                {"started": utc(t0)}, {"started": utc(t0 + 4000)}]
    close_killed_sittings(sittings, out)
    assert sittings[0] == {"wall_time_s": 50.0, "ended": "2023-01-01 00:00 UTC"}
    # the first killed sitting ends at its own last progress (the run's end), not at the time
    # someone read the store, nor at the next sitting's progress
    assert sittings[1]["wall_time_s"] == 700.0 and sittings[1]["ended"] == utc(t0 + 700)
    assert sittings[1]["exit_code"] is None and "killed" in sittings[1]
    assert sittings[2]["wall_time_s"] == 1000.0


def test_a_sittings_last_progress_is_not_the_lock_the_next_command_takes(tmp_path):
    # the next sitting takes the folder's lock (rewriting it) before it closes a killed one
    import os

    from plasticlab.experiments.lock import LOCK_NAME
    from plasticlab.experiments.study import progress_times

    (tmp_path / "checkpoints").mkdir()
    checkpoint = tmp_path / "checkpoints" / "ensemble-0.ckpt"
    checkpoint.write_bytes(b"")
    os.utime(checkpoint, (1000.0, 1000.0))
    (tmp_path / LOCK_NAME).write_text("pid 1 …")
    assert progress_times(tmp_path) == [1000.0]
