"""Datasets: locate, download with checksums, parse official formats into uint8 arrays, cache.

Every loader reads the publishers' own file formats with the small parsers of this package
(no torchvision) and returns an :class:`ImageDataset` of uint8 images and int64 labels, or
raises :class:`DataError` with a message that names the file and says what to do. A missing
or broken dataset is never replaced by random data.

Data directory (:func:`resolve_data_dir`): ``--data-dir``, else ``$PLASTICLAB_DATA``, else
the user cache directory (``platformdirs.user_cache_dir("plasticlab")``). Below it::

    mnist/
        train-images-idx3-ubyte[.gz]    official IDX files, gzip-compressed or raw; the MD5
        train-labels-idx1-ubyte[.gz]    of the decompressed contents is verified
        t10k-images-idx3-ubyte[.gz]
        t10k-labels-idx1-ubyte[.gz]
    cifar10/
        cifar-10-batches-py/            official python pickles: data_batch_1..5, test_batch
        cifar-10-python.tar.gz          ...or the official archive (MD5-checked, extracted)
        <name>.npz                      ...or, if neither is there, one .npz (e.g. a subset)
    cifar100/
        cifar-100-python/               official python pickles: train, test (fine labels)
        cifar-100-python.tar.gz         ...or the official archive; a single .npz as above
    imagenet32/
        classes/0.npy, 1.npy, ...       Dohare et al.'s per-class ImageNet 32x32 files,
                                        700 images each (600 train, then 100 test)

MNIST and CIFAR are downloaded (with MD5 verification, through ``pooch``) when missing and
``download=True``; ImageNet-32 must be obtained by hand (:data:`IMAGENET32_HELP`). A command
that starts worker processes fetches what they will read once, first (:func:`fetch_datasets`). Users'
own data loads from a plain ``.npz`` with :func:`load_npz`.

Parsed arrays are cached per process and handed out read-only; copy before modifying.
"""

from .cache import clear_cache
from .cifar import fetch_cifar, load_cifar10, load_cifar100
from .dataset import ImageDataset
from .errors import DataError
from .idx import parse_idx
from .imagenet import (
    IMAGENET32_HELP,
    imagenet32_class_path,
    imagenet32_num_classes,
    load_imagenet32_class,
)
from .locate import ENV_VAR, resolve_data_dir
from .mnist import fetch_mnist, load_mnist
from .npz import load_npz
from .prepare import FETCHERS, fetch_datasets

__all__ = [
    "ENV_VAR",
    "FETCHERS",
    "IMAGENET32_HELP",
    "DataError",
    "ImageDataset",
    "clear_cache",
    "fetch_cifar",
    "fetch_datasets",
    "fetch_mnist",
    "imagenet32_class_path",
    "imagenet32_num_classes",
    "load_cifar10",
    "load_cifar100",
    "load_imagenet32_class",
    "load_mnist",
    "load_npz",
    "parse_idx",
    "resolve_data_dir",
]
