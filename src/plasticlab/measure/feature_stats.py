"""Feature norm and feature variance of a layer's post-activation features on the probe batch,
as RLE-Foundation/Plasticine measures them (``plasticine/metrics.py``: ``compute_feature_norm``,
``compute_feature_variance``).

Both look at one input's feature vector φ(x) ∈ ℝ^d at a time (a conv layer's C·H·W values
flattened) and average over the n inputs of the batch. The headline values are taken on the
**penultimate** features — the last hidden layer's, which the output layer reads (Plasticine
measures its encoder's output, the same place) — and every hidden layer has its own per-layer
value. Definitions: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _per_input(features: torch.Tensor) -> torch.Tensor:
    """``[K, n, …]`` features as ``[K, n, d]`` float64: one row per input, its values flat."""
    if features.dim() < 3:
        raise ValueError(f"features must be [K, n, …], got {tuple(features.shape)}")
    return features.detach().flatten(2).double()


def feature_norm(features: torch.Tensor) -> torch.Tensor:
    """(1/n) Σₓ ‖φ(x)‖₂: the mean over the batch of each input's feature-vector norm, ``[K]``
    float64 (Plasticine: ``torch.mean(torch.norm(features, dim=1))``)."""
    return torch.linalg.vector_norm(_per_input(features), dim=2).mean(1)


def feature_variance(features: torch.Tensor) -> torch.Tensor:
    """(1/n) Σₓ Var_j φ_j(x): the mean over the batch of the variance **across the d units** of
    one input's feature vector, unbiased (1/(d − 1)), ``[K]`` float64 (Plasticine:
    ``torch.mean(torch.var(features, dim=1))``). Not the variance of a unit across inputs. NaN
    for a layer of one value per input."""
    phi = _per_input(features)
    if phi.shape[2] < 2:  # one value per input has no unbiased variance
        return torch.full(phi.shape[:1], float("nan"), dtype=torch.float64, device=phi.device)
    return phi.var(dim=2, correction=1).mean(1)


def feature_stats(features: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Of the hidden layers' ``features`` (one ``[K, n, …]`` tensor each, input to output):
    ``feature_norm`` and ``feature_variance`` of the last (penultimate features) ``[K]``, and
    ``*_per_layer`` ``[K, L]`` for every layer."""
    if not features:
        raise ValueError("the network has no hidden layers")
    norms = torch.stack([feature_norm(f) for f in features], dim=1)
    variances = torch.stack([feature_variance(f) for f in features], dim=1)
    return {"feature_norm": norms[:, -1], "feature_variance": variances[:, -1],
            "feature_norm_per_layer": norms, "feature_variance_per_layer": variances}


__all__ = ["feature_norm", "feature_stats", "feature_variance"]
