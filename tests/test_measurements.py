"""Task-end measurements of an ensemble (SPEC §5): batched equals per-member, test sets,
forgetting, the gradient norm, and measurements never changing training."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import count_host_syncs
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.measure import (
    INTERNALS,
    Measurer,
    evaluate_accuracy,
    held_out_accuracy,
    held_out_batches,
    network_internals,
    to_host,
)
from plasticlab.nets import build_network
from plasticlab.problems import FivePlusOneCIFAR, PermutedMNIST, RandomLabelMNIST
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

SMALL = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 20,
         "problem_params": {"examples_per_task": 320}}


def config(method: str = "l2_init", **extra):
    return resolve_config({**SMALL, "method": method, **extra})


def mlp(seeds, **kw):
    return build_network("mlp", len(seeds), (784,), 10,
                         generators=[torch_generator(s, "init") for s in seeds], **kw)


# --- batched internals against an independent per-member computation ---------------------------

def srank_by_hand(s: np.ndarray) -> int:
    total, running = s.sum(), 0.0
    for k, v in enumerate(s, start=1):
        running += v
        if running >= 0.99 * total:
            return k
    return len(s)


def test_internals_equal_an_independent_per_member_computation():
    seeds = [0, 1, 2]
    net = mlp(seeds)
    with torch.no_grad():  # kill some units so that dead and dormant counts are not trivially 0
        net.blocks[0].affine.bias[1, :30] = -100.0
        net.blocks[1].affine.bias[2, 50:] = -100.0
    x = torch.randn(3, 300, 784, generator=torch.Generator().manual_seed(0))
    got = network_internals(net, x)
    assert set(got) == set(INTERNALS)
    for k in range(3):
        h, rows = x[k].double().numpy(), []
        for block in net.blocks[:-1]:
            w = block.affine.weight[k].detach().double().numpy()
            b = block.affine.bias[k].detach().double().numpy()
            h = np.maximum(h @ w.T + b, 0.0)
            rows.append(h)
        for layer, feats in enumerate(rows):
            s = np.linalg.svd(feats, compute_uv=False)
            assert got["srank"][k, layer].item() == srank_by_hand(s)
            p = s[s > 0] / s.sum()
            assert got["effective_rank"][k, layer].item() == pytest.approx(np.exp(-(p * np.log(p)).sum()),
                                                                           rel=1e-4)
            dead = (feats.max(axis=0) == 0).mean()
            assert got["dead_fraction_per_layer"][k, layer].item() == pytest.approx(dead)
            act = np.abs(feats).mean(axis=0)
            dormant = (act / (act.mean() + 1e-9) <= 0.1).mean()
            assert got["dormant_fraction_per_layer"][k, layer].item() == pytest.approx(dormant)
        all_units = np.concatenate([(f.max(axis=0) == 0) for f in rows])
        assert got["dead_fraction"][k].item() == pytest.approx(all_units.mean())
        params = torch.cat([p[k].detach().abs().flatten() for p in net.regularized_parameters()])
        assert got["weight_magnitude"][k].item() == pytest.approx(params.double().mean().item())
    assert got["dead_fraction_per_layer"][1, 0].item() == pytest.approx(0.3)
    assert got["dead_fraction_per_layer"][2, 1].item() == pytest.approx(0.5)


def test_conv_internals_of_an_ensemble_equal_each_member_alone():
    seeds = [4, 5]
    shape = (3, 32, 32)
    together = build_network("cnn", 2, shape, 10, generators=[torch_generator(s, "init") for s in seeds])
    x = torch.randn(2, 40, *shape, generator=torch.Generator().manual_seed(1))
    got = network_internals(together, x)
    assert got["srank"].shape == (2, 4)  # 2 conv + 2 fc hidden layers
    for k, s in enumerate(seeds):
        alone = build_network("cnn", 1, shape, 10, generators=[torch_generator(s, "init")])
        one = network_internals(alone, x[k:k + 1])
        for name in INTERNALS:
            torch.testing.assert_close(got[name][k:k + 1], one[name], rtol=1e-5, atol=1e-6)


def test_a_diverged_member_gets_nan_ranks_and_the_others_are_measured():
    net = mlp([0, 1])
    with torch.no_grad():
        net.blocks[0].affine.weight[1, 0, 0] = float("nan")
    values = to_host(network_internals(net, torch.randn(2, 50, 784)))
    assert all(isinstance(r, int) for r in values[0]["srank"])
    assert all(math.isnan(r) for r in values[1]["srank"])
    assert math.isnan(values[1]["weight_magnitude"]) and not math.isnan(values[0]["weight_magnitude"])


def test_to_host_gives_numbers_lists_and_ints():
    values = {"a": torch.tensor([1.5, 2.5]), "b": torch.tensor([[1, 2], [3, 4]]),
              "srank": torch.tensor([[3.0], [float("nan")]], dtype=torch.float64)}
    out = to_host(values)
    assert out[0] == {"a": 1.5, "b": [1, 2], "srank": [3]}
    assert to_host({"m": torch.arange(12.0).view(2, 3, 2)})[1]["m"] == [[6.0, 7.0], [8.0, 9.0], [10.0, 11.0]]
    assert out[1]["b"] == [3, 4] and math.isnan(out[1]["srank"][0])
    assert isinstance(out[0]["srank"][0], int)


# --- test sets ------------------------------------------------------------------------------------

def direct_accuracy(net, x, y) -> list[float]:
    with torch.no_grad():
        return (net(x).argmax(-1) == y).double().mean(1).tolist()


def test_test_accuracy_is_the_accuracy_on_the_problems_test_set(data_dir):
    seeds = [3, 8]
    problem = PermutedMNIST(seeds, tasks=3, data_dir=data_dir, examples_per_task=160)
    problem.start_task(1)
    net = mlp(seeds)
    x, y = problem.test_set(1)
    expected = direct_accuracy(net, x, y)
    # folded permutation (the fast path) and plain chunks (the generic path) agree with it
    assert held_out_accuracy(net, problem, 1, chunk=3000).tolist() == pytest.approx(expected, abs=1e-4)
    assert evaluate_accuracy(net, held_out_batches(problem, 1, chunk=3000)).tolist() == pytest.approx(
        expected, abs=1e-4)
    chunks = list(held_out_batches(problem, 1, chunk=3000))
    assert [c[0].shape[1] for c in chunks] == [3000, 3000, 3000, 1000]
    torch.testing.assert_close(torch.cat([c[0] for c in chunks], dim=1), x, rtol=0, atol=0)
    torch.testing.assert_close(torch.cat([c[1] for c in chunks], dim=1), y, rtol=0, atol=0)
    # an earlier task's test set is rebuilt on demand
    x0, y0 = problem.test_set(0)
    assert held_out_accuracy(net, problem, 0).tolist() == pytest.approx(direct_accuracy(net, x0, y0),
                                                                        abs=1e-4)


@pytest.mark.parametrize("arch", [{"layer_norm": True}, {"activation": "concat_relu", "hidden_scale": 0.91},
                                  {"extra_layers": 1}])
def test_folded_permutation_matches_the_test_set_for_every_mlp_variant(data_dir, arch):
    seeds = [0, 6]
    problem = PermutedMNIST(seeds, tasks=2, data_dir=data_dir, examples_per_task=160)
    problem.start_task(1)
    net = mlp(seeds, **arch)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn_like(p))  # LayerNorm gains/biases away from 1/0
    x, y = problem.test_set(1)
    assert held_out_accuracy(net, problem, 1).tolist() == pytest.approx(direct_accuracy(net, x, y), abs=1e-4)


def test_test_accuracy_on_a_cnn_problem_without_permutations(cifar100_dir):
    seeds = [0, 1]
    problem = FivePlusOneCIFAR(seeds, tasks=2, data_dir=cifar100_dir)
    problem.start_task(0)
    net = build_network("cnn", 2, problem.input_shape, problem.num_outputs,
                        generators=[torch_generator(s, "init") for s in seeds])
    x, y = problem.test_set(0)
    assert held_out_accuracy(net, problem, 0, chunk=7).tolist() == pytest.approx(direct_accuracy(net, x, y))


def test_forgetting_row_is_every_earlier_tasks_test_accuracy(data_dir):
    seeds = [1, 2]
    problem = PermutedMNIST(seeds, tasks=3, data_dir=data_dir, examples_per_task=160)
    net = mlp(seeds)
    measurer = Measurer(net, problem, samples=64, forgetting=True)
    for task in range(3):
        problem.start_task(task)
    out = measurer.task_end(2)
    assert out["accuracy_row"].shape == (2, 3)
    for m in range(3):
        x, y = problem.test_set(m)
        assert out["accuracy_row"][:, m].tolist() == pytest.approx(direct_accuracy(net, x, y), abs=1e-4)
    torch.testing.assert_close(out["task_test_accuracy"], out["accuracy_row"][:, 2])


def test_problems_without_test_sets_have_no_test_accuracy_and_refuse_forgetting(data_dir):
    problem = RandomLabelMNIST([0], tasks=2, steps_per_task=5, data_dir=data_dir, examples=64)
    problem.start_task(0)
    net = mlp([0])
    out = Measurer(net, problem, samples=32).task_end(0)
    assert "task_test_accuracy" not in out and "srank" in out
    with pytest.raises(ValueError, match="test sets"):
        Measurer(net, problem, forgetting=True)


# --- through the engine ---------------------------------------------------------------------------

def test_member_k_of_an_ensemble_measures_like_seed_k_alone(data_dir):
    cfg = config(params={"strength": 1e-2})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2, 3]), data_dir=data_dir, forgetting=True)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir, forgetting=True)
    a, b = together.members[2], alone.members[0]
    assert a.task_metrics["srank"] == b.task_metrics["srank"]
    assert a.task_metrics["dead_fraction"] == b.task_metrics["dead_fraction"]
    assert a.task_metrics["dormant_fraction"] == b.task_metrics["dormant_fraction"]
    for name in ("weight_magnitude", "task_test_accuracy", "grad_norm"):
        assert a.task_metrics[name] == pytest.approx(b.task_metrics[name], rel=1e-5, abs=1e-4), name
    assert a.task_metrics["effective_rank"][1] == pytest.approx(b.task_metrics["effective_rank"][1], rel=1e-4)
    for row_a, row_b in zip(a.accuracy_matrix, b.accuracy_matrix, strict=True):
        assert row_a == pytest.approx(row_b, abs=1e-4)
    assert a.bwt == pytest.approx(b.bwt, abs=2e-4)


def test_measurements_never_change_training(data_dir):
    cfg = config("redo", params={"period": 7, "threshold": 0.1})
    plain = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    measured = train_ensemble(Members.from_config(cfg, [0, 1]),
                              data_dir=data_dir, forgetting=True, measure_every=6)
    for p, m in zip(plain.members, measured.members, strict=True):
        assert p.task_online_accuracy == m.task_online_accuracy
        assert p.task_metrics == {} and p.accuracy_matrix is None and p.bwt is None
    assert plain.measure_time == 0.0 and measured.measure_time > 0


def test_task_end_and_step_measurements_have_the_documented_shape(data_dir):
    result = train_ensemble(Members.from_config(config(), [0, 1]), data_dir=data_dir, measure_every=8)
    m = result.members[1]
    for name in (*INTERNALS, "grad_norm", "task_test_accuracy"):
        assert len(m.task_metrics[name]) == 2, name
    assert all(len(r) == 2 for r in m.task_metrics["srank"])  # two hidden layers
    assert all(len(r) == 3 for r in m.task_metrics["weight_magnitude_per_layer"])  # three affine
    assert all(0 <= v <= 1 for v in m.task_metrics["dead_fraction"] + m.task_metrics["task_test_accuracy"])
    assert m.step_metrics["step"] == [8, 16, 24, 32, 40]
    # the last step of task 1 is step 40: same network, same measurement inputs as the task end
    assert m.step_metrics["srank"][-1] == m.task_metrics["srank"][-1]
    assert m.step_metrics["grad_norm"][-1] == m.task_metrics["grad_norm"][-1]
    assert m.step_metrics["weight_magnitude"][-1] == m.task_metrics["weight_magnitude"][-1]
    assert result.extra["measurements"] == {"task_end": True, "every": 8, "forgetting": False,
                                            "samples": 500, "test_examples": "all",
                                            "internals_on": "current"}
    with pytest.raises(ValueError):
        train_ensemble(Members.from_config(config(), [0]), data_dir=data_dir, measure=False, forgetting=True)


def test_grad_norm_is_the_last_steps_task_loss_gradient_without_the_penalty(data_dir):
    # One step: the measured gradient is the initial network's on batch 0. L2 with λ = 1 adds
    # λθ to the gradient — the measurement must not include it.
    cfg = resolve_config({**SMALL, "method": "l2", "params": {"strength": 1.0}, "tasks": 1,
                          "steps_per_task": 1})
    measured = train_ensemble(Members.from_config(cfg, [5]),
                              data_dir=data_dir).members[0].task_metrics["grad_norm"][0]
    problem = PermutedMNIST([5], tasks=1, steps_per_task=1, data_dir=data_dir,
                            **SMALL["problem_params"])
    problem.start_task(0)
    x, y = problem.batch(0)
    net = mlp([5])
    F.cross_entropy(net(x)[0], y[0]).backward()
    grads = [p.grad for p in net.parameters()]
    expected = torch.sqrt(sum(g.double().pow(2).sum() for g in grads)).item()
    assert measured == pytest.approx(expected, rel=1e-5)
    with_penalty = torch.sqrt(sum((g + p.detach()).double().pow(2).sum()
                                  for g, p in zip(grads, net.parameters(), strict=True))).item()
    assert abs(with_penalty - expected) > 1e-2 * expected  # the check above can tell them apart


def test_measurements_add_no_per_step_host_synchronisation(data_dir, monkeypatch):
    calls = count_host_syncs(monkeypatch)
    marks = []
    train_ensemble(Members.from_config(config(), [0, 1]), data_dir=data_dir, forgetting=True,
                   measure_every=2, on_task_end=lambda task, accs: marks.append(calls["n"]))
    # task 1 holds 10 step measurements and 2 test sets, all read back together at its end
    assert marks[1] - marks[0] <= 3


# --- measurement conventions: test_examples and internals_on (SPEC §9) --------------------------

def test_test_examples_n_is_the_accuracy_on_the_first_n_of_each_seeds_shuffled_test_set(data_dir):
    seeds = [3, 8]
    problem = PermutedMNIST(seeds, tasks=3, data_dir=data_dir, examples_per_task=160)
    net = mlp(seeds)
    x, y = problem.test_set(1)
    expected = []
    for k, seed in enumerate(seeds):
        first = torch.from_numpy(problem.test_order(seed, 10_000)[:300])
        expected.append(direct_accuracy(net, x[:, first], y[:, first])[k])
    assert held_out_accuracy(net, problem, 1, examples=300).tolist() == pytest.approx(expected, abs=1e-6)
    # the same images for every task (under each task's permutation), as in the authors' code
    a, b = problem.member_test_subset(0, 3, 1, 300), problem.member_test_subset(0, 3, 2, 300)
    assert torch.equal(a.x, b.x) and not torch.equal(a.perm, b.perm)


def test_reference_test_examples_score_the_authors_992_images(data_dir):
    cfg = config(test_examples="reference", tasks=2)
    result = train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir)
    problem = PermutedMNIST([0], tasks=2, data_dir=data_dir, examples_per_task=320)
    assert problem.member_test_subset(0, 0, 0, 992).size == 992
    acc = result.members[0].task_metrics["task_test_accuracy"][0]
    assert round(acc * 992) == pytest.approx(acc * 992, abs=1e-6)  # a whole number of the 992
    assert result.extra["measurements"]["test_examples"] == "reference"


def test_test_examples_must_be_all_reference_or_a_positive_count():
    for bad in ("0", "-5", "some", "1.5"):
        with pytest.raises(ValueError, match="test_examples must be 'all', 'reference' or a whole number"):
            config(test_examples=bad)
    assert config(test_examples="250").test_examples == "250"


def test_internals_on_next_measure_the_next_tasks_first_test_inputs(data_dir):
    seeds = [0, 1]
    problem = PermutedMNIST(seeds, tasks=3, data_dir=data_dir, examples_per_task=160)
    net = mlp(seeds)
    measurer = Measurer(net, problem, internals_on="next")
    assert measurer.samples == 1000  # the authors' count
    problem.start_task(0)
    expected = network_internals(net, problem.test_examples(1, 1000)[0])
    got = measurer.internals()
    for name in INTERNALS:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)
    problem.start_task(2)  # the last task has no next one: its own test inputs
    assert torch.equal(measurer.inputs(), problem.test_examples(2, 1000)[0])


def test_internals_on_next_needs_test_sets():
    with pytest.raises(ValueError, match="has no test sets: use internals_on=current"):
        resolve_config({"problem": "random_label_mnist", "method": "baseline", "internals_on": "next"})
    with pytest.raises(ValueError, match="internals_on must be one of current, next"):
        config(internals_on="later")
