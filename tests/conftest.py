"""Shared fixtures: where the real data is, and one torch thread per test process."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)


def find_real_data_dir() -> tuple[Path | None, str]:
    """(directory with the real data or None, how it was chosen / why none was found):
    $PLASTICLAB_DATA, else ../shared/data beside the repo."""
    env = os.environ.get("PLASTICLAB_DATA")
    if env:
        return Path(env), "$PLASTICLAB_DATA"
    shared = REPO.parent / "shared" / "data"
    if shared.is_dir():
        return shared, str(shared)
    return None, f"PLASTICLAB_DATA is not set and {shared} does not exist"


HOST_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


def count_host_syncs(monkeypatch) -> dict:
    """Count calls that read a tensor back to the host (a sync on GPUs): ``calls["n"]``."""
    calls = {"n": 0}
    for name in HOST_SYNC_METHODS:
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _original=original, **k):
            calls["n"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return calls


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The directory holding real MNIST (and the CIFAR-10 subset); skips when there is none."""
    path, _ = find_real_data_dir()
    if path is None or not (path / "mnist").is_dir():
        pytest.skip("real data not found: set PLASTICLAB_DATA or put shared/data beside the repo")
    return path


# Fake CIFAR-100: pixel (0,0) of the red/green/blue planes holds (class, split, index in class).
CIFAR100_TRAIN_PER_CLASS = 20
CIFAR100_TEST_PER_CLASS = 4


def _cifar100_split(rng: np.random.Generator, per_class: int, split: int) -> dict:
    labels = np.repeat(np.arange(100), per_class)
    index = np.tile(np.arange(per_class), 100)
    order = rng.permutation(len(labels))  # classes interleaved, as in the official files
    labels, index = labels[order], index[order]
    data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    data[:, 0] = labels  # R plane, pixel (0, 0)
    data[:, 1024] = split  # G plane, pixel (0, 0)
    data[:, 2048] = index  # B plane, pixel (0, 0)
    return {b"data": data, b"fine_labels": labels.tolist(), b"coarse_labels": (labels // 5).tolist(),
            b"filenames": [f"{i}.png".encode() for i in range(len(labels))],
            b"batch_label": b"fake"}


@pytest.fixture(scope="session")
def cifar100_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar100data")
    folder = root / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(100)
    for name, per_class, split in (("train", CIFAR100_TRAIN_PER_CLASS, 0),
                                   ("test", CIFAR100_TEST_PER_CLASS, 1)):
        (folder / name).write_bytes(pickle.dumps(_cifar100_split(rng, per_class, split), protocol=2))
    return root


# Fake ImageNet-32: image i of class c has pixel (0,0) = (c, i // 256, i % 256), channels last.
IMAGENET_CLASSES = 12


@pytest.fixture(scope="session")
def imagenet_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imagenetdata")
    folder = root / "imagenet32" / "classes"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(32)
    for c in range(IMAGENET_CLASSES):
        images = rng.integers(0, 256, (700, 32, 32, 3), dtype=np.uint8)
        images[:, 0, 0, 0] = c
        images[:, 0, 0, 1] = np.arange(700) // 256
        images[:, 0, 0, 2] = np.arange(700) % 256
        np.save(folder / f"{c}.npy", images)
    return root


@pytest.fixture(autouse=True)
def no_machine_calibration(tmp_path, monkeypatch):
    """Tests plan sweeps as on a machine without a `plasticlab bench` calibration: this
    machine's saved one (user cache) must not change how a test's runs are grouped."""
    from plasticlab.experiments import bench

    monkeypatch.setattr(bench, "default_path", lambda: tmp_path / "no-calibration" / "bench.json")
