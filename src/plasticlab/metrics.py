"""What the paper measures inside a network (SPEC §5), as pure functions on tensors.

Everything here is batched over the member dimension K of an ensemble: inputs carry a leading
``K`` and results come back as ``[K]`` (or ``[K, L]``) tensors on the inputs' device, with no
host synchronisation — the caller decides when to read them. Nothing here touches a network
or a stream; :mod:`plasticlab.measure` applies these functions to an ensemble at task ends.

Notation (SPEC §5): a layer's features on n inputs form the matrix Φ ∈ ℝ^{n×d} (rows =
inputs, columns = units) with singular values σ₁ ≥ σ₂ ≥ … ≥ σ_r ≥ 0, r = min(n, d); θ are the
network's weights and biases; A[j, m] is the test accuracy on task m after training on task j.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .fast import enabled
from .nets.units import dormant_mask, unit_activity

SRANK_THRESHOLD = 0.99
"""1 − δ of Kumar et al. (2020): srank counts the singular values holding 99 % of Σσ."""

DORMANT_THRESHOLD = 0.1
"""τ of ReDo's dormant-unit score used for the ``dormant_fraction`` measurement."""

__all__ = [
    "DORMANT_THRESHOLD", "SRANK_THRESHOLD", "accuracy", "bwt", "correct_counts", "dead_fraction",
    "dead_units", "dormant_fraction", "effective_rank", "feature_matrix", "gradient_norm",
    "gram_applies", "gram_singular_values",
    "layer_weight_magnitude", "one_step_bwt", "singular_values", "srank", "unit_fractions",
    "weight_magnitude",
]


# --- feature rank -------------------------------------------------------------------------------

def feature_matrix(features: torch.Tensor) -> torch.Tensor:
    """A hidden layer's post-activation features as the matrix Φ whose rank is measured.

    Linear layer: ``[K, n, U]`` as it is (one row per input, one column per unit).
    Conv layer ``[K, n, C, H, W]``: ``[K, n·H·W, C]`` — every spatial position of every input
    is a row and every channel (the conv layer's unit) a column, the usual convention for the
    rank of convolutional features (the channel is the unit, positions are samples of it).
    """
    if features.dim() == 3:
        return features
    if features.dim() != 5:
        raise ValueError(f"features must be [K, n, U] or [K, n, C, H, W], got {tuple(features.shape)}")
    K, n, C, H, W = features.shape
    return features.permute(0, 1, 3, 4, 2).reshape(K, n * H * W, C)


def singular_values(matrices: torch.Tensor) -> torch.Tensor:
    """σ of every member's matrix, ``[K, rows, cols]`` → ``[K, min(rows, cols)]`` in
    descending order: ONE batched ``torch.linalg.svdvals`` call for the whole ensemble (on CUDA
    its fast path, :func:`gram_singular_values`, where :func:`gram_applies`)."""
    if matrices.dim() != 3:
        raise ValueError(f"expected [K, rows, cols], got {tuple(matrices.shape)}")
    if gram_applies(matrices):
        return gram_singular_values(matrices)
    return torch.linalg.svdvals(matrices.detach())


def gram_applies(matrices: torch.Tensor) -> bool:
    """Whether :func:`singular_values` takes :func:`gram_singular_values`: on CUDA, outside
    :func:`plasticlab.fast.plain_forms`. There the batched SVD was measured to stall (cusolver
    falling back on batches that do not converge), while a batched symmetric eigensolver on
    small Gram matrices does not; on the CPU the SVD is kept, so the CPU's recorded
    measurements do not move."""
    return enabled() and matrices.is_cuda


