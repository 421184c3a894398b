"""What the ``plasticlab`` commands share: the user error (:class:`CLIError`), the checks of
``--threads`` and ``--device``, TOML files, the logging options, the results folder's lock
(:func:`writing_into`, ``--no-lock``), and how a command's errors become its exit code
(:func:`run_guarded`)."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


class CLIError(Exception):
    """A user error: printed as one line, exit code 2."""


def load_toml(path: str) -> dict:
    """The TOML file ``path`` as a dict; a CLIError when it is missing or not valid TOML."""
    p = Path(path)
    if not p.is_file():
        raise CLIError(f"config file {p} does not exist")
    try:
        with p.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise CLIError(f"config file {p} is not valid TOML: {e}") from None


def check_threads(value) -> int | None:
    """``--threads`` as a positive int (None: the default), or a CLIError."""
    if value is None:
        return None
    try:
        threads = int(value)
    except (TypeError, ValueError):
        raise CLIError(f"--threads must be a whole number >= 1, got {value!r}") from None
    if threads < 1:
        raise CLIError(f"--threads must be >= 1, got {threads}")
    return threads


def check_device(device: str) -> str:
    """``device`` if this machine has it (cpu, cuda, cuda:N), else a CLIError saying why."""
    import torch

    try:
        parsed = torch.device(str(device))
    except (RuntimeError, ValueError):
        raise CLIError(f"--device {device!r} is not a device; use cpu, cuda or cuda:N") from None
    if parsed.type == "cpu":
        return str(device)
    if parsed.type != "cuda":
        raise CLIError(f"--device {device}: plasticlab trains on cpu or cuda, not {parsed.type}")
    if not torch.cuda.is_available():
        why = ("this torch was built without CUDA" if torch.version.cuda is None
               else "torch sees no GPU")
        raise CLIError(f"--device {device}: no CUDA device here ({why}); use --device cpu")
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise CLIError(f"--device {device}: this machine has {torch.cuda.device_count()} CUDA "
                       f"device(s), cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return str(device)


def add_logging_options(parser) -> None:
    """``--tensorboard DIR`` and ``--wandb PROJECT``: optional mirrors of the results store."""
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="also log every run to TensorBoard in DIR (needs tensorboard)")
    parser.add_argument("--wandb", metavar="PROJECT",
                        help="also log every run to Weights & Biases PROJECT (needs wandb)")


def add_checkpoint_every(parser) -> None:
    """``--checkpoint-every SECONDS``: how often a task in flight is saved between two steps."""
    parser.add_argument("--checkpoint-every", type=float, metavar="SECONDS",
                        help="also save each ensemble between two steps once SECONDS have passed "
                             "since its last save (default 300; 0: at task ends only) — a crash "
                             "or a stop loses at most that much of a long task")


def add_lock_option(parser) -> None:
    """``--no-lock``: write into ``--out`` without its lock (a file system with no working locks)."""
    parser.add_argument("--no-lock", dest="no_lock", action="store_true",
                        help="write into --out without taking its lock (only where its file system "
                             "keeps no working locks, which the command says): then nothing stops "
                             "a second command writing into it at once")


@contextmanager
def writing_into(out, no_lock: bool = False) -> Iterator[None]:
    """Hold the results folder ``out`` for this command's writing (its lock,
    :func:`plasticlab.experiments.lock.writer_lock`); with ``no_lock``, without the lock, said
    on stderr."""
    from ..experiments.lock import writer_lock

    if no_lock:
        print(f"plasticlab: warning: --no-lock: nothing stops another command writing into {out} "
              "at the same time; run one at a time", file=sys.stderr)
    with writer_lock(out, enabled=not no_lock):
        yield


def run_guarded(command: Callable[..., int], *args) -> int:
    """``command(*args)``'s exit code, as the ``plasticlab`` command ends: a user error
    (CLIError, ValueError, DataError) or an operating-system error in a folder (a full disk, a
    permission refused, a read-only or missing folder: :mod:`plasticlab.experiments.oserrors`)
    printed as one line, 2; a stop by SIGINT or SIGTERM said so, with its exit code (130, 143) —
    quietly when the command wrote no runs (Ctrl-C at a pager); stdout closed by its reader
    (``| head``) ends quietly, 141, as Unix tools do."""
    from ..data import DataError
    from ..experiments.lifecycle import exit_code, signal_name
    from ..experiments.lock import holds_any, taken_count
    from ..experiments.oserrors import storage_error

    taken = taken_count()
    try:
        code = command(*args)
        sys.stdout.flush()  # here, not at exit: a reader gone (``| head``) is then caught below
        return code
    except (CLIError, ValueError, DataError) as e:
        print(f"plasticlab: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _stdout_gone()
    except KeyboardInterrupt as e:
        if taken_count() != taken or holds_any():  # it wrote into a results folder
            print(f"plasticlab: stopped by {signal_name(e)}; unfinished runs are recorded as "
                  "interrupted: the same command resumes them from their last checkpoint",
                  file=sys.stderr)
        return exit_code(e)
    except (OSError, sqlite3.Error) as e:
        error = storage_error(e)
        if error is None:  # not the machine's state: a bug, whose traceback says where
            raise
        print(f"plasticlab: error: {error}", file=sys.stderr)
        return 2


def _stdout_gone() -> int:
    """The exit code of a command whose reader closed stdout (128 + SIGPIPE); stdout is pointed
    at /dev/null first, so that flushing it at exit raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test's captured stdout)
        pass
    return 128 + signal.SIGPIPE
