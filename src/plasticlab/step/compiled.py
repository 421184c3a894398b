"""Fast path: the whole training step as one function under ``torch.compile``.

One step of an MLP whose method's links are all written for capture is, per member k::

    z = MLP_θ(x);  g = ∇_θ mean_b ℓ(z, y)          (the ReLU MLP with the cross-entropy:
                                                      :func:`plasticlab.step.mlp_backprop.mlp_gradients`;
                                                      any other, Concat ReLU's, Layer Norm's, the
                                                      squared error: :func:`functional_gradients`)
    g ← g + λ_k ρ'(θ − target), EWC's β_k(Fθ − Fθ*)  (each penalty's
                                                      :meth:`~plasticlab.regularizers.Regularizer.add_grads_to_`)
    g ← g + the method's own transform              (its
                                                      :meth:`~plasticlab.methods.Method.captured_gradient_transform`:
                                                      Parseval's, spectral regularization's,
                                                      C-CHAIN's λ·∂L_C/∂θ with the step's task loss)
    the update                                       (:func:`plasticlab.optim.adam.adam_update_`,
                                                      :func:`plasticlab.optim.sgd.sgd_update_`)
    the method's post-step hook                      (:meth:`plasticlab.methods.Method.captured_after_step`:
                                                      Shrink & Perturb's θ ← p·θ + σ·ε, ε from Philox;
                                                      CBP's generate-and-test and SNR's resets as
                                                      masks; Weight Clipping, Normalize-and-Project,
                                                      Hare & Tortoise, C-CHAIN's kept batch)

:class:`CompiledStep` calls those same functions — the ones the eager step and the
optimizers' plain forms call — in one function and hands it to ``torch.compile``: on the CPU,
inductor fuses the penalty, Adam and the elementwise work of the backward into a few loops; on
CUDA it runs with ``mode="reduce-overhead"`` (the step replayed as a CUDA graph: one launch
instead of dozens of small kernels). It updates the very tensors the eager step updates — the
network's parameters, :class:`plasticlab.optim.Adam`'s moments and step counts, the method's
state — so eager and compiled steps can alternate (the engine takes the eager step where a
measurement needs the task gradient, and where a hook acts on some steps only), checkpoints
are the same, and a task-end hook (EWC's consolidation, a reset, FIRE) changes them in place
between two tasks, eagerly, as it does for the eager step.

Plain form: the eager step (:class:`~plasticlab.step.mlp_backprop.ManualBackprop` or
autograd's ``backward``, the penalties' ``add_grad_``, the optimizer's ``step``, whose default
forms are torch's fused kernels). Compilation reorders and fuses floating-point work, so the
two agree up to rounding, not to the bit; member k of a compiled ensemble is still seed k
compiled alone (``tests/test_compiled_step.py`` states both tolerances).

Applies (:func:`applies`; :func:`why_eager` names the first condition a step fails): asked
for (the engine's ``compile=True``, ``--compile``), outside :func:`plasticlab.fast.plain_forms`,
an MLP of ensemble linear layers (any activation, Layer Norm or not, plasticity injection's
frozen heads or not; not a convolutional network, nor a growing head's output mask:
:func:`untraceable_because`), a
method whose declared links (:meth:`plasticlab.methods.Method.needs`) are each written for
capture — penalties :attr:`~plasticlab.regularizers.Regularizer.captured`, a
:class:`~plasticlab.methods.base.CapturedTransform`, a
:class:`~plasticlab.methods.base.CapturedHook` or a hook that acts on some steps only
(``Needs.some_steps``: those steps take the eager step, :meth:`CompiledStep.computes`), a
pre-step hook that only prepares (:meth:`~plasticlab.methods.Method.before_step_prepares`), any
task-end hook — and :class:`plasticlab.optim.Adam` (restarted elements with their own step
counts, :func:`plasticlab.optim.adam.restarted_corrections_`) or :class:`plasticlab.optim.SGD`.
Elsewhere the engine takes the eager step and the run's manifest says so.

Compile time is paid once per ensemble shape and process; inductor's on-disk cache
(``TORCHINDUCTOR_CACHE_DIR``, by default under the system's temporary directory) serves later
processes — the tasks of a run, the runs of a sweep and its workers — with the compiled code
(``benchmarks/compiled_step.py`` measures both). Whether it is faster is measured, not
assumed: docs/performance.md gives the figures, and ``compile`` is off by default.
Test: ``tests/test_compiled_step.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..fast import enabled
from ..nets.layers import EnsembleLinear
from ..nets.network import forward_with
from ..optim import SGD, Adam
from ..optim.adam import adam_update_, restarted_corrections_
from ..optim.sgd import sgd_update_
from .backward import online_tally, task_losses
from .chain import Chain
from .mlp_backprop import ManualBackprop, minus_ones, mlp_gradients

RECOMPILE_LIMIT = 64
"""The most ensemble shapes and method structures one process compiles the step for."""


def _recompile_limits() -> dict:
    """Dynamo's options for :data:`RECOMPILE_LIMIT`: the limit, and an error rather than an
    eager fall-back when it is hit — under their current names (``recompile_limit``), else the
    older ``cache_size_limit`` (torch 2.6's), which has no such error (torch then falls back to
    eager with a warning)."""
    config = torch._dynamo.config
    if hasattr(config, "recompile_limit"):
        return {"recompile_limit": RECOMPILE_LIMIT, "fail_on_recompile_limit_hit": True}
    return {"cache_size_limit": RECOMPILE_LIMIT}


COMPILE_TORCH = "2.6"
"""The oldest torch the compiled step is taken with: every form compiles whole with 2.6.0 and
2.13.0 (tests/test_compiled_step.py run on each), not every one with 2.4.1 (there Concat ReLU's
and Layer Norm's torch.func gradient, Deep Fourier features, plasticity injection, C-CHAIN,
Normalize-and-Project and a regression's step failed to compile); an older torch trains
eagerly, saying so."""

CPU_BACKEND = "inductor"
"""The compiler the CPU's compiled step goes through. Inductor generates and compiles C++ for
each graph (most of a compile's seconds); ``"aot_eager"`` captures the same whole graph
(``fullgraph``, the same functionalized forward and backward) and runs it with torch's eager
kernels, in a fraction of the time: the test suite's checks of what a method's capture computes
use it, the checks of inductor's code one form each (``tests/test_compiled_step.py``)."""

REALIZE_OPCOUNT = 1000
"""With a captured post-step hook, the longest chain of operations inductor inlines into its
readers before writing a buffer (:meth:`CompiledStep._inductor_options`): the whole of a
Philox draw's rounds."""


def traceable(net) -> bool:
    """Whether :func:`functional_gradients` computes ``net``'s gradient inside a compiled step
    (:func:`untraceable_because` says why not)."""
    return untraceable_because(net) is None


def untraceable_because(net) -> str | None:
    """What keeps :func:`functional_gradients` from ``net`` in a compiled step, or None: it
    takes an MLP of :class:`~plasticlab.nets.layers.EnsembleLinear` blocks, any activation,
    with or without Layer Norm, with or without plasticity injection's frozen heads (their
    stacked form, :meth:`plasticlab.nets.injection.FrozenHeads.captured`)."""
    if not all(isinstance(b.affine, EnsembleLinear) and not b.pool and not b.flatten
               for b in net.blocks):
        return "a convolutional network (torch.func's gradient is compiled for MLPs alone)"
    if net.output_mask is not None:
        return "a growing head (its output mask changes each task)"
    return None


def functional_gradients(net, params, loss: str = "cross_entropy") -> Callable:
    """∂L/∂θ of L = Σₖ mean_b ℓ(zₖ_b, yₖ_b) (``loss`` ℓ: :func:`plasticlab.step.backward.task_losses`)
    through ``net`` with ``torch.func.grad``: a function of (θ as a list in the order of
    ``params``, x, y) that returns (the gradients in that order, the outputs z). Autograd's
    formulas — the plain form's, :func:`plasticlab.step.backward.autograd_gradients` — traced
    into the compiled function, for networks without a hand-written backward."""
    forward = forward_with(net, params)

    def task_loss(values, x, y):
        outputs = forward(values, x)
        return task_losses(outputs, y, loss).mean(1).sum(), outputs

    return torch.func.grad(task_loss, has_aux=True)


def applies(net, hand: ManualBackprop | None, chain: Chain) -> bool:
    """Whether :class:`CompiledStep` computes this step: an MLP (the hand-written backward
    ``hand`` where the step has one, else :func:`functional_gradients`: :func:`traceable`)
    whose method's declared links (``chain.needs``) are each written for capture, with
    :class:`plasticlab.optim.Adam` or :class:`plasticlab.optim.SGD`, outside
    :func:`plasticlab.fast.plain_forms` (the module docstring's "Applies"); :func:`why_eager`
    says what stops it."""
    return why_eager(net, hand, chain) is None


def why_eager(net, hand: ManualBackprop | None, chain: Chain) -> str | None:
    """What keeps this step out of :class:`CompiledStep` (the first of :func:`applies`'
    conditions it fails, in words), or None where the compiled step computes it."""
    needs, optimizer, method = chain.needs, chain.optimizer, chain.method
    transform = chain.captured_transform
    if not enabled():
        return "the plain forms were asked for (plasticlab.fast.plain_forms)"
    if torch.__version__ < COMPILE_TORCH:
        return (f"torch {torch.__version__} (the compiled step needs torch >= {COMPILE_TORCH}: an "
                "older dynamo cannot trace every form of it)")
    if hand is None and not traceable(net):
        return untraceable_because(net)
    host_draws = method.hp.get("draws") == "generator"  # a method with a `draws` choice
    reasons = [(needs.before_step and not method.before_step_prepares(), "a hook before each step"),
               (needs.after_step and not needs.some_steps and chain.captured_hook is None,
                "fresh draws from the members' host generators (draws=philox draws on the "
                "device, and compiles)" if host_draws else "a post-step hook not written for capture"),
               (needs.features and hand is None,
                "a post-step hook that reads the step's features, on a network without the "
                "hand-written backward"),
               (needs.gradient_hook and transform is None,
                "a gradient transform not written for capture"),
               (needs.task_loss and not (transform is not None and transform.reads_task_loss),
                "a gradient transform that reads the step's task loss"),
               (not all(reg.captured for reg in chain.penalties),
                "a penalty whose target is drawn from the members' host generators each step "
                "(draws=philox draws on the device, and compiles)")]
    for failed, reason in reasons:
        if failed:
            return reason
    return None if type(optimizer) in (Adam, SGD) else f"its optimizer ({type(optimizer).__name__})"


class CompiledStep:
    """The compiled training step of one ensemble: ``step(x, y, correct, step)`` trains every
    member on its batch (``x`` ``[K, B, in]``, ``y`` ``[K, B]``) and adds each member's online
    tally to ``correct`` ``[K]`` (:func:`plasticlab.step.backward.online_tally`), as the eager
    step does (with the method's captured post-step hook, told ``step``).

    ``hand``: the step's own hand-written backward, where it has one (its gradient formulas are
    compiled); None: the gradient of ``loss`` through the network with
    :func:`functional_gradients`."""

    def __init__(self, net, chain: Chain, device: torch.device, hand: ManualBackprop | None = None,
                 loss: str = "cross_entropy"):
        if not applies(net, hand, chain):
            raise ValueError(f"the compiled step does not compute method {chain.method.name!r} "
                             f"with {type(chain.optimizer).__name__} (plasticlab.step.compiled.applies)")
        self.optimizer = optimizer = chain.optimizer
        self.adam = type(optimizer) is Adam
        self.loss = loss
        if hand is not None:  # the hand-written backward's order: W_1, b_1, W_2, …
            self.params = [p for b in net.blocks for p in (b.affine.weight, b.affine.bias)]
            if [id(p) for p in optimizer.params] != [id(p) for p in self.params]:
                raise ValueError("the compiled step needs the optimizer to hold exactly the MLP's "
                                 "weights and biases, in order")
            self.gradients = None
        else:
            self.params = list(optimizer.params)
            if {id(p) for p in self.params} != {id(p) for p in net.parameters()}:
                raise ValueError("the compiled step needs the optimizer to hold every parameter "
                                 "of the network")
            self.gradients = functional_gradients(net, self.params, loss)
        self.lr = optimizer.member_rates()
        # per penalty: the places of its parameters among the step's
        place = {id(p): i for i, p in enumerate(self.params)}
        if not all(id(p) in place for reg in chain.penalties for p in reg.params):
            raise ValueError("the compiled step needs every penalized tensor among the "
                             "optimizer's parameters")
        self.penalties = [(reg, [place[id(p)] for p in reg.params]) for reg in chain.penalties]
        # the method's gradient transform, captured after the penalties (as Chain applies
        # them), with the places of the gradients it adds to
        self.transform = chain.captured_transform
        if self.transform is not None and not all(id(p) in place for p in self.transform.params):
            raise ValueError(f"method {chain.method.name!r}'s captured gradient transform adds to "
                             f"tensors the optimizer does not update")
        self.transform_places = ([place[id(p)] for p in self.transform.params]
                                 if self.transform is not None else [])
        self.weight_decay = getattr(optimizer, "weight_decay", 0.0) + chain.decay
        # the method's post-step hook, captured in the same function (None: it has none, or
        # it acts on some steps only, which take the eager step: computes)
        self.method = chain.method
        self.some_steps = chain.needs.some_steps
        self.after = chain.captured_hook
        self._started: tuple[torch.Tensor, ...] = ()  # what the hook's start made (CapturedHook.start)
        if self.after is not None and not {id(p) for p in self.after.params} <= set(map(id, self.params)):
            raise ValueError(f"method {chain.method.name!r}'s captured post-step hook updates "
                             f"tensors other than the MLP's weights and biases")
        self.device = torch.device(device)
        # plasticity injection's frozen heads, read from their stacked copy (brought up to date
        # before each call: an injection between two calls adds heads)
        self.frozen = net.head_offset
        # Adam's step count t as a device scalar (float32, like torch.optim.Adam's step tensors:
        # inductor in torch 2.13 loses the in-place update of a float64 0-d input), kept equal
        # to the optimizer's count; _t_value: its value, on the host
        self.t = torch.zeros((), dtype=torch.float32, device=self.device)
        self._t_value = 0
        self._minus_one: torch.Tensor | None = None
        self._step = self._build()
        self._compiled_for: tuple | None = None  # the structure last compiled for (None: none yet)

    def _build(self) -> Callable:
        penalties, adam, weight_decay, after = self.penalties, self.adam, self.weight_decay, self.after
        transform, transform_places = self.transform, self.transform_places
        gradients, loss = self.gradients, self.loss
        betas = getattr(self.optimizer, "betas", None)
        eps = getattr(self.optimizer, "eps", None)

        def step(x, y, minus_one, params, ms, vs, lr, t, restarts):
            if gradients is None:  # the hand-written backward
                logits, hidden, grads = mlp_gradients(x, y, params[0::2], params[1::2], minus_one)
            else:
                (grads, logits), hidden = gradients(params, x, y), []
            hits = online_tally(logits, y, loss)
            for reg, places in penalties:  # λ·ρ'(θ − target), EWC's β(Aθ − B), …
                reg.add_grads_to_([grads[i] for i in places], [params[i] for i in places])
            if transform is not None:  # Parseval's 4λ(WWᵀ − sI)W, C-CHAIN's λ·∂L_C/∂θ, …
                task_loss = (task_losses(logits, y, loss).mean(1) if transform.reads_task_loss
                             else None)
                transform.run([grads[i] for i in transform_places], task_loss)
            if adam:
                # the step count t on the device, so its value does not change the graph; the
                # bias corrections 1 − βᵗ in double, as torch's fused kernel computes them
                t.add_(1)
                t64 = t.to(torch.float64)
                shared = [i for i, counts in enumerate(restarts) if counts is None]
                adam_update_(*([a[i] for i in shared] for a in (params, grads, ms, vs)), lr=lr,
                             bc1=1 - betas[0] ** t64, bc2_sqrt=torch.sqrt(1 - betas[1] ** t64),
                             betas=betas, eps=eps, weight_decay=weight_decay)
                for i, counts in enumerate(restarts):
                    if counts is not None:  # restarted elements: their own counts (CBP)
                        bc1, bc2_sqrt = restarted_corrections_(counts, betas)
                        adam_update_([params[i]], [grads[i]], [ms[i]], [vs[i]], lr=lr, bc1=bc1,
                                     bc2_sqrt=bc2_sqrt, betas=betas, eps=eps,
                                     weight_decay=weight_decay)
            else:
                sgd_update_(params, grads, lr)
            if after is not None:
                after.run(hidden, x)  # Shrink & Perturb's θ ← p·θ + σ·ε, ε drawn with Philox; …
            return hits

        if self.device.type == "cuda":
            return torch.compile(step, dynamic=False, fullgraph=True, mode="reduce-overhead")
        # fullgraph: the step is captured whole, or compiling it fails (never a silent split)
        return torch.compile(step, dynamic=False, fullgraph=True, backend=CPU_BACKEND)

    def _mark_static(self) -> None:
        """On CUDA, before the first call compiles: CUDA graphs replay the step on fixed
        addresses, so the state it updates or reads must stay where it is (a mutated input that
        is not static would make inductor skip the graph); the batch is copied into the graph's
        own input buffers."""
        penalties, after = self.penalties, self.after
        for tensor in [*self.params, *self._state(), self.lr, self.t,
                       *(t for reg, _ in penalties for t in reg.captured_reads()),
                       *(after.reads if after is not None else ()), *self._started,
                       *(self.transform.reads if self.transform is not None else ())]:
            torch._dynamo.mark_static_address(tensor)

    def _state(self) -> list[torch.Tensor]:
        # Adam's moments, and the step counts of its restarted elements (where the method
        # restarts some: created by the captured hook's first prepare, before the compile)
        opt = self.optimizer
        if not self.adam:
            return []
        return [*opt.exp_avg, *opt.exp_avg_sq, *(c for cs in self._restarts() if cs for c in cs)]

    def _restarts(self) -> list:
        # per parameter, its restart patterns' count tensors, or None (one shared count t)
        return list(self.optimizer.restart_counts) if self.adam else []

    def computes(self, step: int) -> bool:
        """Whether this compiled step computes update ``step`` whole: every step, except where
        the method's post-step hook acts on some steps only (``Needs.some_steps``: ReDo every
        ``period``) and acts after this one — that step is the eager step's, hook and all."""
        return not (self.some_steps and self.method.acts_after(step))

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor, step: int) -> None:
        """Train on the batch; ``step``: the updates so far once this one is taken (what the
        method's post-step hook is told)."""
        if self.after is not None:
            self.after.prepare(step)
        if self.frozen is not None:
            self.frozen.stack()
        structure = self._structure(x)
        if structure == self._compiled_for:
            self._call(x, y, correct)
            return
        # The first call compiles, and so does the first after the step's structure changed (a
        # task-end hook restarted Adam's elements, the frozen heads outgrew their slots). Every
        # CompiledStep shares one function, whose graphs dynamo keeps together (so a process
        # compiles each ensemble shape once and reuses it), up to a recompile limit (8) past
        # which it would silently run the function eagerly: raise the limit for this compile,
        # and fail rather than fall back.
        if self._compiled_for is None and self.after is not None and self.after.start is not None:
            self._started = self.after.start(x.shape[1])  # state sized by the batch
        if self.device.type == "cuda":
            self._mark_static()  # new state too (a restart's counts), static like the rest
        with (torch._dynamo.config.patch(_recompile_limits()),
              torch._inductor.config.patch(self._inductor_options())):
            self._call(x, y, correct)
        self._compiled_for = structure

    def _structure(self, x: torch.Tensor) -> tuple:
        """What the compiled graph's guards check that a run can change: the batch's shape,
        which tensors have restarted elements (and in how many patterns), the frozen heads'
        slots."""
        return (tuple(x.shape), tuple(None if cs is None else len(cs) for cs in self._restarts()),
                self.frozen.capacity if self.frozen is not None else 0)

    def _inductor_options(self) -> dict:
        """Inductor's settings for this step's compilation: with a captured post-step hook (a
        Philox draw: ten rounds that reuse every word twice a round), inductor inlines chains of
        up to :data:`REALIZE_OPCOUNT` operations into their readers before it writes a buffer
        (its default: 30 on CUDA, 50 on the CPU). Measured for Shrink & Perturb's step on this
        CPU (docs/performance.md): inlined whole it ran fastest and compiled no slower. (An
        older inductor without the CPU's own setting takes the one it has.)"""
        if self.after is None or not self.after.draws:
            return {}
        options = ("realize_opcount_threshold", "realize_cpu_opcount_threshold")
        return {name: REALIZE_OPCOUNT for name in options if hasattr(torch._inductor.config, name)}

    def _call(self, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor) -> None:
        if self._minus_one is None or self._minus_one.shape[:2] != y.shape:
            self._minus_one = minus_ones(y, self.params[0].dtype)
            if self.device.type == "cuda":
                torch._dynamo.mark_static_address(self._minus_one)
        if self.adam:
            count = self.optimizer.count_shared_step()  # the update below is its step t + 1
            if count - 1 != self._t_value:  # eager steps ran in between, or a resume
                self.t.fill_(count - 1)
            self._t_value = count
            hits = self._step(x, y, self._minus_one, self.params, self.optimizer.exp_avg,
                              self.optimizer.exp_avg_sq, self.lr, self.t, self._restarts())
        else:
            hits = self._step(x, y, self._minus_one, self.params, [], [], self.lr, self.t, [])
        # read before the next call: a CUDA graph's outputs live in buffers the next replay reuses
        correct.add_(hits)


__all__ = ["CompiledStep", "applies", "why_eager"]
