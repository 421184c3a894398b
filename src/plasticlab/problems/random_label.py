"""Random Label MNIST and Random Label CIFAR (SPEC §3): target non-stationarity.

A run fixes 1,200 training images; every task gives them new random labels — a shuffle of the
label vector, so the class counts stay the same — and trains 400 epochs in batches of 16
(30,000 steps), 50 tasks. The network must memorise; there is no test set.
"""

from __future__ import annotations

import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ, NPZ_CNN, OwnImages


class _RandomLabel(OwnImages, Problem):
    defaults = {"tasks": 50, "steps_per_task": 30_000, "batch_size": 16}
    parameters = (Param("examples", 1200, int, "training images, fixed for the whole run", low=1),)

    def load(self) -> None:
        sets = self.images()
        x, y, self.source, self._normalize = sets.x_train, sets.y_train, sets.source, sets.normalize
        n = self.params["examples"]
        if not 1 <= n <= len(x):
            raise ValueError(f"{self.name}: examples must be in 1..{len(x)}, got {n}")
        # Each member's fixed images, drawn once: the only data kept for the whole run.
        self._pool = []
        for seed in self.seeds:
            idx = torch.from_numpy(np_rng(seed, self.name, "pool").choice(len(x), n, replace=False))
            self._pool.append((x[idx], y[idx].numpy()))

    def member_task(self, member, seed, task):
        x, labels = self._pool[member]
        shuffled = np_rng(seed, self.name, "labels", task).permutation(labels)
        return TaskData(x, torch.from_numpy(shuffled))

    def normalize(self, x):
        return self._normalize(x)


class RandomLabelMNIST(_RandomLabel):
    """Random Label MNIST: 1,200 fixed MNIST images (or ``npz`` images), new random labels at
    every task."""

    name = "random_label_mnist"
    title = "Random Label MNIST"
    dataset = "mnist"
    description = "1,200 MNIST images relabelled at random each task (memorisation)"
    arch = "mlp"
    input_shape = (784,)
    num_outputs = 10
    parameters = (*_RandomLabel.parameters, NPZ)


class RandomLabelCIFAR(_RandomLabel):
    """Random Label CIFAR: 1,200 fixed CIFAR-10 images (or ``npz`` images), new random labels at
    every task."""

    name = "random_label_cifar"
    title = "Random Label CIFAR"
    dataset = "cifar10"
    description = "1,200 CIFAR-10 images relabelled at random each task (memorisation)"
    arch = "cnn"
    input_shape = (3, 32, 32)
    num_outputs = 10
    parameters = (*_RandomLabel.parameters, NPZ_CNN)
