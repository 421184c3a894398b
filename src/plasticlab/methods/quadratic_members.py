"""Baseline, L2 and L2 Init members in one ensemble: a per-member method selector.

The three are one penalty with different settings: member k adds the gradient

    λ_k (θ_k − a_k θ₀_k),   a_k = 1 for L2 Init, 0 for L2;   λ_k = 0 for the Baseline,

so one regularizer — L2 Init's, with θ₀ masked to 0 for the L2 members and λ = 0 for the
Baseline members — trains a grid of all three in one ensemble. Each member's gradient is its
own method's to the bit (λ·0 adds nothing; θ − 0 is θ), so member k is still run k alone
(``tests/test_member_independence.py``). A sweep packs these methods together
(:func:`plasticlab.experiments.sweep.group`); the engine builds this method when an
ensemble's members name more than one of them. It is not a method of its own: each run keeps
its own method's name and parameters.
"""

from __future__ import annotations

import torch

from .. import regularizers
from .base import STRENGTH, PenaltyMethod

MEMBER_METHODS = ("baseline", "l2", "l2_init")
"""The methods that can share an ensemble, each member with its own."""


class QuadraticPenaltyMembers(PenaltyMethod):
    """λ_k(θ_k − a_k θ₀_k) per member: ``hp["member_methods"][k]`` says which method member k
    runs (one of :data:`MEMBER_METHODS`), ``hp["strength"]`` its λ_k (ignored — 0 — for a
    Baseline member)."""

    name = "quadratic_members"
    description = "Baseline, L2 and L2 Init members in one ensemble"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        methods = list(hp["member_methods"])
        unknown = sorted(set(methods) - set(MEMBER_METHODS))
        if unknown:
            raise ValueError(f"methods {', '.join(unknown)} cannot share an ensemble with others; "
                             f"those that can: {', '.join(MEMBER_METHODS)}")
        device = context.device
        strength = torch.as_tensor(hp["strength"], dtype=torch.float32, device=device)
        strength = strength.expand(len(methods)) if strength.dim() == 0 else strength
        penalized = torch.tensor([m != "baseline" for m in methods], device=device)
        anchored = torch.tensor([m == "l2_init" for m in methods], dtype=torch.float32,
                                device=device)
        params = regularizers.regularized_parameters(net)
        # θ₀ for the L2 Init members, 0 for the others
        targets = [p.detach() * anchored.view(-1, *([1] * (p.dim() - 1))) for p in params]
        return regularizers.L2Init(params, torch.where(penalized, strength, 0.0),
                                   member_dim=True, initial=targets)
