"""The optional trainability probe of a :class:`plasticlab.Monitor`: how much a copy of the
model can still learn, fitted to fresh random targets on the probe inputs
(:class:`TrainabilityProbe`, :func:`trainability`)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .capture import call


@dataclass(frozen=True)
class TrainabilityProbe:
    """The optional trainability probe: every ``every`` steps, a copy of the model is fitted
    for ``steps`` full-batch steps of ``optimizer`` (``"adam"``, ``"sgd"`` or a callable
    ``params → torch.optim.Optimizer``) at ``lr`` to fresh random targets on the probe inputs.

    ``target="labels"``: uniform random classes over the output's last dimension, cross-entropy
    (the output must be ``[n, classes]``); ``"regression"``: standard normal targets shaped like
    the output, mean squared error. Reported: ``trainability_loss_start`` (L₀, before fitting),
    ``trainability_loss_end`` (L_k, after the k steps) and ``trainability`` = (L₀ − L_k) / L₀.

    Cost per probe: one deep copy of the model plus ``steps`` forward/backward/update passes
    on the whole probe batch (measured for the example in docs/monitor.md).
    """

    every: int
    steps: int = 100
    lr: float = 1e-3
    optimizer: str | Callable = "adam"
    target: str = "labels"

    def __post_init__(self):
        if int(self.every) < 1 or int(self.steps) < 1:
            raise ValueError(f"trainability probe: every and steps must be >= 1, got {self.every}, "
                             f"{self.steps}")
        if self.target not in ("labels", "regression"):
            raise ValueError(f"trainability probe: target must be 'labels' or 'regression', "
                             f"got {self.target!r}")
        if not callable(self.optimizer) and self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"trainability probe: optimizer must be 'adam', 'sgd' or a callable, "
                             f"got {self.optimizer!r}")

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        """The optimizer of the fit, over ``params``."""
        if callable(self.optimizer):
            return self.optimizer(params)
        cls = torch.optim.Adam if self.optimizer == "adam" else torch.optim.SGD
        return cls(params, lr=self.lr)


def output_tensor(out) -> torch.Tensor:
    """The output tensor of a model that returns a tensor, a tuple (its first) or a dict (its
    ``"logits"``)."""
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)) and out and torch.is_tensor(out[0]):
        return out[0]
    if isinstance(out, dict) and "logits" in out:
        return out["logits"]
    raise TypeError(f"the trainability probe needs the model to return a tensor, got {type(out).__name__}")


def trainability(model: nn.Module, probe, config: TrainabilityProbe, generator: torch.Generator,
                 cuda_devices: list[int]) -> dict:
    """Fit a deep copy of ``model`` for ``config.steps`` full-batch steps to fresh random targets
    (drawn from ``generator``) on the ``probe`` inputs; ``trainability`` = (L₀ − L_k) / L₀ and
    the two losses. Under a forked RNG state (of the CPU and ``cuda_devices``): ``model`` and
    the global RNG are left as they were."""
    with torch.random.fork_rng(devices=cuda_devices):
        clone = copy.deepcopy(model)
        params = [p for p in clone.parameters() if p.requires_grad]
        for p in params:
            p.grad = None
        optimizer = config.make_optimizer(params)
        with torch.no_grad():
            out = output_tensor(call(clone, probe))
        if config.target == "labels":
            if out.dim() != 2 or out.shape[1] < 2:
                raise ValueError(f"trainability probe with random labels needs [n, classes] "
                                 f"outputs, got {tuple(out.shape)} (use target='regression')")
            targets = torch.randint(out.shape[1], (out.shape[0],), generator=generator)
            loss_fn = nn.functional.cross_entropy
        else:
            targets = torch.randn(out.shape, generator=generator, dtype=out.dtype)
            loss_fn = nn.functional.mse_loss
        targets = targets.to(out.device)

        def loss():
            return loss_fn(output_tensor(call(clone, probe)), targets)

        with torch.no_grad():
            start = loss().item()
        with torch.enable_grad():
            for _ in range(config.steps):
                optimizer.zero_grad(set_to_none=True)
                loss().backward()
                optimizer.step()
        with torch.no_grad():
            end = loss().item()
    reduction = (start - end) / start if start > 0 else math.nan
    return {"trainability": reduction, "trainability_loss_start": start,
            "trainability_loss_end": end}
