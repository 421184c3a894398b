"""The effective learning rate ‖g‖/‖θ‖ per layer (FIRE's form): on gradients whose norm is
known, on the task loss's gradient of each member alone, and from a Monitor's last backward."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import plasticlab
from plasticlab.measure.effective_lr import effective_lr, layer_effective_lr
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.nets import build_network
from plasticlab.rng import torch_generator


def test_a_gradient_twice_the_weights_has_effective_learning_rate_two():
    theta = [torch.tensor([[3.0, 4.0]]), torch.tensor([[0.0]])]
    assert effective_lr([2 * t for t in theta], theta).tolist() == [2.0]


def test_the_network_value_is_the_parameter_count_weighted_mean_of_the_layers():
    big = ([torch.ones(1, 6)], [torch.ones(1, 6)])  # ratio 1, 6 parameters
    small = ([torch.full((1, 2), 3.0)], [torch.ones(1, 2)])  # ratio 3, 2 parameters
    overall, per_layer = layer_effective_lr([big[0], small[0]], [big[1], small[1]])
    assert per_layer.tolist() == [[1.0, pytest.approx(3.0)]] and overall.tolist() == [pytest.approx(1.5)]


def test_each_members_value_is_its_own_task_loss_gradient_over_its_weights():
    seeds = [3, 4]
    net = build_network("mlp", 2, (5,), 3, width=0.06,
                        generators=[torch_generator(s, "init") for s in seeds])
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 16, 5, generator=g), torch.randint(3, (2, 16), generator=g)
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=seeds), ["effective_lr"], 16)
    got = optional.from_network(x, y, 0, None)
    for k in range(2):
        params = [t[k].detach().clone().requires_grad_() for layer in net.affine_layers
                  for t in (layer.weight, layer.bias)]
        h = x[k]
        for i in range(0, len(params) - 2, 2):
            h = torch.relu(h @ params[i].T + params[i + 1])
        F.cross_entropy(h @ params[-2].T + params[-1], y[k]).backward()
        for layer in range(3):
            w, b = params[2 * layer], params[2 * layer + 1]
            expected = torch.cat([w.grad.flatten(), b.grad.flatten()]).norm() / torch.cat(
                [w.flatten(), b.flatten()]).norm()
            assert got["effective_lr_per_layer"][k, layer].item() == pytest.approx(expected.item(), rel=1e-5)


def test_the_monitor_takes_the_last_backwards_gradient_per_module():
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(0))
    monitor = plasticlab.Monitor(model, x, measurements=["effective_lr"], thresholds=None)
    row = monitor.measure()
    assert all(row[f"effective_lr/{m}"] != row[f"effective_lr/{m}"] for m in ("0", "2"))  # no grad: NaN
    model(x).square().sum().backward()
    row = monitor.measure()
    first = model[0]
    expected = torch.cat([first.weight.grad.flatten(), first.bias.grad.flatten()]).norm() / torch.cat(
        [first.weight.flatten(), first.bias.flatten()]).norm()
    assert row["effective_lr/0"] == pytest.approx(expected.item(), rel=1e-6)
