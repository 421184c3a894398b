"""The optional Hessian probe of a :class:`plasticlab.Monitor`: the top eigenvalue of the loss's
Hessian on the probe batch, every M steps (:class:`HessianProbe`, :func:`hessian_eigenvalue`),
by the power iteration of :func:`plasticlab.measure.hessian.top_eigenvalue`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..measure.hessian import ITERATIONS, TOLERANCE, top_eigenvalue
from .capture import call
from .probe import output_tensor


@dataclass(frozen=True)
class HessianProbe:
    """Every ``every`` steps, the eigenvalue of largest magnitude of ∇²_θ ``loss_fn(model(probe),
    targets)`` over the model's trainable parameters, by at most ``iterations`` Hessian-vector
    products (power iteration, stopping at a relative change below ``tolerance``; the start
    vector drawn from ``seed``). Reported as ``hessian_top_eigenvalue``.

    Cost per probe: one forward and backward with its graph kept, then one double backward per
    iteration, on the whole probe batch (measured in benchmarks/README.md)."""

    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    targets: torch.Tensor
    every: int
    iterations: int = ITERATIONS
    tolerance: float = TOLERANCE
    seed: int = 0

    def __post_init__(self):
        if int(self.every) < 1 or int(self.iterations) < 1:
            raise ValueError(f"Hessian probe: every and iterations must be >= 1, got {self.every}, "
                             f"{self.iterations}")
        if not callable(self.loss_fn):
            raise TypeError("Hessian probe: loss_fn must be a callable (outputs, targets) → scalar loss")


def hessian_eigenvalue(model: nn.Module, probe, config: HessianProbe, cuda_devices: list[int]) -> dict:
    """``{"hessian_top_eigenvalue": λ}`` of ``model`` on the ``probe`` inputs (in eval mode, under
    a forked RNG state of the CPU and ``cuda_devices``; every module's mode restored after).
    The model's ``.grad`` and parameters are left as they were."""
    params = [p for p in model.parameters() if p.requires_grad]
    targets = config.targets.to(params[0].device)
    modes = [(m, m.training) for m in model.modules()]
    with torch.random.fork_rng(devices=cuda_devices):
        model.eval()
        try:
            value = top_eigenvalue(lambda: config.loss_fn(output_tensor(call(model, probe)), targets),
                                   params, [torch.Generator().manual_seed(int(config.seed))],
                                   member_dim=False, iterations=config.iterations,
                                   tolerance=config.tolerance)
        finally:
            for m, training in modes:
                m.training = training
    return {"hessian_top_eigenvalue": value.item()}


__all__ = ["HessianProbe", "hessian_eigenvalue"]
