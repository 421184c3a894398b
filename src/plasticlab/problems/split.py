"""Class-incremental split MNIST and split CIFAR-10: the ten classes arrive two at a time.

One random class order per run (per seed); task t holds the next ``classes_per_task`` classes
— with ``cumulative``, every class seen so far — with their original labels 0–9, and its test
set is the test images of those classes. Five tasks of two classes by default. Every class
contributes the same number of images (``examples_per_class`` training, ``test_per_class``
test images, a fixed seeded draw of the class's training images, the first of its test images
in file order), so every member's tasks have the same size, as an ensemble needs.

**The head** (``head``), one network output per class either way:

- ``fixed`` (the default): a 10-way head whose every output is live from the first task on —
  FIRE's class-incremental benchmark (isaac7778/FIRE ``vision/task.py``, mode ``class``: a
  fixed 100-way head on CIFAR-100). It is the default because the network, its forward pass and
  every fast path stay those of the other problems, and the classes not yet seen are learned
  against — pushed down while absent, to be raised when they arrive, which is a demand on
  plasticity that a masked head hides;
- ``growing``: the outputs of classes not yet seen are masked (their logits −∞: no part in the
  loss, the argmax or the test accuracy; :meth:`plasticlab.nets.EnsembleNet.mask_outputs`),
  the head growing by ``classes_per_task`` outputs each task — Dohare et al.'s incremental
  CIFAR (shibhansh/loss-of-plasticity ``lop/incremental_cifar``, the logits sliced to the
  classes seen so far) and van de Ven & Tolias's "active units" for class-incremental learning.
  It trains with autograd (the hand-written backward and the compiled step do not apply).

**Which examples** (``cumulative``): ``False`` (the default): task t trains on its own classes
alone — a *split* benchmark, as the name says; ``True``: on every class seen so far, as FIRE
(``access='full'``) and Dohare et al. do, the task growing by ``classes_per_task`` classes.

**Measurements**: the online accuracy of every task and, with forgetting on (``--forgetting``),
the accuracy matrix A[j, m] — after task j, on task m's test set, the head then in force — from
which BWT follows: the accuracy on earlier tasks.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ, NPZ_CNN, OwnImages

HEADS = ("fixed", "growing")


def split_parameters(examples_per_class: int, test_per_class: int) -> tuple[Param, ...]:
    """A split problem's parameters, with its data set's defaults for the images per class."""
    return (
        Param("head", "fixed", str, "fixed: a 10-way head, every output live from the start "
              "(FIRE); growing: outputs of classes not yet seen masked (Dohare et al.)",
              choices=HEADS),
        Param("classes_per_task", 2, int, "new classes per task", low=1),
        Param("cumulative", False, bool, "train each task on every class seen so far "
              "(FIRE, Dohare et al.), not on its new classes alone"),
        Param("examples_per_class", examples_per_class, int,
              "training images of each class (a fixed seeded draw)", low=1),
        Param("test_per_class", test_per_class, int,
              "test images of each class (the first in file order)", low=1),
    )


class _Split(OwnImages, Problem):
    """Class-incremental split of a 10-class image data set (module docstring), or of the
    classes of a user's ``npz``."""

    num_outputs = 10
    has_test_sets = True

    def load(self) -> None:
        sets = self.images()
        self.source, self._normalize = sets.source, sets.normalize
        self.x_train, self.y_train, self.x_test, self.y_test = (
            sets.x_train, sets.y_train, sets.x_test, sets.y_test)
        self.num_classes = sets.classes
        needed = self.tasks * self.params["classes_per_task"]
        if needed > self.num_classes:
            raise ValueError(f"{self.name}: {self.tasks} tasks of {self.params['classes_per_task']} "
                             f"classes need {needed} classes, the data has {self.num_classes}; "
                             "lower tasks or classes_per_task")
        self._train_rows = _class_rows(self.y_train, self.params["examples_per_class"],
                                       "examples_per_class", self.name, "training")
        self._test_rows = _class_rows(self.y_test, self.params["test_per_class"],
                                      "test_per_class", self.name, "test")

    def class_order(self, seed: int) -> np.ndarray:
        """The run's order of the classes: task t introduces
        ``order[t·c : (t+1)·c]`` (c = ``classes_per_task``)."""
        return np_rng(seed, self.name, "class_order").permutation(self.num_classes)

    def task_classes(self, seed: int, task: int) -> np.ndarray:
        """The classes ``task`` trains and tests on for the run with ``seed``: its own c new
        classes, or with ``cumulative`` every class introduced up to it."""
        c = self.params["classes_per_task"]
        start = 0 if self.params["cumulative"] else task * c
        return self.class_order(seed)[start:(task + 1) * c]

    def class_examples(self, seed: int, cls: int) -> np.ndarray:
        """The ``examples_per_class`` training images of class ``cls`` for the run with
        ``seed``: a seeded draw from the class's images, the same in every task it is in."""
        rows = self._train_rows[cls]
        pick = np_rng(seed, self.name, "class_examples", cls).choice(
            len(rows), self.params["examples_per_class"], replace=False)
        return rows[np.sort(pick)]

    def member_task(self, member, seed, task):
        index = np.concatenate([self.class_examples(seed, int(c))
                                for c in self.task_classes(seed, task)])
        return TaskData(self.x_train, self.y_train[torch.from_numpy(index)], index=index)

    def member_test(self, member, seed, task):
        rows = np.concatenate([self._test_rows[int(c)][:self.params["test_per_class"]]
                               for c in self.task_classes(seed, task)])
        index = torch.from_numpy(rows)
        return TaskData(self.x_test[index], self.y_test[index])

    def output_mask(self, task: int) -> torch.Tensor | None:
        """With the growing head, ``[K, 10]``: member k's classes introduced up to ``task``;
        with the fixed head None (every output, every task)."""
        if self.params["head"] == "fixed":
            return None
        c = self.params["classes_per_task"]
        mask = torch.zeros(self.members, self.num_outputs, dtype=torch.bool)
        for k, seed in enumerate(self.seeds):
            mask[k, torch.from_numpy(self.class_order(seed)[:(task + 1) * c])] = True
        return mask.to(self.device)

    def normalize(self, x):
        return self._normalize(x)


