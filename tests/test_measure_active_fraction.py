"""The fraction of active units under each activation's definition (Plasticine's): ReLU and
Concat ReLU h > 0, tanh |h| ≤ 0.99, sigmoid 0.01 ≤ h ≤ 0.99 — in the engine and the Monitor."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.measure import network_internals
from plasticlab.measure.active_units import active_fraction, layer_active_fraction, rule_for_module
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.nets import build_network


def test_each_activation_has_its_own_definition_of_active():
    h = torch.tensor([[[-0.5, 0.0, 0.005, 0.5, 0.995, 1.0]]])
    assert layer_active_fraction(h, "relu").item() == pytest.approx(4 / 6)
    assert layer_active_fraction(h, "concat_relu").item() == pytest.approx(4 / 6)
    assert layer_active_fraction(h, "tanh").item() == pytest.approx(4 / 6)  # |h| ≤ 0.99
    assert layer_active_fraction(h, "sigmoid").item() == pytest.approx(1 / 6)  # 0.5 only
    with pytest.raises(ValueError, match="defined for relu"):
        layer_active_fraction(h, "gelu")


def test_the_network_fraction_weighs_every_unit_once():
    wide, narrow = torch.ones(1, 2, 6), torch.zeros(1, 2, 2)  # all active, none active
    overall, per_layer = active_fraction([wide, narrow], ["relu", "relu"], [6, 2])
    assert per_layer.tolist() == [[1.0, 0.0]] and overall.tolist() == [0.75]


def test_a_relu_network_with_known_signs_has_its_active_fraction():
    # W = I, b = 0: the first layer is active where x > 0 — 3 of the 8 entries.
    net = build_network("mlp", 1, (4,), 3, width=0.04)
    with torch.no_grad():
        net.blocks[0].affine.weight[0] = torch.eye(4)
        net.blocks[0].affine.bias.zero_()
    x = torch.tensor([[[1.0, -1.0, 2.0, 0.0], [-3.0, 0.0, 5.0, -1.0]]])
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0]), ["active_fraction"], 2)
    got = network_internals(net, x, optional=optional)
    assert got["active_fraction_per_layer"][0, 0].item() == pytest.approx(3 / 8)


def test_an_activation_without_a_definition_is_refused_when_the_run_asks_for_it():
    net = build_network("mlp", 1, (4,), 3, width=0.04)
    net.blocks[0].activation = "gelu"
    with pytest.raises(ValueError, match="active_fraction has no definition"):
        TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0]), ["active_fraction"], 2)


def test_the_monitor_counts_saturated_tanh_units_as_inactive_where_none_is_dead():
    # A tanh layer with huge weights saturates: nothing is exactly 0 (no dead unit), yet most
    # entries are beyond 0.99.
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        model[0].weight.mul_(100.0)
    x = torch.randn(64, 3, generator=torch.Generator().manual_seed(0))
    row = plasticlab.Monitor(model, x, measurements=["active_fraction"], thresholds=None).measure()
    h = torch.tanh(model[0](x)).detach()
    assert row["dead_fraction"] == 0.0
    assert row["active_fraction/1"] == pytest.approx((h.abs() <= 0.99).double().mean().item())
    assert row["active_fraction/1"] < 0.5
    assert rule_for_module(nn.ReLU6()) == "relu" and rule_for_module(nn.GELU()) is None


def test_the_monitor_refuses_active_fraction_where_no_layer_has_a_definition():
    model = nn.Sequential(nn.Linear(3, 8), nn.GELU(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match="active_fraction is defined for"):
        plasticlab.Monitor(model, torch.randn(4, 3), measurements=["active_fraction"])
