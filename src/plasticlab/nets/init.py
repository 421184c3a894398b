"""Initialisation schemes of SPEC §4.

θ₀ is the draw made here, before the first update. ``torch_default`` is PyTorch's own default
for ``nn.Linear``/``nn.Conv2d``: weight **and bias** ~ U(−1/√fan_in, 1/√fan_in). The other
schemes draw the weight with the ReLU gain (Kaiming) or the Glorot rule (Xavier) and set the
bias to 0, as ``torch.nn.init`` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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


def draw_layers_philox(scheme: str, layers: Sequence[tuple[tuple[int, ...], int, int]],
                       keys: torch.Tensor, step, device) -> list[torch.Tensor]:
    """Every member's weight and bias of every layer from ``scheme``, drawn with
    Philox-4x32-10 (:mod:`plasticlab.philox`) on ``device`` for all members and all layers in
    one draw (:func:`plasticlab.philox.uniform_streams`): ``layers[i]`` = (layer i's weight
    shape ``[out, …]``, fan-in, fan-out); member k's layer-i weight from its stream
    ``keys[k, 2i]`` and its bias from ``keys[k, 2i + 1]`` (``keys`` ``[K, 2L, 2]``), at counter
    ``step`` (an int, or an int64 tensor on ``device``). Returns [W₀ ``[K, …]``, b₀ ``[K, out]``,
    W₁, b₁, …]: U(−1, 1) or N(0, 1) times each layer's bound or s.d., as :func:`draw_members`
    draws them — other numbers than its generators', the same bits on any device and for any
    K, and each layer's the numbers of its own streams alone."""
    check_scheme(scheme)
    forms = [_form(scheme, fan_in, fan_out) for _, fan_in, fan_out in layers]
    distribution, _, bias_drawn = forms[0]  # the scheme's, for every layer
    streams, shapes = [], []
    for i, (shape, _, _) in enumerate(layers):
        streams.append(2 * i)
        shapes.append(shape)
        if bias_drawn:
            streams.append(2 * i + 1)
            shapes.append(shape[:1])
    chosen = keys if len(streams) == keys.shape[1] else keys[:, streams]
    if distribution == "uniform":
        drawn = iter(philox.uniform_streams(chosen, step, shapes, device, -1.0, 1.0))
    else:
        drawn = iter(philox.normal_streams(chosen, step, shapes, device))
    out = []
    for (shape, _, _), (_, factor, _) in zip(layers, forms, strict=True):
        weight = next(drawn).mul_(factor)
        bias = next(drawn).mul_(factor) if bias_drawn else \
            torch.zeros(len(keys), shape[0], device=weight.device)
        out.extend((weight, bias))
    return out
