"""Adam on stacked ensemble parameters, with per-element state.

Same update as ``torch.optim.Adam`` (defaults β = (0.9, 0.999), ε = 1e-8, no weight decay):

    m ← β₁m + (1−β₁)g,   v ← β₂v + (1−β₂)g²,
    θ ← θ − α · (m / (1−β₁ᵗ)) / (√v / √(1−β₂ᵗ) + ε)

with one difference that resetting methods need: the step count t is kept **per element**, so
that Continual Backprop and ReDo can restart a single unit's moments *and* its bias correction
(:meth:`Adam.reset`). Until the first reset every element shares one scalar count, which is
cheaper and gives the same numbers.

The step size α is one for all members, or one per member (``lr=[α_1, …, α_K]``): the
members of a step-size grid then train in one ensemble, each updated as it is alone.

The rule is written once, in :func:`adam_update_` (the plain form, which the compiled training
step compiles too); by default :class:`Adam` hands it to torch's fused kernel instead
(:mod:`plasticlab.optim.fused_adam`, a named fast path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import fused_adam
from .stacked import StackedOptimizer, lr_groups, per_member, step_sizes


def restarted_corrections_(counts: Sequence[torch.Tensor], betas: tuple[float, float]
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Advance a tensor's per-element step counts (its restart patterns ``counts``, each
    broadcastable to it) by one and return its bias corrections (1 − β₁ᵗ, √(1 − β₂ᵗ)) per
    element: 1 − βᵗ = −expm1(t·ln β), accurate for small t, computed on each pattern and combined
    with a minimum (1 − βᵗ grows with t: the minimum is the element's own count's)."""
    beta1, beta2 = betas
    bc1 = bc2_sqrt = None
    for c in counts:
        c.add_(1)
        b1 = torch.expm1(c * math.log(beta1)).neg_()
        b2 = torch.expm1(c * math.log(beta2)).neg_().sqrt_()
        bc1 = b1 if bc1 is None else torch.minimum(bc1, b1)
        bc2_sqrt = b2 if bc2_sqrt is None else torch.minimum(bc2_sqrt, b2)
    return bc1, bc2_sqrt


def adam_update_(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                 ms: Sequence[torch.Tensor], vs: Sequence[torch.Tensor], *, lr, bc1, bc2_sqrt,
                 betas: tuple[float, float], eps: float, weight_decay: float = 0.0) -> None:
    """One Adam update of every θ in ``params``, in place (with its moments ``ms``, ``vs``)::

        g ← g + wd·θ,   m ← β₁m + (1−β₁)g,   v ← β₂v + (1−β₂)g²,
        θ ← θ − (α / (1−β₁ᵗ)) · m / (√v / √(1−β₂ᵗ) + ε)

    ``lr``: α, a number or a ``[K]`` tensor (member k's α_k); ``bc1`` = 1 − β₁ᵗ and
    ``bc2_sqrt`` = √(1 − β₂ᵗ): numbers, 0-d tensors, or tensors that broadcast against θ
    (per-element step counts after restarts). ``weight_decay``: ``torch.optim.Adam``'s (an L2
    term in the gradient, not AdamW's). The plain form of :class:`Adam`'s update, and what the
    compiled training step compiles."""
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, ms, vs, strict=True):
        if weight_decay:
            g = g.add(p, alpha=weight_decay)  # torch.optim.Adam's form: one multiply-add
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = v.sqrt() / bc2_sqrt + eps
        p.sub_(per_member(lr, p) / bc1 * m / denom)


