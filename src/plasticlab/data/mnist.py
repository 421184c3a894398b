"""MNIST from the IDX files of the original distribution.

Layout: ``<data dir>/mnist/`` holds ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte``, each either gzip-compressed
(``.gz``, as distributed) or raw; a raw file takes precedence over its ``.gz``.

Integrity: the MD5 of the *decompressed* bytes is checked against the official values. That
accepts the original ``.gz`` files as well as re-compressed or decompressed copies of them (the
gzip wrapper can differ, the contents cannot), and rejects anything truncated or corrupt.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import download as _dl
from .cache import FileSignature, file_signature, freeze, readonly_view, register
from .checksums import md5_bytes
from .dataset import ImageDataset
from .errors import DATA_DIR_HINT, DataError
from .idx import parse_idx
from .locate import dataset_dir

MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"


@dataclass(frozen=True)
class _IdxFile:
    stem: str  # file name without .gz
    md5: str  # of the decompressed contents (the official value)
    gz_md5: str  # of the original .gz, as served by MNIST_URL (checked by the downloader)
    shape: tuple[int, ...]  # expected array shape


_TRAIN_IMAGES = _IdxFile(
    "train-images-idx3-ubyte",
    "6bbc9ace898e44ae57da46a324031adb",
    "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    (60000, 28, 28),
)
_TRAIN_LABELS = _IdxFile(
    "train-labels-idx1-ubyte",
    "a25bea736e30d166cdddb491f175f624",
    "d53e105ee54ea40749a09fcbcd1e9432",
    (60000,),
)
_TEST_IMAGES = _IdxFile(
    "t10k-images-idx3-ubyte",
    "2646ac647ad5339dbf082846283269ea",
    "9fb629c4189551a2d022fa330f9573f3",
    (10000, 28, 28),
)
_TEST_LABELS = _IdxFile(
    "t10k-labels-idx1-ubyte",
    "27ae3e4e09519cfbb04c329615203637",
    "ec29112dd5afa0611ce80d1b7f02629c",
    (10000,),
)
MNIST_FILES = (_TRAIN_IMAGES, _TRAIN_LABELS, _TEST_IMAGES, _TEST_LABELS)


def load_mnist(data_dir: str | os.PathLike | None = None, download: bool = True) -> ImageDataset:
    """Load MNIST (60,000 train and 10,000 test 28x28 uint8 images, int64 labels 0-9).

    Reads the four IDX files from ``<data dir>/mnist/`` (see :func:`resolve_data_dir`),
    downloading missing ones from the official mirror when ``download`` is true. Parsed arrays
    are cached for the rest of the process, so a second call is free; they are read-only.

    Raises:
        DataError: a file is missing (and could not be downloaded), truncated or corrupt; the
            message names the file and what to do.
    """
    root = dataset_dir(data_dir, "mnist")
    found = fetch_mnist(data_dir) if download else {spec: _find(root, spec) for spec in MNIST_FILES}
    missing = [spec for spec, path in found.items() if path is None]
    if missing:
        # Name every missing file at once, so the user fixes the directory in one go.
        listing = "; ".join(
            f"{root / spec.stem}.gz (from {MNIST_URL}{spec.stem}.gz)" for spec in missing
        )
        raise DataError(
            f"MNIST is incomplete: missing from {root}: {listing}. Download these files and "
            f"put them there (gzip-compressed or not), or call load_mnist with download=True. "
            f"{DATA_DIR_HINT}"
        )
    paths = [found[spec] for spec in MNIST_FILES]
    arrays = [
        _read_verified(file_signature(p), spec) for p, spec in zip(paths, MNIST_FILES, strict=True)
    ]
    x_train, y_train, x_test, y_test = (readonly_view(a) for a in arrays)
    return ImageDataset(
        name="mnist",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        source=f"MNIST IDX files in {root}: " + ", ".join(p.name for p in paths),
    )


def fetch_mnist(data_dir: str | os.PathLike | None = None) -> dict[_IdxFile, Path]:
    """Download whichever of MNIST's four files are missing from ``<data dir>/mnist/`` (each
    ``.gz`` checked against the mirror's MD5), without reading any: each file's path.

    Raises:
        DataError: a missing file could not be downloaded (which, from where, and where to put
            it by hand).
    """
    root = dataset_dir(data_dir, "mnist")
    found = {spec: _find(root, spec) for spec in MNIST_FILES}
    for spec, path in found.items():
        if path is None:
            found[spec] = _dl.fetch(f"{MNIST_URL}{spec.stem}.gz", spec.gz_md5, root)
    return found


def _find(root: Path, spec: _IdxFile) -> Path | None:
    """Return ``spec``'s file in ``root``, raw before ``.gz``; None when neither exists."""
    for candidate in (root / spec.stem, root / f"{spec.stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


@register
@lru_cache(maxsize=8)
def _read_verified(signature: FileSignature, spec: _IdxFile) -> np.ndarray:
    """Read, decompress, parse and MD5-check one MNIST file; cached on its signature."""
    path = Path(signature[0])
    remedy = (
        f"Delete it and download it again from {MNIST_URL}{spec.stem}.gz "
        f"(load_mnist(download=True) fetches missing files)."
    )
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            # BadGzipFile (an OSError) for garbage, EOFError for a cut-off stream,
            # zlib.error / CRC errors for flipped bytes.
            raise DataError(
                f"{path}: cannot be decompressed ({type(exc).__name__}: {exc}); the file is "
                f"truncated or corrupt. {remedy}"
            ) from exc
    # Parse before the MD5 check: for a truncated file the parser's message ("ends after N
    # of M bytes") says more than "checksum mismatch".
    array = parse_idx(raw, path)
    digest = md5_bytes(raw)
    if digest != spec.md5:
        what = "decompressed contents" if path.suffix == ".gz" else "contents"
        raise DataError(
            f"{path}: MD5 of the {what} is {digest}, but the official {spec.stem} has "
            f"{spec.md5}; the file is corrupt or not the official MNIST file. {remedy}"
        )
    if array.shape != spec.shape:  # cannot happen with a matching MD5; kept as a guard
        raise DataError(f"{path}: shape {array.shape}, expected {spec.shape}. {remedy}")
    if array.ndim == 1:
        array = array.astype(np.int64)  # labels: int64 for torch's cross-entropy
    return freeze(array)
