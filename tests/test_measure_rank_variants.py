"""The rank variants (PCA approximate rank, Lyle's feature rank, matrix rank) on feature
matrices whose singular values are known, and from the engine's one SVD per layer."""

from __future__ import annotations

import types

import pytest
import torch

from plasticlab import metrics
from plasticlab.measure import network_internals
from plasticlab.measure.optional import TaskEndMeasurements
from plasticlab.measure.rank_variants import approximate_rank, feature_rank, matrix_rank, matrix_tolerance
from plasticlab.nets import build_network


def with_singular_values(sigma: list[float], rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A ``rows × cols`` float64 matrix U diag(σ) Vᵀ with orthonormal U, V: its singular values
    are exactly ``sigma`` (then zeros)."""
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(rows, len(sigma), generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(cols, len(sigma), generator=g, dtype=torch.float64))
    return u @ torch.diag(torch.tensor(sigma, dtype=torch.float64)) @ v.T


def test_the_pca_approximate_rank_counts_the_directions_holding_99_percent_of_the_energy():
    # σ² = 100, 2, 0.5, 0.5: the first holds 97.1 % of 103, the first two 99.03 %.
    sv = torch.tensor([[100, 2, 0.5, 0.5]], dtype=torch.float64).sqrt()
    assert approximate_rank(sv).tolist() == [2]
    assert metrics.srank(sv).tolist() == [4]  # srank counts σ, not σ²: the first three hold 94.5 %
    assert approximate_rank(torch.zeros(1, 3)).tolist() == [0]


def test_lyles_feature_rank_counts_singular_values_above_one_hundredth_of_root_n():
    # n = 400 rows: √n = 20, so σ counts when σ > 0.2.
    phi = with_singular_values([5.0, 1.0, 0.21, 0.19, 0.01], rows=400, cols=6)
    sv = metrics.singular_values(phi[None])
    assert feature_rank(sv, rows=400).tolist() == [3]


def test_matrix_rank_is_torch_matrix_rank_with_its_default_tolerance():
    for rank, seed in ((1, 0), (3, 1), (7, 2)):
        g = torch.Generator().manual_seed(seed)
        phi = (torch.randn(50, rank, generator=g) @ torch.randn(rank, 9, generator=g))[None]
        sv = metrics.singular_values(phi)
        assert matrix_rank(sv, 50, 9, phi.dtype).tolist() == [rank]
        assert matrix_rank(sv, 50, 9, phi.dtype).item() == torch.linalg.matrix_rank(phi[0]).item()
    sv = torch.tensor([[1.0, 1e-3]], dtype=torch.float64)
    assert matrix_tolerance(sv, 50, 9, torch.float32).item() == pytest.approx(50 * 2.0 ** -23)


def test_a_diagonal_first_layer_on_unit_inputs_has_the_rank_variants_of_its_diagonal():
    # Layer 1: W = diag(σ), b = 0, inputs e_1..e_4: the features are diag(σ) itself.
    sigma = [4.0, 2.0, 0.05, 0.001]
    net = build_network("mlp", 1, (4,), 3, width=0.04)  # 4 hidden units
    with torch.no_grad():
        net.blocks[0].affine.weight[0] = torch.diag(torch.tensor(sigma))
        net.blocks[0].affine.bias.zero_()
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0]), ["rank_variants"], 4)
    got = network_internals(net, torch.eye(4)[None], optional=optional)
    assert got["approximate_rank"][0, 0].item() == 2  # σ²: 16 / 20.0025 < 99 % ≤ (16 + 4) / 20.0025
    assert got["feature_rank"][0, 0].item() == 3  # σ/√4 = 2, 1, 0.025 > 0.01, 0.0005
    assert got["matrix_rank"][0, 0].item() == 4  # all four above 4 · 4 · 1.19e-7
    assert got["srank"][0, 0].item() == 2


def test_a_diverged_members_rank_variants_are_nan_and_the_others_measured():
    net = build_network("mlp", 2, (4,), 3, width=0.04,
                        generators=[torch.Generator().manual_seed(s) for s in (0, 1)])
    with torch.no_grad():
        net.blocks[0].affine.weight[1, 0, 0] = float("inf")
    optional = TaskEndMeasurements(net, types.SimpleNamespace(seeds=[0, 1]), ["rank_variants"], 8)
    x = torch.randn(2, 8, 4, generator=torch.Generator().manual_seed(0))
    got = network_internals(net, x, optional=optional)
    for name in ("approximate_rank", "feature_rank", "matrix_rank"):
        assert torch.isnan(got[name][1]).all() and torch.isfinite(got[name][0]).all(), name
