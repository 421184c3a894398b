"""Distance to θ₀: how far each layer's parameters have moved from their values when training
began, ‖θ_ℓ − θ₀_ℓ‖₂ (dojeon-ai/Hare-Tortoise, ``src/trainers/base.py``, measures
‖θ − θ₀‖₂ of each tensor, divided by its count, per block; RLE-Foundation/Plasticine's
``compute_l2_norm_difference`` the root mean square √(Σ(θ − θ₀)² / n) over the whole network).

plasticlab reports the plain Euclidean distance, per layer (weight and bias together) and over
every layer together, so the per-layer values combine: ‖θ − θ₀‖² = Σ_ℓ ‖θ_ℓ − θ₀_ℓ‖².
Definitions: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def squared_distance(params: Sequence[torch.Tensor], initial: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖θ − θ₀‖₂² over ``params`` together (each ``[K, …]``, ``initial`` shaped alike), per
    member, ``[K]`` float64."""
    if len(params) != len(initial) or not params:
        raise ValueError(f"distance to θ₀ needs one initial tensor per parameter, got "
                         f"{len(initial)} for {len(params)}")
    return sum((p.detach().double() - p0.double()).pow(2).flatten(1).sum(1)
               for p, p0 in zip(params, initial, strict=True))


def distance_to_init(params: Sequence[Sequence[torch.Tensor]], initial: Sequence[Sequence[torch.Tensor]]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """Over the network ``[K]`` (‖θ − θ₀‖₂ over every layer) and per layer ``[K, A]``
    (‖θ_ℓ − θ₀_ℓ‖₂), from each layer's tensors and their initial values."""
    squares = torch.stack([squared_distance(p, p0) for p, p0 in zip(params, initial, strict=True)], dim=1)
    return squares.sum(1).sqrt(), squares.sqrt()


__all__ = ["distance_to_init", "squared_distance"]
