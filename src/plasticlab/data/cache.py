"""In-process caching of parsed arrays, and the read-only views handed to callers.

Parsing MNIST (gunzip + MD5) or CIFAR (unpickling 6 batches) costs up to a second or two;
experiments load the same dataset once per ensemble, tests many times. The loaders therefore
memoise their parsed arrays with :func:`functools.lru_cache`, keyed on the file's resolved
path *and* its size and modification time, so that a file that is replaced or repaired on
disk is re-read instead of served stale from the cache.

Cached arrays are shared between all callers, so they are frozen (``writeable=False``) and
callers get *views* of them: numpy refuses to make a view of a read-only array writeable
again, so no caller can corrupt what the next caller receives. Code that needs to modify the
data makes its own copy (``x.copy()``, or a dtype conversion such as ``x.astype(np.float32)``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

# Every lru_cache of the data layer registers its cache_clear here so clear_cache() frees
# all parsed datasets at once (tests, long-lived interactive sessions).
_CLEARERS: list[Callable[[], None]] = []

# A file signature: (resolved path, size in bytes, mtime in ns).
FileSignature = tuple[str, int, int]


def file_signature(path: Path) -> FileSignature:
    """Return the cache key of ``path``: resolved path, size and modification time."""
    resolved = Path(path).resolve()
    st = os.stat(resolved)
    return (str(resolved), st.st_size, st.st_mtime_ns)


def register(cached_function):
    """Register an ``lru_cache``-wrapped function so :func:`clear_cache` empties it."""
    _CLEARERS.append(cached_function.cache_clear)
    return cached_function


def clear_cache() -> None:
    """Drop every dataset parsed so far in this process (frees the memory they hold)."""
    for clear in _CLEARERS:
        clear()


def freeze(array: np.ndarray) -> np.ndarray:
    """Mark ``array`` read-only in place and return it (for arrays about to be cached)."""
    array.setflags(write=False)
    return array


def readonly_view(array: np.ndarray) -> np.ndarray:
    """Return a read-only view of a frozen cached array that cannot be made writeable."""
    view = array.view()
    view.setflags(write=False)
    return view
