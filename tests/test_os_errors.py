"""Operating-system errors are one line and lose nothing (:mod:`plasticlab.experiments.oserrors`):
a full disk, a read-only folder, a missing one, a store that cannot be written, and a reader
that closes the pipe."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from plasticlab.cli import main
from plasticlab.cli.common import run_guarded
from plasticlab.experiments import lock
from plasticlab.experiments import store as store_module
from plasticlab.experiments.oserrors import StorageError, storage_error
from plasticlab.experiments.store import ResultStore

TINY = ["--problem", "permuted_mnist", "--tasks", "2", "--steps-per-task", "10",
        "--set", "examples_per_task=160", "--no-progress"]

SWEEP = """
name = "tiny"
problem = "permuted_mnist"
methods = ["baseline", "l2_init"]
seeds = "0-1"
tasks = 2
steps_per_task = 10
[problem_params]
examples_per_task = 160
"""


def statuses(out: Path) -> list[list[str]]:
    """Each run's attempts' statuses, oldest first, in run order."""
    with ResultStore(out) as store:
        return [[a["status"] for a in store.attempts(r["run_id"])] for r in store.runs()]


def one_line(err: str) -> str:
    """The only line of ``err``, checked to be one plasticlab error and no traceback."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("plasticlab: error: ")
    return lines[0]


@pytest.mark.slow
def test_a_full_disk_stops_the_sweep_in_one_line_and_the_same_command_resumes(data_dir, tmp_path):
    """Before: a sweep on a nearly full disk ended in chained tracebacks (sqlite3.OperationalError:
    database or disk is full), exit 1, its runs left 'running'. After: writes fail for real (the
    driver and its workers run under RLIMIT_FSIZE, so a checkpoint's write fails with EFBIG as
    on a full disk — no root needed); the sweep stops its workers, records the runs in flight as
    interrupted, says so in one line naming the folder and what to do, exits 2; the same command,
    with room, resumes and finishes them."""
    (tmp_path / "s.toml").write_text(SWEEP)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "plasticlab.cli", "sweep", str(tmp_path / "s.toml"), "--out", str(out),
           "--data-dir", str(data_dir), "--workers", "2", "--no-progress"]

    def small_disk():  # the store fits, an ensemble's checkpoint (about 1 MB) does not
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))

    proc = subprocess.run(cmd, preexec_fn=small_disk, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert f"{out}: no space left on the device" in line and "(File too large)" in line
    assert "run the same command again" in line and "recorded as interrupted" in line
    assert statuses(out) == [["interrupted"]] * 4
    assert not list((out / "checkpoints").glob("*.tmp"))  # partial writes give their space back
    # the same command, with room, in this process and on the inline executor (what resumes is
    # the store and the checkpoints, the same on every executor; two more worker processes
    # would take ~4 s of a core to start)
    assert main([*cmd[3:], "--executor", "inline"]) == 0
    assert statuses(out) == [["interrupted", "finished"]] * 4


def test_a_store_that_cannot_be_written_mid_run_is_one_line_and_the_run_resumes(data_dir, tmp_path,
                                                                               capsys, monkeypatch):
    """Before: a store that refused the finished runs' commit (a disk remounted read-only) raised
    sqlite3.OperationalError out of `plasticlab run` with a traceback and left the runs
    'running'. After: one line ("read-only file system … attempt to write a readonly database"),
    exit 2, the runs recorded as interrupted; the same command trains them again and finishes."""
    out = tmp_path / "out"
    args = ["run", *TINY, "--method", "l2_init", "--seeds", "0-1", "--data-dir", str(data_dir),
            "--out", str(out)]

    def refused(self, *args, **kwargs):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    with monkeypatch.context() as m:
        m.setattr(ResultStore, "finish_run", refused)
        assert main(args) == 2
    line = one_line(capsys.readouterr().err)
    assert "read-only file system (attempt to write a readonly database)" in line
    assert "the runs training were recorded as interrupted" in line
    assert statuses(out) == [["interrupted"]] * 2
    assert main(args) == 0
    assert statuses(out) == [["interrupted", "finished"]] * 2


def test_a_failed_commit_rolls_back_and_leaves_the_store_usable(tmp_path):
    """Before: a COMMIT that failed (disk full) left its transaction open on the connection, so
    the next write raised "cannot start a transaction within a transaction" (the second
    traceback). After: the failed write is rolled back whole — no metrics without 'finished',
    the attempt still 'running' —, raised as a StorageError (an OSError, ENOSPC) naming the
    store, and the same connection records the run as interrupted. Also with SQLite's own
    full database (max_page_count), failing mid-transaction."""
    store = ResultStore(tmp_path)
    store.start_run("r", {"method": "m"}, {"seed": 0})
    metrics = {"online_accuracy": [0.5] * 2000}

    class CommitFails:  # the connection, whose COMMIT fails as on a full disk
        def __init__(self, db):
            self.db = db

        def execute(self, sql, *args):
            if sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            return self.db.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.db, name)

    real = store._conn
    store._conn = CommitFails(real)
    with pytest.raises(StorageError) as failed:
        store.finish_run("r", {"total_online_accuracy": 0.5}, metrics)
    store._conn = real
    assert failed.value.errno == errno.ENOSPC and str(tmp_path / "results.sqlite") in str(failed.value)
    assert not real.in_transaction
    assert store.status("r") == "running" and store.task_metrics("r") == {}

    (pages,) = real.execute("PRAGMA page_count").fetchone()
    real.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's full disk, mid-transaction
    with pytest.raises(StorageError, match="database or disk is full"):
        store.finish_run("r", {"total_online_accuracy": 0.5}, metrics)
    assert not real.in_transaction and store.status("r") == "running"
    real.execute("PRAGMA max_page_count = 1073741823")
    store.interrupt_run("r", "stopped")
    assert store.status("r") == "interrupted"
    store.close()


