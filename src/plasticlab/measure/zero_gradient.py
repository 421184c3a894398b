"""The zero-gradient ratio: the fraction of parameters whose gradient is exactly 0 on the probe
batch (dojeon-ai/Hare-Tortoise, ``src/trainers/base.py``: ``torch.sum(param.grad == 0) /
param.numel()`` per tensor, their count-weighted mean over the network).

A weight gets no gradient when every path through it is cut — its unit is dead on every input
of the batch, or the input feeding it is always 0 — so the ratio counts the weights that
cannot learn from the data at hand. Definitions: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def zero_gradient_count(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """How many entries of ``grads`` (each ``[K, …]``) are exactly 0, per member, ``[K]`` float64."""
    return sum((g.detach() == 0).flatten(1).sum(1) for g in grads).double()


def zero_gradient_ratio(grads: Sequence[Sequence[torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer ``[K, A]``: #{g = 0} / #g over each layer's gradient tensors (weight and bias
    together); over the network ``[K]``: Σ #{g = 0} / Σ #g, every parameter once."""
    zeros = torch.stack([zero_gradient_count(g) for g in grads], dim=1)
    counts = torch.tensor([sum(t[0].numel() for t in g) for g in grads], dtype=torch.float64,
                          device=zeros.device)
    return zeros.sum(1) / counts.sum(), zeros / counts


__all__ = ["zero_gradient_count", "zero_gradient_ratio"]
