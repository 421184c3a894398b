"""The five continual-classification problems of SPEC §3, and the field's (issue 47: warm-start,
class-incremental split, the slowly-changing regression), as per-member seeded streams; and any
of them for one model of your own (:func:`task_stream`)."""

from ..registry import Registry
from .base import LOSSES, Problem, TaskData
from .continual_imagenet import ContinualImageNet
from .five_plus_one_cifar import FivePlusOneCIFAR
from .permuted_mnist import PermutedMNIST
from .random_label import RandomLabelCIFAR, RandomLabelMNIST
from .slowly_changing_regression import SlowlyChangingRegression
from .split import SplitCIFAR, SplitMNIST
from .task_stream import StreamTask, stream_tasks
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


def task_stream(problem: str | type[Problem], seed: int = 0, *, first_task: int = 0, data_dir=None,
                device="cpu", **settings):
    """The tasks of ``problem`` (a name, as ``plasticlab list`` gives them, or a problem class)
    for one model of your own, seeded by ``seed``, from ``first_task`` (a run resumed at a task
    end) to the last: each a :class:`StreamTask` whose batches (inputs ``[B, …]``, labels
    ``[B]``) are those member k of an ensemble trains on when it is seed ``seed``. ``settings``:
    the stream's (``tasks``, ``steps_per_task``, ``batch_size``) and the problem's parameters, as
    ``plasticlab run --set`` takes them; ``data_dir`` where its data set is (default
    ``$PLASTICLAB_DATA``, else downloaded), ``device`` where the batches are made. Each task's
    batches are read before the next task is taken (:mod:`plasticlab.problems.task_stream`)."""
    cls = get_problem(problem) if isinstance(problem, str) else problem
    return stream_tasks(cls, seed, first_task=first_task, data_dir=data_dir, device=device, **settings)


__all__ = ["LOSSES", "PROBLEMS", "ContinualImageNet", "FivePlusOneCIFAR", "PermutedMNIST", "Problem",
           "RandomLabelCIFAR", "RandomLabelMNIST", "SlowlyChangingRegression", "SplitCIFAR",
           "SplitMNIST", "StreamTask", "TaskData", "WarmStartCIFAR", "WarmStartMNIST", "get_problem",
           "problem_title", "task_stream"]
