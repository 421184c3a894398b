"""Plasticity methods: one file each, one registry (SPEC §1–2, names of SPEC §8).

Adding a method: write ``methods/my_method.py`` with a :class:`Method` subclass (``name``,
``title``, ``description``, ``hyperparameters``, the hooks it needs and :meth:`Method.needs` declaring
them) and add it to ``METHODS`` below — or, from a package of your own, name it in the entry
points ``plasticlab.methods`` (:mod:`plasticlab.registry`).
"""

from ..registry import Registry
from .base import Method, MethodContext, Needs, PenaltyMethod
from .baseline import Baseline
from .c_chain import ContinualChurnReduction
from .cbp import ContinualBackprop
from .concat_relu import ConcatReLU
from .dash import DirectionAwareShrinking
from .deep_fourier import DeepFourierFeatures
from .ewc import EWCMethod
from .fire import FIRE
from .full_reset import FullReset, HeadReset
from .hare_tortoise import HareTortoiseMethod
from .huber_init import HuberInitMethod
from .l1_init import L1InitMethod
from .l2 import L2Method
from .l2_init import L2InitMethod
from .l2_init_ewc import L2InitEWC
from .l2_init_resample import L2InitResampleMethod
from .layer_norm import LayerNorm
from .normalize_project import NormalizeProjectMethod
from .parseval import ParsevalMethod
from .plasticity_injection import PlasticityInjectionMethod
from .redo import ReDo
from .regrama import ReGraMa
from .shrink_perturb import ShrinkPerturbMethod
from .snr import SelfNormalizedResets
from .spectral import SpectralMethod
from .swr import SelectiveWeightReinit
from .wasserstein_init import WassersteinInitMethod
from .weight_clip import WeightClipMethod

METHODS: Registry = Registry("method", "plasticlab.methods", Method, {
    cls.name: cls for cls in (Baseline, L2Method, L2InitMethod, L1InitMethod, HuberInitMethod,
                              L2InitResampleMethod, ShrinkPerturbMethod, ContinualBackprop,
                              ConcatReLU, LayerNorm, ReDo, EWCMethod, L2InitEWC,
                              # the field since the paper (SPEC §10)
                              SelfNormalizedResets, HareTortoiseMethod, ParsevalMethod,
                              SelectiveWeightReinit, FullReset, HeadReset, FIRE,
                              # the other toolkits' methods (issue 47)
                              WeightClipMethod, NormalizeProjectMethod, SpectralMethod,
                              WassersteinInitMethod, ReGraMa, DirectionAwareShrinking,
                              DeepFourierFeatures, PlasticityInjectionMethod,
                              ContinualChurnReduction)
})
"""Every method by name: plasticlab's, then those other packages add (entry points
``plasticlab.methods``: :mod:`plasticlab.registry`)."""


def boundary_oracle(method: str | type[Method]) -> bool:
    """Whether ``method`` (a name or class) is told where tasks end — it declares
    ``Needs.task_end`` (EWC, full/head reset, FIRE). That is privileged information no agent of
    the paper's protocol has; reports and ``plasticlab list`` mark such methods."""
    cls = get_method(method) if isinstance(method, str) else method
    return cls.needs(cls.default_params()).task_end


BOUNDARY_ORACLE_NOTE = "uses privileged task-boundary information (told where tasks end)"


def method_title(name: str) -> str:
    """How papers, figures and tables name the method called ``name`` (its class's ``title``:
    ``"l2_init"`` → ``"L2 Init"``); a name no method has is given back as it is (a study recorded
    by a plasticlab that had it)."""
    cls = METHODS.get(name)
    return cls.title if cls is not None else name


def get_method(name: str) -> type[Method]:
    """The method class called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(METHODS)}") from None


__all__ = ["BOUNDARY_ORACLE_NOTE", "METHODS", "Method", "MethodContext", "Needs", "PenaltyMethod",
           "boundary_oracle", "get_method", "method_title"]
