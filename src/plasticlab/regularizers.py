"""Drop-in regularizers for any PyTorch model: L2 Init and its relatives (SPEC §1).

Each regularizer is a penalty Σᵢ λ·ρ(θᵢ − targetᵢ) over a set of parameters::

    reg = L2Init(model, strength=1e-2)      # θ₀ is copied here, before the first update
    loss = task_loss + reg()                # gradient of reg(): λ(θ − θ₀)
    loss.backward(); optimizer.step()

| class            | target          | ρ(d)                          |
|------------------|-----------------|-------------------------------|
| ``L2``           | 0               | ½d²                           |
| ``L2Init``       | θ₀              | ½d²                           |
| ``L1Init``       | θ₀              | abs(d)                        |
| ``HuberInit``    | θ₀              | huber_δ(d)                    |
| ``L2InitResample`` | φₜ ~ init, fresh every step | ½d²                |
| ``WassersteinInit`` | θ₀'s value of the same rank | ½d²                 |

λ is the authors' code's λ: the penalty is (λ/2)‖θ − θ₀‖², so its gradient is λ(θ − θ₀) — the
paper writes λ‖θ − θ₀‖², i.e. its λ is half of ours; the paper's hyper-parameter tables were
made with the code's form. The penalty is a loss term: under Adam it passes through Adam's
normalisation (it is not decoupled weight decay).

The same classes run inside plasticlab's ensemble engine on stacked ``[K, …]`` parameters
(``member_dim=True``, λ a ``[K]`` tensor): the math is elementwise, so it is one code path.
Besides ``reg()`` (autograd), :meth:`Regularizer.add_grad_` adds the closed-form gradient
straight into ``.grad``; a test keeps the two equal. That gradient, λ·ρ′(θ − target), is
written once, in :func:`add_penalty_gradient_`: the drop-ins, the engine's eager training step
and its compiled step all call it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from . import foreach_penalty, rank_order
from .nets.layers import EnsembleLayerNorm
from .state import NamedState

NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm,
               EnsembleLayerNorm)


def regularized_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The trainable parameters of ``module`` that the penalties act on: every weight and
    bias except those of normalisation layers (SPEC §1: LayerNorm gain/bias are not
    regularized), each once — a weight tied between two layers (an embedding and the output
    layer) is one parameter, penalised once, as ``module.parameters()`` counts it."""
    if hasattr(module, "regularized_parameters"):
        return list(module.regularized_parameters())
    params: dict[int, nn.Parameter] = {}
    for m in module.modules():
        if isinstance(m, NORM_LAYERS):
            continue
        params.update((id(p), p) for p in m.parameters(recurse=False) if p.requires_grad)
    return list(params.values())


def add_penalty_gradient_(grad: torch.Tensor, theta: torch.Tensor, target: torch.Tensor | None,
                          strength, rho_grad: Callable[[torch.Tensor], torch.Tensor],
                          difference: torch.Tensor | None = None) -> torch.Tensor:
    """``grad`` ← ``grad`` + λ·ρ′(θ − target), in place; returns ``grad``.

    ``target`` None means 0 (the difference is θ itself); ``strength`` λ shaped to broadcast
    against θ; ``rho_grad`` ρ′; ``difference``: a buffer for θ − target kept across steps
    instead of a fresh temporary every step (the same numbers). The difference is taken first
    and scaled after — never split into λθ − λ·target, which leaves a rounding residue where
    θ = target and the task gradient is 0 (a weight on an always-blank pixel, a dead unit's
    weights), and Adam's normalisation turns that residue into a step of order α."""
    if target is None:
        d = theta
    elif difference is None:
        d = theta - target
    else:
        d = torch.sub(theta, target, out=difference)
    return grad.addcmul_(strength, rho_grad(d))


