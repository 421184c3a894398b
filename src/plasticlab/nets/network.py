"""The paper's networks (SPEC §4) as ensembles of K members.

A network is a list of blocks. A hidden block is ``affine → [LayerNorm] → activation →
[max-pool] → [flatten]``; the last block is the affine output layer alone. The methods look
inside through :meth:`EnsembleNet.hidden_blocks` (features for CBP/ReDo/srank) and
:meth:`EnsembleNet.regularized_parameters` (what the penalties pull on).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from .. import philox
from . import init as init_schemes
from . import pool_before_relu
from .injection import FrozenHeads
from .layers import ACTIVATIONS, EnsembleConv2d, EnsembleLayerNorm, EnsembleLinear, max_pool


class Block(nn.Module):
    """One layer of the network: affine map, optional LayerNorm, activation, pooling."""

    def __init__(self, affine: nn.Module, norm: nn.Module | None = None,
                 activation: str | None = None, pool: bool = False, flatten: bool = False):
        super().__init__()
        self.affine, self.norm = affine, norm
        self.activation, self.pool, self.flatten = activation, pool, flatten

    def pre_activation(self, h: torch.Tensor) -> torch.Tensor:
        h = self.affine(h)
        return self.norm(h) if self.norm is not None else h

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (features, output): the post-activation features and what the next block gets."""
        h = self.pre_activation(h)
        if self.activation is None:
            return h, h
        feats = ACTIVATIONS[self.activation][0](h)
        out = max_pool(feats) if self.pool else feats
        return feats, (out.flatten(2) if self.flatten else out)

    def output(self, h: torch.Tensor) -> torch.Tensor:
        """What the next block gets, without the features: ``self(h)[1]``, or with ReLU and
        pooling, pooling then ReLU (:mod:`plasticlab.nets.pool_before_relu`, where it applies)."""
        if not pool_before_relu.applies(self.activation, self.pool):
            return self(h)[1]
        out = pool_before_relu.pooled_relu(self.pre_activation(h), max_pool)
        return out.flatten(2) if self.flatten else out


