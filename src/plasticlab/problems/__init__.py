"""The five continual-classification problems of SPEC §3, as per-member seeded streams."""

from .base import Problem, TaskData
from .continual_imagenet import ContinualImageNet
from .five_plus_one_cifar import FivePlusOneCIFAR
from .permuted_mnist import PermutedMNIST
from .random_label import RandomLabelCIFAR, RandomLabelMNIST

PROBLEMS: dict[str, type[Problem]] = {
    cls.name: cls
    for cls in (PermutedMNIST, RandomLabelMNIST, RandomLabelCIFAR, FivePlusOneCIFAR, ContinualImageNet)
}


def get_problem(name: str) -> type[Problem]:
    """The problem class called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise ValueError(f"unknown problem {name!r}; valid: {', '.join(PROBLEMS)}") from None


__all__ = ["PROBLEMS", "ContinualImageNet", "FivePlusOneCIFAR", "PermutedMNIST", "Problem",
           "RandomLabelCIFAR", "RandomLabelMNIST", "TaskData", "get_problem"]
