"""The ``plasticlab`` command: options, --json, TOML configs, errors, the results store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from plasticlab.cli import main
from plasticlab.experiments import ResultStore
from plasticlab.experiments.config import parse_seeds
from plasticlab.methods import METHODS
from plasticlab.problems import PROBLEMS

TINY = ["--problem", "permuted_mnist", "--tasks", "2", "--steps-per-task", "10",
        "--set", "examples_per_task=160", "--no-progress"]


def test_list_shows_every_problem_and_method_with_parameters(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*PROBLEMS, *METHODS, "strength", "steps_per_task", "examples_per_task"]:
        assert name in out


def test_version_names_the_package_the_code_runs_record_torch_and_python(capsys, monkeypatch):
    import platform

    import torch

    from plasticlab.experiments import manifest

    def version() -> str:
        with pytest.raises(SystemExit) as stop:
            main(["--version"])
        assert stop.value.code == 0
        return capsys.readouterr().out

    assert version().startswith(f"plasticlab {manifest.package_version()}")
    monkeypatch.setattr(manifest, "package_version", lambda: "1.2.3")
    # a git checkout: the commit a run's manifest records, beside the version
    monkeypatch.setattr(manifest, "code_identity", lambda: "git:" + "a" * 40 + "+dirty")
    assert version() == (f"plasticlab 1.2.3 (git:{'a' * 40}+dirty), torch {torch.__version__}, "
                         f"Python {platform.python_version()}\n")
    # installed from a wheel, no git: the identity runs record is the version, said once
    monkeypatch.setattr(manifest, "code_identity", lambda: "plasticlab 1.2.3")
    assert version().startswith("plasticlab 1.2.3, torch ")


def test_run_json_prints_only_json_with_the_documented_keys(data_dir, tmp_path, capsys):
    code = main(["run", *TINY, "--method", "l2_init", "--set", "strength=1e-2", "--seeds", "0-2",
                 "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["seed"] for r in doc["runs"]] == [0, 1, 2]
    for r in doc["runs"]:
        assert r["problem"] == "permuted_mnist" and r["method"] == "l2_init"
        assert r["params"] == {"strength": 0.01}
        assert len(r["task_online_accuracy"]) == 2
        assert all(0 <= a <= 1 for a in r["task_online_accuracy"])
        assert r["total_online_accuracy"] == pytest.approx(sum(r["task_online_accuracy"]) / 2)


def test_run_records_every_seed_with_a_manifest_in_the_store(data_dir, tmp_path, capsys):
    assert main(["run", *TINY, "--method", "baseline", "--seeds", "0,3", "--lr", "1e-4",
                 "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "baseline" in out
    with ResultStore(tmp_path) as store:
        runs = store.runs(status="finished")
        assert sorted(r["seed"] for r in runs) == [0, 3]
        m = runs[0]["manifest"]
        assert m["config"]["lr"] == 1e-4 and m["config"]["problem"] == "permuted_mnist"
        for key in ("versions", "host", "device", "threads", "start_time", "end_time", "git_commit"):
            assert key in m
        assert m["threads"] == 1
        assert set(m["versions"]) >= {"plasticlab", "torch", "numpy", "python"}
        assert len(store.task_metrics(runs[0]["run_id"])["online_accuracy"]) == 2


def test_toml_config_is_read_and_options_override_it(data_dir, tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'''
problem = "permuted_mnist"
method = "l2_init"
lr = 1e-3
tasks = 3
steps_per_task = 10
seeds = "4-5"
data_dir = "{data_dir}"
[params]
strength = 1e-3
[problem_params]
examples_per_task = 160
''')
    assert main(["run", str(cfg), "--tasks", "1", "--out", str(tmp_path / "o"), "--json",
                 "--no-progress"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["seed"] for r in runs] == [4, 5]
    assert runs[0]["params"] == {"strength": 1e-3}
    assert len(runs[0]["task_online_accuracy"]) == 1


@pytest.mark.parametrize("args,needle", [
    (["--problem", "nope", "--method", "baseline"], "valid: permuted_mnist"),
    (["--problem", "permuted_mnist", "--method", "nope"], "valid: baseline"),
    (["--problem", "permuted_mnist", "--method", "l2_init", "--set", "strenght=1"], "valid: strength"),
    (["--problem", "permuted_mnist", "--method", "l2_init", "--optimizer", "rmsprop"], "adam, sgd"),
    (["--problem", "permuted_mnist", "--method", "baseline", "--seeds", "3-1"], "seed range"),
])
def test_unknown_names_are_errors_that_list_the_valid_ones(args, needle, tmp_path, capsys):
    assert main(["run", *args, "--out", str(tmp_path), "--no-progress"]) == 2
    assert needle in capsys.readouterr().err


def test_unknown_toml_key_is_an_error(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('problem = "permuted_mnist"\nmethod = "baseline"\nlearning_rate = 0.1\n')
    assert main(["run", str(cfg), "--out", str(tmp_path)]) == 2
    assert "learning_rate" in capsys.readouterr().err


def test_a_data_dir_without_mnist_names_the_directory_and_the_file(tmp_path, capsys, monkeypatch):
    import plasticlab.data.download as download

    def offline(*args, **kwargs):
        raise OSError("no network in this test")

    monkeypatch.setattr(download, "_download", offline)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["run", *TINY, "--method", "baseline", "--data-dir", str(empty),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(empty) in err and "train-images-idx3-ubyte" in err


def test_seed_lists_and_ranges():
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("0,3,5") == [0, 3, 5]
    assert parse_seeds("0-1,7") == [0, 1, 7]
    assert parse_seeds([0, 3, "5-6"]) == [0, 3, 5, 6] and parse_seeds(4) == [4]  # TOML values
    with pytest.raises(ValueError):
        parse_seeds("a")
    with pytest.raises(ValueError):
        parse_seeds("1,1")


def test_python_dash_m_plasticlab_is_the_command(data_dir, tmp_path):
    # where pip's scripts folder is not on PATH, `python -m plasticlab` is the command
    proc = subprocess.run(
        [sys.executable, "-m", "plasticlab", "run", *TINY, "--method", "l2_init",
         "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["method"] == "l2_init"


# --- looking inside the network (measurements, forgetting) ----------------------------------------

MEASURED_KEYS = ("weight_magnitude", "srank", "effective_rank", "dead_fraction", "dormant_fraction",
                 "task_test_accuracy", "grad_norm")


def test_run_json_has_every_task_end_measurement_per_task(data_dir, tmp_path, capsys):
    assert main(["run", *TINY, "--method", "l2_init", "--seeds", "0-1", "--data-dir", str(data_dir),
                 "--out", str(tmp_path), "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    for r in runs:
        for key in MEASURED_KEYS:
            assert len(r[key]) == 2, key  # one entry per task
        assert all(len(layers) == 2 and all(isinstance(v, int) for v in layers) for layers in r["srank"])
        assert all(len(layers) == 2 for layers in r["effective_rank"])
        assert all(0 <= v <= 1 for v in r["dead_fraction"] + r["dormant_fraction"] + r["task_test_accuracy"])
        assert all(v > 0 for v in r["weight_magnitude"] + r["grad_norm"])
        assert "accuracy_matrix" not in r and "bwt" not in r
    with ResultStore(tmp_path) as store:
        metrics = store.task_metrics(store.runs(status="finished")[0]["run_id"])
        for key in (*MEASURED_KEYS, "dead_fraction_per_layer", "dormant_fraction_per_layer",
                    "weight_magnitude_per_layer", "online_accuracy"):
            assert len(metrics[key]) == 2, key


def test_forgetting_gives_a_lower_triangular_accuracy_matrix_and_bwt(data_dir, tmp_path, capsys):
    assert main(["run", *TINY, "--tasks", "3", "--method", "baseline", "--seeds", "4",
                 "--data-dir", str(data_dir), "--out", str(tmp_path), "--json", "--forgetting"]) == 0
    r = json.loads(capsys.readouterr().out)["runs"][0]
    A = r["accuracy_matrix"]
    assert [len(row) for row in A] == [1, 2, 3]
    assert [A[j][j] for j in range(3)] == r["task_test_accuracy"]
    assert r["bwt"] == pytest.approx(((A[2][0] - A[0][0]) + (A[2][1] - A[1][1])) / 2)
    assert r["one_step_bwt"] == pytest.approx(((A[1][0] - A[0][0]) + (A[2][1] - A[1][1])) / 2)
    with ResultStore(tmp_path) as store:
        run = store.runs(status="finished")[0]
        assert store.task_metrics(run["run_id"])["accuracy_matrix"] == A
        assert run["summary"]["bwt"] == pytest.approx(r["bwt"])


def test_printed_summary_shows_the_network_internals(data_dir, tmp_path, capsys):
    assert main(["run", *TINY, "--method", "l2_init", "--seeds", "0-1", "--data-dir", str(data_dir),
                 "--out", str(tmp_path), "--forgetting"]) == 0
    out = capsys.readouterr().out
    for needle in ("srank", "weight magnitude", "dead units", "test accuracy", "BWT", "one-step BWT"):
        assert needle in out, needle


def test_no_measure_and_measure_every(data_dir, tmp_path, capsys):
    common = [*TINY, "--method", "baseline", "--data-dir", str(data_dir), "--json"]
    assert main(["run", *common, "--out", str(tmp_path / "a"), "--no-measure"]) == 0
    r = json.loads(capsys.readouterr().out)["runs"][0]
    assert not any(key in r for key in MEASURED_KEYS) and len(r["task_online_accuracy"]) == 2
    assert main(["run", *common, "--out", str(tmp_path / "b"), "--measure-every", "5"]) == 0
    steps = json.loads(capsys.readouterr().out)["runs"][0]["step_measurements"]
    assert steps["step"] == [5, 10, 15, 20] and len(steps["srank"]) == 4
    assert main(["run", *common, "--out", str(tmp_path / "c"), "--no-measure", "--forgetting"]) == 2
    assert "--no-measure" in capsys.readouterr().err


def test_backprop_option_picks_how_gradients_are_computed_and_is_recorded(data_dir, tmp_path, capsys):
    common = [*TINY, "--method", "baseline", "--data-dir", str(data_dir), "--json", "--no-measure"]
    assert main(["run", *common, "--out", str(tmp_path / "a")]) == 0
    auto = json.loads(capsys.readouterr().out)["runs"][0]
    assert main(["run", *common, "--out", str(tmp_path / "b"), "--backprop", "autograd"]) == 0
    autograd = json.loads(capsys.readouterr().out)["runs"][0]
    assert (auto["backprop"], autograd["backprop"]) == ("manual", "autograd")
    assert auto["task_online_accuracy"] == pytest.approx(autograd["task_online_accuracy"], abs=1.5 / 160)
    with ResultStore(tmp_path / "b") as store:
        assert store.runs(status="finished")[0]["manifest"]["backprop"] == "autograd"
    assert main(["run", *TINY, "--method", "layer_norm", "--data-dir", str(data_dir),
                 "--out", str(tmp_path / "c"), "--backprop", "manual"]) == 2
    assert "backprop='manual' needs a plain ReLU MLP" in capsys.readouterr().err


def test_random_label_runs_have_no_test_accuracy_and_refuse_forgetting(data_dir, tmp_path, capsys):
    common = ["--problem", "random_label_mnist", "--method", "baseline", "--tasks", "2",
              "--steps-per-task", "5", "--set", "examples=64", "--no-progress",
              "--data-dir", str(data_dir), "--json"]
    assert main(["run", *common, "--out", str(tmp_path / "a")]) == 0
    r = json.loads(capsys.readouterr().out)["runs"][0]
    assert "task_test_accuracy" not in r and len(r["srank"]) == 2
    assert main(["run", *common, "--out", str(tmp_path / "b"), "--forgetting"]) == 2
    assert "test sets" in capsys.readouterr().err


def test_toml_run_file_can_ask_for_forgetting(data_dir, tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'problem = "permuted_mnist"\nmethod = "l2_init"\ntasks = 2\nsteps_per_task = 10\n'
                   f'forgetting = true\ndata_dir = "{data_dir}"\n'
                   '[problem_params]\nexamples_per_task = 160\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--json", "--no-progress"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert len(run["accuracy_matrix"]) == 2 and "bwt" in run


# -- results that are never lost, never silently changed, and never run code -------------------


@pytest.mark.parametrize("setting,needle", [
    (["--set", "strength=nan"], "strength must be a finite number >= 0"),
    (["--set", "strength=-1"], "strength must be a finite number >= 0"),
    (["--lr", "inf"], "lr must be a finite number > 0"),
    (["--tasks", "0"], "tasks must be an integer >= 1"),
    (["--batch-size", "0"], "batch_size must be an integer >= 1"),
    (["--set", "shrink=1.5"], "shrink must be a finite number >= 0 and <= 1"),
    (["--threads", "0"], "--threads must be >= 1"),
])
def test_invalid_numbers_are_one_line_errors_before_anything_is_created(setting, needle, tmp_path, capsys):
    out = tmp_path / "out"
    method = "shrink_perturb" if "shrink=1.5" in setting else "l2_init"
    assert main(["run", *TINY, "--method", method, *setting, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_a_missing_cuda_device_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["run", *TINY, "--method", "baseline", "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--device cuda: no CUDA device here" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_corrupt_results_store_is_a_one_line_error_naming_it(tmp_path, capsys):
    (tmp_path / "results.sqlite").write_bytes(b"not a database" * 100)
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "results.sqlite" in err and "move the file away" in err and len(err.strip().splitlines()) == 1


def test_a_diverged_run_prints_strict_json_and_a_warning(data_dir, tmp_path, capsys):
    code = main(["run", *TINY, "--method", "baseline", "--optimizer", "sgd", "--lr", "1e30",
                 "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["runs"][0]["diverged_at_task"] == 0
    assert doc["runs"][0]["weight_magnitude"][0] is None
    assert "diverged" in captured.err


def test_a_finished_run_is_skipped_unless_rerun_and_every_attempt_is_kept(data_dir, tmp_path, capsys):
    args = ["run", *TINY, "--method", "baseline", "--data-dir", str(data_dir), "--out", str(tmp_path),
            "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)["runs"][0]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"runs": []} and "already finished" in captured.err
    assert main([*args, "--rerun"]) == 0
    capsys.readouterr()
    with ResultStore(tmp_path) as store:
        attempts = store.attempts(first["run_id"])
        (run,) = store.runs()
    assert [a["status"] for a in attempts] == ["finished", "finished"]
    assert run["attempt"] == attempts[-1]["attempt"]
    assert run["manifest"]["ensemble"] == {"members": 1, "index": 0, "run_ids": [first["run_id"]],
                                           "seeds": [0], "params": [{}], "lr": [1e-3],
                                           "methods": ["baseline"]}
    assert run["manifest"]["data_files"] and not run["manifest"]["data_stand_in"]


def test_an_interrupted_run_keeps_the_earlier_results_and_resumes_from_its_checkpoint(
        data_dir, tmp_path, capsys, monkeypatch):
    from plasticlab.experiments import executor

    args = ["run", *TINY, "--method", "l2_init", "--set", "tasks=3", "--data-dir", str(data_dir),
            "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)["runs"][0]

    real = executor.progress_bar

    def interrupting_bar(*a, **k):  # Ctrl-C right after the first task's checkpoint
        bar, on_task_end = real(*a, **k)

        def stop(task, accs):
            on_task_end(task, accs)
            raise KeyboardInterrupt

        return bar, stop

    monkeypatch.setattr(executor, "progress_bar", interrupting_bar)
    monkeypatch.setattr(executor, "code_identity", lambda: "git:" + "a" * 40)  # an older commit
    assert main([*args, "--rerun"]) == 130
    assert "interrupted" in capsys.readouterr().err
    with ResultStore(tmp_path) as store:
        assert [a["status"] for a in store.attempts(first["run_id"])] == ["finished", "interrupted"]
        assert store.runs()[0]["summary"]["total_online_accuracy"] == first["total_online_accuracy"]
    assert list((tmp_path / "checkpoints").glob("run-*.ckpt"))

    monkeypatch.setattr(executor, "progress_bar", real)
    monkeypatch.setattr(executor, "code_identity", lambda: "git:" + "b" * 40)
    assert main([*args, "--rerun"]) == 0
    captured = capsys.readouterr()
    assert "resuming from" in captured.err and "at task 1" in captured.err
    # the resume says, before it trains, that the runs will mix two codes
    assert "note: of its first 1 task(s), some were trained by other code" in captured.err
    assert f"): git:{'a' * 40}; the runs it finishes" in captured.err
    assert json.loads(captured.out)["runs"][0]["task_online_accuracy"] == first["task_online_accuracy"]
    assert not list((tmp_path / "checkpoints").glob("*.ckpt"))
    # the run records which code trained which tasks, and counts as other code for both
    with ResultStore(tmp_path) as store:
        sittings = store.runs()[0]["manifest"]["sittings"]
    assert [(s["from_task"], s["code"]) for s in sittings] == [(0, "git:" + "a" * 40), (1, "git:" + "b" * 40)]
    assert all(s["device"] == "cpu" and s["torch"] and s["started"] for s in sittings)
    assert main(["status", str(tmp_path)]) == 0
    assert f"1 by git:{'a' * 40} then git:{'b' * 40}" in capsys.readouterr().out


def test_a_corrupt_checkpoint_is_a_one_line_error_naming_the_file(data_dir, tmp_path, capsys):
    from plasticlab.experiments.config import resolve_config
    from plasticlab.experiments.recording import checkpoint_path
    from plasticlab.run_config import Members

    config = resolve_config({"problem": "permuted_mnist", "method": "baseline", "tasks": 2,
                             "steps_per_task": 10, "problem_params": {"examples_per_task": 160}})
    path = checkpoint_path(tmp_path, Members.from_config(config, [0]))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x80\x04garbage")
    assert main(["run", *TINY, "--method", "baseline", "--data-dir", str(data_dir),
                 "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and f"delete {path}" in err and len(err.strip().splitlines()) == 1


def test_the_demo_prints_its_table_under_the_methods_titles_and_saves_its_figure(data_dir, tmp_path, capsys):
    from plasticlab.demo import run_demo

    curves = run_demo(tasks=2, steps_per_task=20, seeds=(0, 1), data_dir=data_dir, out=tmp_path / "demo",
                      workers=1, progress=False)
    assert list(curves) == ["Baseline", "L2 Init λ=0.01"] and all(len(c) == 2 for c in curves.values())
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.split()[:1] == ["task"])
    assert header.split() == ["task", "Baseline", "L2", "Init", "λ=0.01"]
    assert "total" in out and (tmp_path / "demo" / "online_accuracy.png").is_file()


def test_every_option_of_every_command_says_what_it_is():
    import argparse

    from plasticlab.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = {name: [a.option_strings[0] if a.option_strings else a.dest for a in parser._actions
                     if not a.help and not isinstance(a, argparse._HelpAction)]
              for name, parser in commands.choices.items()}
    assert {name: options for name, options in silent.items() if options} == {}
