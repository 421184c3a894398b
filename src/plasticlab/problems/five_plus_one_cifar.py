"""5+1 CIFAR (SPEC §3): CIFAR-100 classes arrive in alternating hard and easy tasks.

One random class order per run; task 0, 2, 4, … are hard (5 new classes, 2,500 images), task
1, 3, 5, … easy (1 new class, 500 images); labels stay the original 100-way labels. Every task
is 780 steps in batches of 32 (10 epochs of a hard task), 30 tasks; only hard tasks are
reported. Each task's test set is the CIFAR-100 test images of its classes.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data import load_cifar100
from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData, affine_normalizer
from .image_sets import CIFAR_MEAN, CIFAR_STD


class FivePlusOneCIFAR(Problem):
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
    )
    has_test_sets = True

    def load(self) -> None:
        ds = load_cifar100(self.data_dir)
        self.source = ds.source
        self.x_train = torch.tensor(ds.x_train.transpose(0, 3, 1, 2))
        self.x_test = torch.tensor(ds.x_test.transpose(0, 3, 1, 2))
        self.y_train = torch.tensor(ds.y_train, dtype=torch.int64)
        self.y_test = torch.tensor(ds.y_test, dtype=torch.int64)
        self.num_classes = int(self.y_train.max()) + 1
        needed = sum(self._sizes())
        if needed > self.num_classes:
            raise ValueError(f"{self.name}: {self.tasks} tasks need {needed} distinct classes, "
                             f"CIFAR-100 has {self.num_classes}; lower tasks")
        self._scale, self._shift = (t.to(self.device) for t in affine_normalizer(CIFAR_MEAN, CIFAR_STD))

    def _sizes(self) -> list[int]:
        hard, easy = self.params["hard_classes"], self.params["easy_classes"]
        return [hard if t % 2 == 0 else easy for t in range(self.tasks)]

    def task_classes(self, seed: int, task: int) -> np.ndarray:
        """The classes introduced by ``task`` for the run with ``seed`` (never reused)."""
        order = np_rng(seed, self.name, "class_order").permutation(self.num_classes)
        start = sum(self._sizes()[:task])
        return order[start:start + self._sizes()[task]]

    def _select(self, x, y, classes) -> TaskData:
        idx = torch.from_numpy(np.flatnonzero(np.isin(y.numpy(), classes)))
        return TaskData(x[idx], y[idx])

    def member_task(self, member, seed, task):
        return self._select(self.x_train, self.y_train, self.task_classes(seed, task))

    def member_test(self, member, seed, task):
        return self._select(self.x_test, self.y_test, self.task_classes(seed, task))

    @classmethod
    def reported(cls, task):
        return task % 2 == 0

    def normalize(self, x):
        return x.float().mul_(self._scale).add_(self._shift)
