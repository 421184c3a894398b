"""The ensemble engine: member independence, the online protocol, no per-step host syncs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import count_host_syncs
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.nets import build_network
from plasticlab.problems import PermutedMNIST
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

# Test accuracy on the first 500 test images of each task (test_examples), not all 10,000: these
# tests compare online accuracies and internals, and measuring on 10,000 took half their time.
SMALL = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 30, "test_examples": "500",
         "problem_params": {"examples_per_task": 480}}


def config(method: str, **extra):
    return resolve_config({**SMALL, "method": method, **extra})


@pytest.mark.parametrize("method,params", [
    ("baseline", {}), ("l2_init", {"strength": 1e-2}), ("l2", {"strength": 1e-3}),
    ("l1_init", {"strength": 1e-4}), ("huber_init", {"strength": 1e-2, "delta": 0.01}),
    ("l2_init_resample", {"strength": 1e-2}),
])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_member_k_of_an_ensemble_equals_seed_k_run_alone(data_dir, method, params, optimizer):
    cfg = config(method, params=params, optimizer=optimizer, lr=1e-3 if optimizer == "adam" else 1e-2)
    seeds = list(range(8))
    together = train_ensemble(Members.from_config(cfg, seeds), data_dir=data_dir)
    for k in (5,):
        alone = train_ensemble(Members.from_config(cfg, [seeds[k]]), data_dir=data_dir)
        assert together.members[k].task_online_accuracy == pytest.approx(
            alone.members[0].task_online_accuracy, abs=1e-5)


def test_per_member_hyperparameters_match_separate_runs(data_dir):
    cfg = config("l2_init", params={"strength": 1e-2})
    grid = train_ensemble(Members.from_config(cfg, [3, 3], params=[{"strength": 0.0}, {"strength": 1e-1}]),
                          data_dir=data_dir)
    for k, strength in enumerate((0.0, 1e-1)):
        alone = train_ensemble(Members.from_config(config("l2_init", params={"strength": strength}), [3]),
                               data_dir=data_dir)
        assert grid.members[k].task_online_accuracy == pytest.approx(
            alone.members[0].task_online_accuracy, abs=1e-5)
    assert grid.members[0].params == {"strength": 0.0}


def test_l2_init_with_zero_strength_is_the_baseline(data_dir):
    a = train_ensemble(Members.from_config(config("l2_init", params={"strength": 0.0}), [1]),
                       data_dir=data_dir)
    b = train_ensemble(Members.from_config(config("baseline"), [1]), data_dir=data_dir)
    assert a.members[0].task_online_accuracy == b.members[0].task_online_accuracy


def test_online_accuracy_is_measured_before_the_update(data_dir):
    # One step: the online accuracy must be the *initial* network's accuracy on the first batch.
    cfg = resolve_config({**SMALL, "method": "baseline", "tasks": 1, "steps_per_task": 1,
                          "lr": 1.0})
    result = train_ensemble(Members.from_config(cfg, [7]), data_dir=data_dir)
    problem = PermutedMNIST([7], tasks=1, steps_per_task=1, data_dir=data_dir,
                            **SMALL["problem_params"])
    problem.start_task(0)
    x, y = problem.batch(0)
    net = build_network("mlp", 1, (784,), 10, generators=[torch_generator(7, "init")])
    with torch.no_grad():
        expected = (net(x).argmax(-1) == y).float().mean().item()
    assert result.members[0].task_online_accuracy == [pytest.approx(expected)]


def test_training_learns_permuted_mnist(data_dir):
    cfg = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "tasks": 1,
                          "steps_per_task": 300, "problem_params": {"examples_per_task": 4800}})
    acc = train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir).members[0].task_online_accuracy[0]
    assert acc > 0.7  # chance is 0.1; one pass over 4,800 images reaches ~80 %


def test_no_host_synchronisation_inside_a_task(data_dir, monkeypatch):
    calls = count_host_syncs(monkeypatch)
    cfg = config("l2_init", params={"strength": 1e-2})
    problem_calls_per_task = []

    def on_task_end(task, accs):
        problem_calls_per_task.append(calls["n"])

    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, on_task_end=on_task_end)
    # At most a handful of syncs per task (the accuracy read-back), never one per step.
    per_task = problem_calls_per_task[1] - problem_calls_per_task[0]
    assert 1 <= per_task < SMALL["steps_per_task"] / 4  # ≥ 1: the counter does see the read-back


def test_the_engine_loss_is_each_members_own_mean_cross_entropy(data_dir):
    # Summing member losses must give every member exactly its own gradient.
    net = build_network("mlp", 2, (784,), 10, generators=[torch_generator(s, "init") for s in (0, 1)])
    x = torch.randn(2, 16, 784)
    y = torch.randint(0, 10, (2, 16))
    logits = net(x)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(2, 16).mean(1).sum()
    loss.backward()
    g_ensemble = net.blocks[0].affine.weight.grad[1].clone()
    single = build_network("mlp", 1, (784,), 10, generators=[torch_generator(1, "init")])
    F.cross_entropy(single(x[1:]).flatten(0, 1), y[1]).backward()
    torch.testing.assert_close(g_ensemble, single.blocks[0].affine.weight.grad[0])


@pytest.mark.parametrize("method,params", [
    ("l2_init", {"strength": 1e-2}), ("cbp", {"replacement_rate": 0.05, "maturity": 5}),
    ("shrink_perturb", {"shrink": 0.99, "noise": 1e-2}), ("ewc", {"fisher_samples": 8}),
])
def test_a_run_resumed_from_a_task_checkpoint_ends_exactly_as_an_uninterrupted_one(
        data_dir, tmp_path, method, params):
    cfg = resolve_config({**SMALL, "tasks": 4, "method": method, "params": params})
    whole = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir)

    path = tmp_path / "run.ckpt"

    class Crash(Exception):
        pass

    def crash_after_task_1(task, accs):
        if task == 1:
            raise Crash

    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0, 1]),
                       data_dir=data_dir, checkpoint=path, on_task_end=crash_after_task_1)
    assert path.exists()
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics["weight_magnitude"] == b.task_metrics["weight_magnitude"]


def test_a_checkpoint_of_another_run_is_an_error_naming_the_file(data_dir, tmp_path):
    path = tmp_path / "run.ckpt"
    cfg = resolve_config({**SMALL, "method": "baseline"})
    train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False,
                   on_task_end=lambda t, a: None)
    other = resolve_config({**SMALL, "method": "baseline", "lr": 1e-4})
    with pytest.raises(ValueError, match=str(path)):
        train_ensemble(Members.from_config(other, [0]), data_dir=data_dir, checkpoint=path)
