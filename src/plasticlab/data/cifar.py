"""CIFAR-10 and CIFAR-100 from the official "python version" pickles.

Layout below the data directory:

* ``cifar10/cifar-10-batches-py/`` with ``data_batch_1`` ... ``data_batch_5`` and
  ``test_batch``, or the archive ``cifar10/cifar-10-python.tar.gz`` that contains it (it is
  extracted in place after its MD5 is checked). When neither is present, a single ``.npz``
  in ``cifar10/`` (keys as in :func:`load_npz`) is used instead -- e.g. a subset or a
  conversion; ``source`` then names that file, so run manifests record that the official
  files were not used.
* ``cifar100/cifar-100-python/`` with ``train`` and ``test``, or
  ``cifar100/cifar-100-python.tar.gz``; the same ``.npz`` fallback applies.

Each pickle is a dict with ``data``, an ``(N, 3072)`` uint8 array whose rows are an image's
red plane, then green, then blue, each 32x32 row-major, and the labels (``labels`` for
CIFAR-10, ``fine_labels`` -- the 100 classes -- for CIFAR-100). Images are returned
``(N, 32, 32, 3)`` channels-last.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath

import numpy as np

from . import download as _dl
from .cache import FileSignature, file_signature, freeze, readonly_view, register
from .checksums import md5_file
from .dataset import ImageDataset
from .errors import DATA_DIR_HINT, DataError
from .locate import dataset_dir
from .npz import load_npz
from .safe_pickle import load_pickle


@dataclass(frozen=True)
class CifarSpec:
    """Where one CIFAR variant lives and how its pickles are laid out."""

    name: str  # dataset name and sub-directory of the data directory
    pretty: str  # for messages
    folder: str  # directory inside the archive
    url: str
    archive_md5: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_key: str
    num_classes: int

    @property
    def archive(self) -> str:
        """File name of the official archive."""
        return self.url.rsplit("/", 1)[-1]


CIFAR_SPECS: dict[str, CifarSpec] = {
    "cifar10": CifarSpec(
        name="cifar10",
        pretty="CIFAR-10",
        folder="cifar-10-batches-py",
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        archive_md5="c58f30108f718f92721af3b95e74349a",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_files=("test_batch",),
        label_key="labels",
        num_classes=10,
    ),
    "cifar100": CifarSpec(
        name="cifar100",
        pretty="CIFAR-100",
        folder="cifar-100-python",
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        archive_md5="eb9058c3a382ffc7106e4002c42a8d85",
        train_files=("train",),
        test_files=("test",),
        label_key="fine_labels",
        num_classes=100,
    ),
}


def load_cifar10(data_dir: str | os.PathLike | None = None, download: bool = True) -> ImageDataset:
    """Load CIFAR-10: uint8 images ``(N, 32, 32, 3)``, int64 labels 0-9.

    Looks in ``<data dir>/cifar10/`` for the official ``cifar-10-batches-py/`` folder, then
    for ``cifar-10-python.tar.gz`` (extracted after an MD5 check), then for a single ``.npz``
    (e.g. a subset: ``source`` then names it); if none is there and ``download`` is true,
    downloads the official archive. Cached per process; arrays are read-only.

    Raises:
        DataError: files missing (and not downloadable), truncated, corrupt or ambiguous.
    """
    return _load(CIFAR_SPECS["cifar10"], data_dir, download)


def load_cifar100(data_dir: str | os.PathLike | None = None, download: bool = True) -> ImageDataset:
    """Load CIFAR-100 with its 100 fine labels: uint8 ``(N, 32, 32, 3)``, int64 labels 0-99.

    Same search order as :func:`load_cifar10`, in ``<data dir>/cifar100/`` with
    ``cifar-100-python/`` and ``cifar-100-python.tar.gz``.

    Raises:
        DataError: files missing (and not downloadable), truncated, corrupt or ambiguous.
    """
    return _load(CIFAR_SPECS["cifar100"], data_dir, download)


def _load(spec: CifarSpec, data_dir: str | os.PathLike | None, download: bool) -> ImageDataset:
    root = dataset_dir(data_dir, spec.name)
    folder = root / spec.folder
    if folder.is_dir():
        return _from_folder(spec, folder)
    archive = root / spec.archive
    if archive.is_file():
        _extract(spec, archive, root)
        return _from_folder(spec, folder)
    npzs = sorted(root.glob("*.npz")) if root.is_dir() else []
    if len(npzs) == 1:
        return _from_npz(spec, npzs[0])
    if len(npzs) > 1:
        raise DataError(
            f"{root} holds no official {spec.pretty} files but several .npz files "
            f"({', '.join(p.name for p in npzs)}); it is ambiguous which one to use. Keep "
            f"only one there, or load the one you want with load_npz(path)."
        )
    if download:
        _extract(spec, _dl.fetch(spec.url, spec.archive_md5, root), root)
        return _from_folder(spec, folder)
    raise DataError(
        f"{spec.pretty} is missing: neither {folder}/ nor {archive} exists (nor a .npz in "
        f"{root}). Download {spec.url} and put it at {archive}, or call with download=True. "
        f"{DATA_DIR_HINT}"
    )


def fetch_cifar(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Make ``<data dir>/<name>/`` (``name``: ``"cifar10"`` or ``"cifar100"``) hold what
    :func:`load_cifar10` / :func:`load_cifar100` read — the extracted folder, the official
    archive, or a ``.npz`` — by downloading the official archive (MD5-checked) and extracting it
    where it holds none. Reads no images; returns the folder.

    Raises:
        DataError: the archive could not be downloaded or extracted (what, from where, and what
            to do).
    """
    spec = CIFAR_SPECS[name]
    root = dataset_dir(data_dir, spec.name)
    if ((root / spec.folder).is_dir() or (root / spec.archive).is_file()
            or (root.is_dir() and any(root.glob("*.npz")))):
        return root
    _extract(spec, _dl.fetch(spec.url, spec.archive_md5, root), root)
    return root


