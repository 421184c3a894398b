"""Continual ImageNet (SPEC §3): a binary task between two never-seen ImageNet-32 classes.

Dohare et al.'s per-class files ``imagenet32/classes/{c}.npy`` (700 images each: the first 600
train, the last 100 test). One random class order per run; task t uses the next two classes,
labelled 0 and 1; 10 epochs of 1,200 images in batches of 100 (120 steps), 500 tasks. Images
are used as stored (no rescaling), as in the reference code. With ``npz``, a ``.npz`` of your
own images in ImageNet-32's place: a task's classes are the file's, its training images the
first ``train_per_class`` of each class's in ``x_train``, its test images that class's in
``x_test`` — each class with as many as the file's smallest has, so that every run's tasks are of
one size; they too are used as stored, and the CNN's input size follows them.
"""

from __future__ import annotations

import numpy as np
import torch

from ..data import imagenet32_num_classes, load_imagenet32_class, load_npz
from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData
from .image_sets import NPZ_IMAGENET, ReadsOwnImages, balanced_classes, channels_first


class ContinualImageNet(ReadsOwnImages, Problem):
    """Continual ImageNet: task t is a binary task between ImageNet-32 classes 2t and 2t + 1
    of the run's class order (the module docstring gives the schedule)."""

    name = "continual_imagenet"
    title = "Continual ImageNet"
    dataset = "imagenet32"
    description = "binary tasks between two new ImageNet-32 classes each time"
    arch = "cnn"
    input_shape = (3, 32, 32)
    num_outputs = 2
    defaults = {"tasks": 500, "steps_per_task": 120, "batch_size": 100}
    parameters = (
        Param("classes_per_task", 2, int, "new classes per task (labels 0..classes_per_task-1)", low=1),
        Param("train_per_class", 600, int, "images of each class used for training; the rest test "
              "(with npz: the first of each class's x_train, and x_test the test)", low=1),
        NPZ_IMAGENET,
    )
    has_test_sets = True

    def load(self) -> None:
        npz = self.params.get("npz", "")
        if npz:
            self._load_own(npz)
            where = npz
        else:
            self.own = None
            self.num_classes = imagenet32_num_classes(self.data_dir)
            self.source = f"imagenet32/classes/*.npy ({self.num_classes} classes)"
            where = "the data directory"
        needed = self.tasks * self.params["classes_per_task"]
        if needed > self.num_classes:
            raise ValueError(f"{self.name}: {self.tasks} tasks need {needed} distinct classes, "
                             f"{where} has {self.num_classes}; lower tasks or add classes")

    def _load_own(self, npz: str) -> None:
        """A user's images in ImageNet-32's place: (images ``[N, C, H, W]``, labels) of the
        training and the test split, each class cut to the smallest one's size, so that every
        run's tasks are of one size."""
        ds = load_npz(npz)
        self.num_classes = int(max(ds.y_train.max(), ds.y_test.max())) + 1
        self.own = []
        for x, y, split in ((ds.x_train, ds.y_train, "x_train"), (ds.x_test, ds.y_test, "x_test")):
            x, y = channels_first(x), torch.tensor(y, dtype=torch.int64)
            keep = balanced_classes(y, self.num_classes, npz, split)
            self.own.append((x[keep], y[keep]))
        self.source = ds.source
        self.input_shape = tuple(int(d) for d in self.own[0][0].shape[1:])

    def task_classes(self, seed: int, task: int) -> np.ndarray:
        """The classes of ``task`` for the run with ``seed`` (never reused)."""
        c = self.params["classes_per_task"]
        order = np_rng(seed, self.name, "class_order").permutation(self.num_classes)
        return order[task * c:(task + 1) * c]

    def _split(self, seed, task, train: bool) -> TaskData:
        n = self.params["train_per_class"]
        xs, ys = [], []
        for label, c in enumerate(self.task_classes(seed, task)):
            if self.own is not None:
                x, y = self.own[0 if train else 1]
                part = x[y == int(c)]
                part = part[:n] if train else part
            else:
                images = np.asarray(load_imagenet32_class(self.data_dir, int(c))).transpose(0, 3, 1, 2)
                part = torch.tensor(images[:n] if train else images[n:])
            xs.append(part)
            ys.append(torch.full((len(part),), label, dtype=torch.int64))
        return TaskData(torch.cat(xs), torch.cat(ys))

    def member_task(self, member, seed, task):
        return self._split(seed, task, train=True)

    def member_test(self, member, seed, task):
        return self._split(seed, task, train=False)
