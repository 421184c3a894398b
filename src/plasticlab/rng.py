"""Seeded random streams.

A run's seed fixes everything random in it (SPEC §3): the initial network, the task sequence,
each task's subset and the batch order. Each of those draws comes from its own stream, derived
from ``(seed, *keys)``, so that adding a draw in one place never shifts the numbers drawn in
another, and so that member k of an ensemble draws exactly what seed k draws alone.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch


def _key_words(keys: tuple) -> list[int]:
    # crc32 of the text of each key: stable across processes and Python versions (unlike hash()).
    return [zlib.crc32(str(k).encode()) for k in keys]


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed for the stream named ``keys`` of run ``seed``."""
    if int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed}")
    seq = np.random.SeedSequence([int(seed), *_key_words(keys)])
    return int(seq.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def np_rng(seed: int, *keys: object) -> np.random.Generator:
    """A NumPy generator for the stream ``keys`` of run ``seed``."""
    return np.random.default_rng(derive_seed(seed, *keys))


def torch_generator(seed: int, *keys: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A torch generator on ``device`` for the stream ``keys`` of run ``seed``."""
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *keys))
    return g
