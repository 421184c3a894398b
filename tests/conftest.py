"""Shared fixtures: where the real data is, and one torch thread per test process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]

torch.set_num_threads(1)


def find_real_data() -> Path | None:
    """$PLASTICLAB_DATA, else ../shared/data beside the repo, else None."""
    env = os.environ.get("PLASTICLAB_DATA")
    if env:
        return Path(env)
    shared = REPO.parent / "shared" / "data"
    return shared if shared.is_dir() else None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The directory holding real MNIST (and the CIFAR-10 subset); skips when there is none."""
    path = find_real_data()
    if path is None or not (path / "mnist").is_dir():
        pytest.skip("real data not found: set PLASTICLAB_DATA or put shared/data beside the repo")
    return path
