"""Each dataset's files fetched once, before the processes that read them start.

Every worker of a sweep loads its problem's dataset itself. With a file missing, each of them
would download it — eight workers, eight downloads of the same 170 MB CIFAR archive — or, with
no network, fail with the same error, one failed ensemble for each. The driver calls
:func:`fetch_datasets` first: what is missing is downloaded once, and a dataset that cannot be
had is one error before any run starts. It reads no images of the downloadable datasets (the
workers parse their own); a user's ``.npz`` it reads and checks once (:func:`~.npz.load_npz`),
so that a malformed file too is one error rather than one per ensemble.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from .cifar import fetch_cifar
from .errors import DataError
from .imagenet import imagenet32_num_classes
from .mnist import fetch_mnist
from .npz import load_npz

FETCHERS: dict[str, Callable[[str | os.PathLike | None], object]] = {
    "mnist": fetch_mnist,
    "cifar10": partial(fetch_cifar, "cifar10"),
    "cifar100": partial(fetch_cifar, "cifar100"),
    # not downloadable: its check says where the class files come from
    "imagenet32": imagenet32_num_classes,
}
"""Each dataset a problem may read (:attr:`plasticlab.problems.Problem.dataset`), and what makes
its files present in a data directory, or raises :class:`~.errors.DataError`."""


def fetch_datasets(names: Iterable[str | os.PathLike | None],
                   data_dir: str | os.PathLike | None = None) -> None:
    """Download whichever files of the datasets ``names`` are missing from ``data_dir`` (see
    :func:`~.locate.resolve_data_dir`), each dataset once; ``None`` (a problem that reads no
    dataset) is skipped; a path (a user's ``.npz``, :meth:`plasticlab.problems.Problem.reads`)
    must name a file that :func:`~.npz.load_npz` accepts.

    Raises:
        DataError: a dataset's files are missing and cannot be downloaded, or a user's file is
            not there or not a valid ``.npz``; the message names the file, where it was looked
            for (or what is wrong in it), and what to do.
        ValueError: a name that is not a key of :data:`FETCHERS`.
    """
    wanted = {n for n in names if n is not None}
    for path in sorted(Path(n) for n in wanted if isinstance(n, os.PathLike)):
        if not path.is_file():
            raise DataError(f"{path}: no such file (the npz problem parameter names it). Pass the "
                            "path of an .npz holding x_train, y_train, x_test and y_test.")
        load_npz(path)
    for name in sorted(n for n in wanted if not isinstance(n, os.PathLike)):
        try:
            fetch = FETCHERS[name]
        except KeyError:
            raise ValueError(f"unknown dataset {name!r}; valid: {', '.join(FETCHERS)}") from None
        fetch(data_dir)
