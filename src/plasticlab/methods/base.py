"""The method interface: how a plasticity method hooks into a training step.

A method is a small object with explicit state (like an optax transformation) that the engine
calls at fixed points of every step:

1. ``architecture()`` (class level) — changes to the network builder (Concat ReLU, LayerNorm);
2. ``add_penalty_grad()`` — after backprop of the task loss, add a regularizer's gradient;
3. ``after_step(features, x, step)`` — after the optimizer step (Shrink & Perturb, CBP, ReDo);
   ``before_step(step)`` — before a step's forward pass (ReDo's ``schedule=reference``);
4. ``on_task_end(stream)`` — at a task boundary; only EWC may use it (SPEC §1).

Per-member numeric hyper-parameters arrive as ``[K]`` tensors, so one ensemble can hold a
grid of λ values; everything is written with stacked tensors and masks, never per-member
Python branches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..checkpoint import Excluded, capture, restore
from ..fast.quadratic_penalty import penalty_gradient
from ..nets import EnsembleNet
from ..params import Param
from ..rng import torch_generator


@dataclass
class MethodContext:
    """What a method may know about its ensemble: the members' seeds and the device."""

    seeds: Sequence[int]
    device: torch.device

    def generators(self, *keys: object) -> list[torch.Generator]:
        """One generator per member for the method's own random draws, seeded from
        ``(seed_k, "method", *keys)`` so member k draws the same numbers in any ensemble."""
        return [torch_generator(s, "method", *keys) for s in self.seeds]


class Method:
    """Base class: the Baseline, which changes nothing."""

    name: ClassVar[str]
    description: ClassVar[str]
    hyperparameters: ClassVar[tuple[Param, ...]] = ()
    needs_features: ClassVar[bool] = False  # after_step wants this step's hidden features

    @classmethod
    def architecture(cls, hp: dict, net: dict) -> dict:
        """Keyword overrides for :func:`plasticlab.nets.build_network`, given the plain
        network ``net`` (``arch``, ``input_shape``, ``num_outputs``, ``width``,
        ``extra_layers``)."""
        return {}

    @classmethod
    def takes_member_lr(cls, params: dict) -> bool:
        """Whether members with these (shared) parameters can each have their own step size in
        one ensemble: yes, unless the method replaces the optimizer with one that has a
        single step size (Continual Backprop's ``adam_variant=reference``)."""
        return True

    def __init__(self, net: EnsembleNet, optimizer, hp: dict, context: MethodContext):
        self.net, self.optimizer, self.hp, self.context = net, optimizer, hp, context

    def add_penalty_grad(self) -> None:
        """Add the method's regularization gradient to ``.grad`` (after the task loss's).

        A quadratic penalty may leave its decay term λθ to the optimizer's weight decay
        (:mod:`plasticlab.fast.quadratic_penalty`): the update is the same, ``.grad`` then
        lacks λθ."""

    def after_step(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """Update after the optimizer step.

        ``features``: each hidden block's post-activation features from this step's forward
        pass (only when ``needs_features``; else empty); ``x``: this step's inputs
        ``[K, B, …]``; ``step``: the number of optimizer steps taken so far (1 after the first).
        """

    def before_step(self, step: int) -> None:
        """Called at the start of every step, before its forward pass; ``step``: the number of
        optimizer steps taken so far (0 before the first)."""

    def on_task_end(self, stream) -> None:
        """Called when a task ends, with the stream (still on that task). Only EWC may use
        this: every other method must work without knowing where tasks end (SPEC §1)."""

    def extra_measurements(self, measurer, task: int) -> dict[str, torch.Tensor]:
        """Task-end measurements of the method's own, merged into the measurer's (called after
        :meth:`plasticlab.measure.Measurer.task_end`, before :meth:`on_task_end`, only when
        measurements are on): name → ``[K]`` device tensor. None by default (Hare & Tortoise:
        the tortoise's test accuracy)."""
        return {}

    def penalty(self) -> torch.Tensor | None:
        """The current regularization penalty per member ``[K]`` (None if the method has none)."""
        return None

    def state_dict(self) -> dict:
        """The method's own training state as tensors and plain values, for checkpoints: every
        attribute but the network, the optimizer, the context and the hyper-parameters (which
        are saved or rebuilt elsewhere), walked by :func:`plasticlab.checkpoint.capture`.
        Override (with :meth:`load_state_dict`) for state that walk cannot encode."""
        return capture(self._own_state(), self._excluded(), type(self).__name__)

    def load_state_dict(self, state: dict) -> None:
        """Put :meth:`state_dict`'s output back into this freshly built method, in place."""
        own = self._own_state()
        restore(own, state, self.context.device, type(self).__name__)
        for name, value in own.items():
            setattr(self, name, value)

    _NOT_STATE = ("net", "optimizer", "context", "hp")

    def _own_state(self) -> dict:
        return {k: v for k, v in vars(self).items() if k not in self._NOT_STATE}

    def _excluded(self) -> Excluded:
        return Excluded(objects=[self.net, self.optimizer, self.context, self.hp, *self.net.modules()],
                        tensors=[*self.net.parameters(), *self.net.buffers()])

    def notes(self) -> dict:
        """What a run's manifest should record about how the method ran (JSON-able), e.g. a
        documented fallback it took; empty by default."""
        return {}


class PenaltyMethod(Method):
    """A method that is one regularizer from :mod:`plasticlab.regularizers` in the loss."""

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.regularizer = self.make_regularizer(net, hp, context)
        # the gradient λ·ρ'(θ − target), through a fast path where one applies
        self.gradient = penalty_gradient(self.regularizer, optimizer)

    def make_regularizer(self, net, hp, context):
        raise NotImplementedError

    def add_penalty_grad(self) -> None:
        self.gradient.add_()

    def penalty(self):
        with torch.no_grad():
            return self.regularizer.value()


STRENGTH = Param("strength", 1e-2, float, "λ: the penalty's strength (code form: gradient λ·(θ−target))",
                 per_member=True, low=0)
