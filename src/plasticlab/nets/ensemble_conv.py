"""The K convolutions of an ensemble convolution layer (stride 1, no padding), in two fast forms.

Plain form: :meth:`plasticlab.nets.EnsembleConv2d.forward`, one ``F.conv2d(x_k, W_k, b_k)`` per
member, stacked, through autograd. Through autograd, each ``x[k]``/``W[k]`` selection's backward
writes a zero-filled full-size tensor that is then summed. The fast forms:

- **loop** (:func:`loop`): the same per-member ``F.conv2d`` forward, with a backward that calls
  each member's ``convolution_backward`` directly and writes its gradients into one tensor per
  input. The same values and gradients as the plain form (tested bit-identical on the CPU).
- **grouped** (:func:`grouped`): one convolution with ``groups=K`` over the members' channels
  side by side. The same function up to rounding (convolution algorithms differ).

Applies: outside :func:`plasticlab.fast.plain_forms`, every ensemble convolution, in the form
its ``kernel`` names; ``"auto"`` is grouped on CUDA and the loop elsewhere (why:
docs/performance.md, ``benchmarks/conv_kernels.py``).
Test: ``tests/test_fast_kernels.py``; ``tests/test_nets.py`` (loop against grouped).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..fast import enabled


class LoopConvFunction(torch.autograd.Function):
    """y_k = conv2d(x_k, W_k) + b_k for each member k in turn, for ``x`` ``[K, B, C, H, W]``,
    ``W`` ``[K, O, C, kh, kw]``, ``b`` ``[K, O]``; the backward is each member's convolution
    backward, written into ``[K, …]`` gradients."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.stack([F.conv2d(x[k], weight[k], bias[k]) for k in range(x.shape[0])])

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        mask = [ctx.needs_input_grad[0], ctx.needs_input_grad[1], ctx.needs_input_grad[2]]
        grad_x = torch.empty_like(x) if mask[0] else None
        grad_w = torch.empty_like(weight) if mask[1] else None
        grad_b = weight.new_empty(weight.shape[:2]) if mask[2] else None
        for k in range(x.shape[0]):
            gx, gw, gb = torch.ops.aten.convolution_backward(
                grad_out[k], x[k], weight[k], [weight.shape[1]], [1, 1], [0, 0], [1, 1], False,
                [0, 0], 1, mask)
            for total, part in ((grad_x, gx), (grad_w, gw), (grad_b, gb)):
                if total is not None:
                    total[k] = part
        return grad_x, grad_w, grad_b


def loop(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The K convolutions one member at a time (:class:`LoopConvFunction`), ``[K, B, O, H', W']``."""
    return LoopConvFunction.apply(x, weight, bias)


def grouped(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The K convolutions as one convolution with ``groups=K``: the batch ``[B, K·C, H, W]``
    holds every member's channels side by side, ``[K, B, O, H', W']`` a view of its output."""
    K, B, C, H, W = x.shape
    y = F.conv2d(x.transpose(0, 1).reshape(B, K * C, H, W),
                 weight.reshape(K * weight.shape[1], C, *weight.shape[3:]), bias.reshape(-1), groups=K)
    return y.view(B, K, weight.shape[1], *y.shape[-2:]).transpose(0, 1)


KERNELS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "loop": loop, "grouped": grouped}
"""The fast forms by name (an ensemble convolution's ``kernel``, besides ``"auto"``)."""


def kernel_for(kernel: str, x: torch.Tensor):
    """The fast form an ensemble convolution built with ``kernel`` runs on input ``x``:
    ``KERNELS[kernel]``, with ``"auto"`` grouped on CUDA and the loop elsewhere; None (the
    plain form) inside :func:`plasticlab.fast.plain_forms`."""
    if not enabled():
        return None
    if kernel == "auto":
        kernel = "grouped" if x.is_cuda else "loop"
    return KERNELS[kernel]


__all__ = ["KERNELS", "LoopConvFunction", "grouped", "kernel_for", "loop"]
