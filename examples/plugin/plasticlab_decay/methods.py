"""Decay: θ ← (1 − ρ)·θ after every optimizer step — weight decay written as a plasticlab method.

Written as the methods in plasticlab's own source are (docs/methods.md, "Adding a method"): the
network's parameters are stacked ``[K, …]`` (member k is index k), a per-member
hyper-parameter arrives as a ``[K]`` tensor, and the one link it adds to the training step is
declared in :meth:`Decay.needs`.
"""

from __future__ import annotations

import torch

from plasticlab.methods import Method, Needs
from plasticlab.params import Param


class Decay(Method):
    """θ ← (1 − ρ)·θ after every step."""

    name = "decay"  # the entry point's name
    title = "Decay"
    description = "θ ← (1 − ρ)·θ after every step (a plugin's method)"
    hyperparameters = (Param("rho", 1e-4, float, "ρ: the fraction of every weight taken off a step",
                             per_member=True, low=0, high=1),)

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        rho = torch.as_tensor(hp["rho"], device=context.device).reshape(-1)  # [K]
        self.kept = [(p, (1 - rho).to(p.dtype).view(-1, *[1] * (p.dim() - 1)))
                     for p in net.regularized_parameters()]

    @torch.no_grad()
    def after_step(self, features, x, step):
        for p, keep in self.kept:
            p.mul_(keep)
