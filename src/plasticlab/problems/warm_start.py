"""Warm-starting (Ash & Adams 2020), as FIRE and Hare & Tortoise run it: train on a fraction of
the training set, then on all of it.

Two tasks. Task 0 holds a fixed random ``warm_fraction`` of the training images (⌊N·fraction⌋
of them, drawn once per seed); task 1 holds every training image — the first task's included
(N: all of the data set's, or with ``train_examples`` a seeded draw of that many, for quick
looks).
Both tasks train the same number of steps: a fixed budget per phase, as FIRE does (100 epochs of
the whole set in its second phase, 1,000 epochs of the 10 % in its first) and near enough to
Hare & Tortoise's (1,000 epochs, then 100/0.9 ≈ 111). The measurement is the test accuracy after
each phase on the whole test set (``task_test_accuracy``, every task end), and the
generalisation gap: the from-scratch run's final test accuracy minus the warm-started one's —
the from-scratch run is ``full_reset`` (θ₀ and a new optimizer at the boundary, then all the
data: FIRE's ``--full-reset-enable``), in the same study with the same seeds.

The references' settings, read from their code:

- **FIRE** (isaac7778/FIRE, ``vision/task.py``, ``vision/config.py``, ``vision/train.py``):
  ``warm_start_subset_ratio = 10``: the first phase has N // (100 // 10) = 10 % of the training
  set, the second all of it (``train_indices[:]``); clean labels; the whole test set after both.
- **Hare & Tortoise** (dojeon-ai/Hare-Tortoise, ``configs/_warm_start.yaml``,
  ``src/datasets/dataset.py``): ``input_data_ratios: [0.1, 0.9]`` — the first task ⌊0.1·N⌋
  images, the second those plus the other 90 %, so all of it — and ``label_noise_ratios:
  [0.5, 0.0]``: half of the first task's images relabelled with a class drawn uniformly from
  the others, the second task's labels clean (``warm_label_noise = 0.5`` here).

Both rebuild their optimizer at the phase boundary and use ResNet-18/ViT/VGG at batch 256;
here the learner is never told the boundary (its optimizer state carries over, as in every
plasticlab problem), the networks are SPEC §4's MLP (MNIST) and CNN (CIFAR-10), batch 256.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ, NPZ_CNN, OwnImages


class _WarmStart(OwnImages, Problem):
    """Warm-start on an image data set (module docstring): task 0 a fraction, task 1 all of it."""

    num_outputs = 10
    has_test_sets = True
    parameters = (
        Param("warm_fraction", 0.1, float, "fraction of the training set in the first phase "
              "(FIRE and Hare & Tortoise: 0.1)", low=0, low_open=True, high=1),
        Param("warm_label_noise", 0.0, float, "fraction of the first phase's images given a "
              "wrong label, uniform over the other classes (Hare & Tortoise: 0.5; FIRE: 0)",
              low=0, high=1),
        Param("train_examples", 0, int, "training images in the run, a seeded draw (0: all of "
              "them, as the references)", low=0),
    )

    def load(self) -> None:
        if self.tasks > 2:
            raise ValueError(f"{self.name}: warm-start has two phases (task 0 on warm_fraction of "
                             f"the training set, task 1 on all of it); tasks must be 1 or 2, got "
                             f"{self.tasks}")
        sets = self.images()
        self.source, self._normalize = sets.source, sets.normalize
        self.x_train, self.y_train, self.x_test, self.y_test = (
            sets.x_train, sets.y_train, sets.x_test, sets.y_test)
        self.classes = sets.classes
        self.size = self.params["train_examples"] or len(self.x_train)  # N
        if self.size > len(self.x_train):
            raise ValueError(f"{self.name}: train_examples = {self.size}, but the data set has "
                             f"{len(self.x_train)} training images; lower it (0: all of them)")
        self.warm_size = int(self.size * self.params["warm_fraction"])
        if self.warm_size < 1:
            raise ValueError(f"{self.name}: warm_fraction {self.params['warm_fraction']} of "
                             f"{self.size} training images is none; raise it")

    def all_examples(self, seed: int) -> np.ndarray:
        """The run's N training images (the second phase's), in the seed's shuffle of the
        training set: all of it, or its first ``train_examples``."""
        return np_rng(seed, self.name, "order").permutation(len(self.x_train))[:self.size]

    def warm_examples(self, seed: int) -> np.ndarray:
        """The training images of the first phase for the run with ``seed``: the first
        ⌊N·warm_fraction⌋ of the seed's shuffle of the training set (as both references take
        the head of a seeded permutation)."""
        return self.all_examples(seed)[:self.warm_size]

    def warm_labels(self, seed: int, examples: np.ndarray) -> torch.Tensor:
        """The first phase's labels: the true ones, but for ⌊n·warm_label_noise⌋ images chosen
        at random, each relabelled with a class drawn uniformly from the C − 1 others (Hare &
        Tortoise's label noise)."""
        labels = self.y_train[torch.from_numpy(examples)].clone()
        rng = np_rng(seed, self.name, "label_noise")
        noisy = rng.choice(len(examples), int(len(examples) * self.params["warm_label_noise"]),
                           replace=False)
        shift = torch.from_numpy(rng.integers(1, self.classes, size=len(noisy)))
        rows = torch.from_numpy(noisy)
        labels[rows] = (labels[rows] + shift) % self.classes  # never the true class
        return labels

    def member_task(self, member, seed, task):
        if task == 0:
            examples = self.warm_examples(seed)
            return TaskData(self.x_train, self.warm_labels(seed, examples), index=examples)
        everything = np.sort(self.all_examples(seed))  # the order is the batch plan's
        return TaskData(self.x_train, self.y_train[torch.from_numpy(everything)], index=everything)

    def member_test(self, member, seed, task):
        return TaskData(self.x_test, self.y_test)

    def normalize(self, x):
        return self._normalize(x)


class WarmStartMNIST(_WarmStart):
    """Warm-start on MNIST with the MLP: 10 % of the 60,000 training images, then all of them."""

    name = "warm_start_mnist"
    title = "Warm-Start MNIST"
    dataset = "mnist"
    description = "MNIST: a fraction of the training set, then all of it (warm-start)"
    arch = "mlp"
    input_shape = (784,)
    # 100 epochs of the 60,000 images at batch 256 per phase (FIRE's second phase)
    defaults = {"tasks": 2, "steps_per_task": 100 * (60_000 // 256), "batch_size": 256}
    parameters = (*_WarmStart.parameters, NPZ)


class WarmStartCIFAR(_WarmStart):
    """Warm-start on CIFAR-10 with the CNN: 10 % of the training images, then all of them."""

    name = "warm_start_cifar"
    title = "Warm-Start CIFAR"
    dataset = "cifar10"
    description = "CIFAR-10: a fraction of the training set, then all of it (warm-start)"
    arch = "cnn"
    input_shape = (3, 32, 32)
    # 100 epochs at batch 256 per phase of the machines' 10,000-image subset (the official
    # 50,000 images: steps_per_task = 19,500 for FIRE's 100 epochs)
    defaults = {"tasks": 2, "steps_per_task": 100 * (10_000 // 256), "batch_size": 256}
    parameters = (*_WarmStart.parameters, NPZ_CNN)


__all__ = ["WarmStartCIFAR", "WarmStartMNIST"]
