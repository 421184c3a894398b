"""The method interface: how a plasticity method hooks into a training step.

A method is a small object with explicit state (like an optax transformation). The training
step (:mod:`plasticlab.step`) is one chain — task gradient → the method's gradient transforms →
the optimizer's update → the method's post-step hook — and a method declares once, in
:meth:`Method.needs`, which links it adds; every form of the step (eager, hand-written backward,
compiled) reads that declaration and nothing else:

1. ``architecture()`` (class level) — changes to the network builder (Concat ReLU, LayerNorm);
2. ``penalties()`` — regularizers whose gradient is added to the task gradient
   (:class:`plasticlab.regularizers.Regularizer`: L2 Init and its relatives, EWC);
   ``add_penalty_grad()`` — a gradient transform of the method's own (Parseval, C-CHAIN),
   told the step's task loss first by ``observe_task_loss(loss)`` where it asks;
   ``captured_gradient_transform()`` — the same transform in the form a compiled step
   captures, where the method writes one (Parseval, spectral regularization);
3. ``after_step(features, x, step)`` — after the optimizer step (Shrink & Perturb, CBP, ReDo);
   ``captured_after_step()`` — the same hook in the form a compiled step captures, where the
   method writes one (Shrink & Perturb with Philox draws, Weight Clipping);
   ``acts_after(step)`` — which steps a hook that acts on some steps only acts after (ReDo:
   every ``period``);
   ``before_step(step)`` — before a step's forward pass (ReDo's ``schedule=reference``);
4. ``on_task_end(stream)`` — at a task boundary: a boundary oracle; only EWC may use it in the
   paper's protocol (SPEC §1).

Per-member numeric hyper-parameters arrive as ``[K]`` tensors, so one ensemble can hold a
grid of λ values; everything is written with stacked tensors and masks, never per-member
Python branches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..checkpoint import Excluded, capture, restore
from ..nets import EnsembleNet
from ..params import Param
from ..regularizers import Regularizer
from ..rng import torch_generator


@dataclass
class MethodContext:
    """What a method may know about its ensemble: the members' seeds, the device, and each
    member's method (several in one ensemble: :mod:`plasticlab.methods.penalty_members`)."""

    seeds: Sequence[int]
    device: torch.device
    methods: tuple[str, ...] = ()

    def generators(self, *keys: object) -> list[torch.Generator]:
        """One generator per member for the method's own random draws, seeded from
        ``(seed_k, "method", *keys)`` so member k draws the same numbers in any ensemble."""
        return [torch_generator(s, "method", *keys) for s in self.seeds]


def _nothing_to_prepare(step: int) -> None:
    """A captured hook with nothing to do outside the compiled step."""


@dataclass(frozen=True)
class CapturedHook:
    """A method's post-step hook in the form a compiled step captures whole
    (:meth:`Method.captured_after_step`): ``prepare(step)`` outside the compiled function (the
    updates so far written into the hook's device tensors, host-side counts: nothing that
    waits on the device), then ``run(features, x)`` inside it — tensor operations alone, no host
    synchronisation, no data-dependent shape, no Python branch on a tensor's value — does
    exactly what :meth:`Method.after_step` does for that step; ``features``: the step's hidden
    features (the hand-written backward's), ``x`` its inputs. ``params``: the network's tensors it updates in
    place; ``reads``: every other tensor it reads or updates (kept at fixed addresses under
    CUDA graphs); ``draws``: it draws with Philox (whose rounds the compiler inlines whole);
    ``start(B)``: where given, called once before the first compiled call with the batch size
    B — state sized by the batch (SNR's histograms), made where it is not yet — and returns
    those tensors, which join ``reads``."""

    run: Callable[[list[torch.Tensor], torch.Tensor], None]
    params: tuple[torch.Tensor, ...]
    reads: tuple[torch.Tensor, ...]
    prepare: Callable[[int], None] = _nothing_to_prepare
    draws: bool = False
    start: Callable[[int], tuple[torch.Tensor, ...]] | None = None


@dataclass(frozen=True)
class CapturedTransform:
    """A method's gradient transform (:meth:`Method.add_penalty_grad`) in the form a compiled
    step captures (:meth:`Method.captured_gradient_transform`): ``run(grads, task_loss)`` adds
    to ``grads[i]``, the step's gradient of ``params[i]``, what :meth:`Method.add_penalty_grad`
    adds to ``params[i].grad`` — tensor operations alone, as :class:`CapturedHook`'s ``run``;
    ``task_loss``: with ``reads_task_loss``, each member's task loss L_k of the step ``[K]``
    (what :meth:`Method.observe_task_loss` is told), else None; ``reads``: every other tensor it
    reads or updates (kept at fixed addresses under CUDA graphs)."""

    run: Callable[[list[torch.Tensor], torch.Tensor | None], None]
    params: tuple[torch.Tensor, ...]
    reads: tuple[torch.Tensor, ...]
    reads_task_loss: bool = False


