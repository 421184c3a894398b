"""``plasticlab verify``: recorded runs trained again give their recorded online accuracies, bit
for bit, and their task-end measurements, or are named with the task and the metric where they
part."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
import torch

from conftest import change_recorded_accuracy, change_recorded_measurement
from plasticlab.cli import main
from plasticlab.experiments.export import EXPORT_NAME, export_results
from plasticlab.experiments.verify import (
    alone_is_exact,
    choose,
    ensembles,
    recorded_metrics,
    same_measurement,
    verify_ensemble,
)

SWEEP = """
name = "tiny"
problem = "permuted_mnist"
methods = ["l2_init", "l2", "shrink_perturb"]
seeds = "0-1"
tasks = 2
steps_per_task = 12
[problem_params]
examples_per_task = 160
"""
PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"


def verify(args: list[str]) -> int:
    """``plasticlab verify ARGS`` in this process (``--workers 1`` unless ARGS say: a spawned
    worker takes ~2 s of a core to start)."""
    return main(["verify", *([] if "--workers" in args else ["--workers", "1"]), *args])


@pytest.fixture(scope="module")
def swept(data_dir, tmp_path_factory) -> Path:
    """A finished sweep of three methods, two of them (the penalties) in one ensemble."""
    root = tmp_path_factory.mktemp("verify")
    (root / "sweep.toml").write_text(SWEEP)
    # inline, in this process: the executor is no part of what is verified (and a worker
    # process takes ~2 s of a core to start)
    assert main(["sweep", str(root / "sweep.toml"), "--out", str(root / "out"), "--data-dir",
                 str(data_dir), "--workers", "1", "--no-progress", "--executor", "inline"]) == 0
    return root / "out"


def test_verify_trains_each_kind_of_ensemble_again_and_finds_its_recorded_accuracies(
        swept, data_dir, tmp_path, capsys):
    export_results(swept, tmp_path / "export")
    for directory in (swept, tmp_path / "export"):  # the store, and the export made of it
        capsys.readouterr()
        assert verify([str(directory), "--tasks", "2", "--data-dir", str(data_dir)]) == 0
        out = capsys.readouterr().out
        assert "2 ensemble(s) of 6 finished runs trained again for 2 task(s)" in out
        assert "same       l2_init+l2, adam, K=4: 4 run(s), 2 task(s)" in out
        assert "same       shrink_perturb, adam, K=2: 2 run(s), 2 task(s)" in out
        # the export keeps 7 measurements a report draws; the store, those and more
        assert re.search(r"same       l2_init\+l2, adam, K=4: 4 run\(s\), 2 task\(s\), (7|1\d) "
                         r"measurement", out)
        assert re.search(r"every run checked gives its recorded online accuracy, bit for bit, and its "
                         r"task-end measurements \(dead_fraction, .*grad_norm, .*weight_magnitude.*\) to 7 "
                         r"significant digits\n$", out)


def test_a_recorded_accuracy_this_code_does_not_give_is_named_with_its_task(swept, data_dir, tmp_path,
                                                                           capsys):
    export_results(swept, tmp_path / "export")
    run, now = change_recorded_accuracy(tmp_path / "export", "shrink_perturb", task=1, by=0.5)
    capsys.readouterr()
    assert verify([str(tmp_path / "export"), "--tasks", "2", "--data-dir", str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT  shrink_perturb, adam, K=2: 1 of 2 run(s)" in out
    assert (f"run {run['run_id']} (shrink_perturb, seed {run['seed']}): task 1, online accuracy: "
            f"recorded {now + 0.5!r}, now {now!r}") in out
    assert "1 run(s) differ" in out
    # a check of the first task alone does not reach the change
    assert verify([str(tmp_path / "export"), "--tasks", "1", "--data-dir", str(data_dir)]) == 0


def test_a_task_end_measurement_this_code_does_not_give_is_named_with_its_task_and_metric(
        swept, data_dir, tmp_path, capsys):
    export_results(swept, tmp_path / "export")
    run, was = change_recorded_measurement(tmp_path / "export", "shrink_perturb", "grad_norm", task=0)
    capsys.readouterr()
    assert verify([str(tmp_path / "export"), "--tasks", "1", "--data-dir", str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT  shrink_perturb, adam, K=2: 1 of 2 run(s)" in out
    assert f"run {run['run_id']} (shrink_perturb, seed {run['seed']}): task 0, grad norm: recorded " in out
    assert f"now {was!r}" in out  # this code's value, as the export keeps it
    # the online accuracy alone does not see it
    assert verify([str(tmp_path / "export"), "--tasks", "1", "--online-only", "--data-dir",
                 str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "measurement(s)" not in out
    assert out.rstrip().endswith("every run checked gives its recorded online accuracy, bit for bit")


def test_measurements_are_the_same_to_the_exports_digits_and_accuracies_to_the_bit():
    assert same_measurement("grad_norm", 4.202524, 4.2025244)
    assert not same_measurement("grad_norm", 4.202524, 4.202525178622813)
    assert not same_measurement("online_accuracy", 0.7774, 0.7774000000000001)
    assert same_measurement("srank", [90, 87], [90, 87])
    assert not same_measurement("srank", [90, 87], [90, 88])
    assert not same_measurement("effective_rank", [25.5139], [25.5139, 17.83703])
    assert same_measurement("weight_magnitude", None, math.nan)  # diverged: None in JSON, NaN now
    assert not same_measurement("weight_magnitude", None, 0.02)
    assert same_measurement("accuracy_matrix", [0.5, None], [0.5, math.nan])


@pytest.mark.parametrize("members", [1, 3])
def test_the_first_runs_of_an_ensemble_trained_on_their_own_give_their_recorded_accuracies(
        swept, data_dir, members, capsys):
    assert verify([str(swept), "--tasks", "2", "--members", str(members), "--data-dir",
                 str(data_dir)]) == 0
    out = capsys.readouterr().out
    # L2 Init and L2 share an ensemble of 4: its first 1 or 3 members, mixed methods and all
    assert f"same       l2_init+l2, adam, K=4: {members} run(s), 2 task(s)" in out
    assert f"({members} member(s) trained again)" in out
    assert "same       shrink_perturb, adam, K=2: " in out


def test_a_change_in_a_run_checked_on_its_own_is_found(swept, data_dir, tmp_path, capsys):
    export_results(swept, tmp_path / "export")
    run, now = change_recorded_accuracy(tmp_path / "export", "shrink_perturb", task=1, by=0.5)
    capsys.readouterr()
    assert verify([str(tmp_path / "export"), "--tasks", "2", "--members", "1", "--data-dir",
                 str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERENT  shrink_perturb, adam, K=2: 1 of 1 run(s), recorded by" in out
    assert f"run {run['run_id']} (shrink_perturb, seed {run['seed']}): task 1" in out


def test_runs_are_checked_on_their_own_only_where_member_k_is_seed_k_alone():
    def run(optimizer, method="l2_init", problem="permuted_mnist", threads=1):
        return {"config": {"optimizer": optimizer, "method": method, "problem": problem},
                "manifest": {"threads": threads}}

    assert alone_is_exact([run("adam"), run("sgd", "baseline")])
    assert alone_is_exact([run("adam", "fire", "random_label_cifar")])
    assert alone_is_exact([run("upgd", "baseline"), run("upgd_nonprotecting", "baseline")])
    assert not alone_is_exact([run("adam"), run("lion", "baseline")])  # not tested: the whole ensemble
    assert not alone_is_exact([run("adam", threads=2)])
    assert not alone_is_exact([run("adam")], device="cuda")


def test_verify_needs_recorded_runs_and_a_task(tmp_path, capsys):
    assert verify([str(tmp_path)]) == 2
    assert "holds no results store" in capsys.readouterr().err
    assert verify([str(tmp_path), "--tasks", "0"]) == 2
    assert "--tasks must be >= 1" in capsys.readouterr().err
    assert verify([str(tmp_path), "--members", "0"]) == 2
    assert "--members must be >= 1" in capsys.readouterr().err


def test_a_missing_dataset_is_one_error_before_any_ensemble_trains(swept, tmp_path, capsys, monkeypatch):
    import plasticlab.data.download as download_module

    def offline(url, md5, dest_dir):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(download_module, "_download", offline)
    assert verify([str(swept), "--data-dir", str(tmp_path / "nodata"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("train-images-idx3-ubyte.gz is missing from") == 1
    assert not (tmp_path / "nodata").exists()


# The committed studies on Permuted MNIST that train L2 Init: the ensemble holding it, its first
# tasks. A study run before a change to the code that alters numbers fails here until it is run
# again (`plasticlab verify docs/reproduction/STUDY` names its runs).
PERMUTED_MNIST_STUDIES = ["ablation", "batch-size", "best-permuted_mnist-adam", "best-permuted_mnist-sgd",
                          "depth", "field-permuted_mnist", "forgetting", "init", "lambda-sensitivity",
                          "width"]
# Of that ensemble, one L2 Init run of each of its settings (step size, λ), at most this many,
# trained on their own (`verify --members`: where member k is seed k alone, bit for bit): the
# whole ensemble, up to 16 members, took up to ~15 s of a core (width's, 4× as wide).
CHECKED_ALONE = 4
# Their first two tasks with the task-end measurements, as `verify` checks by default: the
# first task's online accuracy alone let `best-permuted_mnist-sgd`'s L2 Init, trained before a
# change to its gradient's arithmetic (820d403), pass (provenance.md).
TASKS_CHECKED = 2


def l2_init_runs_to_check(ensemble: list[dict]) -> list[dict]:
    """One L2 Init run of each setting (step size, parameters) of ``ensemble``, at most
    :data:`CHECKED_ALONE`."""
    settings = {}
    for run in ensemble:
        if run["config"]["method"] == "l2_init":
            settings.setdefault((run["config"]["lr"], repr(sorted(run["config"]["params"].items()))), run)
    return list(settings.values())[:CHECKED_ALONE]


# width's networks are up to 4× as wide: ~6 s of a core, a long test
@pytest.mark.parametrize("study", [pytest.param(s, marks=pytest.mark.slow) if s == "width" else s
                                   for s in PERMUTED_MNIST_STUDIES])
def test_the_committed_l2_init_runs_of_a_permuted_mnist_study_train_to_the_same_first_tasks(study, data_dir):
    runs, recorded = recorded_metrics(PAGE / study)
    groups = [g for g in choose(ensembles(runs)) if "l2_init" in {r["config"]["method"] for r in g}]
    assert groups and all(r["config"]["problem"] == "permuted_mnist" for r in runs), study
    # the first of the ensembles with the fewest steps a task (batch-size's batch 1 has 10,000)
    group = min(groups, key=lambda g: g[0]["config"]["steps_per_task"])
    checked = l2_init_runs_to_check(group)
    rest = [r for r in group if r not in checked]
    check = verify_ensemble(checked + rest, recorded, TASKS_CHECKED, data_dir=data_dir, limit=len(checked))
    # where a run alone is not exact, verify trains (and compares) the whole ensemble
    assert check.compared == check.trained == (len(checked) if alone_is_exact(checked) else len(group))
    assert check.same, (f"{study}: {check.mismatches}; this code does not give the committed numbers: "
                        "run the study again or find the change")


def test_a_regressions_runs_are_verified_on_their_online_squared_error(data_dir, tmp_path, capsys):
    """The slowly-changing regression records no online accuracy: verify trains it again and
    compares its online squared error, task by task, and finds a changed one."""
    out = tmp_path / "out"
    assert main(["sweep", "--preset", "field-slowly_changing_regression", "--tasks", "2", "--scale", "0.01",
                 "--only", "method=baseline,l2_init", "--only", "seed=0", "--out", str(out),
                 "--workers", "1", "--no-progress", "--executor", "inline"]) == 0
    capsys.readouterr()
    assert verify([str(out), "--tasks", "2"]) == 0
    said = capsys.readouterr().out
    assert "every run checked gives its recorded online squared error, bit for bit, and its task-end" in said
    export_results(out, tmp_path / "export")
    path = tmp_path / "export" / EXPORT_NAME
    body = json.loads(gzip.decompress(path.read_bytes()))
    run = next(r for r in body["runs"] if r["config"]["method"] == "baseline")
    body["task_metrics"][run["run_id"]]["online_squared_error"][1] *= 1.5
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    assert verify([str(tmp_path / "export"), "--tasks", "2"]) == 1
    said = capsys.readouterr().out
    assert f"run {run['run_id']} (baseline, seed 0): task 1, online squared error: recorded" in said


def test_ensembles_verified_in_worker_processes_give_the_lines_one_process_gives(swept, data_dir, tmp_path,
                                                                                capsys):
    """``--workers 2`` trains the two ensembles in two spawned processes at once; the lines,
    their order, a run that differs and the exit code are those of one process."""
    export_results(swept, tmp_path / "export")
    run, _ = change_recorded_accuracy(tmp_path / "export", "shrink_perturb", task=1, by=0.5)
    said = {}
    for workers in ("1", "2"):
        capsys.readouterr()
        assert verify([str(tmp_path / "export"), "--tasks", "2", "--workers", workers,
                       "--data-dir", str(data_dir)]) == 1
        said[workers] = capsys.readouterr().out
    assert f"torch {torch.__version__}, 2 worker(s))" in said["2"]
    assert said["2"].replace("2 worker(s)", "1 worker(s)") == said["1"]
    assert f"run {run['run_id']} (shrink_perturb, seed {run['seed']}): task 1" in said["2"]
    assert verify([str(tmp_path), "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_a_folder_of_studies_is_verified_study_by_study_and_a_change_in_one_is_named_under_it(
        swept, data_dir, tmp_path, capsys):
    """``verify docs/reproduction`` checks every study under it: each study's ensembles under
    its folder's line, one verdict for all."""
    for name in ("one", "two"):
        export_results(swept, tmp_path / "pages" / name)
    run, _ = change_recorded_accuracy(tmp_path / "pages" / "two", "l2_init", task=0, by=0.25)
    capsys.readouterr()
    assert verify([str(tmp_path / "pages"), "--tasks", "1", "--online-only", "--data-dir",
                   str(data_dir)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"verify 2 studies under {tmp_path / 'pages'}: 4 ensemble(s) of 12 finished runs")
    one, two = out.split(f"{tmp_path / 'pages' / 'one'}: 2 ensemble(s) of 6 finished runs\n")[1].split(
        f"{tmp_path / 'pages' / 'two'}: 2 ensemble(s) of 6 finished runs\n")
    assert "DIFFERENT" not in one and one.count("  same       ") == 2
    assert "DIFFERENT  l2_init+l2, adam, K=4: 1 of 4 run(s)" in two
    assert f"run {run['run_id']} (l2_init, seed {run['seed']}): task 0" in two
    assert out.rstrip().endswith("1 run(s) differ: this code does not give their recorded numbers (a run "
                                 "recorded by other code, another device or more threads may; "
                                 "docs/member-independence.md)")
    # a folder given twice, or with its parent, is checked once
    assert verify([str(tmp_path / "pages" / "one"), str(tmp_path / "pages"), "--tasks", "1", "--online-only",
                   "--data-dir", str(data_dir)]) == 1
    assert capsys.readouterr().out.startswith("verify 2 studies: 4 ensemble(s) of 12 finished runs")
