"""Hidden units of a network, as resetting methods (CBP, ReDo) and the measurements see them:
which weights are a unit's, and the per-unit statistics (mean activation, ReDo's dormancy score).

A *unit* is an output feature of a hidden Linear layer or an output channel of a hidden Conv
layer. Its **incoming** weights are its row (or filter) of that layer plus its bias; its
**outgoing** weights are the next layer's weights that read it: a column of the next Linear
layer, an input channel of the next Conv layer, or — from a conv into a linear layer — the
unit's contiguous block of flattened positions (flatten order is channel-major).

Everything is seen with a leading member dimension K: an ensemble's stacked parameters as they
are, and a plain ``nn.Sequential``'s parameters as ``[1, …]`` views (:func:`sequential_hidden_layers`),
so one implementation of each method serves both. Unit masks are ``[K, units]`` booleans.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import init as init_schemes
from .layers import ACTIVATIONS, EnsembleConv2d
from .network import EnsembleNet


@dataclass
class HiddenLayer:
    """A hidden layer seen as units: the weights they read with and the weights that read them.

    ``*_param`` are the optimizer's parameter tensors behind the ``[K, …]`` views
    ``in_weight`` etc.; ``member_view`` says the views add a member dim of 1 to them.
    """

    in_weight: torch.Tensor  # [K, U, fan_in…]
    in_bias: torch.Tensor  # [K, U]
    out_weight: torch.Tensor  # [K, out, U·spatial] or [K, out, U, kh, kw]
    out_bias: torch.Tensor  # [K, out]
    in_weight_param: torch.Tensor
    in_bias_param: torch.Tensor
    out_weight_param: torch.Tensor
    out_bias_param: torch.Tensor
    is_conv: bool
    outgoing_is_conv: bool
    units: int
    spatial: int  # positions per unit in the outgoing layer's input (conv → linear: H·W)
    fan_in: int
    fan_out: int
    member_view: bool = False

    def outgoing_mask(self, unit_mask: torch.Tensor) -> torch.Tensor:
        """``unit_mask`` [K, U] → a mask broadcastable to ``out_weight``."""
        if self.outgoing_is_conv:
            return unit_mask[:, None, :, None, None]
        m = unit_mask.repeat_interleave(self.spatial, dim=1) if self.spatial > 1 else unit_mask
        return m[:, None, :]

    def incoming_mask(self, unit_mask: torch.Tensor) -> torch.Tensor:
        """``unit_mask`` [K, U] → a mask broadcastable to ``in_weight``."""
        return unit_mask.view(*unit_mask.shape, *([1] * (self.in_weight.dim() - 2)))

    def outgoing_abs_mean(self) -> torch.Tensor:
        """Mean |outgoing weight| of each unit, ``[K, U]``."""
        w = self.out_weight.detach().abs()
        if self.outgoing_is_conv:
            return w.mean(dim=(1, 3, 4))
        K, out, _ = w.shape
        return w.view(K, out, self.units, self.spatial).mean(dim=(1, 3))

    def incoming_abs_mean(self) -> torch.Tensor:
        """Mean |incoming weight| of each unit (bias excluded), ``[K, U]``."""
        return self.in_weight.detach().abs().flatten(2).mean(2)

    def sample_init(self, scheme: str, generators) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh draw of the whole layer's incoming (weight, bias) from init ``scheme``,
        ``[K, …]`` on the layer's device; member k draws from ``generators[k]`` only."""
        return init_schemes.draw_members(scheme, tuple(self.in_weight.shape[1:]), self.fan_in,
                                         self.fan_out, generators, self.in_weight.device)

    def sample_init_philox(self, scheme: str, keys: torch.Tensor, step) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample_init` with Philox (:func:`~plasticlab.nets.init.draw_layers_philox`):
        the whole layer's incoming (weight, bias) from ``keys`` ``[K, 2, 2]`` (its weight's and
        bias's streams, :func:`hidden_philox_keys`) at counter ``step``."""
        weight, bias = init_schemes.draw_layers_philox(
            scheme, [(tuple(self.in_weight.shape[1:]), self.fan_in, self.fan_out)], keys, step,
            self.in_weight.device)
        return weight, bias

    def reset_optimizer(self, optimizer, which: str, mask: torch.Tensor,
                        restart_count: bool = True) -> None:
        """Restart the optimizer state of parameter ``which`` (``in_weight``, ``in_bias``,
        ``out_weight``) where the ``[K, …]``-shaped ``mask`` is true."""
        param = getattr(self, f"{which}_param")
        mask = mask.expand_as(getattr(self, which))
        if self.member_view:
            mask = mask[0]
        optimizer.reset(parameter_index(optimizer, param), mask, restart_count=restart_count)


def hidden_philox_keys(net: EnsembleNet, seeds, stream: str) -> list[torch.Tensor]:
    """Each hidden layer's Philox keys for :meth:`HiddenLayer.sample_init_philox`, ``[K, 2, 2]``:
    hidden layer l's are the streams ``STREAM/l/weight|bias`` of
    :meth:`EnsembleNet.philox_init_keys` (a hidden layer is the affine layer of the same place)."""
    keys = net.philox_init_keys(seeds, stream)
    return [keys[:, 2 * i:2 * i + 2] for i in range(len(net.affine_layers) - 1)]


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
        layers.append(_layer(inc.weight, inc.bias, out.weight, out.bias,
                             isinstance(inc, EnsembleConv2d), isinstance(out, EnsembleConv2d),
                             inc.fan_in, inc.fan_out, member_view=False))
    return layers


def _layer(w_in, b_in, w_out, b_out, is_conv, out_is_conv, fan_in, fan_out, member_view):
    view = (lambda t: t.unsqueeze(0)) if member_view else (lambda t: t)
    units = w_in.shape[-4] if is_conv else w_in.shape[-2]
    in_features = w_out.shape[-3] if out_is_conv else w_out.shape[-1]
    return HiddenLayer(view(w_in), view(b_in), view(w_out), view(b_out), w_in, b_in, w_out, b_out,
                       is_conv, out_is_conv, units, in_features // units, fan_in, fan_out,
                       member_view)


SEQUENTIAL_PASSTHROUGH = (nn.ReLU, nn.MaxPool2d, nn.AvgPool2d, nn.Flatten, nn.Dropout, nn.Identity)


def sequential_hidden_layers(model: nn.Sequential, method: str = "this method"
                             ) -> tuple[list[HiddenLayer], list[nn.Module]]:
    """The hidden layers of a plain ``nn.Sequential`` of Linear/Conv2d layers, ReLU, pooling,
    flatten and dropout, as ``[1, …]`` views; and, for each, the ReLU module whose output is
    that layer's features (hook it to capture them).

    Anything else (normalisation layers, other activations, nested containers, convs with
    groups/dilation) is refused with the offending layer named: the method's statistics
    would not mean what the paper means.
    """
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"{method} works on nn.Sequential models, got {type(model).__name__}")
    affine: list[tuple[int, nn.Module]] = []
    relu_after: dict[int, nn.Module] = {}
    for i, m in enumerate(model):
        if isinstance(m, nn.Linear | nn.Conv2d):
            if isinstance(m, nn.Conv2d) and (m.groups != 1 or m.dilation != (1, 1)):
                raise ValueError(f"{method}: layer {i} ({m}) uses groups/dilation; not supported")
            if m.bias is None:
                raise ValueError(f"{method}: layer {i} ({m}) has no bias; not supported")
            affine.append((i, m))
        elif isinstance(m, nn.ReLU):
            if not affine or affine[-1][0] in relu_after:
                raise ValueError(f"{method}: layer {i} (ReLU) does not follow a Linear/Conv2d")
            relu_after[affine[-1][0]] = m
        elif not isinstance(m, SEQUENTIAL_PASSTHROUGH):
            raise ValueError(f"{method}: layer {i} ({type(m).__name__}) is not supported; use "
                             "Linear, Conv2d, ReLU, MaxPool2d/AvgPool2d, Flatten, Dropout")
    if len(affine) < 2:
        raise ValueError(f"{method}: the model needs a hidden layer (two Linear/Conv2d layers)")
    layers, relus = [], []
    for (i, inc), (_, out) in zip(affine[:-1], affine[1:], strict=True):
        if i not in relu_after:
            raise ValueError(f"{method}: hidden layer {i} ({inc}) is not followed by a ReLU")
        is_conv = isinstance(inc, nn.Conv2d)
        k = inc.kernel_size[0] * inc.kernel_size[1] if is_conv else 1
        fan_in = inc.weight[0].numel()
        fan_out = inc.weight.shape[0] * k
        layers.append(_layer(inc.weight, inc.bias, out.weight, out.bias, is_conv,
                             isinstance(out, nn.Conv2d), fan_in, fan_out, member_view=True))
        relus.append(relu_after[i])
    return layers, relus


def check_layers_current(layers, who: str) -> None:
    """Each hidden layer's ``[1, …]`` views (:func:`sequential_hidden_layers`)
    share their parameters' storage; else a ``RuntimeError``: the model was moved or converted
    after ``who`` was built from those views."""
    for layer in layers:
        if any(view.data_ptr() != param.data_ptr() for view, param in (
                (layer.in_weight, layer.in_weight_param), (layer.out_weight, layer.out_weight_param))):
            param = layer.in_weight_param
            raise RuntimeError(f"{who}: the model's parameters were replaced after {who} was built "
                               f"(moved or converted: they are now {param.dtype} on {param.device}), "
                               f"and {who} would change the old ones; build {who} after "
                               "model.to(device)")


def unit_mean(features: torch.Tensor) -> torch.Tensor:
    """Mean over the batch (and space, for conv features ``[K, B, U, H, W]``) → ``[K, U]``."""
    return features.mean(dim=1) if features.dim() == 3 else features.mean(dim=(1, 3, 4))


def parameter_index(optimizer, tensor: torch.Tensor) -> int:
    """Position of ``tensor`` in ``optimizer.params`` (for per-element state resets)."""
    for i, p in enumerate(optimizer.params):
        if p is tensor:
            return i
    raise ValueError("tensor is not one of the optimizer's parameters")


SCORE_EPS = 1e-9
"""Added to the layer's mean score (SPEC §2.2), so an all-silent layer scores 0 and is recycled
whole. The L2 Init authors' code adds nothing: there such a layer scores 0/0 = NaN and is never
recycled (no switch; docs/methods-reference-modes.md)."""


# --- the dormant-neuron score ---------------------------------------------------------------

def unit_activity(features: torch.Tensor) -> torch.Tensor:
    """E|h_i|: each unit's mean absolute activation, ``[K, U]``.

    ``features`` are post-activation features ``[K, B, U]`` (linear) or ``[K, B, U, H, W]``
    (conv: the mean also runs over the spatial positions of the channel).
    """
    return unit_mean(features.detach().abs())


def dormancy_scores(activity: torch.Tensor) -> torch.Tensor:
    """s_i = E|h_i| / (mean_k E|h_k| + 1e-9) from :func:`unit_activity` ``[K, U]`` → ``[K, U]``.

    The normalisation by the layer's mean makes τ a fraction of the typical unit's activity,
    the same for wide and narrow layers and for any activation scale.
    """
    return activity / (activity.mean(dim=1, keepdim=True) + SCORE_EPS)


def dormant_mask(activity: torch.Tensor, threshold: torch.Tensor | float) -> torch.Tensor:
    """Dormant units, ``[K, U]`` bool: s_i ≤ τ, with τ a float or a per-member ``[K]`` tensor.

    With τ = 0 exactly the units with zero activity on every input of the batch are dormant
    (scores are ≥ 0, and 0 only when E|h_i| = 0).
    """
    scores = dormancy_scores(activity)
    tau = torch.as_tensor(threshold, dtype=scores.dtype, device=scores.device)
    return scores <= tau.reshape(-1, 1)
