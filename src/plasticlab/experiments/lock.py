"""One writer per results folder: the exclusive lock a command that trains into ``--out`` holds.

``plasticlab run``, ``sweep`` and ``reproduce`` (and :func:`~.executor.run_jobs`, so the demo
and any script that trains into a folder) hold an exclusive lock on ``OUT/.lock``
(:func:`fcntl.flock`) for the command's life. The operating system releases it however the
process ends — an exception, a signal, ``kill -9``, the OOM killer —, so it is never stale.
The driver alone holds it: the file is opened close-on-exec and the workers it spawns never
need it. A second command on the same folder stops at once with one line naming the holder
(:class:`FolderBusy`): its host, pid, command line and since when, which the holder writes into
the lock file after taking the lock. Commands that only read a folder (``status``, ``report``,
``export``, ``compare``, ``verify``) take no lock and work while it is held.

A file system where the lock cannot work — ``flock`` refused (``ENOLCK``, ``EOPNOTSUPP``,
``ENOSYS``), or a lock another process does not see (checked once per acquisition: a child
process tries to take the same lock and must be refused) — is said in one line
(:class:`LocksUnsupported`) and the command refuses to write, unless told ``--no-lock``
(``enabled=False``): then nothing stops a second writer, which is the user's to avoid.

The lock is this process's, counted: a command that holds a folder may enter
:func:`writer_lock` on it again (``reproduce`` around its sweep, a sweep around its
:func:`~.executor.run_jobs`) without a second lock.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .oserrors import StorageError, storage_error

try:
    import fcntl
except ImportError:  # not a POSIX system: no flock
    fcntl = None

#: The lock file's name inside a results folder.
LOCK_NAME = ".lock"

_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
"""What ``flock`` raises on a file system that keeps no locks."""


class FolderBusy(ValueError):
    """Another process holds the results folder's lock: one line naming it."""


class LocksUnsupported(ValueError):
    """The results folder's file system keeps no working locks: one line saying so."""


_holds: dict[Path, list] = {}
"""This process's locked folders: resolved path → [open file descriptor or None (not locked:
``--no-lock``), how many times entered]."""

_taken = 0
"""How many times this process has taken a folder for writing (see :func:`taken_count`)."""


def taken_count() -> int:
    """How many times this process has taken a results folder for writing (a lock, or a folder
    used with ``--no-lock``): a command that never did wrote no runs (``run_guarded`` then ends
    an interrupt quietly, as a reader)."""
    return _taken


def holds(out) -> bool:
    """Whether this process holds ``out`` for writing now."""
    return _key(out) in _holds


def holds_any() -> bool:
    """Whether this process holds any results folder for writing now."""
    return bool(_holds)


@contextmanager
def writer_lock(out, *, enabled: bool = True) -> Iterator[None]:
    """Hold the results folder ``out`` (created if needed) for writing while the block runs.

    :class:`FolderBusy` when another process holds it; :class:`LocksUnsupported` when its file
    system keeps no working locks (``enabled=False`` — ``--no-lock`` — writes without one);
    a :class:`~.oserrors.StorageError` when the folder cannot be created or written. Entered
    again by the process that holds it, it only counts. A folder it created that holds nothing
    but its lock when the block ends (a command that failed before writing: a bad grid value)
    is removed, so a refused command leaves no trace."""
    global _taken
    created = not Path(out).exists()
    key = _make_folder(out)
    if key in _holds:
        _holds[key][1] += 1
        try:
            yield
        finally:
            _holds[key][1] -= 1
        return
    try:
        fd = _acquire(Path(out)) if enabled else None
    except BaseException:
        if created:
            _remove_if_unused(Path(out))
        raise
    _holds[key] = [fd, 1]
    _taken += 1
    try:
        yield
    finally:
        del _holds[key]
        if created:
            _remove_if_unused(Path(out), fd)
        if fd is not None:
            _release(fd)


def _remove_if_unused(out: Path, fd: int | None = None) -> None:
    """Remove the folder ``out`` this process created when nothing but the lock file is in it.
    The lock file goes while still held (``fd``), so no other command can have taken it."""
    try:
        if any(entry.name != LOCK_NAME for entry in out.iterdir()):
            return
        (out / LOCK_NAME).unlink(missing_ok=True)
        out.rmdir()
    except OSError:  # written into meanwhile, or not ours to remove: it stays
        pass


def _key(out) -> Path:
    return Path(out).resolve()


