"""Selective Weight Reinitialization, SWR (Hernandez-Garcia, Dohare, Luo & Sutton, CoLLAs 2025;
SPEC §10).

Where CBP and ReDo recycle whole units, SWR recycles single weights. Every ``period`` optimizer
steps, after the step, each parameter tensor (weights and biases, the output layer included)
scores its entries by the gradient-based utility of the current batch

    u = |g ⊙ w|

and reinitializes the entries whose utility is at most a fraction ρ of the tensor's mean:

    reinit where u ≤ ρ · mean(u)      (the *threshold* rule)

— weights with a fresh draw from the network's init distribution, biases with 0. The
optimizer's state is left as it is. ρ (``threshold``) and ``period`` are per member; the mean
is each member's own. The drop-in :class:`plasticlab.dropin_field.SWR` applies the same rule
(:func:`reinitialize_low_utility_`) to a plain model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..nets.init import draw_members
from ..params import Param
from .base import Method
from .schedule import OnItsPeriod, due_members, host_periods, member_mask


def low_utility(weight: torch.Tensor, grad: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """The entries SWR reinitializes, ``[K, …]`` bool: u ≤ ρ·mean(u) with u = |g ⊙ w| and the
    mean over each member's own tensor; ρ per member ``[K]``."""
    u = (grad * weight).abs()
    mean = u.flatten(1).mean(dim=1)
    bound = threshold.to(u.dtype) * mean
    return u <= bound.view(-1, *([1] * (u.dim() - 1)))


def reinitialize_low_utility_(param: torch.Tensor, grad: torch.Tensor, new: torch.Tensor,
                              threshold: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """θ ← ``new`` where :func:`low_utility` holds and the member acts (``members``, a bool
    mask broadcastable to θ), in place; the count reinitialized per member, ``[K]``."""
    mask = low_utility(param, grad, threshold) & members
    param.copy_(torch.where(mask, new, param))
    return mask.flatten(1).sum(dim=1)


PERIOD = Param("period", 2048, int, "optimizer steps between reinitializations", per_member=True,
               in_steps=True, low=1)
THRESHOLD = Param("threshold", 1e-5, float, "ρ: reinitialize entries with |g⊙w| ≤ ρ·mean |g⊙w|",
                  per_member=True, low=0.0)


class SelectiveWeightReinit(OnItsPeriod, Method):
    """Every ``period`` steps, reinitialize the low-utility weights and biases of every layer."""

    name = "swr"
    title = "SWR"
    description = "Selective Weight Reinitialization: reinit weights with |g⊙w| ≤ ρ·mean"
    hyperparameters = (PERIOD, THRESHOLD)

    @classmethod
    def needs(cls, params):
        # the steps it acts after take the eager step, which leaves their gradient in .grad
        return cls.period_needs(params["period"])

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.periods = host_periods(hp["period"], self.name)
        self.threshold = torch.as_tensor(hp["threshold"], device=context.device).reshape(-1)
        if bool((self.threshold < 0).any()):  # once, at construction
            raise ValueError("method swr: threshold ρ must be >= 0")
        self.generators = context.generators(self.name)
        self.last_reinitialized = torch.zeros(net.members, dtype=torch.long, device=context.device)

    def after_step(self, features, x, step):
        """On a step where some member's period is due, reinitialize its low-utility entries."""
        due = due_members(self.periods, step)
        if any(due):
            self.reinitialize(due)

    @torch.no_grad()
    def reinitialize(self, due: Sequence[bool]) -> torch.Tensor:
        """Apply the threshold rule for the members flagged in ``due``; return how many entries
        each member reinitialized, ``[K]``.

        Only due members draw (a whole tensor each, whatever the mask: the number of draws
        never depends on the data), so member k's stream follows its own schedule alone, as
        when it runs by itself."""
        counts = torch.zeros(self.net.members, dtype=torch.long, device=self.context.device)
        for layer in self.net.affine_layers:
            fresh = self.fresh_weight(layer, due)
            for param, new in ((layer.weight, fresh), (layer.bias, torch.zeros_like(layer.bias))):
                if param.grad is None:
                    continue
                counts += reinitialize_low_utility_(param, param.grad, new, self.threshold,
                                                    member_mask(due, param))
        self.last_reinitialized = counts
        return counts

    def fresh_weight(self, layer, due: Sequence[bool]) -> torch.Tensor:
        """A fresh init draw of ``layer``'s weight for the due members (zeros elsewhere)."""
        members = [k for k, d in enumerate(due) if d]
        weight, _ = draw_members(self.net.init, tuple(layer.weight.shape[1:]), layer.fan_in,
                                 layer.fan_out, [self.generators[k] for k in members],
                                 layer.weight.device)
        out = torch.zeros_like(layer.weight)
        out[torch.tensor(members, device=out.device)] = weight.to(out.dtype)
        return out