class Regularizer(NamedState):
    """Base class: value = Σ over parameters of λ·Σ ρ(θ − target).

    ``state_dict()``/``load_state_dict()`` save and restore what its constructor cannot rebuild
    (θ₀, EWC's anchors; :mod:`plasticlab.state`), for resuming a training loop.

    Parameters
    ----------
    params:
        an ``nn.Module`` (its :func:`regularized_parameters`) or an explicit list of tensors.
    strength:
        λ ≥ 0: a float, or with ``member_dim=True`` a ``[K]`` tensor, one λ per member.
    member_dim:
        the parameters are stacked ensembles ``[K, …]``; :meth:`value` is then per member.
    """

    def __init__(self, params: nn.Module | Iterable[torch.Tensor], strength, *,
                 member_dim: bool = False):
        self.params = (regularized_parameters(params) if isinstance(params, nn.Module)
                       else list(params))
        if not self.params:
            what = (f"{type(params).__name__} has no trainable weight or bias outside normalisation "
                    "layers (frozen ones, requires_grad=False, are left out)"
                    if isinstance(params, nn.Module) else "the list of tensors given is empty")
            raise ValueError(f"{type(self).__name__}: no parameters to regularize: {what}; build it "
                             "on the model you train")
        self.member_dim = member_dim
        strength = torch.as_tensor(strength, dtype=self.params[0].dtype,
                                   device=self.params[0].device)
        if member_dim and strength.dim() == 0:
            strength = strength.expand(self.params[0].shape[0])
        if not member_dim and strength.dim() != 0:
            raise ValueError(f"{type(self).__name__}: strength must be a number, "
                             f"got shape {tuple(strength.shape)} (use member_dim=True for ensembles)")
        if bool((strength < 0).any()):
            raise ValueError(f"{type(self).__name__}: strength must be >= 0, got {strength.tolist()}")
        self.strength = strength
        self._differences: list[torch.Tensor | None] | None = None  # add_grad_'s kept θ − target
        self._differences_dtype: torch.dtype | None = None  # the parameters' when they were made

    def _state_device(self) -> torch.device:
        return self.params[0].device

    device_attributes = ("strength",)

    def _follow_parameters(self) -> None:
        """θ₀ and the rest after the parameters, if the model was moved since (:meth:`_follow`);
        the kept differences θ − target anew if it was converted (``model.double()``), so that
        they are taken in the parameters' own precision. Checked on the first parameter (a
        model is moved and converted whole), every step, so kept to two comparisons."""
        first = self.params[0]
        if self.strength.device != first.device:
            self._follow(first.device)
        if self._differences is not None and self._differences_dtype != first.dtype:
            self._differences = None

    def _after_move(self) -> None:
        self._differences = None

    captured: bool = False
    """Whether a compiled training step computes this penalty's gradient inside its function
    (:meth:`add_grads_to_`, :mod:`plasticlab.step.compiled`): tensor operations alone, its
    state changed only in place."""

    # --- what a subclass defines -------------------------------------------------------------
    def targets(self) -> Sequence[torch.Tensor | None]:
        """The point each parameter is pulled toward (None means 0)."""
        raise NotImplementedError

    def rho(self, d: torch.Tensor) -> torch.Tensor:
        """The elementwise penalty ρ(d)."""
        return 0.5 * d * d

    def rho_grad(self, d: torch.Tensor) -> torch.Tensor:
        """dρ/dd."""
        return d

    # --- shared machinery --------------------------------------------------------------------
    def strength_for(self, p: torch.Tensor) -> torch.Tensor:
        """λ shaped to broadcast against ``p`` (``[K, 1, …]`` for ensembles)."""
        if not self.member_dim:
            return self.strength
        return self.strength.view(-1, *([1] * (p.dim() - 1)))

    def _diffs(self):
        for p, t in zip(self.params, self.targets(), strict=True):
            yield p, (p if t is None else p - t)

    def value(self) -> torch.Tensor:
        """The penalty, differentiable: a scalar, or ``[K]`` per member with ``member_dim``."""
        self._follow_parameters()
        kind = FOREACH_KINDS.get((type(self).rho, type(self).rho_grad))
        if kind is not None and foreach_penalty.applies(self.params, self.member_dim, self.strength):
            return foreach_penalty.penalty(kind, self.strength, self.params, self.targets())
        total = 0
        for _, d in self._diffs():
            r = self.rho(d)
            if self.member_dim:
                total = total + self.strength * r.flatten(1).sum(1)
            else:
                total = total + self.strength * r.sum()
        return total

    def __call__(self) -> torch.Tensor:
        """The penalty as a scalar loss term (summed over members for ensembles)."""
        return self.value().sum()

    @torch.no_grad()
    def add_grad_(self) -> None:
        """Add the penalty's gradient λ·ρ'(θ − target) to each parameter's ``.grad``
        (:func:`add_penalty_gradient_`, the difference θ − target in a buffer kept across
        steps)."""
        self._follow_parameters()
        targets = self.targets()
        if self._differences is None:
            self._differences = [None if t is None else torch.empty_like(p)
                                 for p, t in zip(self.params, targets, strict=True)]
            self._differences_dtype = self.params[0].dtype
        for p, t, difference in zip(self.params, targets, self._differences, strict=True):
            s = self.strength_for(p)
            if p.grad is None:
                p.grad = (s * self.rho_grad(p if t is None else p - t)).expand_as(p).clone()
            else:
                add_penalty_gradient_(p.grad, p, t, s, self.rho_grad, difference)


    def add_grads_to_(self, grads: Sequence[torch.Tensor], thetas: Sequence[torch.Tensor]) -> None:
        """``grads[i]`` ← ``grads[i]`` + the penalty's gradient for its parameter i (``thetas[i]``,
        that parameter), in place: the form a compiled step calls on the gradients it computes,
        where the penalty is :attr:`captured` — λ·ρ′(θ − target) toward
        :meth:`captured_targets` (:func:`add_penalty_gradient_`, as :meth:`add_grad_`)."""
        for g, theta, target in zip(grads, thetas, self.captured_targets(thetas), strict=True):
            add_penalty_gradient_(g, theta, target, self.strength_for(theta), self.rho_grad)

    def captured_targets(self, thetas: Sequence[torch.Tensor]) -> Sequence[torch.Tensor | None]:
        """This step's targets as tensor operations alone, for :meth:`add_grads_to_`: what
        :meth:`targets` gives (``thetas``: the parameters, as the compiled step holds them)."""
        raise NotImplementedError(f"{type(self).__name__}'s gradient is not written for a "
                                  f"compiled step (Regularizer.captured)")

    def captured_reads(self) -> list[torch.Tensor]:
        """The tensors :meth:`add_grads_to_` reads besides θ (kept at fixed addresses under
        CUDA graphs)."""
        return [self.strength]


