"""MNIST and CIFAR-10 as the field's problems (warm-start, split) train on them: the whole
training and test sets, stored as uint8 on the host, with the normalisation plasticlab's
other problems on the same data use (SPEC §3).

- MNIST: images flattened to ``[N, 784]``, pixels scaled to [−1, 1] (as Permuted and Random
  Label MNIST), for the MLP;
- CIFAR-10: ``[N, 3, 32, 32]``, (x/255 − mean)/std per channel with
  :data:`~plasticlab.problems.random_label.CIFAR_MEAN` and ``CIFAR_STD`` (as Random Label
  CIFAR and 5+1 CIFAR), for the CNN. The official files where they are, else the data
  directory's ``.npz`` (the machines' 10,000-image subset: :mod:`plasticlab.data.cifar`).

A missing data set is the loaders' :class:`plasticlab.data.DataError`, naming the file and
what to do; nothing is ever put in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..data import load_cifar10, load_mnist
from .base import affine_normalizer
from .random_label import CIFAR_MEAN, CIFAR_STD


@dataclass
class ImageSets:
    """A labelled image data set: stored uint8 training and test images, int64 labels, where
    it was read from (``source``) and ``normalize``, stored images → network inputs."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    source: str
    normalize: Callable[[torch.Tensor], torch.Tensor]

    @property
    def classes(self) -> int:
        """The number of classes, C (labels 0 … C − 1)."""
        return int(self.y_train.max()) + 1


def mnist_sets(data_dir) -> ImageSets:
    """MNIST from ``data_dir``, flattened, scaled to [−1, 1] by ``normalize``."""
    ds = load_mnist(data_dir)
    return ImageSets(torch.from_numpy(np.array(ds.x_train.reshape(len(ds.x_train), -1))),
                     torch.tensor(ds.y_train, dtype=torch.int64),
                     torch.from_numpy(np.array(ds.x_test.reshape(len(ds.x_test), -1))),
                     torch.tensor(ds.y_test, dtype=torch.int64), ds.source,
                     lambda x: x.float().mul_(2.0 / 255.0).sub_(1.0))


def cifar10_sets(data_dir, device: torch.device) -> ImageSets:
    """CIFAR-10 (or its subset) from ``data_dir`` as ``[N, 3, 32, 32]``, normalised per channel
    by ``normalize`` on ``device``."""
    ds = load_cifar10(data_dir)
    scale, shift = (t.to(device) for t in affine_normalizer(CIFAR_MEAN, CIFAR_STD))
    return ImageSets(torch.tensor(ds.x_train.transpose(0, 3, 1, 2)),
                     torch.tensor(ds.y_train, dtype=torch.int64),
                     torch.tensor(ds.x_test.transpose(0, 3, 1, 2)),
                     torch.tensor(ds.y_test, dtype=torch.int64), ds.source,
                     lambda x: x.float().mul_(scale).add_(shift))


__all__ = ["ImageSets", "cifar10_sets", "mnist_sets"]
