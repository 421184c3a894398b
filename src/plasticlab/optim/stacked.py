"""What every optimizer on stacked ``[K, …]`` parameters shares: its ``params`` list and
dropping their gradients (the rest — the update and the per-element state — is each one's own)."""

from __future__ import annotations

import torch


class StackedOptimizer:
    """Base of plasticlab's optimizers: ``params`` is the list of tensors they update."""

    params: list[torch.Tensor]

    def zero_grad(self) -> None:
        """Drop every parameter's gradient."""
        for p in self.params:
            p.grad = None
