"""The engine's whole training step as one function under ``torch.compile``.

One step of the paper's MLP with a penalty toward a fixed target (the Baseline, L2, L2 Init,
L1 Init, Huber Init, or members of those in one ensemble) is, per member k::

    z = MLP_θ(x);  g = ∇_θ mean_b CE(z, y)        (the hand-written backward's formulas,
                                                     :mod:`plasticlab.fast.mlp_backprop`)
    g ← g + λ_k ρ'(θ − target)                       (target θ₀, or 0 for L2; ρ' the
                                                     identity, sign, or clamp to ±δ)
    Adam:  m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²,
           θ ← θ − α_k (m / (1−β₁ᵗ)) / (√v / √(1−β₂ᵗ) + ε)
    SGD:   θ ← θ − α_k g

:class:`CompiledStep` writes this as one function and hands it to ``torch.compile``: on the CPU,
inductor fuses the penalty, Adam and the elementwise work of the backward into a few loops; on
CUDA it runs with ``mode="reduce-overhead"`` (the step replayed as a CUDA graph: one launch
instead of dozens of small kernels). It updates the very tensors the eager step updates — the
network's parameters, :class:`plasticlab.optim.Adam`'s moments and step counts — so eager and
compiled steps can alternate (the engine takes the eager step where a measurement needs the
task gradient) and checkpoints are the same.

Plain form: the engine's eager step (:class:`~plasticlab.fast.mlp_backprop.ManualBackprop`, the
method's ``add_penalty_grad``, the optimizer's ``step``). Compilation reorders and fuses
floating-point work, so the two agree up to rounding, not to the bit; member k of a compiled
ensemble is still seed k compiled alone (``tests/test_compiled_step.py`` states both
tolerances).

Applies (:func:`applies`): asked for (the engine's ``compile=True``, ``--compile``), outside
:func:`plasticlab.fast.plain_forms`, with the hand-written MLP backward, a method of
:data:`COMPILED_METHODS`, and :class:`plasticlab.optim.Adam`
with no restarted elements or :class:`plasticlab.optim.SGD`. Elsewhere the engine takes the
eager step and the run's manifest says so.

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

from ..methods.base import Method, PenaltyMethod
from ..optim import SGD, Adam
from ..regularizers import L2, HuberInit, L1Init, L2Init
from . import enabled

COMPILED_METHODS = ("baseline", "l2", "l2_init", "l1_init", "huber_init", "penalty_members")
"""Methods whose step is the task gradient plus penalties λ·ρ(θ − target) toward a fixed target,
with no hook before or after the optimizer's step (``penalty_members``: members of the others
in one ensemble)."""
PENALTIES = (L2, L2Init, L1Init, HuberInit)

RECOMPILE_LIMIT = 64
"""The most ensemble shapes and method structures one process compiles the step for."""


def _penalties(method) -> list | None:
    """The method's penalties as (regularizer, decay left to the optimizer), or None
    when the method is not one the compiled step computes."""
    if getattr(method, "name", None) not in COMPILED_METHODS:
        return None
    cls = type(method)
    if (cls.before_step is not Method.before_step or cls.after_step is not Method.after_step
            or method.needs_features):
        return None
    parts = getattr(method, "parts", [method])
    out = []
    for part in parts:
        if not isinstance(part, PenaltyMethod):
            if type(part).add_penalty_grad is not Method.add_penalty_grad:
                return None
            continue  # the Baseline: no penalty
        if type(part.regularizer) not in PENALTIES:
            return None
        out.append((part.regularizer, getattr(part.gradient, "decay_in_optimizer", False)))
    return out


def applies(hand, method, optimizer) -> bool:
    """Whether :class:`CompiledStep` computes this engine's step: the hand-written MLP backward
    (``hand`` not None), a method of :data:`COMPILED_METHODS`,
    :class:`plasticlab.optim.Adam` (no restarted elements) or :class:`plasticlab.optim.SGD`;
    outside :func:`plasticlab.fast.plain_forms`."""
    if not enabled() or hand is None or _penalties(method) is None:
        return False
    if type(optimizer) is Adam:
        return all(c is None for c in optimizer.restart_counts)
    return type(optimizer) is SGD


def _mlp_gradients(x, y, weights, biases):
    """Logits and ∂L/∂θ of Σ_k mean_b CE for the ensemble ReLU MLP, by the hand-written
    backward's formulas (:class:`plasticlab.fast.mlp_backprop.ManualBackprop`)."""
    inputs = [x]
    for w, b in zip(weights[:-1], biases[:-1], strict=True):
        inputs.append(torch.relu(torch.baddbmm(b.unsqueeze(1), inputs[-1], w.transpose(1, 2))))
    logits = torch.baddbmm(biases[-1].unsqueeze(1), inputs[-1], weights[-1].transpose(1, 2))
    delta = (torch.softmax(logits, dim=-1)
             - torch.nn.functional.one_hot(y, logits.shape[-1]).to(logits.dtype)) / y.shape[1]
    grad_w: list = [None] * len(weights)
    grad_b: list = [None] * len(weights)
    for layer in range(len(weights) - 1, -1, -1):
        grad_w[layer] = torch.bmm(delta.transpose(1, 2), inputs[layer])
        grad_b[layer] = delta.sum(1)
        if layer:
            delta = torch.bmm(delta, weights[layer]) * (inputs[layer] > 0)
    return logits, [g for pair in zip(grad_w, grad_b, strict=True) for g in pair]


