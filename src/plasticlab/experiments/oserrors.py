"""Operating-system errors in a results folder, each said in one line: the path, what happened
and what to do.

A full disk, a permission refused, a read-only file system, a folder that is missing or a disk
or share that went away are the machine's state, not plasticlab's bug: a command that meets one
stops with one line (:class:`StorageError`, exit 2) instead of a traceback. They come as an
:class:`OSError` (``ENOSPC``, ``EACCES``, ``EROFS`` …) or, from the results store, as a
:class:`sqlite3.OperationalError` whose message alone says what it was (``database or disk is
full``, ``attempt to write a readonly database``); :func:`storage_error` reads both.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

#: What each kind of error is, and what to do about it.
KINDS = {
    "full": ("no space left on the device (or a file-size limit or quota reached)",
             "free space there, or give --out on another disk, then run the same command again: "
             "it resumes the unfinished runs"),
    "permission": ("permission denied",
                   "make it writable by this user (chmod, chown), or give another --out, then run "
                   "the same command again"),
    "read-only": ("read-only file system",
                  "remount it read-write, or give --out on another disk, then run the same "
                  "command again"),
    "missing": ("no such file or folder",
                "if it is on a disk or share that is not mounted, mount it; else create the "
                "folder or give another path"),
    "not-a-folder": ("is not a folder, or a folder on its way is a file", "give another path"),
    "device": ("input/output error: the disk or network share failed or went away",
               "check that it is mounted and healthy (mount, dmesg), then run the same command "
               "again"),
}

ERRNO_KINDS = {
    errno.ENOSPC: "full", errno.EDQUOT: "full", errno.EFBIG: "full",
    errno.EACCES: "permission", errno.EPERM: "permission",
    errno.EROFS: "read-only",
    errno.ENOENT: "missing",
    errno.EEXIST: "not-a-folder", errno.ENOTDIR: "not-a-folder",
    errno.EIO: "device", errno.ESTALE: "device", errno.ENODEV: "device", errno.ENXIO: "device",
    errno.ENOTCONN: "device",
}
"""The kind of each errno that is the machine's state, not a bug."""

_KIND_ERRNO = {"full": errno.ENOSPC, "permission": errno.EACCES, "read-only": errno.EROFS,
               "missing": errno.ENOENT, "not-a-folder": errno.EEXIST, "device": errno.EIO}


class StorageError(OSError):
    """An operating-system error in a results folder, as one line: the path, what happened and
    what to do (``str``); ``errno`` and ``filename`` as an OSError's."""

    def __init__(self, kind: str, path, detail: str = "", note: str = ""):
        super().__init__(_KIND_ERRNO[kind], KINDS[kind][0], str(path))
        self.kind, self.detail, self.note = kind, detail, note

    def __str__(self) -> str:
        """``PATH: what happened (the system's words): what to do[; note]``."""
        what, advice = KINDS[self.kind]
        # the system's words where they add to ours (EFBIG's "File too large": a size limit)
        plain = {what.lower(), os.strerror(self.errno).lower()}
        detail = f" ({self.detail})" if self.detail and self.detail.lower() not in plain else ""
        return f"{self.filename}: {what}{detail}: {advice}" + (f"; {self.note}" if self.note else "")

    def __reduce__(self):
        return (StorageError, (self.kind, self.filename, self.detail, self.note))


def storage_error(exc: BaseException, path=None) -> StorageError | None:
    """``exc`` as a :class:`StorageError` when it is the machine's state — an OSError of an
    errno in :data:`ERRNO_KINDS`, or SQLite's words for a full disk, a read-only store or an
    I/O error —, naming its file (else ``path``); None when it is anything else (a bug keeps its
    traceback)."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, OSError) and not isinstance(exc, (BrokenPipeError, TimeoutError)):
        kind = ERRNO_KINDS.get(exc.errno)
        if kind is None:
            return None
        name = exc.filename if exc.filename is not None else path
        return StorageError(kind, name if name is not None else "?", exc.strerror or "")
    if isinstance(exc, sqlite3.OperationalError):
        kind = _sqlite_kind(str(exc), path)
        if kind is not None:
            return StorageError(kind, path if path is not None else "the results store", str(exc))
    return None


def _sqlite_kind(message: str, path) -> str | None:
    """The kind of a SQLite error by its message (SQLite gives no errno); for a store it could
    not write or open, the file system says why."""
    message = message.lower()
    if "database or disk is full" in message:
        return "full"
    if "disk i/o error" in message:
        return "device"
    if "readonly database" in message or "unable to open database file" in message:
        return _why_not_writable(path) or ("read-only" if "readonly" in message else None)
    return None


def _why_not_writable(path) -> str | None:
    """Why ``path``'s folder cannot be written: its file system is read-only, it is missing, or
    this user may not write it (None: it can be, as far as the system says)."""
    if path is None:
        return None
    folder = Path(path).parent
    if not folder.is_dir():
        return "missing"
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only"
    except OSError:
        return "device"
    writable = all(os.access(p, os.W_OK) for p in (folder, Path(path)) if p.exists())
    return None if writable else "permission"
