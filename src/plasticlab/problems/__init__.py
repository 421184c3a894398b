"""The five continual-classification problems of SPEC §3, and the field's (issue 47: warm-start,
class-incremental split, the slowly-changing regression), as per-member seeded streams."""

from ..registry import Registry
from .base import LOSSES, Problem, TaskData
from .continual_imagenet import ContinualImageNet
from .five_plus_one_cifar import FivePlusOneCIFAR
from .permuted_mnist import PermutedMNIST
from .random_label import RandomLabelCIFAR, RandomLabelMNIST
from .slowly_changing_regression import SlowlyChangingRegression
from .split import SplitCIFAR, SplitMNIST
from .warm_start import WarmStartCIFAR, WarmStartMNIST

PROBLEMS: Registry = Registry("problem", "plasticlab.problems", Problem, {
    cls.name: cls
    for cls in (PermutedMNIST, RandomLabelMNIST, RandomLabelCIFAR, FivePlusOneCIFAR, ContinualImageNet,
                WarmStartMNIST, WarmStartCIFAR, SplitMNIST, SplitCIFAR, SlowlyChangingRegression)
})
"""Every problem by name: plasticlab's, then those other packages add (entry points
``plasticlab.problems``: :mod:`plasticlab.registry`)."""


def problem_title(name: str) -> str:
    """How papers, reports and tables name the problem called ``name`` (its class's ``title``:
    ``"permuted_mnist"`` → ``"Permuted MNIST"``); a name no problem has is given back as it is."""
    cls = PROBLEMS.get(name)
    return cls.title if cls is not None else name


def get_problem(name: str) -> type[Problem]:
    """The problem class called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise ValueError(f"unknown problem {name!r}; valid: {', '.join(PROBLEMS)}") from None


__all__ = ["LOSSES", "PROBLEMS", "ContinualImageNet", "FivePlusOneCIFAR", "PermutedMNIST", "Problem",
           "RandomLabelCIFAR", "RandomLabelMNIST", "SlowlyChangingRegression", "SplitCIFAR",
           "SplitMNIST", "TaskData", "WarmStartCIFAR", "WarmStartMNIST", "get_problem", "problem_title"]
