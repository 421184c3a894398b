"""Plain SGD on stacked ensemble parameters: θ ← θ − α g (``torch.optim.SGD`` defaults)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .stacked import StackedOptimizer


class SGD(StackedOptimizer):
    """Stateless gradient descent; :meth:`reset` exists so methods can treat every optimizer
    alike, and does nothing because there is no state to restart."""

    def __init__(self, params: Sequence[torch.Tensor], lr: float, member_dim: bool = False):
        if not lr > 0:
            raise ValueError(f"SGD step size lr must be > 0, got {lr}")
        self.params = list(params)
        self.lr = float(lr)
        # Stacked members need nothing special here: the update θ + (−α)·g rounds the same in
        # torch's vector loop and in its scalar tail, so a member's result does not depend on
        # where its elements fall (tests/test_member_independence.py).
        self.member_dim = bool(member_dim)

    @torch.no_grad()
    def step(self) -> None:
        """θ ← θ − α·∇ for every parameter with a gradient."""
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """No state to restart."""

    def state_dict(self) -> dict:
        """The step size (SGD has no other state)."""
        return {"lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.lr = state["lr"]
