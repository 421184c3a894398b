"""The measurement functions against independent computations (SPEC §5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from plasticlab import metrics
from plasticlab.nets import build_network


def with_singular_values(s: list[float], n: int, d: int, seed: int) -> torch.Tensor:
    """U diag(s) Vᵀ with random orthonormal U [n, r], V [d, r]: a matrix whose σ are s."""
    g = torch.Generator().manual_seed(seed)
    r = len(s)
    u, _ = torch.linalg.qr(torch.randn(n, r, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(d, r, generator=g, dtype=torch.float64))
    return (u * torch.tensor(s, dtype=torch.float64)) @ v.T


def srank_by_hand(s: list[float], threshold: float = 0.99) -> int:
    s = sorted(s, reverse=True)
    total, running = sum(s), 0.0
    for k, value in enumerate(s, start=1):
        running += value
        if running >= threshold * total:
            return k
    return len(s)


def effective_rank_by_hand(s: list[float]) -> float:
    p = np.asarray(s, dtype=np.float64) / sum(s)
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


SPECTRA = [
    [10.0, 5.0, 1.0, 0.1, 0.05],  # Σ = 16.15: 10 + 5 + 1 = 16 ≥ 15.99 → 3
    [1.0] * 40,  # equal: ceil(0.99 · 40) = 40; effective rank exactly 40
    [2.0 ** -i for i in range(30)],  # geometric
    [3.0, 3.0, 3.0, 0.0001],  # 9/9.0001 ≥ 0.99 → 3
]


def test_srank_and_effective_rank_of_matrices_with_known_singular_values():
    d = 60
    mats = [with_singular_values(s, 200, d, seed=i) for i, s in enumerate(SPECTRA)]
    sv = metrics.singular_values(torch.stack(mats).float())  # one batched call over "members"
    assert sv.shape == (len(SPECTRA), d)
    for k, s in enumerate(SPECTRA):
        padded = sorted(s, reverse=True) + [0.0] * (d - len(s))
        np.testing.assert_allclose(sv[k].numpy(), padded, rtol=1e-4, atol=1e-4)
    ranks = metrics.srank(sv)
    assert ranks.tolist() == [srank_by_hand(s) for s in SPECTRA]
    assert ranks.tolist()[0] == 3 and ranks.tolist()[1] == 40 and ranks.tolist()[3] == 3
    eranks = metrics.effective_rank(sv)
    for k, s in enumerate(SPECTRA):
        assert eranks[k].item() == pytest.approx(effective_rank_by_hand(s), rel=1e-4)
    assert eranks[1].item() == pytest.approx(40.0, rel=1e-5)


@pytest.mark.parametrize("shape", [(3, 200, 60), (3, 40, 90), (2, 64, 64)])
def test_the_gram_matrix_fast_path_gives_the_svds_singular_values_and_ranks(shape):
    # tall, wide and square features, a low-rank member among them
    g = torch.Generator().manual_seed(1)
    phi = torch.randn(*shape, generator=g)
    phi[1] = torch.randn(shape[1], 3, generator=g) @ torch.randn(3, shape[2], generator=g)
    plain, gram = torch.linalg.svdvals(phi), metrics.gram_singular_values(phi)
    torch.testing.assert_close(gram, plain, rtol=1e-5, atol=1e-5 * plain.max().item())
    assert metrics.srank(gram).tolist() == metrics.srank(plain).tolist()
    # a rank-3 member's other σ are rounding noise in either form (about 1e-7·σ₁ in float32),
    # each adding a sliver to the effective rank's entropy
    torch.testing.assert_close(metrics.effective_rank(gram), metrics.effective_rank(plain),
                               rtol=1e-4, atol=0)
    mats = torch.stack([with_singular_values(sp, 200, 60, seed=i) for i, sp in enumerate(SPECTRA)])
    assert metrics.srank(metrics.gram_singular_values(mats)).tolist() == \
        [srank_by_hand(sp) for sp in SPECTRA]
    # on the CPU singular_values keeps the SVD, so recorded measurements do not move
    assert not metrics.gram_applies(phi)
    assert torch.equal(metrics.singular_values(phi), plain)


def test_srank_threshold_and_edge_cases():
    exact = torch.tensor([[4.0, 3.0, 2.0, 1.0]], dtype=torch.float64)  # cumulative 0.4 0.7 0.9 1.0
    assert metrics.srank(exact, threshold=0.7).item() == 2  # "reach" includes equality
    assert metrics.srank(exact, threshold=0.71).item() == 3
    assert metrics.srank(exact, threshold=1.0).item() == 4
    assert metrics.srank(torch.ones(1, 100)).item() == 99  # ceil(0.99·100)
    zero = torch.zeros(2, 5)
    assert metrics.srank(zero).tolist() == [0, 0]
    assert metrics.effective_rank(zero).tolist() == [0.0, 0.0]
    one = torch.tensor([[5.0, 0.0, 0.0]])
    assert metrics.srank(one).item() == 1 and metrics.effective_rank(one).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        metrics.srank(exact, threshold=0.0)


def test_conv_features_are_positions_by_channels():
    g = torch.Generator().manual_seed(0)
    f = torch.rand(2, 3, 4, 5, 6, generator=g)  # K, n, C, H, W
    f[1, :, 2:] = 0  # member 1 uses only 2 of its 4 channels
    phi = metrics.feature_matrix(f)
    assert phi.shape == (2, 3 * 5 * 6, 4)
    # column c holds channel c at every (input, position)
    torch.testing.assert_close(phi[0, :, 1], f[0, :, 1].reshape(-1))
    ranks = metrics.srank(metrics.singular_values(phi))
    assert ranks[1].item() <= 2 and ranks[0].item() >= 3
    assert metrics.feature_matrix(torch.ones(2, 3, 4)).shape == (2, 3, 4)


def test_dead_fraction_on_hand_built_activations():
    layer1 = torch.tensor([  # K = 2 members, 3 inputs, 4 units
        [[0.0, 1.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0]],  # units 0, 2 dead
        [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]],  # none dead
    ])
    conv = torch.zeros(2, 3, 2, 2, 2)  # K, n, C=2 channels, 2×2 positions
    conv[0, 2, 1, 1, 0] = 0.3  # member 0: channel 1 fires at one position of one input → alive
    conv[1, :, 0] = 1.0  # member 1: channel 0 alive, channel 1 dead
    dead = metrics.dead_units(layer1)
    assert dead.tolist() == [[True, False, True, False], [False, False, False, False]]
    assert metrics.dead_units(conv).tolist() == [[True, False], [False, True]]
    overall, per_layer = metrics.dead_fraction([layer1, conv])
    assert per_layer.tolist() == [[0.5, 0.5], [0.0, 0.5]]
    assert overall.tolist() == [3 / 6, 1 / 6]  # over all 6 units, not the mean of layer fractions


def test_dormant_fraction_uses_redo_scores_at_tau_0_1():
    # mean |h| per unit: 0.05, 1, 1, 1.95 → layer mean 1 → scores 0.05, 1, 1, 1.95: one dormant
    h = torch.tensor([[[0.05, 1.0, 1.0, 1.95]]]).expand(1, 5, 4)
    overall, per_layer = metrics.dormant_fraction([h])
    assert overall.item() == pytest.approx(0.25) and per_layer.tolist() == [[0.25]]
    assert metrics.dormant_fraction([h], threshold=0.01)[0].item() == 0.0
    assert metrics.dead_fraction([h])[0].item() == 0.0


def test_weight_magnitude_of_a_known_network():
    net = build_network("mlp", 2, (3,), 2, generators=[torch.Generator().manual_seed(s) for s in (0, 1)])
    # 3 → 100 → 100 → 2: set every weight of layer l to ±(l+1), every bias to member-dependent 0.5·(k+1)
    with torch.no_grad():
        for i, layer in enumerate(net.affine_layers):
            sign = torch.ones_like(layer.weight)
            sign.view(-1)[::2] = -1
            layer.weight.copy_((i + 1) * sign)
            layer.bias.copy_(torch.tensor([0.5, 1.0])[:, None].expand_as(layer.bias))
    counts = [(3 * 100, 100), (100 * 100, 100), (100 * 2, 2)]
    for k, b in enumerate((0.5, 1.0)):
        total = sum((i + 1) * w + b * n for i, (w, n) in enumerate(counts))
        expected = total / sum(w + n for w, n in counts)
        assert metrics.weight_magnitude(net.regularized_parameters())[k].item() == pytest.approx(expected)
        per_layer = metrics.layer_weight_magnitude([(lay.weight, lay.bias) for lay in net.affine_layers])
        for i, (w, n) in enumerate(counts):
            assert per_layer[k, i].item() == pytest.approx(((i + 1) * w + b * n) / (w + n))


def test_weight_magnitude_matches_a_plain_torch_model():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3))
    flat = torch.cat([p.detach().abs().flatten() for p in model.parameters()])
    stacked = [p.detach()[None] for p in model.parameters()]
    assert metrics.weight_magnitude(stacked).item() == pytest.approx(flat.mean().item(), rel=1e-6)


def test_gradient_norm_is_each_members_own():
    a = torch.zeros(2, 3, requires_grad=True)
    b = torch.zeros(2, 4, requires_grad=True)
    a.grad = torch.tensor([[3.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    b.grad = torch.tensor([[0.0, 4.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    c = torch.zeros(2, 1, requires_grad=True)  # no gradient: skipped
    assert metrics.gradient_norm([a, b, c]).tolist() == pytest.approx([5.0, 2.0])


def test_accuracy_helpers():
    logits = torch.tensor([[[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]], [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
    labels = torch.tensor([[1, 0, 0], [1, 1, 1]])
    assert metrics.correct_counts(logits, labels).tolist() == [2, 1]
    assert metrics.accuracy(logits, labels).tolist() == pytest.approx([2 / 3, 1 / 3])


A = [  # A[j][m]: test accuracy on task m after training on task j (m ≤ j)
    [0.90],
    [0.80, 0.92],
    [0.70, 0.85, 0.95],
    [0.60, 0.80, 0.90, 0.97],
]


def test_bwt_and_one_step_bwt_on_a_hand_written_matrix():
    # BWT: K = 3; (0.60−0.90) + (0.80−0.92) + (0.90−0.95) = −0.47 → −0.47/3
    assert metrics.bwt(A) == pytest.approx(-0.47 / 3)
    # one-step: (0.80−0.90) + (0.85−0.92) + (0.90−0.95) = −0.22 → −0.22/3
    assert metrics.one_step_bwt(A) == pytest.approx(-0.22 / 3)
    # a full square matrix gives the same: entries above the diagonal are ignored
    square = [row + [0.1] * (4 - len(row)) for row in A]
    assert metrics.bwt(square) == pytest.approx(metrics.bwt(A))
    # two tasks: BWT and one-step BWT coincide
    assert metrics.bwt(A[:2]) == metrics.one_step_bwt(A[:2]) == pytest.approx(0.80 - 0.90)
    assert math.isnan(metrics.bwt(A[:1])) and math.isnan(metrics.one_step_bwt(A[:1]))
    with pytest.raises(ValueError):
        metrics.bwt([[0.9], [0.8]])  # row 1 lacks A[1][1]
