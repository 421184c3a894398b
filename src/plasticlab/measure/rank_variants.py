"""The rank of a feature matrix as the field's other toolkits count it, beside srank and the
effective rank (:mod:`plasticlab.metrics`): the PCA approximate rank, Lyle's feature rank and
the numerical matrix rank — each from the singular values σ₁ ≥ … ≥ σ_r of Φ ∈ ℝ^{n×d} that
srank already took, so one SVD per layer serves every variant.

Source: isaac7778/FIRE, ``rl/sac/scale_rl/networks/metrics.py`` ``get_rank`` (after
CLAIRE-Labo/no-representation-no-trust), which reports five variants of one ``svdvals`` call:
effective rank, approximate rank, srank, feature rank and ``jnp.linalg.matrix_rank``.
Definitions and differences: docs/measurements.md.
"""

from __future__ import annotations

import torch

from .. import metrics

PCA_VARIANCE = 0.99
"""The share of Σσᵢ² the PCA approximate rank keeps (Yang et al. 2020; FIRE's ``1 − tau``)."""

FEATURE_RANK_CUTOFF = 0.01
"""ε of Lyle et al. (2022): a direction counts when σᵢ/√n > ε (FIRE's ``tau``)."""


def approximate_rank(sv: torch.Tensor, variance: float = PCA_VARIANCE) -> torch.Tensor:
    """PCA approximate rank (Yang et al. 2020): min { k : Σ_{i≤k} σᵢ² ≥ 0.99 · Σᵢ σᵢ² } — the
    number of principal directions that hold 99 % of Φ's energy ‖Φ‖_F² = Σσᵢ².

    ``sv``: singular values ``[..., r]`` in descending order; returns int64 ``[...]`` (0 for an
    all-zero matrix). As in FIRE's code, Φ is not centred (σ are the raw features').
    srank is the same count on σᵢ instead of σᵢ², so this is :func:`plasticlab.metrics.srank`
    of σ²."""
    return metrics.srank(sv.detach().double().clamp_min(0).square(), variance)


def feature_rank(sv: torch.Tensor, rows: int, cutoff: float = FEATURE_RANK_CUTOFF) -> torch.Tensor:
    """Feature rank (Lyle et al. 2022, eqs. 4–5): #{ i : σᵢ / √n > ε }, n = ``rows`` (the rows
    of Φ: inputs, times positions for a conv layer), ε = 0.01; int64 ``[...]``."""
    if rows < 1:
        raise ValueError(f"feature_rank needs the number of rows of the feature matrix, got {rows}")
    return (sv.detach().double() / rows ** 0.5 > cutoff).sum(-1)


def matrix_tolerance(sv: torch.Tensor, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """``torch.linalg.matrix_rank``'s default tolerance for an ``rows × cols`` matrix of
    ``dtype``: σ₁ · max(rows, cols) · eps(dtype) (atol = 0, rtol = max(m, n)·eps — the
    default of torch and of ``jnp.linalg.matrix_rank`` alike), ``[...]`` float64."""
    return sv.detach().double()[..., 0] * max(rows, cols) * torch.finfo(dtype).eps


def matrix_rank(sv: torch.Tensor, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """Numerical rank: #{ i : σᵢ > σ₁ · max(n, d) · eps }, eps of the features' ``dtype``
    (float32: 1.19e-7) — ``torch.linalg.matrix_rank(Φ)`` with its default tolerance, counted
    on the σ already taken; int64 ``[...]``."""
    tol = matrix_tolerance(sv, rows, cols, dtype)
    return (sv.detach().double() > tol.unsqueeze(-1)).sum(-1)


def rank_variants(sv: torch.Tensor, rows: int, cols: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The three variants of one layer from its σ ``[K, r]`` (of a ``rows × cols`` feature
    matrix of ``dtype``): ``approximate_rank``, ``feature_rank``, ``matrix_rank``, each
    float64 ``[K]`` (whole numbers; float so that a diverged member can be NaN)."""
    return {"approximate_rank": approximate_rank(sv).double(),
            "feature_rank": feature_rank(sv, rows).double(),
            "matrix_rank": matrix_rank(sv, rows, cols, dtype).double()}


RANK_VARIANTS = ("approximate_rank", "feature_rank", "matrix_rank")
"""The names :func:`rank_variants` returns."""

__all__ = ["FEATURE_RANK_CUTOFF", "PCA_VARIANCE", "RANK_VARIANTS", "approximate_rank",
           "feature_rank", "matrix_rank", "matrix_tolerance", "rank_variants"]
