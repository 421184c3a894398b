"""Unpickling the official CIFAR files without executing arbitrary code.

The CIFAR python version is a set of pickles (written by Python 2's cPickle). Unpickling can
run any function a file names, so instead of plain :func:`pickle.load` we allow only the few
globals that a pickled dict of numpy arrays, lists and strings needs. A file naming anything
else is rejected with a :class:`DataError` instead of being executed.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

from .errors import DataError

# (module, name) pairs that pickles of numpy arrays need: the array reconstructor and the
# ndarray/dtype types (protocols 0-4), numpy scalars, the out-of-band buffer path of
# protocol 5, and _codecs.encode, which Python 3 uses to pickle bytes at protocol 2.
_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        # numpy 2 renamed numpy.core to numpy._core (the old name still works but warns);
        # numpy < 2 has only numpy.core. Try the current name first, then the other.
        candidates = [module]
        if module.startswith("numpy.core."):
            candidates.insert(0, "numpy._core." + module[len("numpy.core.") :])
        elif module.startswith("numpy._core."):
            candidates.append("numpy.core." + module[len("numpy._core.") :])
        for candidate in candidates[:-1]:
            try:
                return super().find_class(candidate, name)
            except (ImportError, AttributeError):
                continue
        return super().find_class(candidates[-1], name)


def load_pickle(raw: bytes, path: Path | str) -> object:
    """Unpickle ``raw`` (the contents of ``path``) allowing only numpy-array globals.

    ``encoding="latin1"`` is what numpy documents for reading Python 2 pickles of arrays; it
    maps Python 2 ``str`` to ``str`` byte for byte. Any failure -- truncation, corruption,
    a disallowed global -- becomes a :class:`DataError` naming ``path``.
    """
    try:
        return _NumpyOnlyUnpickler(io.BytesIO(raw), encoding="latin1").load()
    except Exception as exc:  # UnpicklingError, EOFError, ValueError, ... all mean "bad file"
        raise DataError(
            f"{path}: cannot be read as a CIFAR python pickle ({type(exc).__name__}: {exc}); "
            f"the file is truncated, corrupt or not an official CIFAR file. Delete it and "
            f"extract or download the official archive again."
        ) from exc
