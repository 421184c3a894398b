"""Feature norm and feature variance (Plasticine's definitions) on features whose values are
known, and the engine's: the penultimate layer's, every layer's beside it."""

from __future__ import annotations

import math
import types

import pytest
import torch

from plasticlab.measure import network_internals
from plasticlab.measure.feature_stats import feature_norm, feature_stats, feature_variance
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.nets import build_network


def test_feature_norm_is_the_mean_over_inputs_of_each_feature_vectors_length():
    # φ(x₁) = (3, 4) has length 5, φ(x₂) = (0, 0) length 0: the mean is 2.5.
    f = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])
    assert feature_norm(f).tolist() == [2.5]


def test_feature_variance_is_across_the_units_of_one_input_not_across_inputs():
    # Every input has the same vector (1, 3): across inputs each unit has variance 0, across
    # its two units each input has the unbiased variance ((1 − 2)² + (3 − 2)²) / 1 = 2.
    f = torch.tensor([[[1.0, 3.0]] * 5])
    assert feature_variance(f).tolist() == [2.0]
    assert math.isnan(feature_variance(torch.ones(1, 4, 1)).item())  # one value per input


def test_a_conv_layers_feature_vector_is_its_channels_and_positions_flattened():
    f = torch.zeros(1, 2, 3, 2, 2)  # [K, n, C, H, W]: 12 values per input
    f[0, 0] = 1.0
    assert feature_norm(f).item() == pytest.approx(math.sqrt(12) / 2)


def test_the_headline_values_are_the_penultimate_layers_and_every_layer_has_its_own():
    a, b = torch.tensor([[[3.0, 4.0]]]), torch.tensor([[[1.0, 1.0]]])
    out = feature_stats([a, b])
    assert out["feature_norm"].tolist() == [math.sqrt(2)]
    assert out["feature_norm_per_layer"].tolist() == [[5.0, math.sqrt(2)]]
    assert out["feature_variance_per_layer"].tolist() == [[0.5, 0.0]]


def test_an_identity_network_measures_the_relu_of_its_inputs():
    # W₁ = W₂ = I, b = 0: both hidden layers' features are relu(x).
    net = build_network("mlp", 1, (4,), 3, width=0.04)
    with torch.no_grad():
        for block in net.blocks[:2]:
            block.affine.weight[0] = torch.eye(4)
            block.affine.bias.zero_()
    x = torch.tensor([[[2.0, -1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]])
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0]), ["feature_stats"], 2)
    got = network_internals(net, x, optional=optional)
    assert got["feature_norm"].tolist() == [pytest.approx((2.0 + 2.0) / 2)]
    # (2, 0, 0, 0): mean ½, unbiased variance (1.5² + 3 · 0.5²) / 3 = 1; (1, 1, 1, 1): 0
    assert got["feature_variance"].tolist() == [pytest.approx(0.5)]
    assert got["feature_norm_per_layer"].shape == (1, 2)