def _class_rows(labels: torch.Tensor, per_class: int, param: str, name: str,
                split: str) -> dict[int, np.ndarray]:
    """Each class's rows of ``labels`` in file order; a class with fewer than ``per_class`` is an
    error naming it and the parameter to lower."""
    y = labels.numpy()
    rows = {int(c): np.flatnonzero(y == c) for c in np.unique(y)}
    short = {c: len(r) for c, r in rows.items() if len(r) < per_class}
    if short:
        c, n = min(short.items(), key=lambda kv: kv[1])
        raise ValueError(f"{name}: {param} = {per_class}, but class {c} has {n} {split} images; "
                         f"lower {param} to at most {n}")
    return rows


class SplitMNIST(_Split):
    """Split MNIST: five tasks of two MNIST digits, the MLP."""

    name = "split_mnist"
    title = "Split MNIST"
    dataset = "mnist"
    description = "MNIST classes two at a time, class-incremental (fixed or growing head)"
    arch = "mlp"
    input_shape = (784,)
    # one epoch of a task's 10,000 images in batches of 16, as Permuted MNIST
    defaults = {"tasks": 5, "steps_per_task": 625, "batch_size": 16}
    # the scarcest digit (5) has 5,421 training and 892 test images
    parameters = (*split_parameters(examples_per_class=5000, test_per_class=800), NPZ)


class SplitCIFAR(_Split):
    """Split CIFAR-10: five tasks of two CIFAR-10 classes, the CNN."""

    name = "split_cifar"
    title = "Split CIFAR"
    dataset = "cifar10"
    description = "CIFAR-10 classes two at a time, class-incremental (fixed or growing head)"
    arch = "cnn"
    input_shape = (3, 32, 32)
    # 10 epochs of a task's 2,000 images in batches of 32 (62 per epoch), as 5+1 CIFAR's 10
    defaults = {"tasks": 5, "steps_per_task": 620, "batch_size": 32}
    # all of the machines' subset's images (the official set has 5,000 and 1,000 per class)
    parameters = (*split_parameters(examples_per_class=1000, test_per_class=200), NPZ_CNN)


__all__ = ["HEADS", "SplitCIFAR", "SplitMNIST"]