class TargetPenalty(Regularizer):
    """A penalty λ·Σ ρ(θ − target) toward targets fixed when it is built (0, or θ₀): its
    gradient needs no draw and no state of its own, so every form of the training step —
    the compiled one too — computes it (L2, L2 Init, L1 Init, Huber Init)."""

    captured = True

    def captured_targets(self, thetas):
        return self.targets()

    def captured_reads(self):
        return [self.strength, *(t for t in self.targets() if t is not None)]


class L2(TargetPenalty):
    """L2 regularization toward the origin: (λ/2)‖θ‖²; gradient λθ (ρ(d) = ½d², the base's)."""

    def targets(self):
        return [None] * len(self.params)


class _InitTarget(TargetPenalty):
    """Pulls toward θ₀, a detached copy of the parameters taken at construction (its state)."""

    state_attributes = ("initial",)

    def __init__(self, params, strength, *, member_dim: bool = False, initial=None):
        super().__init__(params, strength, member_dim=member_dim)
        self.initial = ([p.detach().clone() for p in self.params] if initial is None
                        else [t.detach() for t in initial])

    def targets(self):
        return self.initial


class L2Init(_InitTarget):
    """L2 Init (regenerative regularization): (λ/2)‖θ − θ₀‖²; gradient λ(θ − θ₀).

    With SGD one step is θ ← (1 − αλ)θ + αλθ₀ − α∇L: a constant pull back to the initial
    weights that keeps the network plastic. ρ(d) = ½d², ρ′(d) = d: the base class's.
    """


class L1Init(_InitTarget):
    """L1 Init: λ‖θ − θ₀‖₁; gradient λ·sign(θ − θ₀)."""

    def rho(self, d):
        return d.abs()

    def rho_grad(self, d):
        return d.sign()


FOREACH_KINDS = {(Regularizer.rho, Regularizer.rho_grad): "quadratic",
                 (L1Init.rho, L1Init.rho_grad): "absolute"}
"""The penalties whose value :mod:`plasticlab.foreach_penalty` computes as one node, by their ρ
and ρ′ themselves (a subclass that defines its own computes its own)."""