@dataclass(frozen=True)
class Needs:
    """What a method adds to the training step, declared in one place (:meth:`Method.needs`)
    that every form of the step reads.

    ``penalties``: regularizers' gradients join the task gradient (:meth:`Method.penalties`);
    ``gradient_hook``: a gradient transform of its own (:meth:`Method.add_penalty_grad`);
    ``task_loss``: told each member's task loss of the step before its gradient transforms
    (:meth:`Method.observe_task_loss`: C-CHAIN scales its term against it);
    ``before_step`` / ``after_step``: the per-step hooks; ``some_steps``: ``after_step`` acts only
    after the steps :meth:`Method.acts_after` names (a schedule of the update count, decided on
    the host) and does nothing after the others; ``features``: ``after_step`` reads the
    step's hidden features; ``task_end``: told where tasks end (:meth:`Method.on_task_end`, a
    boundary oracle); ``member_lr``: members may each have their own step size in one ensemble
    (not when the method replaces the optimizer with one that has a single step size)."""

    penalties: bool = False
    gradient_hook: bool = False
    task_loss: bool = False
    before_step: bool = False
    after_step: bool = False
    some_steps: bool = False
    features: bool = False
    task_end: bool = False
    member_lr: bool = True

    @property
    def per_step_hooks(self) -> bool:
        """Whether the method runs code of its own before or after every step."""
        return self.before_step or self.after_step


class Method:
    """Base class: the Baseline, which changes nothing."""

    name: ClassVar[str]
    title: ClassVar[str]  # as papers, figures and tables name it ("L2 Init", "Shrink & Perturb")
    description: ClassVar[str]
    hyperparameters: ClassVar[tuple[Param, ...]] = ()

    @classmethod
    def architecture(cls, hp: dict, net: dict) -> dict:
        """Keyword overrides for :func:`plasticlab.nets.build_network`, given the plain
        network ``net`` (``arch``, ``input_shape``, ``num_outputs``, ``width``,
        ``extra_layers``)."""
        return {}

    @classmethod
    def needs(cls, params: dict) -> Needs:
        """What this method adds to the training step with these parameters (:class:`Needs`):
        nothing, for the Baseline. A test holds every method's declaration to the hooks it
        overrides."""
        return Needs()

    @classmethod
    def default_params(cls) -> dict:
        """Every hyper-parameter at its default."""
        return {p.name: p.default for p in cls.hyperparameters}

    def __init__(self, net: EnsembleNet, optimizer, hp: dict, context: MethodContext):
        self.net, self.optimizer, self.hp, self.context = net, optimizer, hp, context

    def penalties(self) -> list[Regularizer]:
        """The regularizers whose gradient the training step adds to the task gradient, in
        order (declared by ``Needs.penalties``); none by default."""
        return []

    def add_penalty_grad(self) -> None:
        """A gradient transform of the method's own, after the penalties' (declared by
        ``Needs.gradient_hook``): add to ``.grad``."""

    def captured_gradient_transform(self) -> CapturedTransform | None:
        """:meth:`add_penalty_grad` written for capture inside a compiled step, or None (the
        default) where it is not."""
        return None

    def observe_task_loss(self, loss: torch.Tensor) -> None:
        """Each member's task loss L_k of this step, ``[K]`` (no gradient), before the gradient
        transforms (declared by ``Needs.task_loss``)."""

    def after_step(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """Update after the optimizer step.

        ``features``: each hidden block's post-activation features from this step's forward
        pass (only when ``Needs.features``; else empty); ``x``: this step's inputs
        ``[K, B, …]``; ``step``: the number of optimizer steps taken so far (1 after the first).
        """

    def captured_after_step(self) -> CapturedHook | None:
        """:meth:`after_step` written for capture inside a compiled step
        (:mod:`plasticlab.step.compiled`), or None (the default) where it is not."""
        return None

    def acts_after(self, step: int) -> bool:
        """Whether :meth:`after_step` does anything after update ``step`` (declared by
        ``Needs.some_steps``; the count alone decides it, on the host). A compiled step skips
        the hook after the other steps and takes the eager step, hook and all, on these."""
        return True

    def before_step(self, step: int) -> None:
        """Called at the start of every step, before its forward pass; ``step``: the number of
        optimizer steps taken so far (0 before the first)."""

    def before_step_prepares(self) -> bool:
        """Whether :meth:`before_step` only writes device tensors the step then reads (a Philox
        counter) and changes nothing the step computes, so a compiled step may follow it (it
        runs outside the compiled function, as before the eager step). False by default."""
        return False

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

    @classmethod
    def needs(cls, params):
        return Needs(penalties=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.regularizer = self.make_regularizer(net, hp, context)

    def make_regularizer(self, net, hp, context):
        """The method's regularizer over ``net`` with the stacked hyper-parameters ``hp``."""
        raise NotImplementedError

    def penalties(self):
        return [self.regularizer]

    def penalty(self):
        with torch.no_grad():
            return self.regularizer.value()


STRENGTH = Param("strength", 1e-2, float, "λ: the penalty's strength (code form: gradient λ·(θ−target))",
                 per_member=True, low=0)