class Adam(StackedOptimizer):
    """Adam over a list of tensors whose gradients are in ``.grad``.

    ``member_dim``: the tensors are stacked ensemble members ``[K, …]`` (the engine's);
    member k's update is then the same to the bit as in an ensemble of its own
    (:func:`plasticlab.optim.fused_adam.member_aligned`). ``fused``: through torch's fused
    kernel where torch has it (:mod:`plasticlab.optim.fused_adam`); False: the plain form,
    :func:`adam_update_` per tensor.
    """

    title = "Adam"

    def __init__(self, params: Sequence[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, fused: bool = True,
                 weight_decay: float = 0.0, member_dim: bool = False):
        if not weight_decay >= 0:
            raise ValueError(f"Adam weight_decay must be >= 0, got {weight_decay}")
        self.params = list(params)
        # α: a float, or member k's α_k in lr[k]
        self.lr = step_sizes(lr, member_dim, "Adam")
        self.betas, self.eps = betas, eps
        # g ← g + wd·θ before the moments, as torch.optim.Adam's weight_decay (L2, not AdamW).
        self.weight_decay = float(weight_decay)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # Steps taken by each tensor (like torch.optim.Adam, a tensor without a gradient in a
        # step is skipped and its count does not advance).
        self.step_counts = [0] * len(self.params)
        # Per-element step counts, created for a tensor on its first reset, kept factored: a list
        # of count tensors broadcastable to the parameter, one per restart pattern (a row of
        # units' incoming weights, a column of outgoing weights …); an element's count is the
        # minimum over them (the steps since the latest restart that covered it).
        self.restart_counts: list[list[torch.Tensor] | None] = [None] * len(self.params)
        self.fused = fused and fused_adam.available()
        self.member_dim = bool(member_dim)
        self.kernel = fused_adam.FusedAdam(self) if fused_adam.available() and self.params else None
        self._lr_tensor: torch.Tensor | None = None  # the plain form's per-member α, from first use

    @torch.no_grad()
    def step(self, decay: float = 0.0) -> None:
        """One Adam update of every parameter from its ``.grad``. ``decay``: λ of a quadratic
        penalty λθ that the training step leaves to this update (g + (wd + λ)·θ before the
        moments, one pass fewer than adding it to ``.grad`` first, and the same numbers)."""
        if self.params:
            self.check_state_current(self.exp_avg[0])
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        weight_decay = self.weight_decay + decay
        if not self.fused:
            for i in active:
                self._plain_step(i, weight_decay)
            return
        fused = [i for i in active if self.restart_counts[i] is None]
        restarted = [i for i in active if self.restart_counts[i] is not None]
        if fused:
            for i in fused:
                self.step_counts[i] += 1
            self.kernel.step(fused, weight_decay)
        if restarted:
            self.kernel.restarted_step(restarted, weight_decay)

    def _plain_step(self, i: int, weight_decay: float) -> None:
        # The plain form, one tensor at a time: the bias corrections of its shared count, or its
        # per-element ones after a restart.
        if self.restart_counts[i] is None:
            self.step_counts[i] += 1
            t = self.step_counts[i]
            bc1, bc2_sqrt = 1 - self.betas[0] ** t, (1 - self.betas[1] ** t) ** 0.5
        else:
            bc1, bc2_sqrt = self.corrections(i)
        p = self.params[i]
        adam_update_([p], [p.grad], [self.exp_avg[i]], [self.exp_avg_sq[i]], lr=self._rate_tensor(),
                     bc1=bc1, bc2_sqrt=bc2_sqrt, betas=self.betas, eps=self.eps,
                     weight_decay=weight_decay)

    def _rate_tensor(self) -> torch.Tensor:
        """α as :func:`adam_update_` takes it here: a tensor in the parameters' dtype, 0-d for a
        shared α or ``[K]`` with the members' rates — the same arithmetic either way, so a
        member's update does not depend on whether the others share its α."""
        if self._lr_tensor is None:
            self._lr_tensor = torch.tensor(self.lr, dtype=self.params[0].dtype,
                                           device=self.params[0].device)
        return self._lr_tensor

    def corrections(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance tensor i's step counts by one and return its per-element bias corrections
        (1 − β₁ᵗ, √(1 − β₂ᵗ)), broadcastable to the parameter.

        1 − βᵗ = −expm1(t·ln β) is accurate to rounding even for small t (where 1 − exp(·)
        would cancel). It is computed on the factored counts (a few hundred values, not every
        element) and combined with a minimum: 1 − βᵗ grows with t, so the minimum over the
        patterns is the correction of the element's own count."""
        self.step_counts[i] += 1
        return restarted_corrections_(self.restart_counts[i], self.betas)

    def count_shared_step(self) -> int:
        """Advance every tensor's step count by one for an update computed elsewhere from this
        optimizer's state (the compiled step, :mod:`plasticlab.step.compiled`) and return the
        new count t of the tensors with no restarted element, which must share one (a tensor
        with restarted elements counts in its own patterns: the update advances them,
        :func:`restarted_corrections_`; t is then 0 where every tensor has them)."""
        shared = {c for c, r in zip(self.step_counts, self.restart_counts, strict=True) if r is None}
        if len(shared) > 1:
            raise RuntimeError(f"an update computed elsewhere needs one Adam step count for every "
                               f"tensor, got {sorted(shared)}")
        t = shared.pop() + 1 if shared else 0
        self.step_counts = [c + 1 for c in self.step_counts]
        return t

    def rates(self) -> list[tuple[float, list[int] | None]]:
        """(α, members) pairs: one pair (α, None = all members) for a shared step size."""
        return [(self.lr, None)] if isinstance(self.lr, float) else lr_groups(self.lr)

    @property
    def element_steps(self) -> list[torch.Tensor | None]:
        """Each tensor's per-element step counts (None until its first restart), materialised."""
        out = []
        for p, counts in zip(self.params, self.restart_counts, strict=True):
            if counts is None:
                out.append(None)
                continue
            full = counts[0].expand_as(p)
            for c in counts[1:]:
                full = torch.minimum(full, c)
            out.append(full.clone())
        return out

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Restart Adam for the elements of parameter ``index`` where ``mask`` is true.

        Moments go to 0 and, with ``restart_count`` (Continual Backprop), the step count too,
        so the next update is bias-corrected as a first step (the public AdamGnT leaves the
        bias correction stale; we do not). ReDo zeroes the moments only
        (``restart_count=False``).
        """
        p = self.params[index]
        mask = mask.expand_as(p)
        self.exp_avg[index].masked_fill_(mask, 0.0)
        self.exp_avg_sq[index].masked_fill_(mask, 0.0)
        if not restart_count:
            return
        # The dims the mask varies along (expanded dims have stride 0): restarting whole units
        # gives a [K, U, 1] or [K, 1, U] pattern, kept as a count tensor of that shape.
        shape = tuple(1 if stride == 0 else size
                      for stride, size in zip(mask.stride(), mask.shape, strict=True))
        pattern = mask[tuple(slice(0, 1) if n == 1 else slice(None) for n in shape)]
        self.restart_pattern(index, shape).masked_fill_(pattern, 0.0)

    def restart_pattern(self, index: int, shape: tuple[int, ...]) -> torch.Tensor:
        """Parameter ``index``'s step counts for restarts of ``shape`` (``[K, U, 1]``: whole rows;
        ``[K, 1, U]``: whole columns), created at the tensor's count where it has none yet (the
        elements' counts are then unchanged: the minimum over its patterns)."""
        p = self.params[index]
        counts = self.restart_counts[index]
        if counts is None:
            counts = self.restart_counts[index] = []
        for c in counts:  # a loop, not next() with a default: torch 2.6's dynamo traces this
            if tuple(c.shape) == shape:
                return c
        match = torch.full(shape, float(self.step_counts[index]), dtype=p.dtype, device=p.device)
        counts.append(match)
        return match

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly (for checkpoints)."""
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                "member_dim": self.member_dim,
                "step_counts": list(self.step_counts),
                "exp_avg": [m.clone() for m in self.exp_avg],
                "exp_avg_sq": [v.clone() for v in self.exp_avg_sq],
                "restart_counts": [None if c is None else [t.clone() for t in c]
                                   for c in self.restart_counts]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.lr, self.betas, self.eps = state["lr"], tuple(state["betas"]), state["eps"]
        self.weight_decay = state.get("weight_decay", 0.0)
        self.member_dim = state.get("member_dim", False)
        self.step_counts = list(state["step_counts"])
        for dst, src in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"],
                            strict=True):
            dst.copy_(src)
        self.restart_counts = [None if c is None else [t.clone() for t in c]
                               for c in state["restart_counts"]]
        self._lr_tensor = None
        if self.kernel is not None:
            self.kernel.forget()
