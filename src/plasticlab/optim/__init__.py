"""Optimizers on stacked parameters with per-element state (checked against torch.optim)."""

from ..rng import torch_generator
from .adam import Adam
from .sgd import SGD
from .trac import TRAC
from .upgd import UPGD, NonprotectingUPGD

OPTIMIZERS = {"adam": Adam, "sgd": SGD, "upgd": UPGD, "upgd_nonprotecting": NonprotectingUPGD,
              # the other toolkits' optimizers (issue 47)
              "trac": TRAC}

MEMBER_LR_OPTIMIZERS = ("adam", "sgd", "trac")
"""The optimizers that take one step size per member (``lr=[α_1, …, α_K]``; TRAC's is its base
Adam's)."""


def optimizer_title(name: str) -> str:
    """How papers and reports name optimizer ``name`` (``"upgd_nonprotecting"`` →
    ``"non-protecting UPGD"``); a name no optimizer has is given back as it is."""
    cls = OPTIMIZERS.get(name)
    return cls.title if cls is not None else name


def optimizer_hyperparameters(name: str) -> tuple:
    """The settings optimizer ``name`` takes besides its step size (UPGD's β, σ, λ; TRAC's
    s_init, ε; none for Adam and SGD), as :class:`plasticlab.params.Param`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    return getattr(OPTIMIZERS[name], "hyperparameters", ())


def optimizer_options(name: str, seeds, device, settings: dict | None = None) -> dict:
    """Keyword arguments for optimizer ``name`` in an ensemble of ``seeds``: its ``settings``,
    and for an optimizer that draws noise (UPGD) one generator per member, seeded from
    ``(seed_k, "optimizer", name)`` — or, with ``draws="philox"``, the seeds its Philox streams
    are keyed by —, so member k draws what seed k draws alone."""
    options = dict(settings or {})
    if getattr(OPTIMIZERS[name], "draws_noise", False):
        if options.get("draws") == "philox":  # its streams keyed by the seeds, on the device
            options["seeds"] = list(seeds)
        else:
            options["generators"] = [torch_generator(s, "optimizer", name, device=device) for s in seeds]
    return options


def make_optimizer(name: str, params, lr, member_dim: bool = False, **options):
    """The optimizer called ``name`` (``adam`` | ``sgd`` | ``upgd`` | ``upgd_nonprotecting`` |
    ``trac``)
    over ``params`` with step size ``lr`` (α, or one α_k per member for
    :data:`MEMBER_LR_OPTIMIZERS`); ``member_dim``: the parameters are stacked ensemble members
    ``[K, …]``; ``options``: the optimizer's own (:func:`optimizer_options`)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](params, lr=lr, member_dim=member_dim, **options)


__all__ = ["MEMBER_LR_OPTIMIZERS", "OPTIMIZERS", "SGD", "TRAC", "UPGD", "Adam", "NonprotectingUPGD",
           "make_optimizer", "optimizer_hyperparameters", "optimizer_options", "optimizer_title"]
