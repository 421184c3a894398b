"""Initialisation schemes of SPEC §4.

θ₀ is the draw made here, before the first update. ``torch_default`` is PyTorch's own default
for ``nn.Linear``/``nn.Conv2d``: weight **and bias** ~ U(−1/√fan_in, 1/√fan_in). The other
schemes draw the weight with the ReLU gain (Kaiming) or the Glorot rule (Xavier) and set the
bias to 0, as ``torch.nn.init`` does.
"""

from __future__ import annotations

import math

import torch

from ..device import to_device

INIT_SCHEMES = ("torch_default", "kaiming_uniform", "kaiming_normal", "xavier_uniform", "xavier_normal")


def check_scheme(scheme: str) -> str:
    """Return ``scheme`` if it is a known init scheme, else raise listing the valid ones."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r}; valid: {', '.join(INIT_SCHEMES)}")
    return scheme


def _uniform(shape, bound: float, generator: torch.Generator) -> torch.Tensor:
    return (torch.rand(shape, generator=generator, device=generator.device) * 2 - 1) * bound


def _normal(shape, std: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=generator.device) * std


def draw(
    scheme: str,
    weight_shape: tuple[int, ...],
    fan_in: int,
    fan_out: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One member's (weight, bias) for a layer, drawn from ``scheme`` with ``generator``.

    The weight is drawn first and the bias second, always, so that a member's draws depend
    only on its own generator.
    """
    bias_shape = (weight_shape[0],)
    if scheme == "torch_default":
        bound = 1.0 / math.sqrt(fan_in)
        return _uniform(weight_shape, bound, generator), _uniform(bias_shape, bound, generator)
    zero_bias = torch.zeros(bias_shape, device=generator.device)
    if scheme == "kaiming_uniform":
        return _uniform(weight_shape, math.sqrt(6.0 / fan_in), generator), zero_bias
    if scheme == "kaiming_normal":
        return _normal(weight_shape, math.sqrt(2.0 / fan_in), generator), zero_bias
    if scheme == "xavier_uniform":
        return _uniform(weight_shape, math.sqrt(6.0 / (fan_in + fan_out)), generator), zero_bias
    if scheme == "xavier_normal":
        return _normal(weight_shape, math.sqrt(2.0 / (fan_in + fan_out)), generator), zero_bias
    check_scheme(scheme)
    raise AssertionError("unreachable")


def draw_members(scheme: str, weight_shape: tuple[int, ...], fan_in: int, fan_out: int,
                 generators, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's (weight ``[K, …]``, bias ``[K, …]``) for a layer on ``device``: member k
    draws from ``generators[k]`` only (:func:`draw`), on the host, and the stack is copied
    without making the host wait for the device."""
    draws = [draw(scheme, weight_shape, fan_in, fan_out, g) for g in generators]
    return (to_device(torch.stack([w for w, _ in draws]), device),
            to_device(torch.stack([b for _, b in draws]), device))
