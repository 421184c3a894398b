"""One training step of an ensemble, written once (SPEC §3: predict, then one update, per batch).

Every member receives one batch of its own stream; a step is one chain::

    the method's pre-step hook           (declared: ReDo's schedule=reference)
    task gradient                        logits, features and ∂L/∂θ, L = Σₖ mean_b ℓ(zₖ_b, yₖ_b)
    online measure                       each member's hits (or squared errors) on the batch,
                                         before the update
    the method's gradient transforms     each penalty's λ·ρ′(θ − target), then its own (Parseval's;
                                         C-CHAIN's, told each member's task loss L_k first)
    the optimizer's update               Adam or SGD (or UPGD, AdamGnT), with a decay it takes on
    the method's post-step hook          (declared: Shrink & Perturb, CBP, ReDo, …)

:class:`~plasticlab.step.chain.Chain` holds the links after the task gradient, chosen once at
set-up from what the method declares (:meth:`plasticlab.methods.Method.needs`). The step has
three forms, chosen once too, that run the same links through the same functions (ℓ is the
problem's task loss, :data:`plasticlab.problems.base.LOSSES`: the cross-entropy, or a
regression's squared error, which only the first form computes):

- **eager, autograd** — the task gradient by autograd
  (:func:`~plasticlab.step.backward.autograd_gradients`): the plain form, any network;
- **eager, hand-written backward** — the ReLU MLP's gradients written out
  (:mod:`plasticlab.step.mlp_backprop`, a fast path of autograd; ``backprop="auto"`` takes it
  wherever the network allows);
- **compiled** — the whole chain as one function under ``torch.compile``
  (:mod:`plasticlab.step.compiled`, asked for with ``compile=True``, where each link the
  method adds is written for capture); where a measurement needs the task gradient on its own,
  or a hook acts after that step only, that step runs eager.

λ(θ − θ₀) is written once (:func:`plasticlab.regularizers.add_penalty_gradient_`), and so is
each update rule (:func:`plasticlab.optim.adam.adam_update_`,
:func:`plasticlab.optim.sgd.sgd_update_`); torch's fused kernels stand in for them as named
fast paths (:mod:`plasticlab.optim.fused_adam`, ``SGD(fused=True)``).
"""

from __future__ import annotations

import torch

from .. import metrics
from . import compiled, mlp_backprop
from .backward import autograd_gradients, check_loss, online_tally, task_losses
from .chain import Chain

BACKPROPS = ("auto", "autograd", "manual")


class Step:
    """The training step of one ensemble (module docstring): ``step(x, y, correct, t)`` trains
    every member on its batch (``x`` ``[K, B, …]``, ``y`` ``[K, B]``), adds each member's
    online tally on it to ``correct`` ``[K]`` (its correct predictions; with the squared error,
    its Σ_b (ŷ − y)²: :func:`~plasticlab.step.backward.online_tally`), and returns the task
    loss's gradient norm per member when ``task_gradient`` asks for it (else None); ``t``: the
    updates taken so far.

    ``backprop``: ``"autograd"``, ``"manual"`` (the hand-written MLP backward; an error for any
    other network or loss) or ``"auto"`` (manual wherever the network and loss allow it);
    ``compile``: the compiled form where it applies (:func:`plasticlab.step.compiled.applies`);
    ``loss``: the task loss ℓ, ``"cross_entropy"`` or ``"squared_error"``."""

    def __init__(self, net, method, optimizer, *, backprop: str = "auto", compile: bool = False,
                 device: torch.device | str = "cpu", loss: str = "cross_entropy"):
        if backprop not in BACKPROPS:
            raise ValueError(f"backprop must be 'auto', 'autograd' or 'manual', got {backprop!r}")
        if backprop == "manual" and not mlp_backprop.supports(net):
            raise ValueError(f"backprop='manual' needs a plain ReLU MLP; method {method.name} "
                             f"builds another network: use backprop='auto'")
        self.loss = check_loss(loss)
        if backprop == "manual" and loss != "cross_entropy":
            raise ValueError(f"backprop='manual' writes out the cross-entropy's gradient; the "
                             f"{loss} loss trains with autograd: use backprop='auto'")
        self.net, self.optimizer = net, optimizer
        self.chain = Chain(method, optimizer)
        self.parameters = list(net.parameters())
        self.hand = (mlp_backprop.ManualBackprop(net)
                     if backprop != "autograd" and mlp_backprop.applies(net, loss) else None)
        # asked to compile: what keeps the step eager, if anything (compiled.why_eager)
        self.eager_because = compiled.why_eager(net, self.hand, self.chain) if compile else None
        self.compiled = (compiled.CompiledStep(net, self.chain, torch.device(device), self.hand, loss)
                         if compile and self.eager_because is None else None)

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
        if self.compiled is not None and not task_gradient and self.compiled.computes(t + 1):
            self.compiled(x, y, correct, t + 1)  # every link below, the post-step hook too
            return None
        features = chain.needs.features
        if self.hand is not None:
            logits, hidden = self.hand.step(x, y)
        else:
            logits, hidden = autograd_gradients(self.net, self.optimizer, x, y, features, self.loss)
        correct += online_tally(logits, y, self.loss)
        # the task loss's gradient, before the penalties
        norm = metrics.gradient_norm(self.parameters) if task_gradient else None
        if chain.needs.task_loss:  # each member's L_k, for a transform that scales against it
            with torch.no_grad():
                chain.method.observe_task_loss(task_losses(logits, y, self.loss).mean(1))
        chain.transform_gradient()
        chain.update()
        chain.after(hidden if features else [], x, t + 1)
        return norm

    def resumed(self) -> None:
        """After a checkpoint's state is loaded into the network, optimizer and method."""
        self.chain.resumed()


__all__ = ["BACKPROPS", "Chain", "Step"]
