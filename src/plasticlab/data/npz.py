"""Users' own datasets as a plain ``.npz`` file.

The file holds four arrays: ``x_train`` and ``x_test`` (uint8 images, ``(N, H, W)`` or
``(N, H, W, C)`` channels-last) and ``y_train`` and ``y_test`` (non-negative integer class
labels, ``(N,)``). Write one with
``np.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)``.
Object arrays are refused (``allow_pickle=False``): loading them could run arbitrary code.
"""

from __future__ import annotations

import os
import zipfile
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from .cache import FileSignature, file_signature, freeze, readonly_view, register
from .dataset import ImageDataset
from .errors import DataError

NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def load_npz(path: str | os.PathLike) -> ImageDataset:
    """Load an image-classification dataset from a ``.npz`` file and validate it.

    Checks that the four keys exist, that images are uint8 with matching per-image shapes
    (channels last), and that labels are 1-D non-negative integers, one per image. Labels are
    returned as int64. The dataset's ``name`` is the file's stem and ``source`` its path.
    Parsed arrays are cached per process and read-only.

    Raises:
        DataError: the file is missing, not a readable ``.npz``, or fails validation; the
            message names the file and the offending array.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(
            f"{path}: no such file. Pass the path of an .npz holding x_train, y_train, "
            f"x_test and y_test."
        )
    arrays = _read_npz(file_signature(path))
    x_train, y_train, x_test, y_test = (readonly_view(a) for a in arrays)
    return ImageDataset(
        name=path.stem,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        source=str(path.resolve()),
    )


@register
@lru_cache(maxsize=4)
def _read_npz(signature: FileSignature) -> tuple[np.ndarray, ...]:
    """Read and validate the four arrays of an .npz; cached on the file's signature."""
    path = Path(signature[0])
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise DataError(
                f"{path}: holds a single array, not an .npz archive of arrays. Write the "
                f"dataset with np.savez(path, x_train=..., y_train=..., x_test=..., "
                f"y_test=...)."
            )
        with loaded as npz:
            missing = [k for k in NPZ_KEYS if k not in npz.files]
            if missing:
                raise DataError(
                    f"{path}: missing array(s) {', '.join(missing)} (found: "
                    f"{', '.join(npz.files) or 'none'}). The file must hold x_train, "
                    f"y_train, x_test and y_test; write it with np.savez(path, x_train=..., "
                    f"y_train=..., x_test=..., y_test=...)."
                )
            arrays = {k: npz[k] for k in NPZ_KEYS}
    except DataError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        # ValueError covers both "not a .npy/.npz" and refused object arrays; BadZipFile and
        # zlib.error a truncated archive or a member whose CRC does not match.
        raise DataError(
            f"{path}: cannot be read as an .npz file ({type(exc).__name__}: {exc}); it is "
            f"truncated, corrupt, or holds object arrays. Re-create it with np.savez."
        ) from exc
    _validate(path, arrays)
    return tuple(
        freeze(arrays[k].astype(np.int64) if k.startswith("y") else arrays[k]) for k in NPZ_KEYS
    )


def _validate(path: Path, a: dict[str, np.ndarray]) -> None:
    """Raise :class:`DataError` naming ``path`` if the arrays do not form a dataset."""
    for split in ("train", "test"):
        x, y = a[f"x_{split}"], a[f"y_{split}"]
        if x.dtype != np.uint8:
            raise DataError(
                f"{path}: x_{split} has dtype {x.dtype}, but images must be uint8 (0-255). "
                f"Convert it, e.g. np.round(x * 255).astype(np.uint8) for images in [0, 1]."
            )
        if x.ndim not in (3, 4):
            raise DataError(
                f"{path}: x_{split} has shape {x.shape}; images must be (N, H, W) or (N, H, W, C)."
            )
        if x.ndim == 4 and x.shape[1] in (1, 3) and x.shape[3] not in (1, 3):
            raise DataError(
                f"{path}: x_{split} has shape {x.shape}, which looks channels-first; store "
                f"images channels-last (N, H, W, C), e.g. x.transpose(0, 2, 3, 1)."
            )
        if y.dtype.kind not in "iu":
            raise DataError(
                f"{path}: y_{split} has dtype {y.dtype}; labels must be integers (class "
                f"indices 0, 1, ...)."
            )
        if y.shape != (len(x),):
            raise DataError(
                f"{path}: y_{split} has shape {y.shape}, but x_{split} holds {len(x)} "
                f"images; labels must be 1-D with one label per image."
            )
        if y.size and int(y.min()) < 0:
            raise DataError(
                f"{path}: y_{split} contains the negative label {int(y.min())}; labels must "
                f"be class indices 0, 1, ..."
            )
    if a["x_train"].shape[1:] != a["x_test"].shape[1:]:
        raise DataError(
            f"{path}: train images have shape {a['x_train'].shape[1:]} but test images "
            f"{a['x_test'].shape[1:]}; both splits must have the same image shape."
        )
    if len(a["x_train"]) == 0:
        raise DataError(f"{path}: x_train holds no images.")
