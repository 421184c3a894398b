"""Weight Clipping (Elsayed, Lan, Lyle & Mahmood, "Weight Clipping for Deep Continual and
Reinforcement Learning", RLC 2024).

Many failures of continual learning come with growing weights, which are hard to move again.
Weight clipping keeps every weight inside its layer's initialization range, widened by κ: after
every optimizer step,

    θ ← clip(θ, −κ·s_ℓ, κ·s_ℓ)      for every weight and bias θ of layer ℓ,

s_ℓ being the bound of the uniform distribution U(−s_ℓ, s_ℓ) layer ℓ's weights are drawn from
(:func:`init_bound`). Every layer is clipped, the output layer included (the reference code's
default, ``clip_last_layer=True``, which its best runs use), and a layer's bias shares its
weight's bound (the reference code: 1/√fan_in for both, PyTorch's default range of each). The
optimizer's state is left as it is. κ (``kappa``) is per member.

A normal initialization N(0, σ²) has no bound; plasticlab takes s_ℓ = √3·σ, the bound of the
uniform distribution with the same variance (the paper and its code use uniform inits only).

The drop-in :class:`plasticlab.dropin_field.WeightClip` clips a plain model's ``nn.Linear`` and
``nn.Conv2d`` layers with the same bound.
"""

from __future__ import annotations

import math

import torch

from ..nets.init import check_scheme
from ..params import Param
from .base import CapturedHook, Method, Needs


def init_bound(scheme: str, fan_in: int, fan_out: int) -> float:
    """s_ℓ: the bound of U(−s_ℓ, s_ℓ) that init ``scheme`` draws a layer's weights from, or
    √3·σ for a normal scheme N(0, σ²) (the uniform of the same variance)."""
    check_scheme(scheme)
    if scheme == "torch_default":
        return 1.0 / math.sqrt(fan_in)
    if scheme in ("kaiming_uniform", "kaiming_normal"):  # both have variance 2/fan_in
        return math.sqrt(6.0 / fan_in)
    return math.sqrt(6.0 / (fan_in + fan_out))  # xavier_uniform, xavier_normal: 2/(in + out)


def clip_(param: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """θ ← clip(θ, −bound, bound) in place, ``bound`` shaped to broadcast against θ (``[K, 1, …]``,
    one bound per member); returns θ."""
    return param.clamp_(min=-bound, max=bound)


KAPPA = Param("kappa", 2.0, float, "κ: the clipping range in units of the layer's init bound s_ℓ",
              per_member=True, low=0.0, low_open=True)


class WeightClipMethod(Method):
    """After every optimizer step, every weight and bias of layer ℓ is clipped to ±κ·s_ℓ."""

    name = "weight_clip"
    title = "Weight Clipping"
    description = "Weight Clipping: θ clipped to ±κ·(its layer's init bound) after every step"
    hyperparameters = (KAPPA,)

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        kappa = torch.as_tensor(hp["kappa"], device=context.device).reshape(-1)
        if bool((kappa <= 0).any()):  # once, at construction
            raise ValueError("method weight_clip: kappa κ must be > 0")
        # one bound κ·s_ℓ per member for each clipped tensor, shaped [K, 1, …] to broadcast
        self.clipped, self.bounds = [], []
        for layer in net.affine_layers:
            s = init_bound(net.init, layer.fan_in, layer.fan_out)
            for p in (layer.weight, layer.bias):
                self.clipped.append(p)
                self.bounds.append((kappa.to(p.dtype) * s).view(-1, *[1] * (p.dim() - 1)))

    @torch.no_grad()
    def after_step(self, features, x, step):
        """Clip every weight and bias to its layer's ±κ·s_ℓ."""
        self.clip()

    def clip(self) -> None:
        """θ ← clip(θ, −κ·s_ℓ, κ·s_ℓ) for every weight and bias."""
        for p, bound in zip(self.clipped, self.bounds, strict=True):
            clip_(p, bound)

    def captured_after_step(self) -> CapturedHook:
        """The clip is tensor operations alone, the step count aside: a compiled step
        captures it whole."""
        return CapturedHook(run=lambda features, x: self.clip(), params=tuple(self.clipped),
                            reads=tuple(self.bounds))