def _make_folder(out) -> Path:
    """Create ``out`` (and its missing parents); its resolved path. A StorageError naming it
    when it cannot be made."""
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (storage_error(exc, path) or exc) from None
    return _key(path)


def _acquire(out: Path) -> int:
    """Lock ``out/.lock`` for this process and write who holds it; the open descriptor."""
    path = out / LOCK_NAME
    if fcntl is None:
        raise LocksUnsupported(f"{out}: this system has no flock, so two commands could write into "
                               "it at once; run one at a time and pass --no-lock")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise (storage_error(exc, path) or exc) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as exc:
        os.close(fd)  # not ours: the holder's name stays
        if isinstance(exc, BlockingIOError):
            raise FolderBusy(busy_message(out, _named_holder(path))) from None
        if isinstance(exc, OSError) and exc.errno in _NO_LOCKS:
            raise LocksUnsupported(_unsupported(out, f"flock: {exc.strerror}")) from None
        raise
    try:
        _write_holder(fd)  # first: a command refused from now on can name this one
        if not _others_see_it(path):
            raise LocksUnsupported(_unsupported(out, "another process could take the same lock"))
    except BaseException as exc:
        _release(fd)
        if isinstance(exc, OSError):  # a full disk: its name cannot be written
            raise (storage_error(exc, path) or exc) from None
        raise
    return fd


def _unsupported(out: Path, why: str) -> str:
    return (f"{out}: its file system keeps no working file locks ({why}), so nothing would stop "
            "a second command writing into it at once; pass --no-lock to write without the lock "
            "(then run one command at a time on it), or give --out on a local disk")


def _others_see_it(path: Path) -> bool:
    """Whether another process is refused the lock this one holds on ``path`` (a file system
    may accept flock and keep it to the process that took it, or ignore it)."""
    code = ("import fcntl, os, sys\n"
            "fd = os.open(sys.argv[1], os.O_RDWR)\n"
            "try:\n"
            "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except BlockingIOError:\n"
            "    sys.exit(3)\n")
    if not sys.executable:  # embedded: no interpreter to ask
        return True
    # -I -S: no site packages, no environment, so it starts in a few milliseconds. Only a child
    # that took the lock (exit 0) shows that it does not work; one that failed otherwise tells
    # nothing.
    child = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(path)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
    return child.returncode != 0


def _write_holder(fd: int) -> None:
    """Write this process's host, pid, command line and the time into the lock file ``fd``."""
    holder = {"host": socket.gethostname(), "pid": os.getpid(),
              "command": " ".join(["plasticlab" if i == 0 and _is_plasticlab(a) else a
                                   for i, a in enumerate(sys.argv)]),
              "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    text = (json.dumps(holder) + "\n").encode()
    # written over the old name, then cut to length: a reader never finds the file empty
    os.pwrite(fd, text, 0)
    os.ftruncate(fd, len(text))
    os.fsync(fd)


def _is_plasticlab(argv0: str) -> bool:
    return Path(argv0).name == "plasticlab" or argv0.endswith(os.path.join("plasticlab", "cli",
                                                                           "__main__.py"))


def read_holder(path) -> dict:
    """What the lock file ``path`` says of its holder (host, pid, command, since); empty when it
    says nothing yet (the holder is starting) or cannot be read."""
    try:
        holder = json.loads(Path(path).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


HOLDER_WAIT_S = 1.0
"""How long a command refused a folder waits for a holder that has just taken it to write its
name (it writes it at once: milliseconds, more on a loaded machine)."""


def _named_holder(path) -> dict:
    """The holder :func:`read_holder` reads, given up to :data:`HOLDER_WAIT_S` to write its
    name; empty if it has not by then."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while not (holder := read_holder(path)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return holder


def busy_message(out, holder: dict) -> str:
    """The line a command refused a busy folder prints."""
    if holder:
        who = (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since "
               f"{holder.get('since', '?')}: {holder.get('command', '?')}")
    else:
        who = "a process that is starting (it has not written its name yet)"
    return (f"{out} is in use by another plasticlab command ({who}); one command writes into a "
            "results folder at a time: wait for it to end (or stop it), or give another --out; "
            "status, report, export and verify can read it meanwhile")


def _release(fd: int) -> None:
    """Unlock and close: the file stays (removing it would let two processes lock two files),
    emptied first so it names no holder."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass  # a full or read-only disk: a stale name in an unlocked file misleads nobody
    os.close(fd)


__all__ = ["FolderBusy", "LOCK_NAME", "LocksUnsupported", "StorageError", "busy_message", "holds",
           "holds_any", "read_holder", "taken_count", "writer_lock"]
