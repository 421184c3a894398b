"""The fraction of active units, with "active" defined for the activation that made them.

plasticlab's dead-unit count (a unit whose output is exactly 0 on every input) says something
only where an activation has a floor it can sit on: a tanh or sigmoid unit is never exactly 0,
yet it stops passing gradient when it saturates. RLE-Foundation/Plasticine
(``plasticine/metrics.py``, ``compute_dormant_units``) defines the inactive entries per
activation; the active fraction here is one minus its ratio:

- ReLU and Concat ReLU: an entry is active when h > 0 (each of Concat ReLU's 2U outputs is an
  entry of its own, as in Plasticine's ``crelu``);
- tanh: active when |h| ≤ 0.99 (Plasticine counts |h| > 0.99 as saturated);
- sigmoid: active when 0.01 ≤ h ≤ 0.99.

The fraction counts **entries** — inputs × positions × units — of the probe batch, as
Plasticine's mean over the whole feature matrix does: a unit active on half the inputs counts
half. Per layer it is the mean over the layer's entries; over the network every unit weighs
once (Σ_l U_l · a_l / Σ_l U_l, as the dead fraction). Definitions: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

SATURATION = 0.99
"""|h| above which a tanh entry is saturated; a sigmoid entry outside [1 − 0.99, 0.99]."""


def _positive(h: torch.Tensor) -> torch.Tensor:
    return h > 0


def _tanh_unsaturated(h: torch.Tensor) -> torch.Tensor:
    return h.abs() <= SATURATION


def _sigmoid_unsaturated(h: torch.Tensor) -> torch.Tensor:
    return (h >= 1 - SATURATION) & (h <= SATURATION)


ACTIVE_RULES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": _positive, "concat_relu": _positive, "tanh": _tanh_unsaturated,
    "sigmoid": _sigmoid_unsaturated,
}
"""Activation name → the test of an active entry (post-activation value h)."""

MODULE_RULES: dict[type, str] = {
    nn.ReLU: "relu", nn.ReLU6: "relu", nn.Tanh: "tanh", nn.Hardtanh: "tanh",
    nn.Sigmoid: "sigmoid", nn.Hardsigmoid: "sigmoid",
}
"""Which rule a :class:`plasticlab.Monitor` applies to the output of each activation module
type (nn.ReLU6 and nn.Hardtanh are checked exactly as ReLU and tanh). Activations with
negative outputs or no saturation (LeakyReLU, GELU, SiLU, …) have no definition here."""


def rule_for_module(module: nn.Module) -> str | None:
    """The :data:`ACTIVE_RULES` name for an activation module (its exact type or a subclass),
    or None where none is defined."""
    for kind, rule in MODULE_RULES.items():
        if isinstance(module, kind):
            return rule
    return None


def check_rule(activation: str) -> str:
    """``activation`` when it has a definition of active, else a ValueError listing those that do."""
    if activation not in ACTIVE_RULES:
        raise ValueError(f"active_fraction has no definition for activation {activation!r}; it is "
                         f"defined for {', '.join(ACTIVE_RULES)}")
    return activation


def layer_active_fraction(features: torch.Tensor, activation: str) -> torch.Tensor:
    """The fraction of active entries of one layer's post-activation ``features`` ``[K, n, …]``
    under ``activation``'s rule, ``[K]`` float64."""
    active = ACTIVE_RULES[check_rule(activation)](features.detach())
    return active.flatten(1).double().mean(1)


def active_fraction(features: Sequence[torch.Tensor], activations: Sequence[str],
                    units: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Over the network ``[K]`` (each unit once: Σ_l U_l a_l / Σ_l U_l, ``units[l]`` = U_l) and
    per layer ``[K, L]``, from each hidden layer's ``features`` and ``activations`` name."""
    if not features:
        raise ValueError("the network has no hidden layers")
    per_layer = torch.stack([layer_active_fraction(f, a)
                             for f, a in zip(features, activations, strict=True)], dim=1)
    weights = torch.tensor(list(units), dtype=torch.float64, device=per_layer.device)
    return (per_layer * weights).sum(1) / weights.sum(), per_layer


__all__ = ["ACTIVE_RULES", "MODULE_RULES", "SATURATION", "active_fraction", "check_rule",
           "layer_active_fraction", "rule_for_module"]
