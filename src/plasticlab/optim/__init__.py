"""Optimizers on stacked parameters with per-element state (checked against torch.optim)."""

from .adam import Adam
from .sgd import SGD

OPTIMIZERS = {"adam": Adam, "sgd": SGD}


def make_optimizer(name: str, params, lr: float):
    """The optimizer called ``name`` (``adam`` | ``sgd``) over ``params`` with step size ``lr``."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](params, lr=lr)


__all__ = ["OPTIMIZERS", "SGD", "Adam", "make_optimizer"]
