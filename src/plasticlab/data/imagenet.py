"""ImageNet-32 for Continual ImageNet, in Dohare et al.'s preprocessed per-class layout.

Layout: ``<data dir>/imagenet32/classes/{c}.npy`` for classes ``c = 0, 1, ...`` (1000 in
the original), each holding the 700 images of one class at 32x32: the first 600 are the
training images, the last 100 the test images. The arrays are accepted as ``(700, 32, 32, 3)``
or ``(700, 3, 32, 32)`` (Dohare et al.'s code feeds them to an NCHW convolution unchanged, so
their files are probably channels-first) and always returned channels-last, uint8.

This data cannot be downloaded automatically; see :data:`IMAGENET32_HELP`.
"""

from __future__ import annotations

import operator
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from .cache import FileSignature, file_signature, freeze, readonly_view, register
from .errors import DATA_DIR_HINT, DataError
from .locate import dataset_dir

IMAGES_PER_CLASS = 700
TRAIN_PER_CLASS = 600  # the first 600 images of a class file; the last 100 are the test set
EXPECTED_SHAPE = (IMAGES_PER_CLASS, 32, 32, 3)

IMAGENET32_HELP = (
    "ImageNet-32 cannot be downloaded automatically. Get the preprocessed Continual ImageNet "
    "data of Dohare et al. (ImageNet downsampled to 32x32 and split into one file per class, "
    "classes/0.npy ... classes/999.npy, 700 images each), following the instructions of "
    "their loss-of-plasticity repository: "
    "https://github.com/shibhansh/loss-of-plasticity/tree/main/lop/imagenet"
)


def imagenet32_class_path(data_dir: str | os.PathLike | None, c: int) -> Path:
    """Return the path of class ``c``'s file: ``<data dir>/imagenet32/classes/{c}.npy``."""
    c = operator.index(c)  # accepts numpy integers, rejects floats and strings
    if c < 0:
        raise ValueError(f"class index must be non-negative, got {c}")
    return _classes_dir(data_dir) / f"{c}.npy"


def load_imagenet32_class(data_dir: str | os.PathLike | None, c: int) -> np.ndarray:
    """Return the 700 images of class ``c`` as read-only uint8 ``(700, 32, 32, 3)``.

    The first 600 are the training images and the last 100 the test images (Dohare et
    al.'s split). Files stored channels-first are converted to channels-last. A small
    per-process cache keeps recently used classes.

    Raises:
        DataError: the file is missing (the message says where to get the data and where to
            put it), unreadable, or holds an array of another shape or with values that are
            not 0-255 integers.
    """
    path = imagenet32_class_path(data_dir, c)
    if not path.is_file():
        raise DataError(
            f"ImageNet-32 class file {path} is missing. {IMAGENET32_HELP}; put the class "
            f"files in {path.parent}/. {DATA_DIR_HINT}"
        )
    return readonly_view(_read_class(file_signature(path)))


def imagenet32_num_classes(data_dir: str | os.PathLike | None) -> int:
    """Return how many class files ``classes/0.npy ... classes/{n-1}.npy`` exist.

    Raises:
        DataError: there are none (the message says where to get them), or the numbering
            has a gap, which means an incomplete copy (the message names the first missing
            file).
    """
    folder = _classes_dir(data_dir)
    found = set()
    if folder.is_dir():
        for p in folder.glob("*.npy"):
            if p.stem.isdigit() and p.is_file():
                found.add(int(p.stem))
    if not found:
        raise DataError(
            f"No ImageNet-32 class files in {folder} (expected {folder}/0.npy, 1.npy, ...). "
            f"{IMAGENET32_HELP}; put the class files in {folder}/. {DATA_DIR_HINT}"
        )
    n = len(found)
    if found != set(range(n)):
        first_missing = min(set(range(max(found) + 1)) - found)
        raise DataError(
            f"ImageNet-32 in {folder} is incomplete: {first_missing}.npy is missing although "
            f"{len(found)} class files up to {max(found)}.npy are present. Copy or extract "
            f"the missing files again. {IMAGENET32_HELP}"
        )
    return n


def _classes_dir(data_dir: str | os.PathLike | None) -> Path:
    return dataset_dir(data_dir, "imagenet32") / "classes"


# Bounded: a Continual ImageNet run visits all 1000 classes (2 MB each); keeping them all in
# every worker process would cost 2 GB per process for almost no speed-up.
@register
@lru_cache(maxsize=32)
def _read_class(signature: FileSignature) -> np.ndarray:
    path = Path(signature[0])
    remedy = f"Replace it with an intact copy. {IMAGENET32_HELP}"
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(
            f"{path}: cannot be read as a .npy array ({type(exc).__name__}: {exc}); the file "
            f"is truncated or corrupt. {remedy}"
        ) from exc
    if not isinstance(array, np.ndarray):  # an .npz under a .npy name
        raise DataError(f"{path}: is not a single .npy array. {remedy}")
    if array.shape == (IMAGES_PER_CLASS, 3, 32, 32):
        array = array.transpose(0, 2, 3, 1)
    elif array.shape != EXPECTED_SHAPE:
        raise DataError(
            f"{path}: holds an array of shape {array.shape}, expected {EXPECTED_SHAPE} "
            f"(or channels-first {(IMAGES_PER_CLASS, 3, 32, 32)}). {remedy}"
        )
    if array.dtype != np.uint8:
        # Accept other numeric dtypes only when the conversion is lossless (whole numbers in
        # 0..255, e.g. float32 copies of the pixels), so the data is used exactly as stored.
        if array.dtype.kind not in "iuf" or not _is_pixel_valued(array):
            raise DataError(
                f"{path}: holds {array.dtype} values that are not whole numbers in 0..255; "
                f"expected uint8 pixels. {remedy}"
            )
        array = array.astype(np.uint8)
    return freeze(np.ascontiguousarray(array))


def _is_pixel_valued(array: np.ndarray) -> bool:
    return bool(
        np.all(np.isfinite(array))
        and array.min() >= 0
        and array.max() <= 255
        and np.all(array == np.round(array))
    )
