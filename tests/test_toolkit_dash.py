"""DASH (issue 47): direction-aware shrinking at task ends against a literal float64
implementation (MLP rows, conv slices or filters, whole biases), the factor's edge cases, the
data it reads, the optimizer, member independence in the engine (MLP and CNN), the drop-in, a
CLI run and the domains."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import assert_host_reads_do_not_grow_with_steps
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods.dash import DASH, shrink_factor
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, backward, f32, inputs, tiny
from test_member_independence import train_keeping_network


class FixedStream:
    """A stream whose ended task holds ``inputs`` ``[K, n, …]`` and ``labels`` ``[K, n]``."""

    def __init__(self, inputs, labels):
        self.inputs, self.labels, self.asked = inputs, labels, []

    @property
    def current_task_size(self):
        return self.labels.shape[1]

    def sample_examples(self, n, key):
        self.asked.append((n, key))
        return self.inputs[:, :n], self.labels[:, :n]


def task_data(arch, n=7, members=2):
    x = inputs(arch, members=members, batch=n, seed=4)
    y = torch.randint(0, 3, (members, n), generator=torch.Generator().manual_seed(5))
    return x, y


def literal_direction(net, k, x, y, batch_size, alpha):
    """Member k's G: (1 − α)G + α(−∇L_b) over consecutive minibatches, from 0."""
    params = net.regularized_parameters()
    G = [torch.zeros_like(p[k]) for p in params]
    for start in range(0, y.shape[1], batch_size):
        xb, yb = x[:, start:start + batch_size], y[:, start:start + batch_size]
        logits = net(xb)
        loss = sum(F.cross_entropy(logits[j], yb[j]) for j in range(y.shape[0]))
        grads = torch.autograd.grad(loss, params)
        G = [(1 - alpha) * g + alpha * (-gr[k]) for g, gr in zip(G, grads, strict=True)]
    return G


def literal_shrunk(w, g, lam, conv_unit):
    """w with each of its vectors (rows; conv slices or filters; a bias whole) times
    min(1, max(λ, cos(w, g))), one vector at a time with Python numbers."""
    w = w.clone()
    if w.dim() == 1 or (w.dim() == 4 and conv_unit == "filter") or w.dim() == 2:
        index = [()] if w.dim() == 1 else [(i,) for i in range(w.shape[0])]
    else:
        index = [(i, j) for i in range(w.shape[0]) for j in range(w.shape[1])]
    for idx in index:
        u, v = w[idx].flatten(), g[idx].flatten()
        cos = float(u @ v) / max(math.sqrt(float(u @ u)) * math.sqrt(float(v @ v)), 1e-8)
        w[idx] = w[idx] * min(1.0, max(lam, cos))
    return w


@pytest.mark.parametrize("arch,conv_unit", [(TINY_MLP, "slice"), (TINY_CNN, "slice"), (TINY_CNN, "filter")],
                         ids=["mlp", "cnn-slice", "cnn-filter"])
def test_dash_shrinks_every_vector_by_its_cosine_with_the_running_negative_gradient(arch, conv_unit):
    lam, alpha = [0.05, 0.5], [0.3, 0.7]
    method, net, _ = tiny("dash", {"lambda": lam, "alpha": alpha, "batch_size": 3,
                                   "conv_unit": conv_unit}, arch=arch)
    x, y = task_data(arch)  # 7 examples: minibatches of 3, 3 and 1
    directions = [literal_direction(net, k, x, y, 3, f32(alpha[k])) for k in range(2)]
    before = [p.detach().clone() for p in net.regularized_parameters()]
    method.on_task_end(FixedStream(x, y))
    for k in range(2):
        for p, w, g in zip(net.regularized_parameters(), before, directions[k], strict=True):
            torch.testing.assert_close(p[k], literal_shrunk(w[k], g, f32(lam[k]), conv_unit))
    # the output layer is shrunk too, and something was shrunk
    assert not torch.equal(net.affine_layers[-1].weight, before[-2])


def test_dash_factor_is_one_along_the_descent_direction_and_lambda_across_or_against_it():
    w = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)
    g = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)
    s = shrink_factor(w, g, torch.tensor([0.5]), 2).flatten().tolist()
    # aligned: kept; orthogonal, opposed or no gradient: λ; 45°: cos = 1/√2 > λ
    assert s[:4] == [1.0, 0.5, 0.5, 0.5]
    assert s[4] == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    assert shrink_factor(w, g, torch.tensor([0.0]), 2).flatten().tolist()[2] == 0.0  # λ = 0: erased


def test_dash_reads_samples_of_the_ended_task_and_refuses_more_than_it_has():
    x, y = task_data(TINY_MLP)
    method, net, _ = tiny("dash", {"samples": 4})
    stream = FixedStream(x, y)
    method.on_task_end(stream)
    assert stream.asked == [(4, "dash")]
    every, _, _ = tiny("dash")
    stream = FixedStream(x, y)
    every.on_task_end(stream)
    assert stream.asked == [(7, "dash")]  # samples = 0: the whole task
    too_many, _, _ = tiny("dash", {"samples": 8})
    with pytest.raises(ValueError, match="only 7 training examples"):
        too_many.on_task_end(FixedStream(x, y))


