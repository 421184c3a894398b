"""Write SYNTHETIC CIFAR-100 and ImageNet-32 files in their official layouts, to check that the
5+1 CIFAR and Continual ImageNet paths run on a machine without the real data.

The images are random bytes and the labels carry no signal: a run on them shows that the
loaders, streams, networks and reports work, never how a method performs. The files follow
the official formats: ``cifar100/cifar-100-python/{train,test}`` (the python pickles with
``data``, ``fine_labels``, ``coarse_labels``, ``filenames``, ``batch_label``) and
``imagenet32/classes/{c}.npy`` (Dohare et al.'s per-class arrays, 700 images of 32×32×3 each).

    python examples/synthetic_official_data.py /tmp/synthetic
    plasticlab run --problem five_plus_one_cifar --method l2_init --tasks 2 --steps-per-task 20 \\
        --batch-size 10 --seeds 0-1 --data-dir /tmp/synthetic --out /tmp/synthetic-runs
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np


def write_cifar100(root: Path, train_per_class: int = 60, test_per_class: int = 12, seed: int = 0) -> Path:
    """``root/cifar100/cifar-100-python/{train,test}``: random images, 100 classes interleaved."""
    folder = root / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, per_class in (("train", train_per_class), ("test", test_per_class)):
        labels = rng.permutation(np.repeat(np.arange(100), per_class))
        data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
        body = {b"data": data, b"fine_labels": labels.tolist(), b"coarse_labels": (labels // 5).tolist(),
                b"filenames": [f"synthetic_{i}.png".encode() for i in range(len(labels))],
                b"batch_label": b"synthetic"}
        (folder / name).write_bytes(pickle.dumps(body, protocol=2))
    return folder


def write_imagenet32(root: Path, classes: int = 12, seed: int = 0) -> Path:
    """``root/imagenet32/classes/{c}.npy``: 700 random 32×32×3 uint8 images per class."""
    folder = root / "imagenet32" / "classes"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for c in range(classes):
        np.save(folder / f"{c}.npy", rng.integers(0, 256, (700, 32, 32, 3), dtype=np.uint8))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="where to write cifar100/ and imagenet32/")
    args = parser.parse_args()
    print(write_cifar100(args.root))
    print(write_imagenet32(args.root))


if __name__ == "__main__":
    main()
