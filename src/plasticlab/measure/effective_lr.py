"""The effective learning rate of each layer, ‖g‖ / ‖θ‖: how far a gradient step turns the
layer's weights, relative to their size (isaac7778/FIRE, ``rl/sac/scale_rl/networks/metrics.py``
``get_effective_lr``: each parameter tensor's gradient norm over its value norm, and their
parameter-count-weighted mean as the total).

FIRE divides the norm of the loss gradient g = ∇L of an update by the norm of the parameters
after it: a layer whose weights have grown large learns slowly whatever its step size, and this
ratio says by how much. It is the gradient's norm, not the update's: with Adam the step's own
size α·m̂/(√v̂ + ε) is another quantity. Definitions and where plasticlab's probe gradient differs
from FIRE's minibatch gradient: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖·‖₂ over ``tensors`` together, per member (leading dimension K), ``[K]`` float64."""
    return torch.sqrt(sum(t.detach().double().pow(2).flatten(1).sum(1) for t in tensors))


def effective_lr(grads: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖g‖₂ / ‖θ‖₂ of one layer, its tensors (weight and bias) taken together, per member:
    ``grads[i]`` is the gradient of ``params[i]``, both ``[K, …]``; ``[K]`` float64 (inf where
    ‖θ‖ = 0 and g ≠ 0)."""
    if len(grads) != len(params) or not params:
        raise ValueError(f"effective_lr needs one gradient per parameter, got {len(grads)} for "
                         f"{len(params)}")
    return _norm(grads) / _norm(params)


def layer_effective_lr(grads: Sequence[Sequence[torch.Tensor]],
                       params: Sequence[Sequence[torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per layer ``[K, A]`` (:func:`effective_lr` of each layer's tensors) and over the network
    ``[K]``: the mean of the per-layer ratios weighted by each layer's parameter count, FIRE's
    ``effective_lr_total``."""
    ratios = torch.stack([effective_lr(g, p) for g, p in zip(grads, params, strict=True)], dim=1)
    counts = torch.tensor([sum(t[0].numel() for t in p) for p in params], dtype=torch.float64,
                          device=ratios.device)
    return (ratios * counts).sum(1) / counts.sum(), ratios


__all__ = ["effective_lr", "layer_effective_lr"]
