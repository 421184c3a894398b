"""Distance to θ₀ per layer: after a known displacement, in the engine (θ₀ kept when the
measurements are made, before training) and in the Monitor."""

from __future__ import annotations

import math
import types

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.measure.init_distance import distance_to_init
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.nets import build_network


def test_the_layer_distances_combine_into_the_networks():
    start = [[torch.zeros(1, 2)], [torch.zeros(1, 1)]]
    now = [[torch.tensor([[3.0, 4.0]])], [torch.tensor([[12.0]])]]
    overall, per_layer = distance_to_init(now, start)
    assert per_layer.tolist() == [[5.0, 12.0]] and overall.tolist() == [13.0]


def test_a_known_displacement_of_one_member_is_its_distance_and_the_others_stay_at_zero():
    net = build_network("mlp", 2, (4,), 3, width=0.04,
                        generators=[torch.Generator().manual_seed(s) for s in (0, 1)])
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0, 1]), ["distance_to_init"], 2)
    with torch.no_grad():
        net.blocks[1].affine.weight[1] += 0.5  # 16 weights moved by 0.5: distance 2
        net.blocks[1].affine.bias[1] -= 1.0  # 4 biases by 1: distance 2
    got = optional.from_network(None, None, 0, None)
    assert got["distance_to_init_per_layer"].tolist() == [[0.0, 0.0, 0.0], [0.0, math.sqrt(8), 0.0]]
    assert got["distance_to_init"].tolist() == [0.0, math.sqrt(8)]


def test_the_monitor_measures_the_distance_from_the_parameters_it_was_made_with():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    monitor = plasticlab.Monitor(model, torch.randn(4, 2), measurements=["distance_to_init"],
                                 thresholds=None)
    with torch.no_grad():
        model[2].weight += torch.tensor([[3.0, 4.0]])
    row = monitor.measure()
    assert row["distance_to_init/2"] == pytest.approx(5.0)
    assert row["distance_to_init/0"] == 0.0 and row["distance_to_init"] == pytest.approx(5.0)
