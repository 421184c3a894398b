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
    with pytest.raises(ValueError):
        parse_seeds("a")
    with pytest.raises(ValueError):
        parse_seeds("1,1")


def test_the_console_script_runs(data_dir, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "plasticlab.cli", "run", *TINY, "--method", "l2_init",
         "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runs"][0]["method"] == "l2_init"
