"""The gradient of a quadratic penalty (λ/2)‖θ − target‖² — L2 (target 0) and L2 Init
(target θ₀) — added faster than its plain form.

The plain form, :meth:`plasticlab.regularizers.Regularizer.add_grad_`, adds λ(θ − target) as
written, with a fresh temporary θ − target every step. Two fast paths, chosen in one place
(:func:`penalty_gradient`):

- **kept difference** — applies to every quadratic penalty: the same arithmetic — the
  difference θ − target first, then g + λ·(θ − target) — into a buffer kept across steps
  instead of a fresh temporary. Bit-identical to the plain form. (Splitting the gradient into
  λθ − λ·target, which saves that pass, is *not* used: where θ = target and the task gradient
  is 0 — a weight on an always-blank pixel, a dead unit's weights — the split leaves a
  rounding residue where the plain form has exactly 0, and Adam's normalisation turns that
  residue into a step of order α: measured 5.9e-4 apart from the plain form after two steps.)
- **decay in the optimizer** — applies to L2 (no target) on the CPU, with
  :class:`plasticlab.optim.Adam` that has no weight decay of its own, one λ shared by every
  member and a penalty on exactly the optimizer's parameters (not with LayerNorm, whose gains
  the penalties leave alone): λθ becomes the optimizer's own weight decay
  (:meth:`plasticlab.optim.Adam.take_weight_decay`, g + wd·θ before the moments, as
  ``torch.optim.Adam``), one pass over the parameters fewer. Bit-identical to g + λθ added
  before the step (tested); not used on CUDA, where the fused kernel's result was measured to
  differ (docs/performance.md).

Applies: L2 and L2 Init (the decay in the optimizer: L2, with the conditions above), outside
:func:`plasticlab.fast.plain_forms`.
Tests: ``tests/test_regularizers.py`` (both forms against the plain form; the exact zero where
θ = θ₀; the decay-in-optimizer identity and its conditions), ``tests/test_fast_kernels.py``
(the plain form inside :func:`plasticlab.fast.plain_forms`).
"""

from __future__ import annotations

import torch

from ..regularizers import L2, L2Init, Regularizer
from . import enabled

QUADRATIC = (L2, L2Init)
"""The penalties (λ/2)‖θ − target‖², whose gradient is λ(θ − target)."""


class PenaltyGradient:
    """The plain form: the regularizer's own :meth:`~Regularizer.add_grad_`."""

    decay_in_optimizer = False

    def __init__(self, regularizer: Regularizer):
        self.regularizer = regularizer

    def add_(self) -> None:
        """Add the penalty's gradient to every parameter's ``.grad``."""
        self.regularizer.add_grad_()


class QuadraticGradient(PenaltyGradient):
    """λ(θ − target), the difference first, into buffers kept across steps; with
    ``decay_in_optimizer`` (L2: no target) nothing here — the optimizer adds λθ in its own
    pass."""

    def __init__(self, regularizer: Regularizer, decay_in_optimizer: bool = False):
        super().__init__(regularizer)
        # the targets (0 or θ₀) do not change during a run
        self.targets = list(regularizer.targets())
        if decay_in_optimizer and any(t is not None for t in self.targets):
            raise ValueError("only a penalty toward 0 (L2) can leave its decay to the optimizer")
        self.decay_in_optimizer = decay_in_optimizer
        self.differences = [None if t is None else torch.empty_like(p)
                            for p, t in zip(regularizer.params, self.targets, strict=True)]

    @torch.no_grad()
    def add_(self) -> None:
        """Add λ(θ − target) to every parameter's ``.grad`` (nothing, with the decay in the
        optimizer)."""
        reg = self.regularizer
        for p, t, buffer in zip(reg.params, self.targets, self.differences, strict=True):
            if self.decay_in_optimizer:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                continue
            d = p if t is None else torch.sub(p, t, out=buffer)
            if p.grad is None:
                p.grad = (reg.strength_for(p) * d).expand_as(p).clone()
            else:
                p.grad.addcmul_(reg.strength_for(p), d)


def shared_strength(regularizer: Regularizer) -> float | None:
    """λ when every member has the same one (an optimizer's scalar weight decay can then apply
    it), else None."""
    s = regularizer.strength
    if s.dim() == 0:
        return float(s)
    return float(s[0]) if bool((s == s[0]).all()) else None


def penalty_gradient(regularizer: Regularizer, optimizer=None) -> PenaltyGradient:
    """How the engine adds ``regularizer``'s gradient: the kept difference for a quadratic
    penalty, with an L2 decay handed to ``optimizer`` where that is bit-identical (module
    docstring); the plain form otherwise, and inside :func:`plasticlab.fast.plain_forms`.
    ``optimizer=None``: never the optimizer's decay."""
    if not enabled() or not isinstance(regularizer, QUADRATIC):
        return PenaltyGradient(regularizer)
    strength = shared_strength(regularizer)
    in_optimizer = (
        all(t is None for t in regularizer.targets())
        and optimizer is not None and hasattr(optimizer, "take_weight_decay")
        and optimizer.weight_decay == 0.0 and strength is not None
        and all(p.device.type == "cpu" for p in regularizer.params)
        and {id(p) for p in optimizer.params} == {id(p) for p in regularizer.params})
    if in_optimizer:
        optimizer.take_weight_decay(strength)
    return QuadraticGradient(regularizer, decay_in_optimizer=in_optimizer)


__all__ = ["PenaltyGradient", "QuadraticGradient", "penalty_gradient", "shared_strength"]
