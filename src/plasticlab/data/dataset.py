"""The in-memory form of every image-classification dataset: :class:`ImageDataset`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# eq=False: the generated __eq__ would compare numpy arrays elementwise and then fail on
# "truth value of an array is ambiguous"; identity comparison is what makes sense here.
# repr=False: the generated repr would print four arrays of up to 150 MB.
@dataclass(frozen=True, eq=False, repr=False)
class ImageDataset:
    """A train/test split of uint8 images with int64 labels, plus where it came from.

    Attributes:
        name: ``"mnist"``, ``"cifar10"``, ``"cifar100"``, or the stem of a user's ``.npz``.
        x_train: uint8 images, ``(N, 28, 28)`` for MNIST, ``(N, 32, 32, 3)`` (HWC) for CIFAR.
        y_train: int64 labels, ``(N,)``.
        x_test: uint8 images, same per-image shape as ``x_train``.
        y_test: int64 labels.
        source: human-readable description of the file(s) read, recorded in run manifests
            (it says, for example, when a CIFAR-10 *subset* was used instead of the
            official files).

    Arrays returned by the loaders are read-only views of a per-process cache; copy them
    (or convert them, e.g. ``astype(np.float32)``) before modifying.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    source: str

    def __post_init__(self) -> None:
        # Catch programming errors early, at construction, rather than deep in a training
        # loop; data-file problems are reported by the loaders as DataError before this.
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.dtype != np.uint8:
                raise ValueError(f"x_{split} must be uint8, got {x.dtype}")
            if y.dtype != np.int64 or y.ndim != 1:
                raise ValueError(f"y_{split} must be 1-D int64, got {y.dtype} {y.shape}")
            if len(x) != len(y):
                raise ValueError(f"x_{split} has {len(x)} images but y_{split} {len(y)} labels")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ValueError(
                f"train images {self.x_train.shape[1:]} and test images "
                f"{self.x_test.shape[1:]} differ in shape"
            )

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image: ``(28, 28)`` for MNIST, ``(32, 32, 3)`` for CIFAR."""
        return tuple(self.x_train.shape[1:])

    @property
    def num_classes(self) -> int:
        """Number of classes: one more than the largest label in either split."""
        top = max(int(self.y_train.max(initial=-1)), int(self.y_test.max(initial=-1)))
        return top + 1

    def __repr__(self) -> str:
        return (
            f"ImageDataset(name={self.name!r}, train={self.x_train.shape}, "
            f"test={self.x_test.shape}, source={self.source!r})"
        )
