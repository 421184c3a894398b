"""5+1 CIFAR (SPEC §3): CIFAR-100 classes arrive in alternating hard and easy tasks.

One random class order per run; task 0, 2, 4, … are hard (5 new classes, 2,500 images), task
1, 3, 5, … easy (1 new class, 500 images); labels stay the original 100-way labels. Every task
is 780 steps in batches of 32 (10 epochs of a hard task), 30 tasks; only hard tasks are
reported. Each task's test set is the CIFAR-100 test images of its classes. With ``npz``, a
``.npz`` of your own images in CIFAR-100's place: their classes arrive so, each with as many
training (and test) images as the file's smallest class has — the first of each — so that every
run's tasks are of one size, as CIFAR-100's 500 a class make them; the CNN's input and output
sizes follow them.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ_CIFAR100, OwnImages, balanced_classes


class FivePlusOneCIFAR(OwnImages, Problem):
    """5+1 CIFAR: CIFAR-100 classes arriving 5 (hard task) and 1 (easy task) at a time."""

    name = "five_plus_one_cifar"
    title = "5+1 CIFAR"
    dataset = "cifar100"
    description = "CIFAR-100 in alternating hard (5 classes) and easy (1 class) tasks"
    arch = "cnn"
    input_shape = (3, 32, 32)
    num_outputs = 100
    defaults = {"tasks": 30, "steps_per_task": 780, "batch_size": 32}
    parameters = (
        Param("hard_classes", 5, int, "new classes in a hard task (even task numbers)", low=1),
        Param("easy_classes", 1, int, "new classes in an easy task (odd task numbers)", low=1),
        NPZ_CIFAR100,
    )
    has_test_sets = True

    def load(self) -> None:
        self.sets = sets = self.images()
        self.source, self.num_classes = sets.source, sets.classes
        npz = self.params.get("npz", "")
        # CIFAR-100's classes are balanced; a user's are made so
        self.keep = ((balanced_classes(sets.y_train, self.num_classes, npz, "x_train"),
                      balanced_classes(sets.y_test, self.num_classes, npz, "x_test")) if npz else None)
        needed = sum(self._sizes())
        if needed > self.num_classes:
            data = self.params.get("npz") or "CIFAR-100"
            raise ValueError(f"{self.name}: {self.tasks} tasks need {needed} distinct classes, "
                             f"{data} has {self.num_classes}; lower tasks")

    def _sizes(self) -> list[int]:
        hard, easy = self.params["hard_classes"], self.params["easy_classes"]
        return [hard if t % 2 == 0 else easy for t in range(self.tasks)]

    def task_classes(self, seed: int, task: int) -> np.ndarray:
        """The classes introduced by ``task`` for the run with ``seed`` (never reused)."""
        order = np_rng(seed, self.name, "class_order").permutation(self.num_classes)
        start = sum(self._sizes()[:task])
        return order[start:start + self._sizes()[task]]

    def _select(self, x, y, classes, keep) -> TaskData:
        chosen = np.isin(y.numpy(), classes)
        idx = torch.from_numpy(np.flatnonzero(chosen if keep is None else chosen & keep.numpy()))
        return TaskData(x[idx], y[idx])

    def member_task(self, member, seed, task):
        keep = None if self.keep is None else self.keep[0]
        return self._select(self.sets.x_train, self.sets.y_train, self.task_classes(seed, task), keep)

    def member_test(self, member, seed, task):
        keep = None if self.keep is None else self.keep[1]
        return self._select(self.sets.x_test, self.sets.y_test, self.task_classes(seed, task), keep)

    @classmethod
    def reported(cls, task):
        return task % 2 == 0

    def normalize(self, x):
        return self.sets.normalize(x)