class HuberInit(_InitTarget):
    """Huber Init: λ·Σ huber_δ(θ − θ₀), with huber_δ(d) = ½d² for |d| ≤ δ and
    δ(|d| − ½δ) beyond; gradient λ·clamp(θ − θ₀, −δ, δ)."""

    device_attributes = ("strength", "delta")

    def __init__(self, params, strength, delta: float = 1.0, *, member_dim: bool = False,
                 initial=None):
        super().__init__(params, strength, member_dim=member_dim, initial=initial)
        delta = torch.as_tensor(delta, dtype=self.params[0].dtype, device=self.params[0].device)
        if bool((delta <= 0).any()):
            raise ValueError(f"HuberInit: delta must be > 0, got {delta.tolist()}")
        if member_dim and delta.dim() == 0:
            delta = delta.expand(self.params[0].shape[0])
        self.delta = delta

    def captured_reads(self):
        return [*super().captured_reads(), self.delta]

    def _delta_for(self, d):
        return self.delta.view(-1, *([1] * (d.dim() - 1))) if self.member_dim else self.delta

    def rho(self, d):
        delta = self._delta_for(d)
        a = d.abs()
        return torch.where(a <= delta, 0.5 * d * d, delta * (a - 0.5 * delta))

    def rho_grad(self, d):
        delta = self._delta_for(d)
        return torch.maximum(torch.minimum(d, delta), -delta)


class WassersteinInit(Regularizer):
    """Wasserstein regularization toward θ₀'s distribution (Lewandowski et al. 2024):
    (λ/2)·Σ_ℓ ‖sort(θ_ℓ) − sort(θ⁰_ℓ)‖² over each parameter tensor θ_ℓ.

    In one dimension the optimal transport between two equal-sized samples pairs them in sorted
    order, so Σ_i (θ_(i) − θ⁰_(i))² is n_ℓ times the squared 2-Wasserstein distance between the
    empirical distributions of θ_ℓ and θ⁰_ℓ. Each weight is pulled toward the initial value of
    its own rank, gradient λ(θ − θ⁰_(rank θ)): only the distribution of θ₀ is kept, not which
    weight held which value — less restrictive than L2 Init, whose penalty bounds this one from
    above (equal while no two weights have swapped ranks). Ties are ranked by position.
    """

    state_attributes = ("sorted_initial",)

    def __init__(self, params, strength, *, member_dim: bool = False, initial=None):
        super().__init__(params, strength, member_dim=member_dim)
        initial = self.params if initial is None else list(initial)
        # sort(θ⁰) per tensor (per member with member_dim), flat: [K, n] or [n]; its state
        self.sorted_initial = [self._flat(t.detach()).sort(dim=-1).values for t in initial]
        # each tensor's order at the last step: where the next sort starts (rank_order)
        self._last_order: list[torch.Tensor | None] = [None] * len(self.params)

    def _after_move(self) -> None:
        super()._after_move()
        self._last_order = [None] * len(self.params)

    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        return t.flatten(1) if self.member_dim else t.flatten()

    def _order(self, i: int, flat: torch.Tensor) -> torch.Tensor:
        """The stable argsort of ``flat`` (tensor ``i``), sorted from its last order where
        :func:`plasticlab.rank_order.applies` (the same order, faster)."""
        hint = self._last_order[i]
        if rank_order.applies(flat, hint):
            order = rank_order.stable_order_from_hint(flat, hint)
        else:
            order = flat.argsort(dim=-1, stable=True)
        self._last_order[i] = order
        return order

    def targets(self):
        """θ⁰_(rank θ): each entry's target is the initial value of the rank it holds now."""
        return [_rank_matched(sorted0, self._order(i, self._flat(p.detach())), p)
                for i, (p, sorted0) in enumerate(zip(self.params, self.sorted_initial, strict=True))]

    # inside a compiled step the plain stable argsort (the hint's path is a host choice; it
    # gives the same order)
    captured = True

    def captured_targets(self, thetas):
        return [_rank_matched(sorted0, self._flat(p).argsort(dim=-1, stable=True), p)
                for p, sorted0 in zip(thetas, self.sorted_initial, strict=True)]

    def captured_reads(self):
        return [self.strength, *self.sorted_initial]


