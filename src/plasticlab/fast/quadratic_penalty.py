"""The gradient of a quadratic penalty (λ/2)‖θ − target‖² — L2 (target 0) and L2 Init
(target θ₀) — added faster than its plain form.

The plain form, :meth:`plasticlab.regularizers.Regularizer.add_grad_`, adds λ(θ − target) as
written. Two fast paths, chosen in one place (:func:`penalty_gradient`):

- **split decay** — applies to every quadratic penalty: λ(θ − target) = λθ − λ·target, added
  as (g − λ·target) + λθ in two in-place passes, with λ·target computed once; no temporary
  θ − target. Equal to the plain form up to rounding.
- **decay in the optimizer** — applies on the CPU, with :class:`plasticlab.optim.Adam` that
  has no weight decay of its own, one λ shared by every member and a penalty on exactly the
  optimizer's parameters (not with LayerNorm, whose gains the penalties leave alone): the λθ
  pass becomes the optimizer's own weight decay (:meth:`plasticlab.optim.Adam.take_weight_decay`,
  g + wd·θ before the moments, as ``torch.optim.Adam``), one pass over the parameters fewer.
  Bit-identical to the split decay (tested); not used on CUDA, where the fused kernel's
  result was measured to differ (docs/performance.md).

Applies: L2 and L2 Init (the decay in the optimizer: with the conditions above), outside
:func:`plasticlab.fast.plain_forms`.
Tests: ``tests/test_regularizers.py`` (the split decay against the plain form; the
decay-in-optimizer identity and its conditions), ``tests/test_fast_kernels.py`` (the plain form
inside :func:`plasticlab.fast.plain_forms`).
"""

from __future__ import annotations

import torch

from ..regularizers import L2, L2Init, Regularizer
from . import enabled

QUADRATIC = (L2, L2Init)
"""The penalties (λ/2)‖θ − target‖² whose gradient splits into λθ − λ·target."""


class PenaltyGradient:
    """The plain form: the regularizer's own :meth:`~Regularizer.add_grad_`."""

    decay_in_optimizer = False

    def __init__(self, regularizer: Regularizer):
        self.regularizer = regularizer

    def add_(self) -> None:
        """Add the penalty's gradient to every parameter's ``.grad``."""
        self.regularizer.add_grad_()


class SplitDecayGradient(PenaltyGradient):
    """λ(θ − target) as (g − λ·target) + λθ; with ``decay_in_optimizer`` only g − λ·target
    (the optimizer adds λθ in its own pass)."""

    def __init__(self, regularizer: Regularizer, decay_in_optimizer: bool = False):
        super().__init__(regularizer)
        self.decay_in_optimizer = decay_in_optimizer
        # λ·target is fixed: λ and the targets (0 or θ₀) do not change during a run
        self.pulls = [None if t is None else regularizer.strength_for(t) * t
                      for t in regularizer.targets()]

    @torch.no_grad()
    def add_(self) -> None:
        """Add −λ·target and then, unless the optimizer does, λθ; the order the optimizer's
        weight decay uses, so both forms agree to the bit."""
        reg = self.regularizer
        for p, pull in zip(reg.params, self.pulls, strict=True):
            if p.grad is None:
                p.grad = torch.zeros_like(p) if pull is None else -pull
            elif pull is not None:
                p.grad.sub_(pull)
        if not self.decay_in_optimizer:
            for p in reg.params:
                p.grad.addcmul_(reg.strength_for(p), p)


def shared_strength(regularizer: Regularizer) -> float | None:
    """λ when every member has the same one (an optimizer's scalar weight decay can then apply
    it), else None."""
    s = regularizer.strength
    if s.dim() == 0:
        return float(s)
    return float(s[0]) if bool((s == s[0]).all()) else None


def penalty_gradient(regularizer: Regularizer, optimizer=None) -> PenaltyGradient:
    """How the engine adds ``regularizer``'s gradient: the split decay for a quadratic penalty,
    with its decay handed to ``optimizer`` where that is bit-identical (module docstring); the
    plain form otherwise, and inside :func:`plasticlab.fast.plain_forms`. ``optimizer=None``:
    never the optimizer's decay."""
    if not enabled() or not isinstance(regularizer, QUADRATIC):
        return PenaltyGradient(regularizer)
    strength = shared_strength(regularizer)
    in_optimizer = (
        optimizer is not None and hasattr(optimizer, "take_weight_decay")
        and optimizer.weight_decay == 0.0 and strength is not None
        and all(p.device.type == "cpu" for p in regularizer.params)
        and {id(p) for p in optimizer.params} == {id(p) for p in regularizer.params})
    if in_optimizer:
        optimizer.take_weight_decay(strength)
    return SplitDecayGradient(regularizer, decay_in_optimizer=in_optimizer)


__all__ = ["PenaltyGradient", "SplitDecayGradient", "penalty_gradient", "shared_strength"]
