"""Shrink & Perturb (Ash & Adams 2020): after every optimizer step,

    θ ← p·θ + σ·ε,   ε a fresh draw from each layer's own init distribution,

which shrinks weights toward 0 and re-injects initialisation-like noise. p (``shrink``, the
paper's tables give it as 1 − x) and σ (``noise``) are per member.

Where ε comes from (``draws``): ``generator`` — each member's own torch generator, on the host,
member by member, copied to the device (the committed studies' numbers); ``philox`` —
Philox-4x32-10 (:mod:`plasticlab.philox`) on the parameters' device, one draw for all members,
keyed by (member's seed, layer, weight or bias) and counted by the optimizer step it follows:
other numbers, the same bits on the CPU and on CUDA, member k still seed k alone. Philox in
tensor operations is slower than torch's generator on one CPU thread
(benchmarks/README.md#philox-draws); it is there for the GPU, where the host draws and their
copies are what make Shrink & Perturb slow (issue 44). With Philox the perturbation is also
captured whole by the compiled step (``--compile``: :meth:`ShrinkPerturbMethod.captured_after_step`).
"""

from functools import partial

import torch

from .. import perturb
from ..params import Param
from .base import CapturedHook, Method, Needs

DRAWS = ("generator", "philox")
"""Where Shrink & Perturb's noise ε comes from (module docstring)."""


class CountedInitDraws:
    """ε as the network's init draw with Philox at counter ``step`` (an int64 tensor on the
    device, set to the optimizer step before each draw, so that setting it waits on nothing)."""

    def __init__(self, net, keys):
        self.net, self.keys = net, keys
        self.step = torch.zeros((), dtype=torch.int64, device=keys.device)

    def __call__(self):
        return self.net.sample_init_philox(self.keys, self.step)


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
        Param("draws", "generator", str, "where ε comes from: generator (each member's torch "
              "generator on the host) or philox (Philox-4x32-10 on the device, counted by step)",
              choices=DRAWS, implicit_default=True),
    )

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        if hp["draws"] == "philox":
            self.draws = CountedInitDraws(net, net.philox_init_keys(context.seeds, f"method/{self.name}"))
            sampler = self.draws
        else:
            self.draws = None
            sampler = partial(net.sample_init, context.generators(self.name))
        self.perturb = perturb.ShrinkPerturb(net.regularized_parameters(), hp["shrink"], hp["noise"],
                                             sampler=sampler, member_dim=True)

    def after_step(self, features, x, step):
        if self.draws is not None:
            self.draws.step.fill_(step)
        self.perturb.step()

    def captured_after_step(self) -> CapturedHook | None:
        """With Philox draws, the step's perturbation is tensor operations on the device, counted
        by a device tensor: a compiled step captures it whole. The host generators cannot be."""
        if self.draws is None:
            return None
        return CapturedHook(run=self.perturb.step, counter=self.draws.step,
                            params=tuple(self.perturb.params),
                            reads=(self.draws.keys, self.perturb.shrink, self.perturb.noise))
