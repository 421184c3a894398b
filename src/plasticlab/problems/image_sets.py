"""MNIST and CIFAR-10 as the field's problems (warm-start, split) train on them: the whole
training and test sets, stored as uint8 on the host, with the normalisation plasticlab's
other problems on the same data use (SPEC §3).

- MNIST: images flattened to ``[N, 784]``, pixels scaled to [−1, 1] (as Permuted and Random
  Label MNIST), for the MLP (:func:`flat_sets`) — or a ``.npz`` of your own uint8 images in its
  place (:data:`NPZ`, :class:`OwnImages`), treated the same way;
- CIFAR-10: ``[N, 3, 32, 32]``, (x/255 − mean)/std per channel with
  :data:`CIFAR_MEAN` and :data:`CIFAR_STD` (as Random Label
  CIFAR and 5+1 CIFAR), for the CNN. The official files where they are, else the data
  directory's ``.npz`` (the machines' 10,000-image subset: :mod:`plasticlab.data.cifar`) — or a
  ``.npz`` of your own images (:data:`NPZ_CNN`, :func:`cnn_sets`), channels first, normalised by
  their own training set's per-channel mean and standard deviation;
- CIFAR-100 (5+1 CIFAR's): as CIFAR-10, by CIFAR-10's mean and std (:func:`cifar100_sets`), or
  a ``.npz`` of your own in its place (:data:`NPZ_CIFAR100`).

A missing data set is the loaders' :class:`plasticlab.data.DataError`, naming the file and
what to do; nothing is ever put in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data import load_cifar10, load_cifar100, load_mnist, load_npz
from ..params import Param
from .base import affine_normalizer

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.247, 0.243, 0.261)
"""CIFAR-10's per-channel mean and standard deviation of x/255, by which every CIFAR problem
normalises its images."""


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


def flat_sets(data_dir, npz: str = "") -> ImageSets:
    """MNIST from ``data_dir`` — or, given ``npz``, the images of that file (any uint8 images,
    ``(N, H, W)`` or ``(N, H, W, C)``: :func:`plasticlab.data.load_npz`) — flattened to
    ``[N, H·W·C]``, scaled to [−1, 1] by ``normalize``."""
    ds = load_npz(npz) if npz else load_mnist(data_dir)
    return ImageSets(torch.from_numpy(np.array(ds.x_train.reshape(len(ds.x_train), -1))),
                     torch.tensor(ds.y_train, dtype=torch.int64),
                     torch.from_numpy(np.array(ds.x_test.reshape(len(ds.x_test), -1))),
                     torch.tensor(ds.y_test, dtype=torch.int64), ds.source,
                     lambda x: x.float().mul_(2.0 / 255.0).sub_(1.0))


def cifar10_sets(data_dir, device: torch.device) -> ImageSets:
    """CIFAR-10 (or its subset) from ``data_dir`` as ``[N, 3, 32, 32]``, normalised per channel
    by ``normalize`` on ``device``."""
    return _cifar_sets(load_cifar10(data_dir), device)


def cifar100_sets(data_dir, device: torch.device) -> ImageSets:
    """CIFAR-100 from ``data_dir`` as ``[N, 3, 32, 32]``, normalised per channel by CIFAR-10's
    mean and std (as the authors' 5+1 CIFAR) by ``normalize`` on ``device``."""
    return _cifar_sets(load_cifar100(data_dir), device)


def _cifar_sets(ds, device: torch.device) -> ImageSets:
    scale, shift = (t.to(device) for t in affine_normalizer(CIFAR_MEAN, CIFAR_STD))
    return ImageSets(torch.tensor(ds.x_train.transpose(0, 3, 1, 2)),
                     torch.tensor(ds.y_train, dtype=torch.int64),
                     torch.tensor(ds.x_test.transpose(0, 3, 1, 2)),
                     torch.tensor(ds.y_test, dtype=torch.int64), ds.source,
                     lambda x: x.float().mul_(scale).add_(shift))


def npz_param(dataset: str, treated: str, sizes: str = "input and output sizes follow it") -> Param:
    """The ``npz`` parameter of a problem on ``dataset``: a user's ``.npz`` in its place,
    ``treated`` so; left out of a run's configuration while empty, so that runs on ``dataset``
    keep their ids."""
    return Param("npz", "", str, f"a .npz of your own uint8 images (x_train, y_train, x_test, "
                 f"y_test) in place of {dataset}, {treated}; the network's {sizes} "
                 f"(empty: {dataset})", implicit_default=True)


NPZ = npz_param("MNIST", "flattened and scaled as MNIST")
"""The parameter that puts a user's images in MNIST's place."""
NPZ_CNN = npz_param("CIFAR-10", "normalised by their own per-channel mean and std")
""":data:`NPZ` for a problem on CIFAR-10 images."""
NPZ_CIFAR100 = npz_param("CIFAR-100", "normalised by their own per-channel mean and std")
""":data:`NPZ` for 5+1 CIFAR."""
NPZ_IMAGENET = npz_param("ImageNet-32", "used as stored, as its images are", "input size follows it")
""":data:`NPZ` for Continual ImageNet (its classes come from the file's labels)."""


def channels_first(x: np.ndarray) -> torch.Tensor:
    """A user's images ``(N, H, W, C)`` or grey ``(N, H, W)`` as ``[N, C, H, W]`` (C = 1)."""
    x = np.ascontiguousarray(x.transpose(0, 3, 1, 2) if x.ndim == 4 else x[:, None])
    return torch.from_numpy(x if x.flags.writeable else x.copy())  # a cached file's arrays are read-only


def balanced_classes(y: torch.Tensor, classes: int, npz: str, split: str) -> torch.Tensor:
    """Which images of labels ``y`` to keep so that each of the ``classes`` classes has as many as
    the smallest one: the first of each class, in the file's order (all of them where the
    classes are balanced). A problem whose members draw different classes needs it: their tasks
    must be of one size. A class with no image is a ``ValueError`` naming the file (``npz``) and
    the ``split``."""
    counts = torch.bincount(y, minlength=classes)
    empty = (counts == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"{npz}: class(es) {empty[:10]} have no image in {split}; every label "
                         "0 … C − 1 needs images in x_train and in x_test (number the classes densely)")
    order = torch.argsort(y, stable=True)
    first = torch.cumsum(counts, 0) - counts  # where each class starts in the sorted labels
    rank = torch.empty_like(y)
    rank[order] = torch.arange(len(y)) - first[y[order]]
    return rank < counts.min()


def own_cnn_sets(npz: str, device: torch.device) -> ImageSets:
    """The images of the user's ``npz`` as ``[N, C, H, W]`` (a grey ``(N, H, W)`` set has C = 1),
    normalised per channel by the mean and standard deviation of x/255 over its training set."""
    ds = load_npz(npz)
    x_train, x_test = channels_first(ds.x_train), channels_first(ds.x_test)
    pixels = x_train.double().div(255.0)
    mean, std = pixels.mean(dim=(0, 2, 3)), pixels.std(dim=(0, 2, 3))
    if bool((std == 0).any()):
        raise ValueError(f"{npz}: a channel of x_train is constant; it cannot be normalised by its "
                         "standard deviation")
    scale, shift = (t.float().to(device) for t in affine_normalizer(mean.tolist(), std.tolist()))
    return ImageSets(x_train, torch.tensor(ds.y_train, dtype=torch.int64), x_test,
                     torch.tensor(ds.y_test, dtype=torch.int64), ds.source,
                     lambda x: x.float().mul_(scale).add_(shift))


def cnn_sets(data_dir, npz: str, device: torch.device, dataset: str = "cifar10") -> ImageSets:
    """CIFAR-10 from ``data_dir`` (:func:`cifar10_sets`; CIFAR-100, :func:`cifar100_sets`, for
    ``dataset="cifar100"``) — or, given ``npz``, the user's images (:func:`own_cnn_sets`)."""
    if npz:
        return own_cnn_sets(npz, device)
    return (cifar100_sets if dataset == "cifar100" else cifar10_sets)(data_dir, device)


class ReadsOwnImages:
    """A problem with an ``npz`` parameter (:func:`npz_param`): what it reads."""

    @classmethod
    def reads(cls, params: dict) -> str | Path | None:
        """The user's ``.npz`` where ``params`` name one, else the problem's dataset."""
        npz = params.get("npz", "")
        return Path(npz).expanduser() if npz else cls.dataset


class OwnImages(ReadsOwnImages):
    """For a problem on MNIST (the MLP), CIFAR-10 or CIFAR-100 (the CNN): :meth:`images` reads
    them — or, where its ``npz`` parameter (:data:`NPZ`, :data:`NPZ_CNN`, :data:`NPZ_CIFAR100`)
    names a file, a user's images in their place — and sizes the network's input and output
    layers by a user's images."""

    def images(self) -> ImageSets:
        """The stream's image sets: :func:`flat_sets` for the MLP, :func:`cnn_sets` for the CNN
        (:func:`cifar100_sets` for a problem on CIFAR-100). With a user's file, this stream's
        input shape and classes C are theirs; MNIST's and CIFAR's stay the class's ((784,) or
        (3, 32, 32), and 10 or 100), whatever subset of them a data directory holds."""
        npz = self.params.get("npz", "")
        sets = (flat_sets(self.data_dir, npz) if self.arch == "mlp"
                else cnn_sets(self.data_dir, npz, self.device, self.dataset))
        if npz:
            self.input_shape = tuple(int(d) for d in sets.x_train.shape[1:])
            self.num_outputs = max(sets.classes, int(sets.y_test.max()) + 1 if len(sets.y_test) else 0)
        return sets


__all__ = ["CIFAR_MEAN", "CIFAR_STD", "NPZ", "NPZ_CIFAR100", "NPZ_CNN", "NPZ_IMAGENET", "ImageSets",
           "OwnImages", "ReadsOwnImages", "balanced_classes", "channels_first", "cifar100_sets",
           "cifar10_sets", "cnn_sets", "flat_sets", "npz_param", "own_cnn_sets"]