def _rank_matched(sorted0: torch.Tensor, order: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The entry at ``order[j]`` gets ``sorted0[j]``, the j-th smallest initial value, shaped
    like ``like``."""
    return torch.empty_like(sorted0).scatter_(-1, order, sorted0).view_as(like)


class L2InitResample(Regularizer):
    """L2 Init + Resample: (λ/2)‖θ − φₜ‖², φₜ a fresh draw from the init distribution at every
    step (the ablation showing that the pull must be to the *same* θ₀).

    ``sampler`` returns one tensor per parameter. For an ``nn.Module`` it defaults to calling
    ``reset_parameters()`` on a private copy of the module, i.e. the module's own init.
    :meth:`resample` draws φₜ; ``reg()`` and :meth:`add_grad_` each draw once per call, so
    call exactly one of them per step. ``on_device``: given for a sampler of tensor operations
    alone (a Philox draw on the parameters' device), the tensors it reads (its keys and
    counter); a compiled step then draws φₜ inside its function (:attr:`captured`).

    Its state is empty: the default sampler draws from torch's global generator (resuming the
    same draws takes ``torch.get_rng_state()`` saved beside the model), a sampler of your own
    keeps its own.
    """

    def __init__(self, params, strength, *, sampler: Callable[[], Sequence[torch.Tensor]] | None = None,
                 member_dim: bool = False, on_device: Sequence[torch.Tensor] | None = None):
        super().__init__(params, strength, member_dim=member_dim)
        self.on_device = None if on_device is None else list(on_device)
        self.captured = on_device is not None
        if sampler is None:
            if not isinstance(params, nn.Module):
                raise ValueError("L2InitResample needs a sampler when given a list of tensors")
            sampler = _module_sampler(params)
        self.sampler = sampler
        self.current: list[torch.Tensor] = []

    def _after_move(self) -> None:
        super()._after_move()
        self.current = []  # the last φₜ, drawn where the model was: the next call draws anew

    @torch.no_grad()
    def resample(self) -> None:
        """Draw a fresh φₜ."""
        self.current = [t.detach() for t in self.sampler()]
        if len(self.current) != len(self.params):
            raise ValueError(f"sampler returned {len(self.current)} tensors "
                             f"for {len(self.params)} parameters")

    def targets(self):
        return self.current

    def __call__(self):
        self.resample()
        return super().__call__()

    def add_grad_(self):
        self.resample()
        super().add_grad_()

    def captured_targets(self, thetas):
        if self.on_device is None:
            raise NotImplementedError("L2InitResample draws inside a compiled step only with a "
                                      "sampler on the device (on_device)")
        return [t.detach() for t in self.sampler()]

    def captured_reads(self):
        return [self.strength, *(self.on_device or ())]


class EWC(Regularizer):
    """Elastic Weight Consolidation, diagonal form: (β/2)·Σ_i F_i (θ_i − θ*_i)², with the
    anchor θ* and the diagonal Fisher F taken at a task end (:meth:`consolidate`). Before the
    first consolidation the penalty is 0.

    ``anchor`` says what a consolidation does with the earlier ones:

    - ``"last"`` (the authors' code, SPEC §9; default): θ* and F are **replaced** — only the
      task that just ended anchors the penalty;
    - ``"sum"`` (Kirkpatrick et al. 2017): one anchor per finished task,
      (β/2)·Σ_t Σ_i F_i,t (θ_i − θ*_i,t)², kept as three running tensors — A = Σ F_t,
      B = Σ F_t θ*_t, C = Σ F_t θ*_t² — so memory does not grow with the number of tasks:
      value (β/2)·Σ(Aθ² − 2Bθ + C), gradient β(Aθ − B).

    ``"last"`` is the same formula with A = F, B = Fθ*, C = Fθ*² of the last task alone.
    """

    ANCHORS = ("last", "sum")
    state_attributes = ("fisher_sum", "anchor_sum", "anchor_sq_sum", "tasks")
    captured = True  # A and B change in place, at task ends only (consolidate)

    def __init__(self, params, strength, *, anchor: str = "last", member_dim: bool = False):
        super().__init__(params, strength, member_dim=member_dim)
        if anchor not in self.ANCHORS:
            raise ValueError(f"EWC: anchor must be one of {', '.join(self.ANCHORS)}, got {anchor!r}")
        self.anchor = anchor
        self.fisher_sum = [torch.zeros_like(p, requires_grad=False) for p in self.params]
        self.anchor_sum = [torch.zeros_like(p, requires_grad=False) for p in self.params]
        self.anchor_sq_sum = [torch.zeros_like(p, requires_grad=False) for p in self.params]
        self.tasks = 0

    @torch.no_grad()
    def consolidate(self, fisher: Sequence[torch.Tensor]) -> None:
        """End of a task: anchor the current θ with weights ``fisher`` (one tensor per param),
        replacing the earlier anchor (``anchor="last"``) or adding to them (``"sum"``)."""
        self._follow_parameters()
        for p, f, a, b, c in zip(self.params, fisher, self.fisher_sum, self.anchor_sum,
                                 self.anchor_sq_sum, strict=True):
            if self.anchor == "last":
                a.copy_(f)
                b.copy_(f * p)
                c.copy_(f * p * p)
            else:
                a.add_(f)
                b.add_(f * p)
                c.add_(f * p * p)
        self.tasks += 1

    def value(self):
        self._follow_parameters()
        total = 0
        for p, a, b, c in zip(self.params, self.fisher_sum, self.anchor_sum, self.anchor_sq_sum,
                              strict=True):
            r = 0.5 * (a * p * p - 2 * b * p + c)
            total = total + self.strength * (r.flatten(1).sum(1) if self.member_dim else r.sum())
        return total

    def _gradient(self, theta: torch.Tensor, index: int) -> torch.Tensor:
        # β(Aθ − B) for parameter `index`
        return self.strength_for(theta) * (self.fisher_sum[index] * theta - self.anchor_sum[index])

    @torch.no_grad()
    def add_grad_(self):
        self._follow_parameters()
        for i, p in enumerate(self.params):
            g = self._gradient(p, i)
            if p.grad is None:
                p.grad = g
            else:
                p.grad.add_(g)

    def add_grads_to_(self, grads, thetas):
        for i, (g, theta) in enumerate(zip(grads, thetas, strict=True)):
            g.add_(self._gradient(theta, i))

    def captured_reads(self):
        return [self.strength, *self.fisher_sum, *self.anchor_sum]

    def consolidate_model(self, model: nn.Module, inputs: torch.Tensor,
                          targets: torch.Tensor | None = None, *, fisher: str = "empirical",
                          generator: torch.Generator | None = None) -> None:
        """Drop-in use at a task end: estimate the diagonal Fisher of a classifier ``model`` on
        examples of the finished task and consolidate.

        ``fisher="empirical"`` (default, the authors' code) uses the data's labels ``targets``
        ``[N]`` for the inputs ``[N, …]``; ``fisher="true"`` draws labels from the model (with
        ``generator``) and needs no targets."""
        from .fisher import FISHER_KINDS, diagonal_fisher

        if self.member_dim:
            raise ValueError("consolidate_model is for plain models; ensembles use consolidate()")
        if fisher not in FISHER_KINDS:
            raise ValueError(f"EWC: fisher must be one of {', '.join(FISHER_KINDS)}, got {fisher!r}")
        if fisher == "empirical" and targets is None:
            raise ValueError("EWC: fisher='empirical' needs the finished task's labels: "
                             "consolidate_model(model, inputs, targets), or pass fisher='true'")
        labels = targets[None] if fisher == "empirical" else None
        estimate = diagonal_fisher(lambda x: model(x[0])[None], self.params, inputs[None],
                                   [generator or torch.default_generator], labels)
        self.consolidate(estimate)


def _module_sampler(module: nn.Module, who: str = "L2InitResample") -> Callable[[], list[torch.Tensor]]:
    """Fresh init draws of ``module``'s regularized parameters: ``reset_parameters()`` on a
    private copy. Every such parameter must belong to a module that has one — a parameter of a
    module without it (a custom module's own ``nn.Parameter``) would come back unchanged, its θ₀,
    in place of a draw — else a ``ValueError`` names them."""
    shadow = copy.deepcopy(module)
    resettable = [m for m in shadow.modules() if hasattr(m, "reset_parameters")]
    owned = {id(p) for m in resettable for p in m.parameters(recurse=False)}
    regularized = {id(p) for p in regularized_parameters(shadow)}
    undrawn = [name for name, p in shadow.named_parameters()
               if id(p) in regularized and id(p) not in owned]
    if undrawn:
        raise ValueError(f"{who}: no init distribution to draw {', '.join(undrawn)} from: "
                         f"{'its module has' if len(undrawn) == 1 else 'their modules have'} no "
                         "reset_parameters(); give the module one that draws them, or pass "
                         "sampler=… returning a fresh draw per parameter")

    followed = regularized_parameters(module)[0]

    def sample() -> list[torch.Tensor]:
        if next(shadow.parameters()).device != followed.device:
            shadow.to(followed.device)  # the model was moved: draw where it is now
        with torch.no_grad():
            for m in resettable:
                m.reset_parameters()
        # walked again each draw: a reset_parameters() of one's own may put new tensors in place
        return regularized_parameters(shadow)

    return sample


__all__ = ["EWC", "L1Init", "L2", "L2Init", "L2InitResample", "HuberInit", "Regularizer",
           "TargetPenalty", "WassersteinInit", "add_penalty_gradient_", "regularized_parameters"]