def _per_member(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A ``[K]`` tensor shaped to broadcast against a stacked ``[K, …]`` tensor."""
    return values.view(-1, *([1] * (like.dim() - 1)))


def _adam_step(params, grads, ms, vs, lr, bc1, bc2_sqrt, betas, eps, weight_decay):
    # torch's Adam as its fused kernel writes it (plasticlab.optim.Adam runs that kernel)
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, ms, vs, strict=True):
        if weight_decay:
            g = g + weight_decay * p
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = v.sqrt() / bc2_sqrt + eps
        p.sub_(_per_member(lr, p) / bc1 * m / denom)


def _sgd_step(params, grads, lr):
    for p, g in zip(params, grads, strict=True):
        p.sub_(_per_member(lr, p) * g)


class CompiledStep:
    """The compiled training step of one ensemble: ``step(x, y, correct)`` trains every member
    on its batch (``x`` ``[K, B, in]``, ``y`` ``[K, B]``) and adds each member's number of
    correct predictions to ``correct`` ``[K]``, as the engine's eager step does."""

    def __init__(self, net, method, optimizer, member_lr: list[float], device: torch.device):
        penalties = _penalties(method)
        if penalties is None:
            raise ValueError(f"the compiled step does not compute method {method.name!r}; "
                             f"it computes {', '.join(COMPILED_METHODS)}")
        layers = [b.affine for b in net.blocks]
        self.params = [p for layer in layers for p in (layer.weight, layer.bias)]
        self.optimizer = optimizer
        self.adam = type(optimizer) is Adam
        if [id(p) for p in optimizer.params] != [id(p) for p in self.params]:
            raise ValueError("the compiled step needs the optimizer to hold exactly the MLP's "
                             "weights and biases, in order")
        self.lr = torch.tensor(member_lr, dtype=self.params[0].dtype, device=device)
        # per penalty: the regularizer (λ per member, ρ') and each parameter's target (None: 0,
        # False: not regularized); an L2 whose
        # decay the optimizer applies (quadratic_penalty's decay_in_optimizer) is left to it
        self.penalties = []
        for reg, in_optimizer in penalties:
            if in_optimizer:
                continue
            targets = dict(zip(map(id, reg.params), reg.targets(), strict=True))
            self.penalties.append((reg, [targets.get(id(p), False) for p in self.params]))
        self.device = torch.device(device)
        # Adam's step count t as a device scalar (float32, like torch.optim.Adam's step tensors:
        # inductor in torch 2.13 loses the in-place update of a float64 0-d input), kept equal
        # to the optimizer's count; _t_value: its value, on the host
        self.t = torch.zeros((), dtype=torch.float32, device=self.device)
        self._t_value = 0
        self._step = self._build()
        self._compiled = False  # the first call compiles

    def _build(self) -> Callable:
        penalties, adam = self.penalties, self.adam
        betas = getattr(self.optimizer, "betas", None)
        eps = getattr(self.optimizer, "eps", None)
        weight_decay = getattr(self.optimizer, "weight_decay", 0.0)

        def step(x, y, params, ms, vs, lr, t):
            logits, grads = _mlp_gradients(x, y, params[0::2], params[1::2])
            hits = (logits.argmax(-1) == y).sum(1)
            for reg, targets in penalties:  # g + λ·ρ'(θ − target), the difference first
                grads = [g if target is False
                         else g + reg.strength_for(p) * reg.rho_grad(p if target is None else p - target)
                         for g, p, target in zip(grads, params, targets, strict=True)]
            if adam:
                # the step count t on the device, so its value does not change the graph; the
                # bias corrections 1 − βᵗ in double, as torch's fused kernel computes them
                t.add_(1)
                t64 = t.to(torch.float64)
                bc1 = 1 - betas[0] ** t64
                bc2_sqrt = torch.sqrt(1 - betas[1] ** t64)
                _adam_step(params, grads, ms, vs, lr, bc1, bc2_sqrt, betas, eps, weight_decay)
            else:
                _sgd_step(params, grads, lr)
            return hits

        if self.device.type == "cuda":
            # CUDA graphs replay the step on fixed addresses: the state it updates or reads
            # must stay where it is (a mutated input that is not static would make inductor
            # skip the graph); the batch is copied into the graph's own input buffers
            for tensor in [*self.params, *self._state(), self.lr, self.t,
                           *(r.strength for r, _ in penalties),
                           *(r.delta for r, _ in penalties if isinstance(r, HuberInit)),
                           *(t for _, ts in penalties for t in ts if isinstance(t, torch.Tensor))]:
                torch._dynamo.mark_static_address(tensor)
            return torch.compile(step, dynamic=False, mode="reduce-overhead")
        return torch.compile(step, dynamic=False)

    def _state(self) -> list[torch.Tensor]:
        opt = self.optimizer
        return [*opt.exp_avg, *opt.exp_avg_sq] if self.adam else []

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor) -> None:
        if self._compiled:
            self._call(x, y, correct)
            return
        # The first call compiles. Every CompiledStep shares one function, whose graphs dynamo
        # keeps together (so a process compiles each ensemble shape once and reuses it), up to
        # a recompile limit (8) past which it would silently run the function eagerly: raise
        # the limit for this compile, and fail rather than fall back.
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT,
                                        fail_on_recompile_limit_hit=True):
            self._call(x, y, correct)
        self._compiled = True

    def _call(self, x: torch.Tensor, y: torch.Tensor, correct: torch.Tensor) -> None:
        opt = self.optimizer
        if self.adam:
            if any(c is not None for c in opt.restart_counts):
                raise RuntimeError("the compiled step cannot run Adam with restarted elements")
            counts = set(opt.step_counts)
            if len(counts) != 1:
                raise RuntimeError(f"the compiled step needs one Adam step count for every "
                                   f"tensor, got {sorted(counts)}")
            count = counts.pop()
            if count != self._t_value:  # eager steps ran in between, or a resume
                self.t.fill_(count)
            opt.step_counts = [count + 1] * len(opt.step_counts)
            self._t_value = count + 1
            hits = self._step(x, y, self.params, opt.exp_avg, opt.exp_avg_sq, self.lr, self.t)
        else:
            hits = self._step(x, y, self.params, [], [], self.lr, self.t)
        # read before the next call: a CUDA graph's outputs live in buffers the next replay reuses
        correct.add_(hits)


__all__ = ["COMPILED_METHODS", "CompiledStep", "applies"]
