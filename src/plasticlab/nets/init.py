"""Initialisation schemes of SPEC §4.

θ₀ is the draw made here, before the first update. ``torch_default`` is PyTorch's own default
for ``nn.Linear``/``nn.Conv2d``: weight **and bias** ~ U(−1/√fan_in, 1/√fan_in). The other
schemes draw the weight with the ReLU gain (Kaiming) or the Glorot rule (Xavier) and set the
bias to 0, as ``torch.nn.init`` does.
"""

from __future__ import annotations

import math

import torch

from .. import philox
from ..device import to_device

INIT_SCHEMES = ("torch_default", "kaiming_uniform", "kaiming_normal", "xavier_uniform", "xavier_normal")


def check_scheme(scheme: str) -> str:
    """Return ``scheme`` if it is a known init scheme, else raise listing the valid ones."""
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init scheme {scheme!r}; valid: {', '.join(INIT_SCHEMES)}")
    return scheme


def _form(scheme: str, fan_in: int, fan_out: int) -> tuple[str, float, bool]:
    """How ``scheme`` draws a layer: the weight's distribution (``"uniform"``: U(−1, 1) times
    the factor, ``"normal"``: N(0, 1) times it), the factor (its bound or s.d.), and whether
    the bias is drawn the same way (``torch_default``) or set to 0."""
    if scheme == "torch_default":
        return "uniform", 1.0 / math.sqrt(fan_in), True
    return {"kaiming_uniform": ("uniform", math.sqrt(6.0 / fan_in), False),
            "kaiming_normal": ("normal", math.sqrt(2.0 / fan_in), False),
            "xavier_uniform": ("uniform", math.sqrt(6.0 / (fan_in + fan_out)), False),
            "xavier_normal": ("normal", math.sqrt(2.0 / (fan_in + fan_out)), False)}[scheme]


def _fill(scheme: str, weight: torch.Tensor, bias: torch.Tensor, fan_in: int, fan_out: int,
          generator: torch.Generator) -> None:
    """Draw one member's layer from ``scheme`` into ``weight`` and ``bias`` (weight first, then
    the bias when the scheme draws one). A uniform draw is U(−1, 1) scaled by its bound, a
    normal one N(0, 1) scaled by its s.d.: the same numbers, to the bit, as
    ``(torch.rand(shape) * 2 − 1) * bound`` and ``torch.randn(shape) * std`` from the same
    generator, written in place instead of through temporaries. ``scheme`` is checked by the
    caller, once per layer rather than once per member."""
    distribution, factor, bias_drawn = _form(scheme, fan_in, fan_out)
    for tensor in (weight, bias) if bias_drawn else (weight,):
        if distribution == "uniform":
            tensor.uniform_(-1.0, 1.0, generator=generator).mul_(factor)
        else:
            tensor.normal_(0.0, 1.0, generator=generator).mul_(factor)
    if not bias_drawn:
        bias.zero_()


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
    check_scheme(scheme)
    weight = torch.empty(weight_shape, device=generator.device)
    bias = torch.empty((weight_shape[0],), device=generator.device)
    _fill(scheme, weight, bias, fan_in, fan_out, generator)
    return weight, bias


def draw_members(scheme: str, weight_shape: tuple[int, ...], fan_in: int, fan_out: int,
                 generators, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's (weight ``[K, …]``, bias ``[K, …]``) for a layer on ``device``: member k
    draws from ``generators[k]`` only — what :func:`draw` gives it — into its row, on the
    generators' device (the host), and the whole is copied without making the host wait for
    the device."""
    check_scheme(scheme)
    host = generators[0].device
    weight = torch.empty((len(generators), *weight_shape), device=host)
    bias = torch.empty((len(generators), weight_shape[0]), device=host)
    for k, generator in enumerate(generators):
        _fill(scheme, weight[k], bias[k], fan_in, fan_out, generator)
    return to_device(weight, device), to_device(bias, device)


def draw_members_philox(scheme: str, weight_shape: tuple[int, ...], fan_in: int, fan_out: int,
                        weight_keys: torch.Tensor, bias_keys: torch.Tensor, step: int,
                        device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's (weight ``[K, …]``, bias ``[K, …]``) for a layer from ``scheme``, drawn
    with Philox-4x32-10 (:mod:`plasticlab.philox`) on ``device`` for all members at once:
    member k's weight from its stream ``weight_keys[k]`` and its bias from ``bias_keys[k]``, at
    counter ``step``. U(−1, 1) (:func:`plasticlab.philox.uniform`) or N(0, 1)
    (:func:`plasticlab.philox.normal`) times the scheme's bound or s.d., as :func:`draw_members`
    — other numbers than its generators', the same bits on any device and for any K."""
    check_scheme(scheme)
    distribution, factor, bias_drawn = _form(scheme, fan_in, fan_out)

    def one(keys, shape):
        if distribution == "uniform":
            return philox.uniform(keys, step, shape, device, -1.0, 1.0).mul_(factor)
        return philox.normal(keys, step, shape, device).mul_(factor)

    weight = one(weight_keys, weight_shape)
    bias = one(bias_keys, weight_shape[:1]) if bias_drawn else \
        torch.zeros(len(bias_keys), weight_shape[0], device=weight.device)
    return weight, bias
