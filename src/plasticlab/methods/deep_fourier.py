"""Deep Fourier features (Lewandowski, Schuurmans & Machado, "Plastic Learning with Deep Fourier
Features", ICLR 2025): every hidden activation is the concatenation of a sine and a cosine of
the pre-activation,

    ψ(z) = [sin(z), cos(z)].

Near any z one of the two is close to linear (sin where cos is near ±1, and the other way
round), so the network keeps the trainability of a linear one while staying nonlinear. Like
Concat ReLU the activation doubles the features, so the next layer's fan-in doubles; for a fair
comparison the hidden widths shrink by the smallest fraction that keeps the parameter count at
least the plain network's (:func:`plasticlab.nets.matched_scale`, the same fractions as Concat
ReLU's). Plasticine's implementation keeps the ReLU widths (docs/methods.md).

:class:`DeepFourier` is the activation as an ``nn.Module``, for a plain PyTorch model.
"""

from __future__ import annotations

import torch
from torch import nn

from ..nets import matched_scale
from .base import Method


class DeepFourierFeatures(Method):
    """Deep Fourier features: every hidden activation is ψ(z) = [sin(z), cos(z)], in a network
    whose hidden widths are shrunk to keep the plain network's parameter count."""

    name = "deep_fourier"
    title = "Deep Fourier Features"
    description = "Deep Fourier features [sin z, cos z], widths shrunk to the plain net's parameter count"

    @classmethod
    def architecture(cls, hp, net):
        scale = matched_scale(net["arch"], net["input_shape"], net["num_outputs"], "deep_fourier",
                              width=net["width"], extra_layers=net["extra_layers"])
        return {"activation": "deep_fourier", "hidden_scale": scale}


class DeepFourier(nn.Module):
    """ψ(z) = [sin(z), cos(z)] concatenated along ``dim`` (1: the features of ``[B, F]``, the
    channels of ``[B, C, H, W]``): a drop-in for ``nn.ReLU`` whose next layer reads twice the
    features."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.sin(z), torch.cos(z)], dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
