"""How training processes stop: on a signal, at a task end, or with the process that started them.

- **The driver** (``plasticlab run`` or a sweep's driver) turns SIGTERM into
  :class:`Terminated`, a :class:`KeyboardInterrupt`, so SIGINT (Ctrl-C) and SIGTERM (what
  ``kill`` and the OOM killer's warnings send) take the same path: training stops, the runs are
  recorded as interrupted, and the command exits 130 (SIGINT) or 143 (SIGTERM).
- **Workers** ignore SIGINT (Ctrl-C in a terminal reaches every process of the group; the
  driver decides) and stop within a step once the driver asks (it creates a stop file; the
  engine asks :func:`stop_asked` between steps): the state is saved between two steps — or at
  the task end, if that comes first — and the worker raises :class:`StopRequested`, whatever
  the task's length. A SIGTERM that reaches the
  whole group (``timeout``, ``kill -- -PGID``, a batch scheduler cancelling a job) reaches the
  driver too, which asks them to stop: a worker waits a moment for that request and stops at
  its task end like the others; a SIGTERM meant for the worker alone (the pool ending its
  workers after one died) finds no request and ends it, :data:`STOP_REQUEST_WAIT_S` later.
- **A driver that trains its ensembles itself** (the ``interleaved`` executor) takes a signal as
  a request (:func:`signals_ask_to_stop`): each of its ensembles stops between two steps, saved
  there, as a worker does; a second signal interrupts at once.
- **Workers never outlive their driver.** On Linux the kernel kills a worker when its driver
  dies, however it dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a watchdog thread notices that
  the parent is gone within a second and exits the worker.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: Exit codes of a command stopped by a signal: 128 + the signal's number.
EXIT_CODES = {"SIGINT": 128 + signal.SIGINT, "SIGTERM": 128 + signal.SIGTERM}


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM."""


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """Raised in a worker when the driver asked it to stop: at a task end, or between two steps
    of a task (``step`` of them done); its checkpoint is saved either way."""

    def __init__(self, task: int, step: int = 0):
        where = f"step {step} of task {task}" if step else f"the end of task {task}"
        super().__init__(f"stopped at {where} (asked to by the driver)")
        self.task, self.step = task, step

    def __reduce__(self):
        return (StopRequested, (self.task, self.step))


_sigterm_received = False  # set by the handler: a library may re-raise it as a plain KeyboardInterrupt


def signal_name(exc: BaseException) -> str:
    """The signal behind an interruption: ``'SIGTERM'`` for :class:`Terminated` — or once this
    process received SIGTERM (Ray's ``ray.wait`` turns it into a plain KeyboardInterrupt) — else
    ``'SIGINT'``."""
    return "SIGTERM" if isinstance(exc, Terminated) or _sigterm_received else "SIGINT"


def exit_code(exc: BaseException) -> int:
    """The exit code for a command stopped by ``exc`` (130 for SIGINT, 143 for SIGTERM)."""
    return EXIT_CODES[signal_name(exc)]


def _raise_terminated(signum, frame):
    global _sigterm_received
    _sigterm_received = True
    raise Terminated


def handle_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread (a no-op off the main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


@contextmanager
def signals_ask_to_stop() -> Iterator[list[KeyboardInterrupt]]:
    """Inside the block, SIGINT and SIGTERM ask to stop instead of interrupting: the first one's
    exception (:class:`KeyboardInterrupt`, :class:`Terminated`) is appended to the list this
    yields — for a driver that trains in its own process to stop its ensembles between two
    steps, each saved there, and raise it then — and a second one is raised at once. Off the
    main thread, where signals cannot be handled, nothing changes (the list stays empty)."""
    asked: list[KeyboardInterrupt] = []
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def ask(signum, frame) -> None:
        exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        if asked:
            raise exc
        asked.append(exc)

    before = {s: signal.signal(s, ask) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield asked
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


# --- in the worker processes ------------------------------------------------------------------

_stop_file: str | None = None


def worker_init(stop_file: str, parent_pid: int) -> None:
    """Set up a worker process: ignore SIGINT, die with the driver, and remember the file whose
    existence asks it to stop (:func:`check_stop`)."""
    global _stop_file
    _stop_file = stop_file
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_at_the_task_end_if_the_driver_asks)
    die_with_parent(parent_pid)


#: How long a worker given SIGTERM waits for its driver's stop request before it ends.
STOP_REQUEST_WAIT_S = 2.0


def _stop_at_the_task_end_if_the_driver_asks(signum, frame) -> None:
    # A group-wide SIGTERM reaches the driver at the same moment; dying here would lose this
    # ensemble's work since its last checkpoint and break the pool, which then records the
    # ensembles it had not started as failed.
    deadline = time.monotonic() + STOP_REQUEST_WAIT_S
    while time.monotonic() < deadline:
        if _stop_file is not None and os.path.exists(_stop_file):
            return  # check_stop raises StopRequested at the next task end
        time.sleep(0.02)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent_pid: int) -> None:
    """Exit this process as soon as ``parent_pid`` (our parent) is gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True,
                     name="plasticlab-parent-watchdog").start()


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(1.0)


def stop_asked() -> bool:
    """Whether the driver asked this worker to stop (asked between steps by the engine, which
    then saves the state between two steps and stops)."""
    return _stop_file is not None and os.path.exists(_stop_file)


def check_stop(task: int) -> None:
    """Raise :class:`StopRequested` if the driver asked this worker to stop (call at a task end,
    after its checkpoint is saved)."""
    if _stop_file is not None and os.path.exists(_stop_file):
        raise StopRequested(task)