def _from_folder(spec: CifarSpec, folder: Path) -> ImageDataset:
    """Load the extracted official pickles in ``folder`` (cached on the files' signatures)."""
    signatures = []
    for fname in spec.train_files + spec.test_files:
        path = folder / fname
        if not path.is_file():
            raise DataError(
                f"{path} is missing: the folder {folder} is incomplete. Delete the folder "
                f"and extract {spec.archive} again (or download it from {spec.url})."
            )
        signatures.append(file_signature(path))
    n_train = len(spec.train_files)
    arrays = _read_pickles(spec, tuple(signatures[:n_train]), tuple(signatures[n_train:]))
    x_train, y_train, x_test, y_test = (readonly_view(a) for a in arrays)
    return ImageDataset(
        name=spec.name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        source=f"official {spec.pretty} python pickles in {folder}",
    )


@register
@lru_cache(maxsize=4)
def _read_pickles(
    spec: CifarSpec, train: tuple[FileSignature, ...], test: tuple[FileSignature, ...]
) -> tuple[np.ndarray, ...]:
    out = []
    for signatures in (train, test):
        parts = [_read_batch(spec, Path(sig[0])) for sig in signatures]
        data = np.concatenate([p[0] for p in parts])
        labels = np.concatenate([p[1] for p in parts])
        # Rows are R plane, G plane, B plane (each 32x32 row-major) -> (N, 32, 32, 3).
        images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        out += [freeze(images), freeze(labels)]
    return tuple(out)


