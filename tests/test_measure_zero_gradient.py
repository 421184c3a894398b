"""The zero-gradient ratio (Hare & Tortoise's): on a network with a dead unit, whose weights in
and out are exactly the parameters that get no gradient."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.measure.zero_gradient import zero_gradient_ratio
from plasticlab.nets import build_network


def test_zeros_are_counted_per_layer_and_over_every_parameter_once():
    layer_a = [torch.tensor([[0.0, 1.0, 0.0, 2.0]])]  # 2 of 4
    layer_b = [torch.tensor([[0.0, 0.0]]), torch.tensor([[5.0, 0.0]])]  # 3 of 4
    overall, per_layer = zero_gradient_ratio([layer_a, layer_b])
    assert per_layer.tolist() == [[0.5, 0.75]] and overall.tolist() == [5 / 8]


def test_a_dead_unit_cuts_the_gradient_of_its_weights_in_and_out():
    # 5 inputs, 4 + 4 hidden units, 3 outputs. Unit 0 of layer 1 is dead (bias −100): its 5
    # weights and bias in, and the 4 weights out of it in layer 2, get no gradient. Layer 2's
    # units are kept alive (bias +10), so nothing else is cut.
    net = build_network("mlp", 1, (5,), 3, width=0.04, generators=[torch.Generator().manual_seed(0)])
    with torch.no_grad():
        net.blocks[0].affine.bias[0, 0] = -100.0
        net.blocks[1].affine.bias.fill_(10.0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(1, 32, 5, generator=g), torch.randint(3, (1, 32), generator=g)
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0]), ["zero_grad_ratio"], 32)
    got = optional.from_network(x, y, 0, None)
    assert got["zero_grad_ratio_per_layer"][0].tolist() == pytest.approx([6 / 24, 4 / 20, 0.0])
    assert got["zero_grad_ratio"].item() == pytest.approx(10 / (24 + 20 + 15))


def test_the_monitor_counts_the_zeros_of_the_last_backward():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].bias[1] = -100.0  # unit 1 dead: 3 + 1 zero gradients in, 2 out
    x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    model(x).sum().backward()
    row = plasticlab.Monitor(model, x, measurements=["zero_grad_ratio"], thresholds=None).measure()
    assert row["zero_grad_ratio/0"] == pytest.approx(4 / 16)
    assert row["zero_grad_ratio/2"] == pytest.approx(2 / 10)
    assert row["zero_grad_ratio"] == pytest.approx(6 / 26)
