"""Plasticity methods: one file each, one registry (SPEC §1–2, names of SPEC §8).

Adding a method: write ``methods/my_method.py`` with a :class:`Method` subclass (``name``,
``description``, ``hyperparameters`` and the hooks it needs) and add it to ``METHODS`` below.
"""

from .base import Method, MethodContext, PenaltyMethod
from .baseline import Baseline
from .cbp import ContinualBackprop
from .concat_relu import ConcatReLU
from .ewc import EWC
from .fire import FIRE
from .full_reset import FullReset, HeadReset
from .hare_tortoise import HareTortoise
from .huber_init import HuberInit
from .l1_init import L1Init
from .l2 import L2
from .l2_init import L2Init
from .l2_init_ewc import L2InitEWC
from .l2_init_resample import L2InitResample
from .layer_norm import LayerNorm
from .parseval import Parseval
from .redo import ReDo
from .shrink_perturb import ShrinkPerturb
from .snr import SelfNormalizedResets
from .swr import SelectiveWeightReinit

METHODS: dict[str, type[Method]] = {
    cls.name: cls for cls in (Baseline, L2, L2Init, L1Init, HuberInit, L2InitResample,
                              ShrinkPerturb, ContinualBackprop, ConcatReLU, LayerNorm, ReDo, EWC,
                              L2InitEWC,
                              # the field since the paper (SPEC §10)
                              SelfNormalizedResets, HareTortoise, Parseval, SelectiveWeightReinit,
                              FullReset, HeadReset, FIRE)
}


def boundary_oracle(method: str | type[Method]) -> bool:
    """Whether ``method`` (a name or class) is told where tasks end — it overrides
    :meth:`Method.on_task_end` (EWC, full/head reset, FIRE). That is privileged information no
    agent of the paper's protocol has; reports and ``plasticlab list`` mark such methods."""
    cls = get_method(method) if isinstance(method, str) else method
    return cls.on_task_end is not Method.on_task_end


BOUNDARY_ORACLE_NOTE = "uses privileged task-boundary information (told where tasks end)"


def get_method(name: str) -> type[Method]:
    """The method class called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(METHODS)}") from None


__all__ = ["BOUNDARY_ORACLE_NOTE", "METHODS", "Method", "MethodContext", "PenaltyMethod", "boundary_oracle",
           "get_method"]
