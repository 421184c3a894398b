"""The paper's networks (SPEC §4) as ensembles of K members.

A network is a list of blocks. A hidden block is ``affine → [LayerNorm] → activation →
[max-pool] → [flatten]``; the last block is the affine output layer alone. The methods look
inside through :meth:`EnsembleNet.hidden_blocks` (features for CBP/ReDo/srank) and
:meth:`EnsembleNet.regularized_parameters` (what the penalties pull on).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from . import init as init_schemes
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


class EnsembleNet(nn.Module):
    """K independent copies of one architecture, trained at once."""

    def __init__(self, blocks: Sequence[Block], members: int, init: str = "torch_default"):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.members = members
        self.init = init_schemes.check_scheme(init)

    @property
    def hidden_blocks(self) -> list[Block]:
        return list(self.blocks[:-1])

    @property
    def affine_layers(self) -> list[nn.Module]:
        return [b.affine for b in self.blocks]

    def forward(self, x: torch.Tensor, return_features: bool = False):
        """Logits ``[K, B, outputs]``; with ``return_features``, also each hidden block's
        post-activation features (before pooling)."""
        features = []
        h = x
        for block in self.blocks[:-1]:
            f, h = block(h)
            features.append(f)
        logits = self.blocks[-1].pre_activation(h)
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

    def sample_layer_init(self, layer: nn.Module, generators: Sequence[torch.Generator]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh (weight ``[K, …]``, bias ``[K, …]``) draw for one affine layer; member k
        draws from ``generators[k]`` only."""
        if len(generators) != self.members:
            raise ValueError(f"need one generator per member ({self.members}), got {len(generators)}")
        shape = tuple(layer.weight.shape[1:])
        draws = [init_schemes.draw(self.init, shape, layer.fan_in, layer.fan_out, g)
                 for g in generators]
        device = layer.weight.device
        return (torch.stack([w for w, _ in draws]).to(device),
                torch.stack([b for _, b in draws]).to(device))

    @torch.no_grad()
    def initialize(self, generators: Sequence[torch.Generator]) -> None:
        """Set every affine parameter to a draw from the init scheme (θ₀)."""
        for p, v in zip(self.regularized_parameters(), self.sample_init(generators), strict=True):
            p.copy_(v)

    def parameter_count(self) -> int:
        """Trainable parameters of one member."""
        return sum(p[0].numel() for p in self.parameters())


MLP_HIDDEN = 100
CNN_CHANNELS = 16
CNN_FC = 100


def hidden_sizes(arch: str, width: float = 1.0, extra_layers: int = 0) -> dict[str, list]:
    """Layer sizes of the SPEC §4 networks before any CReLU shrinking.

    MLP: ``{"fc": [100]*(2+extra_layers)}``. CNN: ``{"conv": [(channels, kernel, pool)…],
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
    if arch == "cnn":
        c = scaled(CNN_CHANNELS)
        if extra_layers == 0:
            return {"conv": [(c, 5, True), (c, 5, True)], "fc": [scaled(CNN_FC)] * 2}
        if extra_layers == 2:
            return {"conv": [(c, 5, True), (c, 3, True), (c, 3, False)], "fc": [scaled(CNN_FC)] * 3}
        raise ValueError(f"the CNN has a deeper variant with extra_layers=2 only, got {extra_layers}")
    raise ValueError(f"unknown architecture {arch!r}; valid: mlp, cnn")


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

    ``hidden_scale`` multiplies every hidden width after ``width`` (Concat ReLU shrinks its
    net this way so its parameter count matches the plain net's). ``generators`` (one per
    member) make θ₀ reproducible; without them, torch's global RNG is used for every member.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid: {', '.join(ACTIVATIONS)}")
    factor = ACTIVATIONS[activation][1]
    sizes = hidden_sizes(arch, width, extra_layers)

    def shrink(n: int) -> int:
        return max(1, int(round(n * hidden_scale)))

    blocks: list[Block] = []
    shape = tuple(input_shape)
    for i, (channels, kernel, pool) in enumerate(sizes.get("conv", [])):
        channels = shrink(channels)
        conv = EnsembleConv2d(members, shape[0], channels, kernel, kernel=conv_kernel)
        h, w = shape[1] - kernel + 1, shape[2] - kernel + 1
        norm = EnsembleLayerNorm(members, (channels, h, w)) if layer_norm else None
        if pool:
            h, w = h // 2, w // 2
        last_conv = i == len(sizes["conv"]) - 1
        blocks.append(Block(conv, norm, activation, pool=pool, flatten=last_conv))
        shape = (channels * factor, h, w)
    features = int(torch.tensor(shape).prod())
    for n in sizes["fc"]:
        n = shrink(n)
        norm = EnsembleLayerNorm(members, (n,)) if layer_norm else None
        blocks.append(Block(EnsembleLinear(members, features, n), norm, activation))
        features = n * factor
    blocks.append(Block(EnsembleLinear(members, features, num_outputs)))
    net = EnsembleNet(blocks, members, init)
    if generators is None:
        generators = [torch.default_generator] * members
    net.initialize(generators)
    return net
