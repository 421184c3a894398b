"""Hare & Tortoise (Lee, Cho, Kim, Kim & Choo, ICML 2024; SPEC §10).

Two copies of the network, inspired by the brain's fast hippocampus and slow neocortex. The
*hare* θ_h is the network that is trained and that predicts (online accuracy is the hare's).
The *tortoise* θ_t receives no gradients; it follows the hare slowly,

    θ_t ← m·θ_t + (1 − m)·θ_h            after every optimizer step,

and every ``reset_period`` steps the hare is sent back to it, θ_h ← θ_t (a copy: the two never
share storage — the reference code's assignment that aliases them is a bug). The optimizer's
state is left as it is. m (``momentum``) and ``reset_period`` are per member; both copies start
at θ₀.
"""

from __future__ import annotations

import torch

from ..params import Param
from .base import Method
from .schedule import due_members, host_periods, member_mask

MOMENTUM = Param("momentum", 0.999, float, "m: the tortoise's EMA coefficient", per_member=True)
RESET_PERIOD = Param("reset_period", 1000, int, "optimizer steps between resets of the hare to "
                     "the tortoise", per_member=True, in_steps=True)


class HareTortoise(Method):
    """The trained network is the hare; :attr:`tortoise` is its slow EMA, copied into it every
    ``reset_period`` steps."""

    name = "hare_tortoise"
    description = "Hare & Tortoise: a slow EMA copy; the trained net is reset to it periodically"
    hyperparameters = (MOMENTUM, RESET_PERIOD)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.hare = list(net.parameters())
        self.tortoise = [p.detach().clone() for p in self.hare]
        self.momentum = torch.as_tensor(hp["momentum"], device=context.device).reshape(-1)
        if bool(((self.momentum < 0) | (self.momentum > 1)).any()):  # once, at construction
            raise ValueError("method hare_tortoise: momentum m must be in [0, 1]")
        self.periods = host_periods(hp["reset_period"], self.name, "reset_period")

    @torch.no_grad()
    def after_step(self, features, x, step):
        """θ_t ← m·θ_t + (1−m)·θ_h; then, for members whose period is due, θ_h ← θ_t."""
        for hare, tortoise in zip(self.hare, self.tortoise, strict=True):
            m = self.momentum.to(tortoise.dtype).view(-1, *([1] * (tortoise.dim() - 1)))
            # lerp: θ_t + (1−m)(θ_h − θ_t), the EMA in one pass
            tortoise.lerp_(hare, 1 - m)
        due = due_members(self.periods, step)
        if any(due):
            for hare, tortoise in zip(self.hare, self.tortoise, strict=True):
                hare.copy_(torch.where(member_mask(due, hare), tortoise, hare))
