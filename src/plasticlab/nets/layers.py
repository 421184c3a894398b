"""Ensemble layers: every parameter carries a leading member dimension K.

A member's slice of each layer computes exactly what the plain PyTorch layer computes on that
member's inputs, so member k of an ensemble is the same network as seed k trained alone.
Inputs are ``[K, B, features]`` for linear layers and ``[K, B, C, H, W]`` for convolutions.

The code here is each layer's plain form, the one to read. Where a fast path of
:mod:`plasticlab.fast` applies (its ``applies``/``kernel_for`` says so), the layer runs that
instead: the same function, computed faster; :func:`plasticlab.fast.plain_forms` turns them off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import ensemble_conv, linear_backward
from . import max_pool_corners as fast_max_pool


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
        if linear_backward.applies(x):  # the same forward, a faster backward
            return linear_backward.ensemble_linear(x, self.weight, self.bias)
        if linear_backward.traced(x):  # under torch.compile: ∂W in W's layout, member by member
            return linear_backward.traced_linear(x, self.weight, self.bias)
        # baddbmm is bit-identical per member to K separate addmm calls on CPU.
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight.transpose(1, 2))


class EnsembleConv2d(nn.Module):
    """K independent ``nn.Conv2d`` layers (stride 1, no padding): y_k = conv2d(x_k, W_k) + b_k.

    ``kernel`` names the fast form the K convolutions run in (:mod:`plasticlab.nets.ensemble_conv`):
    ``"loop"`` (one conv per member, the faster on CPU for the paper's small CNN), ``"grouped"``
    (one grouped conv with groups=K, the faster on a GPU), or ``"auto"`` (grouped on CUDA, loop
    elsewhere); the measurements: ``benchmarks/conv_kernels.py``, docs/performance.md.
    """

    def __init__(self, members: int, in_channels: int, out_channels: int, kernel_size: int,
                 kernel: str = "auto"):
        super().__init__()
        if kernel != "auto" and kernel not in ensemble_conv.KERNELS:
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
        fast = ensemble_conv.kernel_for(self.kernel, x)
        if fast is not None:
            return fast(x, self.weight, self.bias)
        # one convolution per member
        return torch.stack([F.conv2d(x[k], self.weight[k], self.bias[k]) for k in range(x.shape[0])])


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


def deep_fourier(h: torch.Tensor) -> torch.Tensor:
    """Deep Fourier features [sin(h), cos(h)] along the feature/channel dim (dim 2): doubles the
    features (Lewandowski, Schuurmans & Machado, ICLR 2025)."""
    return torch.cat([torch.sin(h), torch.cos(h)], dim=2)


ACTIVATIONS = {"relu": (relu, 1), "concat_relu": (concat_relu, 2), "deep_fourier": (deep_fourier, 2)}
"""name → (function, factor by which it multiplies the number of features)."""


def max_pool(h: torch.Tensor, size: int = 2) -> torch.Tensor:
    """Max-pooling of ``[K, B, C, H, W]`` features over ``size``×``size`` windows, per member."""
    K, B = h.shape[:2]
    flat = h.reshape(K * B, *h.shape[2:])
    if size == 2 and fast_max_pool.applies(flat):  # the same values, indices and gradient
        y = fast_max_pool.max_pool2x2(flat)
    else:
        y = F.max_pool2d(flat, size)
    return y.view(K, B, *y.shape[1:])
