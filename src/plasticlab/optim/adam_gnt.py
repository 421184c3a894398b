"""AdamGnT: the optimizer Continual Backprop trains with in its public code (SPEC §9).

Dohare et al.'s generate-and-test code (``AdamGnT`` in ``gnt.py``), which the L2 Init authors
use for the **whole network** whenever Continual Backprop runs with Adam, is not Adam. Per
element, with that element's own step count t:

    m ← β₁m + (1−β₁)g,   v ← β₂v + (1−β₂)g²,   θ ← θ − α · (1 − β₂ᵗ) · m / (√v + ε)

There is no 1/(1−β₁ᵗ), and (1 − β₂ᵗ) *multiplies* the step where Adam divides by √(1 − β₂ᵗ):
the line of the public code meant to form Adam's step size computes a value and discards it.
So its first steps are far shorter than Adam's (at t = 1 about α·(1−β₁)·√(1−β₂) ≈ 0.003·α
for a steady gradient; about 0.8·α by t = 1000) and approach Adam's step as t grows. A
replaced unit's elements restart at t = 0 with zero moments, so new units start with that
slow warm-up again.

This class is that update on stacked ensemble parameters, with the state-reset protocol of
:class:`plasticlab.optim.Adam` (``params``, ``reset(index, mask, restart_count)``), so
Continual Backprop drives both alike. It is **not** a general-purpose optimizer: it exists to
run Continual Backprop as its reference code does (``--set adam_variant=reference``).

(1 − β₂ᵗ) is computed as −expm1(t·ln β₂), accurate to rounding for every t.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from .stacked import StackedOptimizer


class AdamGnT(StackedOptimizer):
    """The public AdamGnT update over a list of tensors whose gradients are in ``.grad``.

    ``lr`` α, ``betas`` (β₁, β₂) and ``eps`` ε as in the formula of the module docstring (the
    public code's defaults). Each tensor keeps one step count until its first restart; from
    then on a per-element count (:attr:`element_steps`).
    """

    title = "AdamGnT"

    def __init__(self, params: Iterable[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        if not isinstance(lr, int | float):
            raise ValueError(f"AdamGnT takes one step size for all members, got lr={lr}: train "
                             "each step size as its own ensemble")
        if not lr > 0:
            raise ValueError(f"AdamGnT step size lr must be > 0, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 < betas[1] < 1.0):
            raise ValueError(f"AdamGnT betas must be in [0, 1) and (0, 1), got {betas}")
        self.params = list(params)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # Steps taken by each tensor (a tensor without a gradient in a step is skipped and its
        # count does not advance, as in the public code).
        self.step_counts = [0] * len(self.params)
        # Per-element step counts (the tensor's dtype: whole numbers, exact to 2²⁴ steps),
        # created for a tensor at its first restart.
        self.counts: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        """One AdamGnT update of every parameter from its ``.grad``."""
        if self.params:
            self.check_state_current(self.exp_avg[0])
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not active:
            return
        beta1, beta2 = self.betas
        params = [self.params[i] for i in active]
        grads = [p.grad for p in params]
        ms, vs = [self.exp_avg[i] for i in active], [self.exp_avg_sq[i] for i in active]
        # The moments, as the public code writes them. (Not torch's fused Adam kernel: on the
        # CPU it rounds a tensor's last elements differently, and which of a member's elements
        # are last would depend on the ensemble; these elementwise ops round alike everywhere.)
        torch._foreach_mul_(ms, beta1)
        torch._foreach_add_(ms, grads, alpha=1 - beta1)
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
        # θ ← θ − α · (1 − β₂ᵗ) · m / (√v + ε)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_add_(denom, self.eps)
        log_beta2 = math.log(beta2)
        for i, p, m, d in zip(active, params, ms, denom, strict=True):
            self.step_counts[i] += 1
            counts = self.counts[i]
            if counts is None:  # one count for the whole tensor: (1 − β₂ᵗ) is a number
                p.addcdiv_(m, d, value=-self.lr * -math.expm1(self.step_counts[i] * log_beta2))
            else:
                counts.add_(1)
                correction = torch.expm1(counts * log_beta2).neg_()
                p.addcdiv_(m * correction, d, value=-self.lr)

    @property
    def element_steps(self) -> list[torch.Tensor | None]:
        """Each tensor's per-element step counts (None until its first restart), copies."""
        return [None if c is None else c.clone() for c in self.counts]

    @torch.no_grad()
    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Restart the elements of parameter ``index`` where ``mask`` (broadcastable to it) is
        true: moments to 0 and, with ``restart_count``, the step count to 0 (the public code's
        reset of a replaced unit)."""
        p = self.params[index]
        mask = mask.expand_as(p)
        self.exp_avg[index].masked_fill_(mask, 0.0)
        self.exp_avg_sq[index].masked_fill_(mask, 0.0)
        if not restart_count:
            return
        if self.counts[index] is None:
            self.counts[index] = torch.full_like(p, float(self.step_counts[index]))
        self.counts[index].masked_fill_(mask, 0.0)

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly (a snapshot, not views)."""
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps,
                "step_counts": list(self.step_counts),
                "exp_avg": [m.clone() for m in self.exp_avg],
                "exp_avg_sq": [v.clone() for v in self.exp_avg_sq],
                "counts": [None if c is None else c.clone() for c in self.counts]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.lr, self.betas, self.eps = state["lr"], tuple(state["betas"]), state["eps"]
        self.step_counts = list(state["step_counts"])
        for dst, src in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"],
                            strict=True):
            dst.copy_(src)
        self.counts = [None if c is None else c.clone() for c in state["counts"]]
