"""MD5 digests of files and byte strings.

MD5 is what the dataset publishers list (MNIST, CIFAR), so it is what we verify against; it is
used to detect truncated or corrupt files, not as protection against tampering.
"""

from __future__ import annotations

import hashlib
import re
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


_MD5_CACHE: dict[tuple[str, int, int], str] = {}


def cached_md5_file(path: Path) -> str:
    """:func:`md5_file`, remembered per (path, size, modification time) in this process."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _MD5_CACHE:
        _MD5_CACHE[key] = md5_file(path)
    return _MD5_CACHE[key]


def data_files(source: str) -> list[Path]:
    """The data files a dataset's ``source`` text names: every existing absolute path in it
    (a folder stands for the regular files in it), and ``name, name`` lists after
    ``… in <folder>:`` (the MNIST loader's form)."""
    found: list[Path] = []
    for match in re.finditer(r"(/[^\s,:()]+)(?::\s*([^()]*))?", source):
        path = Path(match.group(1))
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            names = [n.strip() for n in (match.group(2) or "").split(",") if n.strip()]
            listed = [path / n for n in names if (path / n).is_file()]
            found.extend(listed or sorted(p for p in path.iterdir() if p.is_file()))
    return list(dict.fromkeys(found))


def data_provenance(source: str) -> dict:
    """What a run's manifest records about its data: ``data_files`` (path → MD5 of every data
    file ``source`` names) and ``data_stand_in`` (whether a ``.npz`` stood in for a dataset's
    official files, e.g. a CIFAR subset)."""
    files = {str(p): cached_md5_file(p) for p in data_files(source or "")}
    return {"data_files": files, "data_stand_in": "standing in for the official" in (source or "")}