def gram_singular_values(matrices: torch.Tensor) -> torch.Tensor:
    """Fast path of :func:`singular_values`: σ_i = √λ_i, λ the eigenvalues of the Gram matrix
    ΦᵀΦ (or ΦΦᵀ, the smaller side) computed in float64, in descending order, ``[K, min(rows,
    cols)]`` in the matrices' dtype.

    Plain form: ``torch.linalg.svdvals`` (the same σ up to rounding: in float64 an eigenvalue's
    absolute error is about 1e-16·σ₁², so σ_i is exact to about 1e-8·σ₁ — far below what moves
    srank's 99 % or the effective rank). Applies: :func:`gram_applies`. Test:
    ``tests/test_metrics.py``."""
    phi = matrices.detach().double()
    gram = phi.mT @ phi if phi.shape[-2] >= phi.shape[-1] else phi @ phi.mT
    eigenvalues = torch.linalg.eigvalsh(gram)  # ascending
    return eigenvalues.clamp_min(0).sqrt().flip(-1).to(matrices.dtype)


def srank(sv: torch.Tensor, threshold: float = SRANK_THRESHOLD) -> torch.Tensor:
    """Feature rank srank_δ(Φ) = min { k : Σ_{i≤k} σ_i ≥ (1 − δ) · Σ_i σ_i }, 1 − δ = ``threshold``.

    ``sv``: singular values ``[..., r]`` in descending order (from :func:`singular_values`);
    returns int64 ``[...]``: the smallest k whose top-k singular values reach 99 % of their sum
    (Kumar et al. 2020; SPEC §5). An all-zero matrix has srank 0.

    Note: the L2 Init authors' code reports one less, k − 1 — it returns the 0-based *index*
    of the first singular value at which the cumulative sum reaches 99 %. This function
    returns the count k, as the paper's definition says; subtract 1 to compare with numbers
    produced by that code.
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"srank threshold must be in (0, 1], got {threshold}")
    s = sv.detach().double().clamp_min(0)
    cum = s.cumsum(-1)
    total = cum[..., -1:]
    # cum/total is compared (not cum against threshold·total) so that r equal singular values
    # give exactly ceil(threshold·r); total = 0 gives NaN, which is never ≥ threshold.
    below = (cum / total < threshold).sum(-1)
    k = below + 1
    return torch.where(total[..., 0] > 0, k, torch.zeros_like(k))


def effective_rank(sv: torch.Tensor) -> torch.Tensor:
    """Effective rank (Roy & Vetterli 2007): exp(H(p)) with p_i = σ_i / Σ_j σ_j and
    H(p) = −Σ_i p_i log p_i (0 · log 0 = 0).

    ``sv``: singular values ``[..., r]``; returns float64 ``[...]``, between 1 (one direction)
    and r (all σ equal); 0 for an all-zero matrix.
    """
    s = sv.detach().double().clamp_min(0)
    total = s.sum(-1, keepdim=True)
    p = s / torch.where(total > 0, total, torch.ones_like(total))
    entropy = -torch.xlogy(p, p).sum(-1)
    return torch.where(total[..., 0] > 0, entropy.exp(), torch.zeros_like(entropy))


# --- dead and dormant units ---------------------------------------------------------------------

def dead_units(features: torch.Tensor) -> torch.Tensor:
    """Dead units of one hidden layer, ``[K, U]`` bool: unit i is dead when h_i(x) = 0 for every
    input x of the batch (and, for a conv channel, at every spatial position).

    ``features``: post-activation features ``[K, n, U]`` or ``[K, n, U, H, W]``. Equivalent to
    ReDo's score at τ = 0 (:func:`plasticlab.nets.units.unit_activity` is 0).
    """
    return unit_activity(features) == 0


def dead_fraction(features: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of dead units over all hidden layers ``[K]`` (Σ_l dead_l / Σ_l U_l, so a wide
    layer weighs more) and per layer ``[K, L]``; ``features``: one tensor per hidden layer."""
    return unit_fractions([dead_units(f) for f in features])