def _read_only_mount_command() -> list[str] | None:
    """A command prefix that runs a command in a private mount namespace, where a folder can be
    bind-mounted read-only (root, or a user namespace); None where this machine allows none."""
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    with tempfile.TemporaryDirectory() as scratch:
        probe = subprocess.run([*prefix, "sh", "-c", f'mount --bind "{scratch}" "{scratch}" && mount -o '
                                f'remount,bind,ro "{scratch}" && ! touch "{scratch}/x" 2>/dev/null'],
                               capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None


# As root (who writes through a folder's mode) the read-only test needs a read-only bind mount;
# probed once, at collection, only there.
READ_ONLY_MOUNT = _read_only_mount_command() if os.geteuid() == 0 else None


@pytest.mark.skipif(os.geteuid() == 0 and READ_ONLY_MOUNT is None,
                    reason="as root, a folder's mode does not stop writes, and this machine allows no "
                           "read-only mount (unshare --mount needs CAP_SYS_ADMIN or user namespaces)")
def test_a_read_only_folder_is_one_line_and_nothing_is_written(data_dir, tmp_path):
    """Before: `--out` on a read-only file system was an OSError traceback (a new folder) or
    "cannot open the results store … move the file away" (an existing one: the wrong advice).
    After: one line naming the path, "read-only file system" or "permission denied", and what
    to do; exit 2; the store unchanged. A real refusal: a non-root user's folder mode 0o555; as
    root (who writes through modes) a read-only bind mount in a private mount namespace, where
    the machine allows one (CI's unprivileged container may not: then the test skips, saying
    so; tests/test_os_errors.py's store-level tests still run)."""
    out = tmp_path / "ro" / "out"
    base = ["run", *TINY, "--method", "baseline", "--data-dir", str(data_dir)]
    assert main([*base, "--seeds", "0", "--out", str(out)]) == 0
    before = statuses(out)
    runs = [[sys.executable, "-m", "plasticlab.cli", *base, "--seeds", "1", "--out", str(o)]
            for o in (out, tmp_path / "ro" / "new")]
    if os.geteuid() != 0:
        os.chmod(out, 0o555)
        os.chmod(tmp_path / "ro", 0o555)
        try:
            procs = [subprocess.run(r, capture_output=True, text=True, timeout=120) for r in runs]
        finally:
            os.chmod(tmp_path / "ro", 0o755)
            os.chmod(out, 0o755)
        words = "permission denied"
    else:
        ro = tmp_path / "ro"
        procs = [subprocess.run([*READ_ONLY_MOUNT, "sh", "-c", f'mount --bind "{ro}" "{ro}" && '
                                 f'mount -o remount,bind,ro "{ro}" && exec "$0" "$@"', *r],
                                capture_output=True, text=True, timeout=120) for r in runs]
        words = "read-only file system"
    for proc, folder in zip(procs, (out, tmp_path / "ro" / "new"), strict=True):
        assert proc.returncode == 2, proc.stderr
        line = one_line(proc.stderr)
        assert str(folder) in line and words in line and "then run the same command again" in line
    assert statuses(out) == before and not (tmp_path / "ro" / "new").exists()


def test_a_missing_or_unusable_out_parent_is_one_line(tmp_path, capsys):
    """Before: `--out` under a file, or under a folder that cannot be created (a mount point
    that is gone), was a NotADirectoryError / FileNotFoundError traceback, exit 1. After: one
    line naming the path and what to do, exit 2, before any training."""
    (tmp_path / "file").write_text("")
    cases = [(tmp_path / "file" / "out", "is not a folder")]
    if Path("/proc/self").is_dir():  # a folder no one can create (Linux's /proc)
        cases.append((Path("/proc/plasticlab-no-such-mount/out"), "no such file or folder"))
    for out, words in cases:
        assert main(["run", *TINY, "--method", "baseline", "--out", str(out)]) == 2
        line = one_line(capsys.readouterr().err)
        assert words in line and ("give another path" in line or "mount it" in line), line


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(data_dir, tmp_path):
    """Before: `plasticlab status DIR | head` (its reader gone) ended in a BrokenPipeError
    traceback, or "Exception ignored … BrokenPipeError" at exit. After: it ends quietly, 141
    (128 + SIGPIPE) as Unix tools do, nothing on stderr: a pipe closed before it writes, and a
    real `| head -n 1`."""
    out = tmp_path / "out"
    assert main(["run", *TINY, "--method", "baseline", "--data-dir", str(data_dir), "--out", str(out)]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "plasticlab.cli", "status", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err
    head = subprocess.run(["bash", "-c", '"$0" -m plasticlab.cli status "$1" | head -n 1; '
                           'exit "${PIPESTATUS[0]}"', sys.executable, str(out)],
                          capture_output=True, text=True, timeout=120)
    assert head.returncode in (0, 141) and head.stderr == "", head.stderr
    assert head.stdout.startswith(f"{out}: 1 runs")


def test_an_interrupt_is_quiet_for_a_reader_and_said_for_a_writer(tmp_path, capsys):
    """Before: Ctrl-C at a pager (`plasticlab status DIR | less`) printed "stopped by SIGINT;
    unfinished runs are recorded as interrupted …" for a command that trains nothing. After: a
    command that wrote into no results folder ends quietly, 130; one that did says so."""
    def reader():
        raise KeyboardInterrupt

    def writer():
        with lock.writer_lock(tmp_path / "out"):
            raise KeyboardInterrupt

    assert run_guarded(reader) == 130 and capsys.readouterr().err == ""
    assert run_guarded(writer) == 130 and "stopped by SIGINT" in capsys.readouterr().err


def test_storage_errors_are_the_machines_state_and_bugs_keep_their_traceback(tmp_path):
    """What is said in one line and what is not: the errnos of a full disk, a refused
    permission, a read-only or missing folder and a failing device, and SQLite's words for
    them; any other error stays an error with its traceback (None here)."""
    assert storage_error(OSError(errno.ENOSPC, "No space left on device", "f")).kind == "full"
    assert storage_error(OSError(errno.EDQUOT, "Disk quota exceeded")).kind == "full"
    assert storage_error(PermissionError(errno.EACCES, "Permission denied", "f")).kind == "permission"
    assert storage_error(OSError(errno.EROFS, "Read-only file system", "f")).kind == "read-only"
    assert storage_error(OSError(errno.ESTALE, "Stale file handle", "f")).kind == "device"
    db = tmp_path / "results.sqlite"
    assert storage_error(sqlite3.OperationalError("database or disk is full"), db).kind == "full"
    assert storage_error(sqlite3.OperationalError("disk I/O error"), db).kind == "device"
    assert storage_error(sqlite3.OperationalError("no such table: runs"), db) is None
    assert storage_error(BrokenPipeError(errno.EPIPE, "Broken pipe")) is None
    assert storage_error(ValueError("bug")) is None
    error = storage_error(OSError(errno.ENOSPC, "No space left on device"), tmp_path)
    assert str(error).startswith(f"{tmp_path}: no space left on the device")
    assert isinstance(error, OSError) and "\n" not in str(error)
    assert store_module.storage_error is storage_error  # the store raises the same
