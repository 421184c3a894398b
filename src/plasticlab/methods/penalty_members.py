"""Members of several penalty methods in one ensemble: a per-member method selector.

The Baseline, L2, L2 Init, L1 Init and Huber Init change nothing but the gradient: member k of
method m adds λ_k ρ_m'(θ_k − target_m) (target 0 for L2, θ₀ for the others; nothing for the
Baseline). So one ensemble can hold members of all of them: each method present gets its own
regularizer with λ = 0 for the members of other methods, and every member's gradient is its own
method's — the other regularizers add λ = 0 times a finite number, which changes no value — so
member k is still run k alone, to the bit (``tests/test_member_independence.py``). A sweep packs
these methods together (:func:`plasticlab.experiments.sweep.group`); the engine builds this method
when an ensemble's members name more than one of them. It is not a method of its own: each run
keeps its own method's name and parameters.
"""

from __future__ import annotations

import torch

from .base import STRENGTH, Method, Needs
from .baseline import Baseline
from .huber_init import HuberInitMethod
from .l1_init import L1InitMethod
from .l2 import L2Method
from .l2_init import L2InitMethod

PENALTY_METHODS = {cls.name: cls for cls in (L2Method, L2InitMethod, L1InitMethod, HuberInitMethod)}
MEMBER_METHODS = (Baseline.name, *PENALTY_METHODS)
"""The methods that can share an ensemble, each member with its own."""


class PenaltyMembers(Method):
    """Each member runs its own method (``context.methods[k]``, one of :data:`MEMBER_METHODS`)
    with its own parameters (``hp``'s ``[K]`` tensors: λ, and δ for Huber Init)."""

    name = "penalty_members"
    title = "penalty members"
    description = "members of the Baseline, L2, L2 Init, L1 Init and Huber Init in one ensemble"
    hyperparameters = (STRENGTH, *(p for p in HuberInitMethod.hyperparameters if p.name == "delta"))

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        methods = list(context.methods)
        unknown = sorted(set(methods) - set(MEMBER_METHODS))
        if unknown:
            raise ValueError(f"methods {', '.join(unknown)} cannot share an ensemble with others; "
                             f"those that can: {', '.join(MEMBER_METHODS)}")
        # one part per penalty method present, its λ zero for every member of another method
        self.parts = []
        for name in dict.fromkeys(methods):
            if name == Baseline.name:
                continue
            cls = PENALTY_METHODS[name]
            mine = torch.tensor([m == name for m in methods], device=context.device)
            own = {p.name: torch.where(mine, hp[p.name], 0.0 if p.name == "strength" else p.default)
                   for p in cls.hyperparameters}
            self.parts.append(cls(net, optimizer, own, context))

    @classmethod
    def needs(cls, params):
        return Needs(penalties=True)

    def penalties(self):
        return [reg for part in self.parts for reg in part.penalties()]

    def penalty(self):
        values = [part.penalty() for part in self.parts]
        return sum(values) if values else None
