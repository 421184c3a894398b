"""2×2 max-pooling computed from the four corners of every window.

Plain form: ``F.max_pool2d(h, 2)`` in :func:`plasticlab.nets.max_pool`. PyTorch's CPU kernel
loops over every window element by element; :class:`MaxPool2x2Function` takes the maximum of
the four corners of all windows at once with elementwise maxima (why: docs/performance.md).
The same values, indices (ties go to the first corner in row-major order, as in
``max_pool2d``) and gradient (``max_pool2d``'s own backward, fed these indices): bit-identical.

Applies: ``[N, C, H, W]`` inputs on the CPU with even H and W, outside
:func:`plasticlab.fast.plain_forms`.
Test: ``tests/test_fast_kernels.py``, ``tests/test_nets.py`` (values, indices and gradient, with ties).
"""

from __future__ import annotations

import functools

import torch

from ..fast import enabled


def applies(h: torch.Tensor) -> bool:
    """Whether 2×2 pooling of ``h`` ``[N, C, H, W]`` runs :func:`max_pool2x2`."""
    return enabled() and not h.is_cuda and h.shape[-1] % 2 == 0 and h.shape[-2] % 2 == 0


@functools.lru_cache(maxsize=16)
def window_corners(H: int, W: int, device: torch.device) -> torch.Tensor:
    """``[H/2, W/2]``: the flat index of every 2×2 window's top-left element in an H×W plane
    (built once per size, not at every pooling)."""
    return torch.arange(0, H, 2, device=device).view(-1, 1) * W + torch.arange(0, W, 2, device=device)


class MaxPool2x2Function(torch.autograd.Function):
    """``F.max_pool2d(h, 2, return_indices=True)`` of ``[N, C, H, W]`` with even H and W:
    (values, flat indices into each H×W plane); the indices pass no gradient."""

    @staticmethod
    def forward(ctx, h):
        N, C, H, W = h.shape
        v = h.view(N, C, H // 2, 2, W // 2, 2)
        a, b, c, d = v[:, :, :, 0, :, 0], v[:, :, :, 0, :, 1], v[:, :, :, 1, :, 0], v[:, :, :, 1, :, 1]
        right_top, top = b > a, torch.maximum(a, b)
        right_bottom, bottom = d > c, torch.maximum(c, d)
        lower = bottom > top
        y = torch.maximum(top, bottom)
        right = right_top.logical_xor(lower.logical_and(right_top.logical_xor(right_bottom)))
        indices = (lower * W).add_(right).add_(window_corners(H, W, h.device))
        ctx.save_for_backward(h, indices)
        ctx.mark_non_differentiable(indices)
        return y, indices

    @staticmethod
    def backward(ctx, grad_y, _grad_indices):
        h, indices = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad_y, h, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)


def max_pool2x2(h: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(h, 2)`` of ``[N, C, H, W]`` with even H and W, through
    :class:`MaxPool2x2Function`."""
    return MaxPool2x2Function.apply(h)[0]


__all__ = ["MaxPool2x2Function", "applies", "max_pool2x2", "window_corners"]
