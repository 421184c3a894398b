"""Shrink & Perturb (Ash & Adams 2020): after every optimizer step,

    θ ← p·θ + σ·ε,   ε a fresh draw from each layer's own init distribution,

which shrinks weights toward 0 and re-injects initialisation-like noise. p (``shrink``, the
paper's tables give it as 1 − x) and σ (``noise``) are per member.

Where ε comes from (``draws``, :mod:`plasticlab.methods.init_draws`): ``generator`` — each
member's own torch generator, on the host (the committed studies' numbers); ``philox`` —
Philox-4x32-10 on the parameters' device, one draw for all members and layers, counted by the
optimizer step it follows. Eager, Philox in tensor operations is slower than torch's generator
on one CPU thread; with Philox the perturbation is also captured whole by the compiled step
(``--compile``: :meth:`ShrinkPerturbMethod.captured_after_step`), which beats the generators'
eager step (benchmarks/README.md#a-compiled-step) — and on the GPU the host draws and their
copies are what make Shrink & Perturb slow (issue 44).
"""

from .. import perturb
from ..params import Param
from .base import CapturedHook, Method, Needs
from .init_draws import draws_param, init_sampler


class ShrinkPerturbMethod(Method):
    """Shrink & Perturb: after every optimizer step θ ← p·θ + σ·ε, ε a fresh draw from the
    init distribution (``shrink`` is p, ``noise`` σ)."""

    name = "shrink_perturb"
    title = "Shrink & Perturb"
    description = "θ ← p·θ + σ·ε after every step, ε ~ init"
    hyperparameters = (
        Param("shrink", 0.999, float, "p: the multiplier applied to θ after every step",
              per_member=True, low=0, high=1),
        Param("noise", 1e-2, float, "σ: scale of the fresh init-distribution noise",
              per_member=True, low=0),
        draws_param("its noise ε"),
    )

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        sampler, self.draws = init_sampler(net, context, self.name, hp["draws"])
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
        return CapturedHook(run=lambda features, x: self.perturb.step(), params=tuple(self.perturb.params),
                            reads=(self.draws.step, self.draws.keys, self.perturb.shrink,
                                   self.perturb.noise),
                            prepare=self.draws.step.fill_, draws=True)
