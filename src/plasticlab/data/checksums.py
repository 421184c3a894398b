"""MD5 digests of files and byte strings.

MD5 is what the dataset publishers list (MNIST, CIFAR), so it is what we verify against; it is
used to detect truncated or corrupt files, not as protection against tampering.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def md5_bytes(data: bytes) -> str:
    """Return the hex MD5 digest of ``data``."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_file(path: Path) -> str:
    """Return the hex MD5 digest of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
