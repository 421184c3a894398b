"""``plasticlab compare A B``: the runs two results directories both hold have the same online
accuracy on every task both ran, and the same task-end measurements, or are named with the task
and the metric where they part."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from conftest import change_recorded_accuracy, change_recorded_measurement
from plasticlab.cli import main
from plasticlab.experiments.compare import first_difference, mean_online_measure, run_key
from plasticlab.experiments.export import EXPORT_NAME, export_results

SWEEP = """
name = "tiny"
problem = "permuted_mnist"
methods = {methods}
seeds = "0-1"
tasks = {tasks}
steps_per_task = 12
[problem_params]
examples_per_task = 160
"""


def _sweep(root: Path, data_dir: Path, tasks: int, methods: list[str]) -> Path:
    (root / "sweep.toml").write_text(SWEEP.format(methods=json.dumps(methods), tasks=tasks))
    # inline, in this process: the executor is no part of what is compared (and a worker
    # process takes ~2 s of a core to start)
    assert main(["sweep", str(root / "sweep.toml"), "--out", str(root / "out"), "--data-dir",
                 str(data_dir), "--workers", "1", "--no-progress", "--executor", "inline"]) == 0
    return root / "out"


@pytest.fixture(scope="module")
def short_and_long(data_dir, tmp_path_factory) -> tuple[Path, Path]:
    """Two sweeps of the same configurations and seeds, 2 and 3 tasks long; the longer one with
    a third method the shorter lacks, in ensembles of another make-up."""
    short = _sweep(tmp_path_factory.mktemp("short"), data_dir, 2, ["l2_init", "shrink_perturb"])
    long = _sweep(tmp_path_factory.mktemp("long"), data_dir, 3, ["l2_init", "l2", "shrink_perturb"])
    return short, long


def test_a_longer_run_has_the_accuracies_of_a_shorter_one_on_the_tasks_both_ran(short_and_long, capsys):
    short, long = short_and_long
    assert main(["compare", str(short), str(long)]) == 0
    out = capsys.readouterr().out
    assert "4 run(s) in both, 0 only in A, 2 only in B" in out
    assert "  same       l2_init, adam: 2 run(s), 2 task(s)" in out
    assert "  same       shrink_perturb, adam: 2 run(s), 2 task(s)" in out
    assert out.rstrip().endswith("the same online accuracy on every task both ran, bit for bit; and the 4 "
                                 "measured alike their task-end measurements, to 7 significant digits")


@pytest.mark.parametrize("metric", ["online accuracy", "grad norm"])
def test_a_run_that_differs_is_named_with_the_first_task_and_metric_it_differs_on(metric, short_and_long,
                                                                                  tmp_path, capsys):
    # a measurement in its 7th digit: a change that moves the weights by a rounding step can
    # leave the accuracies as they were
    short, long = short_and_long
    export_results(short, tmp_path / "export")
    if metric == "online accuracy":
        task, (run, was) = 1, change_recorded_accuracy(tmp_path / "export", "shrink_perturb", task=1, by=0.25)
        now = was + 0.25
    else:
        task, (run, was) = 0, change_recorded_measurement(tmp_path / "export", "shrink_perturb", "grad_norm",
                                                          task=0)
        now = float(format(was * (1 + 5e-6), ".7g"))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "export"), str(long)]) == 1
    out = capsys.readouterr().out
    assert "  DIFFERENT  shrink_perturb, adam: 1 of 2 run(s)" in out
    assert f"    seed {run['seed']} (run {run['run_id']} in A, " in out
    assert f"task {task}, {metric}: {now!r} in A, " in out
    assert "  same       l2_init, adam: 2 run(s), 2 task(s)" in out
    assert "1 run(s) differ" in out


def test_statistically_identical_runs_agree_with_a_zero_difference(short_and_long, capsys):
    short, long = short_and_long
    assert main(["compare", str(short), str(long), "--statistical"]) == 0
    out = capsys.readouterr().out
    assert "  consistent l2_init, adam: 2 run(s), 2 task(s): A − B = +0.00 points [+0.00, +0.00]" in out
    assert "; 2 the same bit for bit" in out
    assert "97.5 % each, 95 % for the 2 method(s) together" in out
    assert out.rstrip().endswith("agree within the spread of their seeds")


def test_statistically_a_method_shifted_on_every_seed_differs_and_one_off_seed_does_not(
        short_and_long, tmp_path, capsys):
    short, long = short_and_long
    export_results(short, tmp_path / "export")
    # every run of L2 Init 0.25 higher on task 1: its total over 2 tasks 12.5 points higher
    change_recorded_accuracy(tmp_path / "export", "l2_init", task=1, by=0.25, every_run=True)
    # one run of S&P off: a difference the seeds' spread holds
    change_recorded_accuracy(tmp_path / "export", "shrink_perturb", task=0, by=0.25)
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "export"), str(long), "--statistical"]) == 1
    out = capsys.readouterr().out
    assert "  DIFFERENT  l2_init, adam: 2 run(s), 2 task(s): A − B = +12.50 points [+12.50, +12.50]" in out
    assert "; 0 the same bit for bit" in out
    assert ("  consistent shrink_perturb, adam: 2 run(s), 2 task(s): A − B = +6.25 points "
            "[+0.00, +12.50]") in out
    assert "1 method(s) differ: their interval excludes 0" in out


def test_a_runs_total_is_its_mean_online_measure_over_the_tasks_compared():
    assert mean_online_measure([0.5, 0.7, 0.9], 2) == pytest.approx(0.6)
    assert math.isnan(mean_online_measure([0.5, None], 2))  # a diverged task
    assert math.isnan(mean_online_measure([], 0))


def test_directories_without_a_run_in_common_are_an_error(short_and_long, tmp_path, capsys):
    short, _ = short_and_long
    export_results(short, tmp_path / "export")
    path = tmp_path / "export" / EXPORT_NAME
    body = json.loads(gzip.decompress(path.read_bytes()))
    for run in body["runs"]:
        run["seed"] += 100
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    assert main(["compare", str(short), str(tmp_path / "export")]) == 2
    assert "hold no run in common" in capsys.readouterr().err
    assert main(["compare", str(short), str(tmp_path / "nothing")]) == 2
    assert "holds no results store" in capsys.readouterr().err


def compare_runs(a: list, b: list) -> tuple[int, int | None]:
    """Two runs that recorded only these online accuracies: how many tasks they share, and the
    first where they part."""
    run = {"config": {"internals_on": "current"}, "manifest": {}, "summary": {}}
    tasks, parted, _ = first_difference(run, {"online_accuracy": a}, run, {"online_accuracy": b})
    return tasks, parted and parted[0]


def test_two_runs_are_compared_on_the_tasks_both_ran():
    assert compare_runs([0.5, 0.6], [0.5, 0.6, 0.7]) == (2, None)
    assert compare_runs([0.5, 0.6, 0.7], [0.5, 0.61]) == (2, 1)
    assert compare_runs([], [0.5]) == (0, None)


def test_a_diverged_task_is_the_same_in_a_store_and_in_its_export():
    nan = float("nan")
    assert compare_runs([0.5, nan], [0.5, None]) == (2, None)  # the store's NaN, the export's null
    assert compare_runs([0.5, None], [0.5, None]) == (2, None)
    assert compare_runs([0.5, nan], [0.5, 0.1]) == (2, 1)


def test_measurements_are_compared_only_where_both_runs_were_measured_alike():
    def run(samples, internals_on="current"):
        return {"config": {"internals_on": internals_on}, "summary": {},
                "manifest": {"measurements": {"task_end": True, "samples": samples}}}

    a = {"online_accuracy": [0.5, 0.6], "grad_norm": [1.0, 2.0]}
    b = {"online_accuracy": [0.5, 0.6], "grad_norm": [1.0, 2.000001]}
    assert first_difference(run(500), a, run(500), b) == (2, (1, "grad_norm"), ["grad_norm"])
    assert first_difference(run(500), a, run(1000), b) == (2, None, [])  # other samples: online only
    # measured on the next task's inputs, a shorter run's last task was measured on its own
    longer = {"online_accuracy": [0.5, 0.6, 0.7], "grad_norm": [1.0, 2.000001, 3.0]}
    assert first_difference(run(500, "next"), a, run(500, "next"), longer)[1] is None
    assert first_difference(run(500), a, run(500), longer)[1] == (1, "grad_norm")


def test_a_run_is_the_same_run_whatever_its_number_of_tasks_but_not_its_seed():
    run = {"config": {"method": "l2_init", "tasks": 2, "lr": 1e-3}, "seed": 0}
    assert run_key(run) == run_key({**run, "config": {**run["config"], "tasks": 500}})
    assert run_key(run) != run_key({**run, "seed": 1})
    assert run_key(run) != run_key({**run, "config": {**run["config"], "lr": 1e-4}})


def test_a_regressions_runs_are_compared_on_their_online_squared_error(tmp_path, capsys):
    """A regression records no online accuracy: its runs are compared on their online squared
    error, task by task and statistically (as it is, not in points), in groups of their own."""
    def run(out: str, tasks: int) -> Path:
        assert main(["run", "--problem", "slowly_changing_regression", "--method", "l2_init", "--seeds",
                     "0-1", "--tasks", str(tasks), "--steps-per-task", "20", "--no-progress",
                     "--out", str(tmp_path / out)]) == 0
        return tmp_path / out

    short, long = run("short", 2), run("long", 3)
    capsys.readouterr()
    assert main(["compare", str(short), str(long)]) == 0
    printed = capsys.readouterr().out
    assert "same       l2_init, adam, online squared error: 2 run(s), 2 task(s)" in printed
    assert main(["compare", str(short), str(long), "--statistical"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "online squared error:" in x)
    assert line.lstrip().startswith("consistent") and "points" not in line and "%" not in line
    assert "A − B = +0 [+0, +0]" in line and "2 the same bit for bit" in line
