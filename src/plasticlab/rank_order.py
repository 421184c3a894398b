"""The stable order of a tensor's entries, sorted from the order they had one step before.

Wasserstein Init (:class:`plasticlab.regularizers.WassersteinInit`) ranks every entry of every
parameter tensor at every step: ``argsort(θ, stable=True)``, ties ranked by position. One
optimizer step moves the ranks only a little, so θ taken in the last step's order is nearly
sorted, and a sort is faster on nearly sorted input. Gathered in that order, though, tied values
would be ranked by their old rank, not their position. So the entries are sorted by a key that
holds both: the value's bits made to order as the value does (an ``int32``), times 2³², plus the
position. No two keys are equal, any sort of them gives the one order, and that order is
``argsort(θ, stable=True)``'s, whatever the hint. The hint changes the time, never the result.

Plain form: ``flat.argsort(dim=-1, stable=True)``. Applies: float32 values, fewer than 2³¹
entries a row, outside
:func:`plasticlab.fast.plain_forms`, from the second step on (the first has no hint). Test:
``tests/test_toolkit_wasserstein_init.py``. Its gain: ``benchmarks/wasserstein_sort.py``.
"""

from __future__ import annotations

import torch

from . import fast


def applies(flat: torch.Tensor, hint: torch.Tensor | None) -> bool:
    """Whether :func:`stable_order_from_hint` may replace the plain stable argsort of ``flat``."""
    return (fast.enabled() and hint is not None and flat.dtype == torch.float32
            and hint.shape == flat.shape and flat.shape[-1] < 2 ** 31)


def ordered_keys(flat: torch.Tensor) -> torch.Tensor:
    """One int64 per entry of float32 ``flat`` (rows along the last dimension), ordered as
    (value, position): ``bits′(x)·2³² + i``, where ``bits′`` is the float's bit pattern as an
    int32 with the negative numbers' magnitude bits flipped, so that it orders as the values
    do. −0.0 is first made +0.0 and every NaN the one positive NaN: torch's sort holds −0.0
    equal to +0.0 and puts every NaN last, their ties by position, as these keys then do."""
    canonical = torch.where(torch.isnan(flat), torch.full_like(flat, float("nan")), flat + 0.0)
    bits = canonical.view(torch.int32)
    bits = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(torch.int64)
    position = torch.arange(flat.shape[-1], device=flat.device, dtype=torch.int64)
    return (bits << 32) | position


def stable_order_from_hint(flat: torch.Tensor, hint: torch.Tensor) -> torch.Tensor:
    """``flat.argsort(dim=-1, stable=True)``, computed by sorting the (value, position) keys of
    ``flat`` taken in the order ``hint`` (the last step's order, a permutation per row)."""
    keys = ordered_keys(flat).gather(-1, hint)
    return hint.gather(-1, keys.argsort(dim=-1))

