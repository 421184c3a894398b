"""Warm-start (plasticlab.problems.warm_start): task 0 a fraction of the training set, task 1 all of
it, as FIRE and Hare & Tortoise run it; the test accuracy after each phase; a run from the CLI and
a sweep with the from-scratch reference (full_reset); member independence; missing data."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import numpy as np
import pytest
import torch

from plasticlab.cli import main
from plasticlab.data import DataError
from plasticlab.engine import EnsembleTraining
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.problems import WarmStartCIFAR, WarmStartMNIST, get_problem
from plasticlab.run_config import Members

SMALL = {"steps_per_task": 6, "batch_size": 16}


def test_defaults_are_two_phases_of_100_epochs_at_batch_256_with_a_tenth_first():
    for cls, images in ((WarmStartMNIST, 60_000), (WarmStartCIFAR, 10_000)):
        assert cls.defaults == {"tasks": 2, "steps_per_task": 100 * (images // 256), "batch_size": 256}
        assert cls.resolve_parameters({}) == {"warm_fraction": 0.1, "warm_label_noise": 0.0,
                                              "train_examples": 0}
    assert (WarmStartMNIST.arch, WarmStartCIFAR.arch) == ("mlp", "cnn")
    assert WarmStartMNIST.has_test_sets and WarmStartCIFAR.has_test_sets


def test_phase_one_is_the_first_tenth_of_the_seeds_shuffle_and_phase_two_all_of_the_training_set(mnist_dir):
    p = WarmStartMNIST([3, 4], data_dir=mnist_dir, **SMALL)
    n = len(p.x_train)
    for k, seed in enumerate(p.seeds):
        warm, full = p.member_task(k, seed, 0), p.member_task(k, seed, 1)
        assert warm.size == n // 10 == 6000
        assert full.size == n and sorted(full.index.tolist()) == list(range(n))  # all of it
        assert set(warm.index.tolist()) <= set(full.index.tolist())
        # clean labels in both phases (no label noise by default): each image's own label
        assert torch.equal(warm.y, p.y_train[torch.from_numpy(warm.index)])
        assert torch.equal(full.y, p.y_train[torch.from_numpy(full.index)])
    # the seed fixes the first phase's images
    first = [set(p.member_task(k, s, 0).index.tolist()) for k, s in enumerate(p.seeds)]
    assert first[0] != first[1]
    again = WarmStartMNIST([4], data_dir=mnist_dir, **SMALL)
    assert set(again.member_task(0, 4, 0).index.tolist()) == first[1]


def test_warm_fraction_and_train_examples_set_the_phase_sizes(mnist_dir):
    p = WarmStartMNIST([0], data_dir=mnist_dir, warm_fraction=0.25, train_examples=1000, **SMALL)
    warm, full = p.member_task(0, 0, 0), p.member_task(0, 0, 1)
    assert (warm.size, full.size) == (250, 1000)
    assert set(warm.index.tolist()) <= set(full.index.tolist())


def test_label_noise_gives_exactly_that_fraction_of_phase_one_a_wrong_label_and_phase_two_is_clean(
        cifar10_dir):
    p = WarmStartCIFAR([7], data_dir=cifar10_dir, warm_label_noise=0.5, **SMALL)
    warm, full = p.member_task(0, 7, 0), p.member_task(0, 7, 1)
    true = p.y_train[torch.from_numpy(warm.index)]
    wrong = warm.y != true
    assert int(wrong.sum()) == warm.size // 2 == 500  # Hare & Tortoise: int(n · 0.5)
    # a wrong label is any other class (1 … C − 1 away, uniformly): all nine offsets turn up
    offsets = Counter(((warm.y - true) % 10)[wrong].tolist())
    assert set(offsets) == set(range(1, 10))
    assert torch.equal(full.y, p.y_train[torch.from_numpy(full.index)])


def test_both_phases_are_tested_on_the_whole_test_set(cifar10_dir):
    p = WarmStartCIFAR([0, 1], data_dir=cifar10_dir, **SMALL)
    for task in (0, 1):
        test = p.member_test(0, 0, task)
        assert test.size == len(p.x_test) == 2000
        assert torch.equal(test.y, p.y_test)


@pytest.mark.parametrize("settings, message", [
    ({"tasks": 3}, "two phases"),
    ({"warm_fraction": 1e-5, "train_examples": 1000}, "warm_fraction"),
    ({"train_examples": 70_000}, "train_examples"),
])
def test_settings_that_break_the_two_phases_are_value_errors_naming_them(mnist_dir, settings, message):
    with pytest.raises(ValueError, match=message):
        WarmStartMNIST([0], data_dir=mnist_dir, **{**SMALL, **settings})


def test_a_truncated_mnist_file_is_a_data_error_naming_it(real_mnist_dir, tmp_path):
    dest = tmp_path / "mnist"
    shutil.copytree(real_mnist_dir, dest)
    target = next(iter(sorted(dest.glob("train-labels*"))))
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(DataError) as info:
        WarmStartMNIST([0], data_dir=tmp_path, **SMALL)
    assert str(target) in str(info.value)


def _config(problem: str, method: str = "baseline", **problem_params):
    # test accuracy on the first 100 of each seed's shuffled test set: the whole one is the CNN's
    # main cost here
    return resolve_config({"problem": problem, "method": method, "tasks": 2, **SMALL,
                           "test_examples": "100",
                           "problem_params": {"train_examples": 320, **problem_params}})


@pytest.mark.parametrize("problem", ["warm_start_mnist", "warm_start_cifar"])
def test_member_k_of_an_ensemble_is_seed_k_alone(data_dir, problem):
    config = _config(problem, "l2_init")
    together, alone = (EnsembleTraining(Members.from_config(config, seeds), data_dir=data_dir)
                       for seeds in ([5, 6], [6]))
    for task in range(2):
        assert together.run_task(task)[1] == alone.run_task(task)[0]
    for p, q in zip(together.net.parameters(), alone.net.parameters(), strict=True):
        assert torch.equal(p[1], q[0])
    tested = [m.task_metrics["task_test_accuracy"] for m in (together.result().members[1],
                                                             alone.result().members[0])]
    assert tested[0] == tested[1] and len(tested[0]) == 2  # after each phase


def test_a_run_from_the_cli_records_the_test_accuracy_after_each_phase(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "warm_start_mnist", "--method", "baseline", "--tasks", "2",
                 "--steps-per-task", "6", "--batch-size", "16", "--set", "train_examples=320",
                 "--seeds", "0-1", "--data-dir", str(data_dir), "--out", str(tmp_path),
                 "--no-progress", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [r["problem"] for r in runs] == ["warm_start_mnist"] * 2
    for r in runs:
        assert len(r["task_online_accuracy"]) == 2
        assert len(r["task_test_accuracy"]) == 2 and all(0 <= a <= 1 for a in r["task_test_accuracy"])


def test_a_sweep_runs_the_warm_start_beside_its_from_scratch_reference(data_dir, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('name = "warm"\nproblem = "warm_start_cifar"\nmethods = ["baseline", "full_reset"]\n'
                     'seeds = "0"\ntasks = 2\nsteps_per_task = 4\nbatch_size = 16\ntest_examples = "100"\n'
                     '[problem_params]\ntrain_examples = 160\n')
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--workers", "1",
                 "--executor", "inline", "--no-progress"]) == 0
    with ResultStore(out) as store:
        runs = {r["config"]["method"]: r for r in store.runs(status="finished")}
        assert set(runs) == {"baseline", "full_reset"}
        for run in runs.values():
            assert len(store.task_metrics(run["run_id"])["task_test_accuracy"]) == 2
    assert get_problem("warm_start_cifar").online_measure() == "online_accuracy"


def test_the_preset_compares_baseline_and_l2_init_with_the_from_scratch_full_reset():
    from plasticlab.experiments.presets import get_preset
    from plasticlab.experiments.sweep import expand

    for problem in ("warm_start_mnist", "warm_start_cifar"):
        runs = expand(get_preset(f"field-{problem}"))
        assert {r.config.problem for r in runs} == {problem}
        assert {r.config.method for r in runs} == {"baseline", "l2_init", "full_reset"}
        assert np.isclose(runs[0].config.lr, 1e-3) and runs[0].config.optimizer == "adam"