def test_dash_refuses_a_problem_that_trains_with_another_loss():
    method, _, _ = tiny("dash")
    stream = FixedStream(*task_data(TINY_MLP))
    stream.loss = "squared_error"
    with pytest.raises(ValueError, match="cross-entropy of a classification problem"):
        method.on_task_end(stream)


@pytest.mark.parametrize("reset", [False, True])
def test_dash_keeps_the_optimizer_state_unless_told_to_restart_it(reset):
    method, net, opt = tiny("dash", {"reset_optimizer": reset})
    backward(net, inputs(TINY_MLP))
    opt.step()
    moments = [m.clone() for m in opt.exp_avg]
    method.on_task_end(FixedStream(*task_data(TINY_MLP)))
    if reset:
        assert opt.step_counts == [0] * len(opt.params) and not any(m.any() for m in opt.exp_avg)
    else:
        assert opt.step_counts == [1] * len(opt.params)
        assert all(torch.equal(m, s) for m, s in zip(opt.exp_avg, moments, strict=True))


def test_dash_drop_in_on_a_plain_model_equals_the_method_on_a_one_member_network():
    method, net, _ = tiny("dash", {"lambda": 0.2, "alpha": 0.5, "batch_size": 3}, members=1)
    layers = net.affine_layers
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).double()
    with torch.no_grad():
        for linear, layer in zip(model[::2], layers, strict=True):
            linear.weight.copy_(layer.weight[0])
            linear.bias.copy_(layer.bias[0])
    x, y = task_data(TINY_MLP, members=1)
    method.on_task_end(FixedStream(x, y))
    DASH(model, lam=f32(0.2), alpha=f32(0.5)).shrink((x[0, s:s + 3], y[0, s:s + 3]) for s in (0, 3, 6))
    for linear, layer in zip(model[::2], layers, strict=True):
        torch.testing.assert_close(linear.weight, layer.weight[0])
        torch.testing.assert_close(linear.bias, layer.bias[0])
    assert all(p.grad is None for p in model.parameters())  # the gradients were taken on a copy


def test_dash_drop_in_refuses_a_model_without_linear_or_conv_layers_and_bad_settings():
    with pytest.raises(ValueError, match="no nn.Linear or nn.Conv2d"):
        DASH(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match="lam"):
        DASH(nn.Linear(2, 2), lam=1.5)
    with pytest.raises(ValueError, match="conv_unit"):
        DASH(nn.Linear(2, 2), conv_unit="kernel")


@pytest.mark.parametrize("run,data", [
    (TINY_MNIST, "data_dir"),
    ({"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 4,
      "problem_params": {"examples": 40}}, "cifar10_dir"),
], ids=["mlp", "cnn"])
def test_member_k_of_a_dash_ensemble_is_seed_k_alone_bit_for_bit(monkeypatch, request, run, data):
    data_dir = request.getfixturevalue(data)
    cfg = resolve_config({**run, "method": "dash", "lr": 1e-2, "params": {"batch_size": 16}})
    together, net_together = train_keeping_network(monkeypatch, cfg, [0, 1, 2], data_dir, "autograd")
    alone, net_alone = train_keeping_network(monkeypatch, cfg, [2], data_dir, "autograd")
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy
    for p, q in zip(net_together.parameters(), net_alone.parameters(), strict=True):
        assert torch.equal(p[2], q[0])
    grid = [{"lambda": 0.5, "alpha": 0.1}, {"lambda": 0.05, "alpha": 0.3}]
    mixed = train_ensemble(Members.from_config(cfg, [0, 1], params=grid), data_dir=data_dir, measure=False)
    single = train_ensemble(Members.from_config(cfg, [1], params=grid[1:]), data_dir=data_dir, measure=False)
    assert mixed.members[1].task_online_accuracy == single.members[0].task_online_accuracy


def test_dash_makes_no_host_round_trip_per_step(data_dir, monkeypatch):
    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "dash"})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_dash_runs_two_tasks_from_the_cli_and_is_marked_a_boundary_oracle(data_dir, tmp_path, capsys):
    from plasticlab.cli import main
    from plasticlab.methods import boundary_oracle

    assert boundary_oracle("dash")
    assert main(["run", "--problem", "permuted_mnist", "--method", "dash", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--no-progress",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "r")]) == 0
    assert "results in" in capsys.readouterr().out


@pytest.mark.parametrize("params,needle", [
    ({"lambda": 1.5}, "lambda must be a finite number >= 0 and <= 1"),
    ({"alpha": 0.0}, "alpha must be a finite number > 0 and <= 1"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"samples": -1}, "samples must be an integer >= 0"),
    ({"conv_unit": "kernel"}, "conv_unit must be one of slice, filter"),
])
def test_dash_parameters_have_domains(params, needle):
    with pytest.raises(ValueError, match=needle):
        resolve_config({"problem": "permuted_mnist", "method": "dash", "params": params})