def _read_batch(spec: CifarSpec, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Unpickle one official batch file and return its ``(N, 3072)`` data and labels."""
    obj = load_pickle(path.read_bytes(), path)
    remedy = f"Delete {path.parent} and extract {spec.archive} again."
    if not isinstance(obj, dict):
        raise DataError(f"{path}: holds a {type(obj).__name__}, not a dict. {remedy}")
    # Python 2 pickles read with encoding="latin1" have str keys; files re-pickled under
    # Python 3 from bytes-keyed dicts have bytes keys. Accept both.
    batch = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}
    for key in ("data", spec.label_key):
        if key not in batch:
            raise DataError(
                f"{path}: has no {key!r} entry (keys: {sorted(map(str, batch))}); it is not "
                f"an official {spec.pretty} batch. {remedy}"
            )
    data = batch["data"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != 3072
    ):
        got = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data)
        raise DataError(f"{path}: 'data' is {got}, expected uint8 (N, 3072). {remedy}")
    try:
        labels = np.asarray(batch[spec.label_key], dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{path}: {spec.label_key!r} are not integers ({exc}). {remedy}") from exc
    if labels.shape != (len(data),):
        raise DataError(
            f"{path}: {len(data)} images but {spec.label_key!r} has shape {labels.shape}. {remedy}"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= spec.num_classes):
        raise DataError(
            f"{path}: {spec.label_key!r} outside 0..{spec.num_classes - 1} "
            f"(min {labels.min()}, max {labels.max()}). {remedy}"
        )
    return data, labels


def _extract(spec: CifarSpec, archive: Path, root: Path) -> None:
    """Check ``archive``'s MD5 and extract its ``spec.folder`` into ``root``, atomically.

    Extraction goes to a temporary directory next to the target and is renamed into place
    only when complete, so an interrupted extraction never leaves a folder that looks
    usable.
    """
    digest = md5_file(archive)
    if digest != spec.archive_md5:
        raise DataError(
            f"{archive}: MD5 is {digest}, but the official {spec.archive} has "
            f"{spec.archive_md5}; the file is truncated or corrupt. Delete it and download "
            f"it again from {spec.url}."
        )
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.folder}-", dir=root))
    except OSError as exc:
        raise DataError(
            f"cannot extract {archive}: {root} is not writable ({exc}). Extract it yourself "
            f"(tar xzf {archive.name}) into a writable directory <dir>/{spec.name}/ and pass "
            f"--data-dir <dir> or set PLASTICLAB_DATA=<dir>."
        ) from exc
    try:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = [m for m in tar.getmembers() if _is_safe_member(m, spec.folder)]
                if not members:
                    raise DataError(
                        f"{archive}: contains no {spec.folder}/ folder; it is not the "
                        f"official {spec.archive}. Delete it and download it again from "
                        f"{spec.url}."
                    )
                kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(tmp, members=members, **kwargs)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise DataError(
                f"{archive}: extraction failed ({type(exc).__name__}: {exc}); the archive is "
                f"corrupt or the disk is full. Delete it and download it again from "
                f"{spec.url}."
            ) from exc
        try:
            os.replace(tmp / spec.folder, root / spec.folder)
        except OSError:
            # Another process extracting the same archive got there first: use its copy.
            if not (root / spec.folder).is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_safe_member(member: tarfile.TarInfo, folder: str) -> bool:
    # Only plain files and directories inside the expected folder: no absolute paths, no
    # "..", no links -- an archive cannot write outside the data directory.
    parts = PurePosixPath(member.name).parts
    return (
        bool(parts)
        and parts[0] == folder
        and ".." not in parts
        and not member.name.startswith("/")
        and (member.isfile() or member.isdir())
    )


def _from_npz(spec: CifarSpec, path: Path) -> ImageDataset:
    """Load a ``.npz`` standing in for the official files, checking it fits ``spec``."""
    ds = load_npz(path)
    for split, x, y in (("train", ds.x_train, ds.y_train), ("test", ds.x_test, ds.y_test)):
        if x.shape[1:] != (32, 32, 3):
            raise DataError(
                f"{path}: x_{split} has shape {x.shape}; {spec.pretty} images must be "
                f"(N, 32, 32, 3) channels-last."
            )
        if y.size and y.max() >= spec.num_classes:
            raise DataError(
                f"{path}: y_{split} has label {y.max()}; {spec.pretty} labels are "
                f"0..{spec.num_classes - 1}."
            )
    return replace(
        ds,
        name=spec.name,
        source=(
            f"{ds.source} (a .npz standing in for the official {spec.pretty} files: "
            f"{len(ds.x_train)} train / {len(ds.x_test)} test images)"
        ),
    )
