"""Hidden units of an ensemble network, as resetting methods (CBP, ReDo) see them.

A *unit* is an output feature of a hidden Linear layer or an output channel of a hidden Conv
layer. Its **incoming** weights are its row (or filter) of that layer plus its bias; its
**outgoing** weights are the next layer's weights that read it: a column of the next Linear
layer, an input channel of the next Conv layer, or — from a conv into a linear layer — the
unit's contiguous block of flattened positions (flatten order is channel-major).
All masks here are ``[K, units]`` booleans, one row per member.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .layers import ACTIVATIONS, EnsembleConv2d, EnsembleLinear
from .network import EnsembleNet


@dataclass
class HiddenLayer:
    """A hidden block seen as units: where they read from and who reads them."""

    block: int
    incoming: EnsembleLinear | EnsembleConv2d
    outgoing: EnsembleLinear | EnsembleConv2d
    units: int
    spatial: int  # positions per unit in the outgoing layer's input (conv → linear: H·W)

    @property
    def is_conv(self) -> bool:
        return isinstance(self.incoming, EnsembleConv2d)

    @property
    def outgoing_is_conv(self) -> bool:
        return isinstance(self.outgoing, EnsembleConv2d)

    def outgoing_mask(self, unit_mask: torch.Tensor) -> torch.Tensor:
        """``unit_mask`` [K, U] → a mask broadcastable to the outgoing weight."""
        if self.outgoing_is_conv:  # weight [K, out, in_channels, kh, kw]
            return unit_mask[:, None, :, None, None]
        m = unit_mask.repeat_interleave(self.spatial, dim=1) if self.spatial > 1 else unit_mask
        return m[:, None, :]  # weight [K, out, in_features]

    def incoming_mask(self, unit_mask: torch.Tensor) -> torch.Tensor:
        """``unit_mask`` [K, U] → a mask broadcastable to the incoming weight."""
        return unit_mask.view(*unit_mask.shape, *([1] * (self.incoming.weight.dim() - 2)))

    def outgoing_abs_mean(self) -> torch.Tensor:
        """Mean |outgoing weight| of each unit, ``[K, U]``."""
        w = self.outgoing.weight.detach().abs()
        if self.outgoing_is_conv:
            return w.mean(dim=(1, 3, 4))
        K, out, _ = w.shape
        return w.view(K, out, self.units, self.spatial).mean(dim=(1, 3))

    def incoming_abs_mean(self) -> torch.Tensor:
        """Mean |incoming weight| of each unit (bias excluded), ``[K, U]``."""
        return self.incoming.weight.detach().abs().flatten(2).mean(2)


def hidden_layers(net: EnsembleNet, method: str = "this method") -> list[HiddenLayer]:
    """Every hidden block of ``net`` as a :class:`HiddenLayer` (never the output layer).

    Resetting methods need one feature per unit, so a Concat ReLU network is refused.
    """
    layers = []
    blocks = list(net.blocks)
    for i, block in enumerate(blocks[:-1]):
        if ACTIVATIONS[block.activation][1] != 1:
            raise ValueError(f"{method} needs an activation with one feature per unit, "
                             f"not {block.activation!r}")
        inc, out = block.affine, blocks[i + 1].affine
        units = inc.out_channels if isinstance(inc, EnsembleConv2d) else inc.out_features
        in_features = out.in_channels if isinstance(out, EnsembleConv2d) else out.in_features
        layers.append(HiddenLayer(i, inc, out, units, spatial=in_features // units))
    return layers


def unit_mean(features: torch.Tensor) -> torch.Tensor:
    """Mean over the batch (and space, for conv features ``[K, B, U, H, W]``) → ``[K, U]``."""
    return features.mean(dim=1) if features.dim() == 3 else features.mean(dim=(1, 3, 4))


def parameter_index(optimizer, tensor: torch.Tensor) -> int:
    """Position of ``tensor`` in ``optimizer.params`` (for per-element state resets)."""
    for i, p in enumerate(optimizer.params):
        if p is tensor:
            return i
    raise ValueError("tensor is not one of the optimizer's parameters")
