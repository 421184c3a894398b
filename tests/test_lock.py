"""One writer per results folder (:mod:`plasticlab.experiments.lock`): a second command that
would train into a folder another holds stops at once, naming the holder; a holder killed with
SIGKILL frees the folder; readers read meanwhile; a file system without working locks is said."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import WITHOUT_PACKAGE_IMPORTS
from plasticlab.cli import main
from plasticlab.experiments import lock
from plasticlab.experiments.lock import LOCK_NAME, read_holder, writer_lock
from plasticlab.experiments.store import ResultStore

TINY = ["--problem", "permuted_mnist", "--tasks", "2", "--steps-per-task", "10",
        "--set", "examples_per_task=160", "--no-progress"]

LONGER = ["--problem", "permuted_mnist", "--tasks", "2", "--steps-per-task", "1500",
          "--set", "examples_per_task=160", "--no-progress"]
"""A run that trains a few seconds: long enough for a second command to meet it."""

pytestmark = pytest.mark.skipif(lock.fcntl is None, reason="flock is POSIX")


def cli(*args: str, **kwargs) -> subprocess.Popen:
    """``plasticlab ARGS`` in a process of its own, its output kept."""
    return subprocess.Popen([sys.executable, "-m", "plasticlab.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def attempts(out: Path) -> dict[str, list[str]]:
    """Each run's attempts' statuses, oldest first."""
    with ResultStore(out) as store:
        return {r["run_id"]: [a["status"] for a in store.attempts(r["run_id"])] for r in store.runs()}


def wait_for_holder(out: Path, proc: subprocess.Popen, timeout: float = 120) -> dict:
    """The holder the lock file of ``out`` names once ``proc`` holds it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        holder = read_holder(out / LOCK_NAME)
        if holder.get("pid") == proc.pid:
            return holder
        time.sleep(0.05)
    raise AssertionError(f"process {proc.pid} never held {out} (exit {proc.poll()})")