class EnsembleNet(nn.Module):
    """K independent copies of one architecture, trained at once."""

    def __init__(self, blocks: Sequence[Block], members: int, init: str = "torch_default"):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.members = members
        self.init = init_schemes.check_scheme(init)
        # plasticity injection's frozen heads, added to the logits (None: a plain network)
        self.head_offset: FrozenHeads | None = None
        # the outputs each member may predict ([K, outputs] bool; None: all): set per task by a
        # growing head (mask_outputs), moved with the network, never part of a checkpoint
        self.register_buffer("output_mask", None, persistent=False)

    def mask_outputs(self, allowed: torch.Tensor | None) -> None:
        """Let member k predict only the outputs ``allowed[k]`` (``[K, outputs]`` bool) — a
        growing head: every other logit is −∞ in every forward pass, so it takes no part in the
        loss, the argmax or any evaluation; None: every output."""
        if allowed is not None:
            bias = self.blocks[-1].affine.bias  # [K, outputs]
            if tuple(allowed.shape) != tuple(bias.shape) or allowed.dtype != torch.bool:
                raise ValueError(f"an output mask is [members, outputs] = {list(bias.shape)} bool, "
                                 f"got {list(allowed.shape)} {allowed.dtype}")
            allowed = allowed.to(bias.device)
        self.output_mask = allowed

    @property
    def hidden_blocks(self) -> list[Block]:
        return list(self.blocks[:-1])

    @property
    def affine_layers(self) -> list[nn.Module]:
        return [b.affine for b in self.blocks]

    def forward(self, x: torch.Tensor, return_features: bool = False):
        """Logits ``[K, B, outputs]``; with ``return_features``, also each hidden block's
        post-activation features (before pooling). With :attr:`head_offset`, the frozen heads'
        Σ_j h_{θ_j}(z) is added, z being what the first of its last ``layers`` blocks reads."""
        features = []
        h = x
        head_from = len(self.blocks) - self.head_offset.layers if self.head_offset is not None else -1
        head_input = x
        for i, block in enumerate(self.blocks[:-1]):
            if i == head_from:
                head_input = h
            if return_features:
                f, h = block(h)
                features.append(f)
            else:
                h = block.output(h)
        logits = self.blocks[-1].pre_activation(h)
        if self.head_offset is not None:
            frozen = self.head_offset(h if head_from == len(self.blocks) - 1 else head_input)
            if frozen is not None:
                logits = logits + frozen
        if self.output_mask is not None:  # a growing head: the outputs not in it are −∞
            logits = logits.masked_fill(~self.output_mask[:, None, :], float("-inf"))
        return (logits, features) if return_features else logits

    def regularized_parameters(self) -> list[nn.Parameter]:
        """Every weight and bias of the affine layers (SPEC §1); never LayerNorm's gain/bias."""
        return [p for layer in self.affine_layers for p in (layer.weight, layer.bias)]

    def sample_init(self, generators: Sequence[torch.Generator]) -> list[torch.Tensor]:
        """A fresh draw from the init distribution, shaped like :meth:`regularized_parameters`.

        Member k draws only from ``generators[k]``, layer by layer, weight then bias, so its
        draw does not depend on the other members.
        """
        out = []
        for layer in self.affine_layers:
            out.extend(self.sample_layer_init(layer, generators))
        return out

    def philox_init_keys(self, seeds: Sequence[int], stream: str) -> torch.Tensor:
        """The Philox keys of :meth:`sample_init_philox`, ``[K, 2L, 2]`` on the parameters'
        device: row 2i of member k keys layer i's weight stream ``STREAM/i/weight`` of its seed
        ``seeds[k]``, row 2i + 1 its bias stream ``STREAM/i/bias``."""
        device = self.affine_layers[0].weight.device
        return torch.stack([philox.member_keys(seeds, f"{stream}/{i}/{part}", device)
                            for i in range(len(self.affine_layers)) for part in ("weight", "bias")],
                           dim=1)

    def sample_init_philox(self, keys: torch.Tensor, step) -> list[torch.Tensor]:
        """A fresh draw from the init distribution, shaped like :meth:`regularized_parameters`,
        with Philox on the parameters' device, every layer in one draw
        (:func:`~plasticlab.nets.init.draw_layers_philox`): layer i's weight and bias from the
        streams ``keys[:, 2i]`` and ``keys[:, 2i + 1]`` (:meth:`philox_init_keys`) at counter
        ``step`` (an int, or an int64 tensor on that device). Member k's numbers depend on its
        keys and ``step`` only."""
        layers = [(tuple(layer.weight.shape[1:]), layer.fan_in, layer.fan_out)
                  for layer in self.affine_layers]
        return init_schemes.draw_layers_philox(self.init, layers, keys, step,
                                               self.affine_layers[0].weight.device)

    def sample_layer_init(self, layer: nn.Module, generators: Sequence[torch.Generator]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh (weight ``[K, …]``, bias ``[K, …]``) draw for one affine layer; member k
        draws from ``generators[k]`` only."""
        if len(generators) != self.members:
            raise ValueError(f"need one generator per member ({self.members}), got {len(generators)}")
        return init_schemes.draw_members(self.init, tuple(layer.weight.shape[1:]), layer.fan_in,
                                         layer.fan_out, generators, layer.weight.device)

    @torch.no_grad()
    def initialize(self, generators: Sequence[torch.Generator]) -> None:
        """Set every affine parameter to a draw from the init scheme (θ₀)."""
        for p, v in zip(self.regularized_parameters(), self.sample_init(generators), strict=True):
            p.copy_(v)

    def parameter_count(self) -> int:
        """Trainable parameters of one member."""
        return sum(p[0].numel() for p in self.parameters())


MLP_HIDDEN = 100
SHALLOW_MLP_HIDDEN = 5
"""Dohare et al.'s learner for the slowly-changing regression problem (``lop/nets/ffnn.py``):
one hidden layer of 5 units."""
CNN_CHANNELS = 16
CNN_FC = 100


def forward_with(net: nn.Module, params: Sequence[torch.Tensor]):
    """``net``'s forward pass as a function of (values for ``params``, in their order, and the
    input): ``torch.func.functional_call`` with the parameters named — what ``torch.func.grad``
    differentiates in a compiled step (the task gradient, C-CHAIN's churn term)."""
    names = {id(p): name for name, p in net.named_parameters()}
    order = [names[id(p)] for p in params]

    def forward(values, x):
        return torch.func.functional_call(net, dict(zip(order, values, strict=True)), (x,))

    return forward


def hidden_sizes(arch: str, width: float = 1.0, extra_layers: int = 0) -> dict[str, list]:
    """Layer sizes of the SPEC §4 networks before any CReLU shrinking.

    MLP: ``{"fc": [100]*(2+extra_layers)}``; shallow MLP: ``{"fc": [5]*(1+extra_layers)}``.
    CNN: ``{"conv": [(channels, kernel, pool)…],
    "fc": [100…]}``; ``extra_layers=2`` is the paper's deeper CNN (convs 5×5, 3×3, 3×3, pool
    after the first two; three fc layers).
    """
    if extra_layers < 0:
        raise ValueError(f"extra_layers must be >= 0, got {extra_layers}")
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")

    def scaled(n: int) -> int:
        return max(1, int(round(n * width)))

    if arch == "mlp":
        return {"fc": [scaled(MLP_HIDDEN)] * (2 + extra_layers)}
    if arch == "shallow_mlp":
        return {"fc": [scaled(SHALLOW_MLP_HIDDEN)] * (1 + extra_layers)}
    if arch == "cnn":
        c = scaled(CNN_CHANNELS)
        if extra_layers == 0:
            return {"conv": [(c, 5, True), (c, 5, True)], "fc": [scaled(CNN_FC)] * 2}
        if extra_layers == 2:
            return {"conv": [(c, 5, True), (c, 3, True), (c, 3, False)], "fc": [scaled(CNN_FC)] * 3}
        raise ValueError(f"the CNN has a deeper variant with extra_layers=2 only, got {extra_layers}")
    raise ValueError(f"unknown architecture {arch!r}; valid: mlp, shallow_mlp, cnn")


def _shrink(n: int, hidden_scale: float) -> int:
    # floor, guarded against 0.29·100 = 28.999…: the paper's CReLU fractions come out this way
    return max(1, int(round(n * hidden_scale, 6)))


def layer_plan(arch: str, input_shape: tuple[int, ...], num_outputs: int, *, width: float = 1.0,
               extra_layers: int = 0, activation: str = "relu", hidden_scale: float = 1.0
               ) -> list[dict]:
    """The layers :func:`build_network` builds, as dicts: ``kind`` (conv | linear), ``inputs``,
    ``outputs``, and for convs ``kernel``, ``pool`` and the output ``size`` (H, W)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    factor = ACTIVATIONS[activation][1]
    sizes = hidden_sizes(arch, width, extra_layers)
    plan = []
    shape = tuple(input_shape)
    for channels, kernel, pool in sizes.get("conv", []):
        channels = _shrink(channels, hidden_scale)
        h, w = shape[1] - kernel + 1, shape[2] - kernel + 1
        plan.append({"kind": "conv", "inputs": shape[0], "outputs": channels, "kernel": kernel,
                     "pool": pool, "size": (h, w)})
        if pool:
            h, w = h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError(f"the {arch}'s convolutions leave nothing of a {input_shape[1]}×"
                             f"{input_shape[2]} input (after conv layer {len(plan)}, {kernel}×{kernel}"
                             f"{', pooled' if pool else ''}); give it larger images")
        shape = (channels * factor, h, w)
    features = math.prod(shape)
    for n in sizes["fc"]:
        n = _shrink(n, hidden_scale)
        plan.append({"kind": "linear", "inputs": features, "outputs": n})
        features = n * factor
    plan.append({"kind": "linear", "inputs": features, "outputs": num_outputs})
    return plan


def plan_parameter_count(plan: list[dict], layer_norm: bool = False) -> int:
    """Trainable parameters of one member of the network ``plan`` describes."""
    total = 0
    for i, layer in enumerate(plan):
        k = layer.get("kernel", 1)
        total += layer["outputs"] * (layer["inputs"] * k * k + 1)
        if layer_norm and i < len(plan) - 1:
            total += 2 * layer["outputs"] * math.prod(layer.get("size", (1, 1)))
    return total


def concat_relu_scale(arch: str, input_shape: tuple[int, ...], num_outputs: int, *,
                      width: float = 1.0, extra_layers: int = 0) -> float:
    """The hidden-width multiplier s for a Concat ReLU network (:func:`matched_scale`). 1 − s
    is the fraction of units removed: 0.09 for the MLP, 0.27 for the CNN with 10 or 2 outputs,
    0.31 with 100 (the paper's numbers)."""
    return matched_scale(arch, input_shape, num_outputs, "concat_relu", width=width,
                         extra_layers=extra_layers)


def matched_scale(arch: str, input_shape: tuple[int, ...], num_outputs: int, activation: str, *,
                  width: float = 1.0, extra_layers: int = 0) -> float:
    """The hidden-width multiplier s for a network with ``activation``: the smallest s on a
    0.01 grid whose network has at least as many parameters as the plain ReLU network (an
    activation that doubles the features doubles each next layer's fan-in)."""
    common = {"width": width, "extra_layers": extra_layers}
    target = plan_parameter_count(layer_plan(arch, input_shape, num_outputs, **common))
    best = 1.0
    for step in range(100, 0, -1):
        s = step / 100
        plan = layer_plan(arch, input_shape, num_outputs, activation=activation,
                          hidden_scale=s, **common)
        if plan_parameter_count(plan) < target:
            break
        best = s
    return best


def build_network(
    arch: str,
    members: int,
    input_shape: tuple[int, ...],
    num_outputs: int,
    *,
    width: float = 1.0,
    extra_layers: int = 0,
    activation: str = "relu",
    layer_norm: bool = False,
    init: str = "torch_default",
    hidden_scale: float = 1.0,
    conv_kernel: str = "auto",
    generators: Sequence[torch.Generator] | None = None,
) -> EnsembleNet:
    """Build the SPEC §4 MLP or CNN for ``members`` members and initialise it.

    ``hidden_scale`` multiplies every hidden width after ``width`` (rounded down; Concat ReLU
    shrinks its net this way so its parameter count matches the plain net's). ``layer_norm``
    puts a LayerNorm after each hidden Linear/Conv (over C, H, W for convs), before the
    activation. ``generators`` (one per member) make θ₀ reproducible; without them, torch's
    global RNG is used for every member.
    """
    plan = layer_plan(arch, input_shape, num_outputs, width=width, extra_layers=extra_layers,
                      activation=activation, hidden_scale=hidden_scale)
    blocks: list[Block] = []
    convs = [layer for layer in plan if layer["kind"] == "conv"]
    for i, layer in enumerate(plan):
        hidden = i < len(plan) - 1
        if layer["kind"] == "conv":
            affine = EnsembleConv2d(members, layer["inputs"], layer["outputs"], layer["kernel"],
                                    kernel=conv_kernel)
            norm_shape = (layer["outputs"], *layer["size"])
            blocks.append(Block(affine, EnsembleLayerNorm(members, norm_shape) if layer_norm else None,
                                activation, pool=layer["pool"], flatten=layer is convs[-1]))
        else:
            affine = EnsembleLinear(members, layer["inputs"], layer["outputs"])
            norm = EnsembleLayerNorm(members, (layer["outputs"],)) if layer_norm and hidden else None
            blocks.append(Block(affine, norm, activation if hidden else None))
    net = EnsembleNet(blocks, members, init)
    if generators is None:
        generators = [torch.default_generator] * members
    net.initialize(generators)
    return net
