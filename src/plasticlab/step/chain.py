"""The links of a training step after the task gradient, chosen once at set-up.

A step is task gradient → the method's gradient transforms → the optimizer's update → the
method's post-step hook. :class:`Chain` reads what the method declares
(:meth:`plasticlab.methods.Method.needs`) and keeps exactly the links it adds:

- its penalties (:meth:`~plasticlab.methods.Method.penalties`), each adding λ·ρ′(θ − target)
  (or EWC's β·F(θ − θ*)) to ``.grad`` through its regularizer's
  :meth:`~plasticlab.regularizers.Regularizer.add_grad_`; then its own gradient transform
  (``add_penalty_grad``, Parseval's) when it declares one;
- the update, ``optimizer.step()``, with a decay it takes on (:func:`decay_in_update`);
- the hooks ``before_step`` and ``after_step`` when declared.

Every form of the step (:mod:`plasticlab.step`) runs these links; the compiled form computes
them inside one compiled function, from the same penalties and the same decay.
"""

from __future__ import annotations

import functools

import torch

from ..fast import enabled
from ..optim import Adam
from ..regularizers import L2, Regularizer


def decay_in_update(penalties: list[Regularizer], optimizer) -> Regularizer | None:
    """Fast path: the L2 penalty among ``penalties`` whose decay λθ the update can add in its
    own pass (Adam's g + λθ before the moments, ``torch.optim.Adam``'s weight decay), one pass
    over the parameters fewer than adding λθ to ``.grad`` first; None where none can.

    Plain form: the penalty's :meth:`~plasticlab.regularizers.Regularizer.add_grad_` before the
    update (bit-identical, tested). Applies: L2 (target 0), :class:`plasticlab.optim.Adam` with
    no weight decay of its own, one λ shared by every member, a penalty on exactly the
    optimizer's parameters (not with LayerNorm, whose gains the penalties leave alone), on the
    CPU — on CUDA the fused kernel's result was measured to differ (docs/performance.md) —
    outside :func:`plasticlab.fast.plain_forms`. Test: ``tests/test_regularizers.py``."""
    if not enabled() or not isinstance(optimizer, Adam) or optimizer.weight_decay:
        return None
    for reg in penalties:
        if (type(reg) is L2 and shared_strength(reg) is not None
                and all(p.device.type == "cpu" for p in reg.params)
                and {id(p) for p in optimizer.params} == {id(p) for p in reg.params}):
            return reg
    return None


def shared_strength(regularizer: Regularizer) -> float | None:
    """λ when every member has the same one (an optimizer's scalar weight decay can then apply
    it), else None."""
    s = regularizer.strength
    if s.dim() == 0:
        return float(s)
    return float(s[0]) if bool((s == s[0]).all()) else None


class Chain:
    """One ensemble's step links after the task gradient (module docstring): built from the
    method's declared :class:`~plasticlab.methods.Needs` and its optimizer."""

    def __init__(self, method, optimizer):
        self.method, self.optimizer = method, optimizer
        self.needs = needs = type(method).needs(method.hp)
        penalties = list(method.penalties()) if needs.penalties else []
        folded = decay_in_update(penalties, optimizer)
        # λ of the L2 penalty whose λθ the update adds (0: none)
        self.decay = 0.0 if folded is None else shared_strength(folded)
        self.penalties = [reg for reg in penalties if reg is not folded]

    @functools.cached_property
    def captured_transform(self):
        """The method's gradient transform in the form a compiled step captures
        (:meth:`~plasticlab.methods.Method.captured_gradient_transform`), built once; None where
        it declares none or has no such form."""
        return self.method.captured_gradient_transform() if self.needs.gradient_hook else None

    @functools.cached_property
    def captured_hook(self):
        """The method's post-step hook in the form a compiled step captures
        (:meth:`~plasticlab.methods.Method.captured_after_step`), built once; None where it
        declares none, acts on some steps only (those take the eager step) or has no such form."""
        if not self.needs.after_step or self.needs.some_steps:
            return None
        return self.method.captured_after_step()

    def before(self, step: int) -> None:
        """The method's pre-step hook, if it declares one; ``step``: updates so far."""
        if self.needs.before_step:
            self.method.before_step(step)

    @torch.no_grad()
    def transform_gradient(self) -> None:
        """Add each penalty's gradient to ``.grad``, in order, then the method's own transform."""
        for reg in self.penalties:
            reg.add_grad_()
        if self.needs.gradient_hook:
            self.method.add_penalty_grad()

    def update(self) -> None:
        """The optimizer's update from ``.grad`` (with the decay it takes on, if any)."""
        if self.decay:
            self.optimizer.step(decay=self.decay)
        else:
            self.optimizer.step()

    def after(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """The method's post-step hook, if it declares one; ``features``: the step's hidden
        features (when it declares ``features``), ``x`` its inputs, ``step`` the updates so far."""
        if self.needs.after_step:
            self.method.after_step(features, x, step)

    def resumed(self) -> None:
        """After a checkpoint's state is loaded: a checkpoint from before the decay was a link of
        the step held it as the optimizer's own weight decay; it is this chain's now."""
        if self.decay and getattr(self.optimizer, "weight_decay", 0.0) == self.decay:
            self.optimizer.weight_decay = 0.0


__all__ = ["Chain", "decay_in_update", "shared_strength"]