def wait_until(condition, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Return once ``condition()`` holds, while ``proc`` runs."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"process {proc.pid} ended first (exit {proc.returncode})"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
def test_two_commands_racing_for_one_folder_one_trains_the_other_exits_2_naming_it(data_dir, tmp_path):
    """Before: the same command started twice on one --out (a double submit) trained the same
    runs at once, both exited 0, and the store marked the first one's finished attempts
    "interrupted … a later attempt took over". After: exactly one trains; the other exits 2 at
    once with one line naming the holder (pid, host, command line, since when). Both start
    together; whichever takes the folder is paused (SIGSTOP) until the other has ended, so the
    other meets it however the machine's load delays either. Seen too late (the other already
    gone, an exit 2 is still the answer; a holder that finished before the other asked is
    not), the race is run again in a new folder."""
    for attempt in range(3):
        out = tmp_path / f"out{attempt}"
        args = ["run", *TINY, "--method", "l2_init", "--seeds", "0-1", "--data-dir", str(data_dir),
                "--out", str(out)]
        procs = {p.pid: p for p in (cli(*args), cli(*args))}
        deadline = time.monotonic() + 120
        while (winner := read_holder(out / LOCK_NAME).get("pid")) not in procs:
            if any(p.poll() is not None for p in procs.values()):
                break
            assert time.monotonic() < deadline, "neither command took the folder"
            time.sleep(0.01)
        if winner in procs:
            (loser,) = [p for pid, p in procs.items() if pid != winner]
            os.kill(winner, signal.SIGSTOP)
            try:
                _, err = loser.communicate(timeout=300)
            finally:
                os.kill(winner, signal.SIGCONT)
            _, winner_err = procs[winner].communicate(timeout=300)
        else:  # one ended before the holder was read: it lost the race only if it exited 2
            outputs = {pid: p.communicate(timeout=300) for pid, p in procs.items()}
            losers = [pid for pid, p in procs.items() if p.returncode == 2]
            if not losers:
                continue
            (winner,) = [pid for pid in procs if pid not in losers]
            loser, err, winner_err = procs[losers[0]], outputs[losers[0]][1], outputs[winner][1]
        break
    else:
        pytest.fail("in three races, one command always ended before the other asked for the folder")
    assert procs[winner].returncode == 0, winner_err
    assert loser.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"is in use by another plasticlab command (pid {winner} on " in lines[0]
    assert "plasticlab run" in lines[0] and " since 20" in lines[0]
    # exactly one training: one finished attempt per run, nothing taken over
    assert list(attempts(out).values()) == [["finished"], ["finished"]]
    assert read_holder(out / LOCK_NAME) == {}  # the lock file names nobody once released


def test_a_holder_killed_with_sigkill_frees_the_folder_and_the_next_command_resumes(data_dir, tmp_path):
    """Before: no lock. After: the lock is the operating system's, released however its holder
    dies: a `plasticlab run` killed with SIGKILL mid-training leaves the folder free, and the same
    command proceeds at once (its runs' killed attempts marked interrupted, new ones finished)."""
    out = tmp_path / "out"
    args = ["run", *LONGER, "--method", "baseline", "--seeds", "0-1", "--data-dir", str(data_dir),
            "--out", str(out)]
    proc = cli(*args)
    wait_for_holder(out, proc)
    wait_until(lambda: (out / "results.sqlite").is_file() and
               [len(a) for a in attempts(out).values()] == [1, 1], proc)
    proc.send_signal(signal.SIGKILL)  # while its runs' attempts are 'running'
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert read_holder(out / LOCK_NAME)["pid"] == proc.pid  # its name stays; its lock does not
    assert main(args) == 0
    assert list(attempts(out).values()) == [["interrupted", "finished"]] * 2


# A process that holds a folder's lock until its stdin closes (the lock module alone: no torch).
HOLDER = WITHOUT_PACKAGE_IMPORTS + """
from plasticlab.experiments.lock import writer_lock
assert "torch" not in sys.modules
with writer_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_read_only_commands_work_while_a_writer_holds_the_folder(data_dir, tmp_path, capsys):
    """Before: no lock. After: a folder held by a writer (here a process that holds its lock)
    is read as before by status, report, export, compare, verify and sweep --dry-run; a command
    that would write exits 2 with the holder's line, and the holder's lock is its own (the same
    process may enter it again: a sweep inside reproduce)."""
    out = tmp_path / "out"
    assert main(["run", *TINY, "--method", "baseline", "--seeds", "0", "--data-dir", str(data_dir),
                 "--out", str(out)]) == 0
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["status", str(out)]) == 0
        assert main(["export", str(out), "--to", str(tmp_path / "export")]) == 0
        assert main(["compare", str(out), str(out)]) == 0
        assert main(["verify", "--workers", "1", str(out), "--data-dir", str(data_dir)]) == 0
        assert main(["report", str(out), "--out", str(tmp_path / "report"), "--formats", "png",
                     "--reps", "10"]) == 0
        sweep = tmp_path / "s.toml"
        sweep.write_text('problem = "permuted_mnist"\nmethod = "baseline"\nseeds = "0"\ntasks = 2\n'
                         'steps_per_task = 10\n')
        assert main(["sweep", str(sweep), "--out", str(out), "--dry-run"]) == 0
        capsys.readouterr()
        assert main(["run", *TINY, "--method", "l2", "--out", str(out), "--data-dir", str(data_dir)]) == 2
        err = capsys.readouterr().err
        assert f"(pid {holder.pid} on " in err and len(err.strip().splitlines()) == 1
        with pytest.raises(lock.FolderBusy):  # the library's door too
            with writer_lock(out):
                pass
        assert read_holder(out / LOCK_NAME)["pid"] == holder.pid  # the refused leave its name
    finally:
        holder.communicate(input="", timeout=60)
    with writer_lock(out):  # free again: taken, and entered again by the same process
        with writer_lock(out):
            assert lock.holds(out)
        assert lock.holds(out)
    assert not lock.holds(out)


def test_a_file_system_without_working_locks_is_said_and_refused_unless_no_lock(data_dir, tmp_path, capsys,
                                                                             monkeypatch):
    """Before: no lock. After: where flock is refused (ENOLCK, as on an NFS mount without a lock
    manager) or takes no effect (another process could take the same lock), the command says so
    in one line and exits 2 before writing anything; --no-lock writes without the lock, with a
    warning."""
    out = tmp_path / "out"
    args = ["run", *TINY, "--method", "baseline", "--seeds", "0", "--data-dir", str(data_dir),
            "--out", str(out)]

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    with monkeypatch.context() as m:
        m.setattr(lock.fcntl, "flock", no_locks)
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "keeps no working file locks" in err and "--no-lock" in err
        assert len(err.strip().splitlines()) == 1
    with monkeypatch.context() as m:
        m.setattr(lock, "_others_see_it", lambda path: False)
        assert main(args) == 2
        assert "another process could take the same lock" in capsys.readouterr().err
        assert not (out / "results.sqlite").exists()  # refused before anything was written
        assert main([*args, "--no-lock"]) == 0
        assert "--no-lock: nothing stops another command" in capsys.readouterr().err
    assert [r["status"] for r in ResultStore(out).runs()] == ["finished"]


def test_a_folder_the_lock_created_goes_when_nothing_was_written_into_it(tmp_path):
    made, kept = tmp_path / "made", tmp_path / "kept"
    kept.mkdir()
    for out in (made, kept):
        with pytest.raises(ValueError, match="bad grid"):
            with writer_lock(out):
                assert (out / LOCK_NAME).exists()
                raise ValueError("bad grid")
    assert not made.exists()  # created by the lock, nothing in it: gone
    assert kept.is_dir() and [p.name for p in kept.iterdir()] == [LOCK_NAME]  # the user's: stays
    with writer_lock(made):
        (made / "runs.sqlite").write_text("")
    assert sorted(p.name for p in made.iterdir()) == [LOCK_NAME, "runs.sqlite"]  # written: stays


def test_a_refused_command_waits_for_a_holder_that_has_just_taken_the_folder_to_write_its_name(tmp_path):
    """A holder takes the lock, then writes its name: a command refused in between waits for the
    name (up to a second) instead of saying "a process that is starting"."""
    import fcntl
    import json
    import threading

    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, its name not written yet
        name = {"host": "elsewhere", "pid": 4242, "command": "plasticlab sweep s.toml", "since": "2026"}
        later = threading.Timer(0.2, lambda: os.pwrite(fd, json.dumps(name).encode(), 0))
        later.start()
        with pytest.raises(lock.FolderBusy, match="pid 4242 on elsewhere since 2026: plasticlab sweep"):
            with writer_lock(out):
                pass
        later.join()
    finally:
        os.close(fd)
    assert "a process that is starting" in lock.busy_message(out, {})  # one that never writes it
