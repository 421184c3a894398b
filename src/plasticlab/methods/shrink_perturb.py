"""Shrink & Perturb (Ash & Adams 2020): after every optimizer step,

    θ ← p·θ + σ·ε,   ε a fresh draw from each layer's own init distribution,

which shrinks weights toward 0 and re-injects initialisation-like noise. p (``shrink``, the
paper's tables give it as 1 − x) and σ (``noise``) are per member.
"""

from functools import partial

from .. import perturb
from ..params import Param
from .base import Method, Needs


class ShrinkPerturbMethod(Method):
    """Shrink & Perturb: after every optimizer step θ ← p·θ + σ·ε, ε a fresh draw from the
    init distribution (``shrink`` is p, ``noise`` σ)."""

    name = "shrink_perturb"
    description = "θ ← p·θ + σ·ε after every step, ε ~ init"
    hyperparameters = (
        Param("shrink", 0.999, float, "p: the multiplier applied to θ after every step",
              per_member=True, low=0, high=1),
        Param("noise", 1e-2, float, "σ: scale of the fresh init-distribution noise",
              per_member=True, low=0),
    )

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        generators = context.generators(self.name)
        self.perturb = perturb.ShrinkPerturb(net.regularized_parameters(), hp["shrink"], hp["noise"],
                                         sampler=partial(net.sample_init, generators),
                                         member_dim=True)

    def after_step(self, features, x, step):
        self.perturb.step()
