"""One training step of an ensemble, written once (SPEC §3: predict, then one update, per batch).

Every member receives one batch of its own stream; a step is one chain::

    the method's pre-step hook           (declared: ReDo's schedule=reference)
    task gradient                        logits, features and ∂L/∂θ, L = Σₖ mean_b CE(zₖ_b, yₖ_b)
    online accuracy                      each member's hits on the batch, before the update
    the method's gradient transforms     each penalty's λ·ρ′(θ − target), then its own (Parseval's;
                                         C-CHAIN's, told each member's task loss L_k first)
    the optimizer's update               Adam or SGD (or UPGD, AdamGnT), with a decay it takes on
    the method's post-step hook          (declared: Shrink & Perturb, CBP, ReDo, …)

:class:`~plasticlab.step.chain.Chain` holds the links after the task gradient, chosen once at
set-up from what the method declares (:meth:`plasticlab.methods.Method.needs`). The step has
three forms, chosen once too, that run the same links through the same functions:

- **eager, autograd** — the task gradient by autograd
  (:func:`~plasticlab.step.backward.autograd_gradients`): the plain form, any network;
- **eager, hand-written backward** — the ReLU MLP's gradients written out
  (:mod:`plasticlab.step.mlp_backprop`, a fast path of autograd; ``backprop="auto"`` takes it
  wherever the network allows);
- **compiled** — the whole chain as one function under ``torch.compile``
  (:mod:`plasticlab.step.compiled`, asked for with ``compile=True``, where the method adds
  nothing but penalties toward fixed targets); where a measurement needs the task gradient on
  its own, that step runs eager.

λ(θ − θ₀) is written once (:func:`plasticlab.regularizers.add_penalty_gradient_`), and so is
each update rule (:func:`plasticlab.optim.adam.adam_update_`,
:func:`plasticlab.optim.sgd.sgd_update_`); torch's fused kernels stand in for them as named
fast paths (:mod:`plasticlab.optim.fused_adam`, ``SGD(fused=True)``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import metrics
from . import compiled, mlp_backprop
from .backward import autograd_gradients
from .chain import Chain

BACKPROPS = ("auto", "autograd", "manual")


class Step:
    """The training step of one ensemble (module docstring): ``step(x, y, correct, t)`` trains
    every member on its batch (``x`` ``[K, B, …]``, ``y`` ``[K, B]``), adds each member's
    correct predictions on it to ``correct`` ``[K]``, and returns the task loss's gradient norm
    per member when ``task_gradient`` asks for it (else None); ``t``: the updates taken so far.

    ``backprop``: ``"autograd"``, ``"manual"`` (the hand-written MLP backward; an error for any
    other network) or ``"auto"`` (manual wherever the network allows it); ``compile``: the
    compiled form where it applies (:func:`plasticlab.step.compiled.applies`)."""

    def __init__(self, net, method, optimizer, *, backprop: str = "auto", compile: bool = False,
                 device: torch.device | str = "cpu"):
        if backprop not in BACKPROPS:
            raise ValueError(f"backprop must be 'auto', 'autograd' or 'manual', got {backprop!r}")
        if backprop == "manual" and not mlp_backprop.supports(net):
            raise ValueError(f"backprop='manual' needs a plain ReLU MLP; method {method.name} "
                             f"builds another network: use backprop='auto'")
        self.net, self.optimizer = net, optimizer
        self.chain = Chain(method, optimizer)
        self.parameters = list(net.parameters())
        self.hand = (mlp_backprop.ManualBackprop(net)
                     if backprop != "autograd" and mlp_backprop.applies(net) else None)
        self.compiled = (compiled.CompiledStep(net, self.chain, torch.device(device))
                         if compile and compiled.applies(self.hand, self.chain) else None)

    @property
    def backprop(self) -> str:
        """Which backward computes the task gradient: ``"manual"`` or ``"autograd"``."""
        return "manual" if self.hand is not None else "autograd"

    @property
    def form(self) -> str:
        """``"compiled"`` where the compiled form runs, else ``"eager"``."""
        return "compiled" if self.compiled is not None else "eager"

    def __call__(self, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor, t: int,
                 task_gradient: bool = False) -> torch.Tensor | None:
        chain = self.chain
        chain.before(t)
        if self.compiled is not None and not task_gradient:
            self.compiled(x, y, correct)  # every link below, compiled
            chain.after([], x, t + 1)
            return None
        features = chain.needs.features
        if self.hand is not None:
            logits, hidden = self.hand.step(x, y)
        else:
            logits, hidden = autograd_gradients(self.net, self.optimizer, x, y, features)
        with torch.no_grad():
            correct += (logits.argmax(-1) == y).sum(1)
        # the task loss's gradient, before the penalties
        norm = metrics.gradient_norm(self.parameters) if task_gradient else None
        if chain.needs.task_loss:  # each member's L_k, for a transform that scales against it
            with torch.no_grad():
                losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
                chain.method.observe_task_loss(losses.view(y.shape).mean(1))
        chain.transform_gradient()
        chain.update()
        chain.after(hidden if features else [], x, t + 1)
        return norm

    def resumed(self) -> None:
        """After a checkpoint's state is loaded into the network, optimizer and method."""
        self.chain.resumed()


__all__ = ["BACKPROPS", "Chain", "Step"]
