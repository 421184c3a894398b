"""Class-incremental split MNIST and split CIFAR-10 (plasticlab.problems.split): which classes and
images each task holds, the fixed and the growing head, the accuracy on earlier tasks with
forgetting, a run from the CLI and a sweep, member independence, missing data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from plasticlab.cli import main
from plasticlab.data import DataError
from plasticlab.engine import EnsembleTraining, train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.nets import build_network
from plasticlab.problems import SplitCIFAR, SplitMNIST
from plasticlab.run_config import Members

SMALL = {"steps_per_task": 6, "examples_per_class": 40, "test_per_class": 10}


def test_defaults_are_five_tasks_of_two_classes_with_a_fixed_head():
    for cls in (SplitMNIST, SplitCIFAR):
        assert cls.defaults["tasks"] == 5 and cls.num_outputs == 10 and cls.has_test_sets
        params = cls.resolve_parameters({})
        assert (params["head"], params["classes_per_task"], params["cumulative"]) == ("fixed", 2, False)
    assert SplitMNIST.resolve_parameters({})["examples_per_class"] == 5000
    assert SplitCIFAR.resolve_parameters({})["examples_per_class"] == 1000
    with pytest.raises(ValueError, match="head"):
        SplitMNIST.resolve_parameters({"head": "shared"})


def test_each_task_holds_its_two_new_classes_with_their_original_labels_and_never_reuses_one(mnist_dir):
    p = SplitMNIST([3, 4], data_dir=mnist_dir, **SMALL)
    for k, seed in enumerate(p.seeds):
        order = p.class_order(seed)
        assert sorted(order.tolist()) == list(range(10))
        seen = []
        for task in range(5):
            data = p.member_task(k, seed, task)
            classes = set(order[2 * task:2 * task + 2].tolist())
            assert set(data.y.tolist()) == classes and not classes & set(seen)
            seen += list(classes)
            # every image is its class's own, 40 of each, its label the file's
            assert torch.equal(data.y, p.y_train[torch.from_numpy(data.index)])
            assert Counter_of(data.y) == {c: 40 for c in classes}
            test = p.member_test(k, seed, task)
            assert Counter_of(test.y) == {c: 10 for c in classes}
    assert not np.array_equal(p.class_order(3), p.class_order(4))  # the seed orders the classes


def Counter_of(y: torch.Tensor) -> dict[int, int]:  # noqa: N802 - reads as collections.Counter
    values, counts = torch.unique(y, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def test_a_class_keeps_the_same_images_in_every_task_it_is_in_with_cumulative_tasks(cifar10_dir):
    p = SplitCIFAR([5], data_dir=cifar10_dir, cumulative=True, **SMALL)
    order = p.class_order(5)
    rows = {}
    for task in range(5):
        data = p.member_task(0, 5, task)
        assert set(data.y.tolist()) == set(order[:2 * task + 2].tolist())  # every class seen so far
        assert data.size == 40 * (2 * task + 2)
        for c in order[:2 * task + 2].tolist():
            mine = data.index[(data.y == c).numpy()]
            assert np.array_equal(rows.setdefault(c, mine), mine)
        assert set(p.member_test(0, 5, task).y.tolist()) == set(order[:2 * task + 2].tolist())


def test_the_growing_head_masks_the_classes_not_yet_seen_and_the_fixed_head_nothing(mnist_dir):
    fixed = SplitMNIST([1, 2], data_dir=mnist_dir, **SMALL)
    assert all(fixed.output_mask(t) is None for t in range(5))
    growing = SplitMNIST([1, 2], data_dir=mnist_dir, head="growing", **SMALL)
    for task in range(5):
        mask = growing.output_mask(task)
        assert mask.shape == (2, 10) and mask.dtype == torch.bool
        for k, seed in enumerate(growing.seeds):
            allowed = set(torch.nonzero(mask[k]).flatten().tolist())
            assert allowed == set(growing.class_order(seed)[:2 * task + 2].tolist())


def test_a_masked_output_is_minus_infinity_so_it_is_never_predicted_nor_learned():
    torch.manual_seed(0)
    net = build_network("mlp", 2, (784,), 10, generators=[torch.Generator().manual_seed(s) for s in (0, 1)])
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[0, [3, 7]] = True
    mask[1, [0, 1, 2, 3]] = True
    net.mask_outputs(mask)
    x = torch.randn(2, 5, 784)
    logits = net(x)
    assert torch.isinf(logits[~mask[:, None, :].expand_as(logits)]).all()
    assert set(logits[0].argmax(-1).tolist()) <= {3, 7} and set(logits[1].argmax(-1).tolist()) <= {0, 1, 2, 3}
    y = torch.tensor([[3, 7, 3, 7, 3], [0, 1, 2, 3, 0]])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    head = net.blocks[-1].affine.weight.grad  # [K, outputs, in]: a masked class's row learns nothing
    assert (head[~mask] == 0).all() and (head[mask].abs().sum(-1) > 0).all()
    assert "output_mask" not in net.state_dict()  # set per task by the problem, never checkpointed
    with pytest.raises(ValueError, match="output mask"):
        net.mask_outputs(torch.ones(3, 10, dtype=torch.bool))


@pytest.mark.parametrize("setting, message", [
    ({"tasks": 6}, "need 12 classes"),
    ({"examples_per_class": 5500}, "class 5 has 5421"),
    ({"test_per_class": 900}, "class 5 has 892"),
])
def test_settings_the_data_cannot_give_are_value_errors_naming_the_limit(mnist_dir, setting, message):
    with pytest.raises(ValueError, match=message):
        SplitMNIST([0], data_dir=mnist_dir, **{**SMALL, **setting})


def test_an_unreadable_cifar10_file_is_a_data_error_naming_it(tmp_path):
    (tmp_path / "cifar10").mkdir()
    broken = tmp_path / "cifar10" / "subset.npz"
    broken.write_bytes(b"not an npz")
    with pytest.raises(DataError, match="subset.npz"):
        SplitCIFAR([0], data_dir=tmp_path, **SMALL)


def _config(problem: str, head: str, method: str = "l2_init"):
    return resolve_config({"problem": problem, "method": method, "tasks": 2, "steps_per_task": 6,
                           "problem_params": {"head": head, "examples_per_class": 40, "test_per_class": 10}})


@pytest.mark.parametrize("problem, head", [("split_mnist", "fixed"), ("split_mnist", "growing"),
                                           ("split_cifar", "growing")])
def test_member_k_of_an_ensemble_is_seed_k_alone(data_dir, problem, head):
    config = _config(problem, head)
    together, alone = (EnsembleTraining(Members.from_config(config, seeds), data_dir=data_dir,
                                        forgetting=True) for seeds in ([5, 6], [6]))
    for task in range(2):
        assert together.run_task(task)[1] == alone.run_task(task)[0]
    for p, q in zip(together.net.parameters(), alone.net.parameters(), strict=True):
        assert torch.equal(p[1], q[0])
    assert together.result().members[1].accuracy_matrix == alone.result().members[0].accuracy_matrix
    # the growing head trains with autograd: the hand-written backward writes the plain softmax's
    assert together.step.backprop == ("manual" if problem == "split_mnist" and head == "fixed"
                                      else "autograd")


def test_a_run_resumed_from_a_checkpoint_trains_its_next_task_under_that_tasks_head(data_dir, tmp_path):
    config = _config("split_mnist", "growing")
    whole = EnsembleTraining(Members.from_config(config, [3]), data_dir=data_dir, measure=False)
    first = EnsembleTraining(Members.from_config(config, [3]), data_dir=data_dir, measure=False)
    whole.run_task(0)
    first.run_task(0)
    first.save(tmp_path / "ckpt")
    first.close()
    resumed = EnsembleTraining(Members.from_config(config, [3]), data_dir=data_dir, measure=False)
    assert resumed.resume(tmp_path / "ckpt") and resumed.next_task == 1
    # the head is no part of the checkpoint: the task sets it (with task 0's head, task 1's two
    # new classes could not be predicted, nor learned)
    assert resumed.run_task(1) == whole.run_task(1)
    for p, q in zip(resumed.net.parameters(), whole.net.parameters(), strict=True):
        assert torch.equal(p, q)


def test_with_forgetting_the_accuracy_on_earlier_tasks_is_measured_under_the_head_then_in_force(data_dir):
    result = train_ensemble(Members.from_config(_config("split_mnist", "growing"), [0]),
                            data_dir=data_dir, forgetting=True)
    member = result.members[0]
    rows = member.accuracy_matrix
    assert [len(r) for r in rows] == [1, 2] and all(0 <= a <= 1 for r in rows for a in r)
    assert member.task_metrics["task_test_accuracy"] == [rows[0][0], rows[1][1]]
    assert member.bwt == pytest.approx(rows[1][0] - rows[0][0])


def test_a_run_from_the_cli_with_the_growing_head_and_forgetting(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "split_cifar", "--method", "baseline", "--tasks", "2",
                 "--steps-per-task", "4", "--set", "head=growing", "--set", "examples_per_class=40",
                 "--set", "test_per_class=10", "--seeds", "0", "--data-dir", str(data_dir),
                 "--out", str(tmp_path), "--no-progress", "--forgetting", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert len(run["task_online_accuracy"]) == 2 and len(run["accuracy_matrix"]) == 2
    assert run["backprop"] == "autograd"


def test_a_sweep_runs_both_heads(data_dir, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('name = "split"\nproblem = "split_mnist"\nmethods = ["baseline", "l2_init"]\n'
                     'seeds = "0"\ntasks = 2\nsteps_per_task = 4\nforgetting = true\n'
                     + "".join(f'[[variants]]\n[variants.problem_params]\nhead = "{head}"\n'
                               'examples_per_class = 40\ntest_per_class = 10\n'
                               for head in ("fixed", "growing")))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--workers", "1",
                 "--executor", "inline", "--no-progress"]) == 0
    with ResultStore(out) as store:
        runs = store.runs(status="finished")
        assert sorted((r["config"]["method"], r["config"]["problem_params"]["head"]) for r in runs) == [
            ("baseline", "fixed"), ("baseline", "growing"), ("l2_init", "fixed"), ("l2_init", "growing")]
        for run in runs:
            assert len(store.task_metrics(run["run_id"])["accuracy_matrix"]) == 2


def test_the_preset_runs_baseline_l2_init_and_full_reset_under_each_head_with_forgetting():
    from plasticlab.experiments.presets import get_preset
    from plasticlab.experiments.sweep import expand

    for problem in ("split_mnist", "split_cifar"):
        sweep = get_preset(f"field-{problem}")
        runs = expand(sweep)
        assert sweep["forgetting"] is True
        assert {r.config.method for r in runs} == {"baseline", "l2_init", "full_reset"}
        assert {r.config.problem_params["head"] for r in runs} == {"fixed", "growing"}
