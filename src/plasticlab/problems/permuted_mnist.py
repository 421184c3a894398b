"""Permuted MNIST (SPEC §3): every task is MNIST under a new fixed pixel permutation.

Per task: a fresh random subset of 10,000 training images, one epoch in batches of 16
(625 steps), 500 tasks; MLP input, pixels scaled to [−1, 1]. The task's test set is the
10,000 MNIST test images under the same permutation.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ, OwnImages


class PermutedMNIST(OwnImages, Problem):
    """Permuted MNIST: task t is MNIST (or the ``npz`` images) under the run's t-th fixed pixel
    permutation."""

    name = "permuted_mnist"
    title = "Permuted MNIST"
    dataset = "mnist"
    description = "MNIST under a new random pixel permutation each task (input non-stationarity)"
    arch = "mlp"
    input_shape = (784,)
    num_outputs = 10
    defaults = {"tasks": 500, "steps_per_task": 625, "batch_size": 16}
    parameters = (
        Param("examples_per_task", 10_000, int, "training images drawn afresh for each task", low=1),
        Param("identity_first_task", False, bool, "task 0 sees unpermuted images"),
        NPZ,
    )
    has_test_sets = True

    def load(self) -> None:
        sets = self.images()
        self.source = sets.source
        self.x_train, self.y_train, self.x_test, self.y_test = (sets.x_train, sets.y_train,
                                                                sets.x_test, sets.y_test)
        n = self.params["examples_per_task"]
        if not 1 <= n <= len(self.x_train):
            raise ValueError(f"{self.name}: examples_per_task must be in 1..{len(self.x_train)}, got {n}")

    def _draw(self, seed: int, task: int):
        # One stream per (seed, task): the permutation first, then the subset.
        rng = np_rng(seed, self.name, "task", task)
        perm = rng.permutation(self.input_shape[0])
        if task == 0 and self.params["identity_first_task"]:
            perm = np.arange(self.input_shape[0])
        subset = rng.choice(len(self.x_train), self.params["examples_per_task"], replace=False)
        return torch.from_numpy(perm), subset

    def member_task(self, member, seed, task):
        perm, subset = self._draw(seed, task)
        return TaskData(self.x_train, self.y_train[torch.from_numpy(subset)], perm, index=subset)

    def member_test(self, member, seed, task):
        perm, _ = self._draw(seed, task)
        return TaskData(self.x_test, self.y_test, perm)

    def normalize(self, x):
        return x.float().mul_(2.0 / 255.0).sub_(1.0)
