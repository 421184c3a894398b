"""Ensemble layers: every parameter carries a leading member dimension K.

A member's slice of each layer computes exactly what the plain PyTorch layer computes on that
member's inputs, so member k of an ensemble is the same network as seed k trained alone.
Inputs are ``[K, B, features]`` for linear layers and ``[K, B, C, H, W]`` for convolutions.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn


class _EnsembleLinearFunction(torch.autograd.Function):
    """y = x Wᵀ + b per member, with a backward that writes ∂L/∂W = δᵀx straight in W's own
    [K, out, in] layout. (Autograd's generic backward of ``baddbmm(b, x, Wᵀ)`` produces a
    transposed gradient that AccumulateGrad then copies element by element, a large share of
    the paper's MLP step on CPU: docs/performance.md.)"""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad_out, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad_out.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        grad_b = grad_out.sum(1) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


class EnsembleLinear(nn.Module):
    """K independent ``nn.Linear`` layers: y_k = x_k W_kᵀ + b_k, one batched matmul."""

    def __init__(self, members: int, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(members, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(members, out_features))

    @property
    def fan_in(self) -> int:
        return self.in_features

    @property
    def fan_out(self) -> int:
        return self.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # baddbmm is bit-identical per member to K separate addmm calls on CPU.
        return _EnsembleLinearFunction.apply(x, self.weight, self.bias)


class _EnsembleConvLoopFunction(torch.autograd.Function):
    """y_k = conv2d(x_k, W_k) + b_k for each member k in turn (stride 1, no padding), with a
    backward that calls each member's convolution backward directly. (Through autograd, each
    ``x[k]``/``W[k]`` selection's backward writes a zero-filled full-size tensor to be summed,
    which this form avoids: docs/performance.md.)"""

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


class EnsembleConv2d(nn.Module):
    """K independent ``nn.Conv2d`` layers (stride 1, no padding).

    ``kernel`` picks how the K convolutions run: ``"loop"`` (one conv per member, the faster
    on CPU for the paper's small CNN), ``"grouped"`` (one grouped conv with groups=K, the
    faster on a GPU), or ``"auto"`` (grouped on CUDA, loop elsewhere); the measurements:
    ``benchmarks/conv_kernels.py``, docs/performance.md.
    """

    def __init__(self, members: int, in_channels: int, out_channels: int, kernel_size: int,
                 kernel: str = "auto"):
        super().__init__()
        if kernel not in ("auto", "loop", "grouped"):
            raise ValueError(f"conv kernel must be 'auto', 'loop' or 'grouped', got {kernel!r}")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.kernel = kernel
        self.weight = nn.Parameter(
            torch.empty(members, out_channels, in_channels, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(members, out_channels))

    @property
    def fan_in(self) -> int:
        return self.in_channels * self.kernel_size ** 2

    @property
    def fan_out(self) -> int:
        return self.out_channels * self.kernel_size ** 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = self.kernel
        if kernel == "auto":
            kernel = "grouped" if x.is_cuda else "loop"
        if kernel == "loop":
            return _EnsembleConvLoopFunction.apply(x, self.weight, self.bias)
        K, B, C, H, W = x.shape
        y = F.conv2d(x.transpose(0, 1).reshape(B, K * C, H, W),
                     self.weight.reshape(K * self.out_channels, C, self.kernel_size, self.kernel_size),
                     self.bias.reshape(-1), groups=K)
        return y.view(B, K, self.out_channels, *y.shape[-2:]).transpose(0, 1)


class EnsembleLayerNorm(nn.Module):
    """K independent ``nn.LayerNorm`` layers over the trailing ``normalized_shape`` dims."""

    def __init__(self, members: int, normalized_shape: tuple[int, ...], eps: float = 1e-5):
        super().__init__()
        self.normalized_shape, self.eps = tuple(normalized_shape), eps
        self.weight = nn.Parameter(torch.ones(members, *self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(members, *self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.layer_norm(x, self.normalized_shape, eps=self.eps)
        shape = (x.shape[0],) + (1,) * (x.dim() - 1 - len(self.normalized_shape)) + self.normalized_shape
        return y * self.weight.view(shape) + self.bias.view(shape)


def relu(h: torch.Tensor) -> torch.Tensor:
    """ReLU(h)."""
    return torch.relu(h)


def concat_relu(h: torch.Tensor) -> torch.Tensor:
    """CReLU(h) = ReLU([h, −h]) along the feature/channel dim (dim 2): doubles the features."""
    return torch.relu(torch.cat([h, -h], dim=2))


ACTIVATIONS = {"relu": (relu, 1), "concat_relu": (concat_relu, 2)}
"""name → (function, factor by which it multiplies the number of features)."""


@functools.lru_cache(maxsize=16)
def _window_corners(H: int, W: int, device: torch.device) -> torch.Tensor:
    """``[H/2, W/2]``: the flat index of every 2×2 window's top-left element in an H×W plane
    (built once per size, not at every pooling)."""
    return torch.arange(0, H, 2, device=device).view(-1, 1) * W + torch.arange(0, W, 2, device=device)


class _MaxPool2x2Function(torch.autograd.Function):
    """``F.max_pool2d(h, 2)`` of ``[N, C, H, W]`` with even H and W, the same values, indices
    and gradient, computed from the four corners of every window with elementwise maxima —
    faster on CPU than PyTorch's kernel, which loops over every window element by element
    (docs/performance.md). Ties go to the first corner in row-major order,
    as in ``max_pool2d``; the backward is ``max_pool2d``'s own, fed these indices."""

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
        indices = (lower * W).add_(right).add_(_window_corners(H, W, h.device))
        ctx.save_for_backward(h, indices)
        ctx.mark_non_differentiable(indices)
        return y, indices

    @staticmethod
    def backward(ctx, grad_y, _grad_indices):
        h, indices = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad_y, h, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)


def max_pool2x2(h: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(h, 2)`` of ``[N, C, H, W]``: the elementwise form on CPU for even H, W
    (:class:`_MaxPool2x2Function`), PyTorch's kernel otherwise."""
    if h.is_cuda or h.shape[-1] % 2 or h.shape[-2] % 2:
        return F.max_pool2d(h, 2)
    return _MaxPool2x2Function.apply(h)[0]


def max_pool(h: torch.Tensor, size: int = 2) -> torch.Tensor:
    """2×2 max-pooling of ``[K, B, C, H, W]`` features, per member."""
    K, B = h.shape[:2]
    flat = h.reshape(K * B, *h.shape[2:])
    y = max_pool2x2(flat) if size == 2 else F.max_pool2d(flat, size)
    return y.view(K, B, *y.shape[1:])