def dormant_fraction(features: Sequence[torch.Tensor], threshold: float = DORMANT_THRESHOLD
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of ReDo-dormant units (score s_i = E|h_i| / mean_k E|h_k| ≤ τ, SPEC §2.2) over
    all hidden layers ``[K]`` and per layer ``[K, L]``; default τ = 0.1. Dead units are
    dormant at every τ ≥ 0."""
    return unit_fractions([dormant_mask(unit_activity(f), threshold) for f in features])


def unit_fractions(masks: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of marked units over all layers ``[K]`` (Σ_l marked_l / Σ_l U_l) and per layer
    ``[K, L]`` (float64), from one ``[K, U_l]`` bool mask per layer."""
    if not masks:
        raise ValueError("the network has no hidden layers")
    counts = torch.stack([m.sum(1) for m in masks], dim=1).double()  # [K, L]
    units = torch.tensor([m.shape[1] for m in masks], dtype=torch.float64, device=counts.device)
    return counts.sum(1) / units.sum(), counts / units


# --- weights and gradients ---------------------------------------------------------------------

def weight_magnitude(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """Average weight magnitude (1/|θ|) · Σ_i |θ_i| over all of ``params`` together, per member.

    ``params``: tensors with a leading member dimension ``[K, …]`` (e.g.
    :meth:`~plasticlab.nets.EnsembleNet.regularized_parameters`: every weight and bias of the
    affine layers, SPEC §1); returns float64 ``[K]``. Every parameter counts once: it is the
    mean over the concatenation, not the mean of per-tensor means.
    """
    if not params:
        raise ValueError("no parameters given")
    total = sum(p.detach().abs().flatten(1).double().sum(1) for p in params)
    count = sum(p[0].numel() for p in params)
    return total / count


def layer_weight_magnitude(layers: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
    """:func:`weight_magnitude` of each layer's parameters (e.g. its weight and bias), ``[K, A]``."""
    return torch.stack([weight_magnitude(list(p)) for p in layers], dim=1)


def gradient_norm(params: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖∇‖₂ per member: sqrt(Σ_i g_i²) over the ``.grad`` of every parameter that has one,
    ``[K]`` float64. Parameters carry a leading member dimension; with the engine's loss (sum of
    the members' mean losses) member k's slice is its own gradient."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        raise ValueError("no parameter has a gradient")
    return torch.sqrt(sum(g.detach().double().pow(2).flatten(1).sum(1) for g in grads))


# --- accuracy and forgetting -------------------------------------------------------------------

def correct_counts(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Number of correct argmax predictions per member: logits ``[K, n, classes]``, labels
    ``[K, n]`` → int64 ``[K]``."""
    return (logits.argmax(-1) == labels).sum(1)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Fraction of correct argmax predictions per member, ``[K]`` float64 in [0, 1]."""
    return correct_counts(logits, labels).double() / labels.shape[1]


def _check_matrix(A: Sequence[Sequence[float]]) -> int:
    for j, row in enumerate(A):
        if len(row) < j + 1:
            raise ValueError(f"accuracy matrix row {j} needs entries for tasks 0..{j}, has {len(row)}")
    return len(A) - 1


def bwt(A: Sequence[Sequence[float]]) -> float:
    """Backward transfer BWT = (1/K) Σ_{m<K} (A[K, m] − A[m, m]), K the last task index (SPEC §5).

    ``A[j][m]``: test accuracy on task m after training on task j, for m ≤ j (a lower-
    triangular list of lists; entries above the diagonal are ignored). Negative = forgetting.
    NaN for fewer than two tasks.
    """
    K = _check_matrix(A)
    if K < 1:
        return math.nan
    return sum(A[K][m] - A[m][m] for m in range(K)) / K


def one_step_bwt(A: Sequence[Sequence[float]]) -> float:
    """One-step backward transfer (1/K) Σ_{m<K} (A[m+1, m] − A[m, m]): what training on the very
    next task does to each task (SPEC §5). NaN for fewer than two tasks."""
    K = _check_matrix(A)
    if K < 1:
        return math.nan
    return sum(A[m + 1][m] - A[m][m] for m in range(K)) / K
