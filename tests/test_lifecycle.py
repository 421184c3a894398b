"""A sweep's processes: killed or signalled drivers, their workers, and exact resumes."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import lock_released

# 5 tasks (10 until 2026-11-29): a signal or a kill comes as soon as the first task's checkpoints
# are there, with four tasks, about a second, still to train.
SWEEP = """
name = "life"
problem = "permuted_mnist"
method = "l2_init"
seeds = "0-3"
tasks = 5
steps_per_task = 300
[problem_params]
examples_per_task = 1200
"""

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(),
                                reason="reads a process's children from /proc (Linux)")


def start_sweep(tmp_path, data_dir, out: str, workers: int, sweep: str = SWEEP,
                options: tuple[str, ...] = ()) -> subprocess.Popen:
    (tmp_path / "sweep.toml").write_text(sweep)
    env = dict(os.environ, PLASTICLAB_DATA=str(data_dir))
    # Its own process group, so a test can signal the group as `timeout` or a scheduler does.
    return subprocess.Popen([sys.executable, "-c", CLI_AS_IN_A_TERMINAL, "sweep",
                             str(tmp_path / "sweep.toml"), "--out", str(tmp_path / out),
                             "--workers", str(workers), "--no-progress", *options],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


# The command with SIGINT raising KeyboardInterrupt, as in a terminal, however the suite was
# started: a process started with SIGINT ignored (`cmd &` in a script, where bash has no job
# control) keeps ignoring it, as Python and plasticlab do, and the SIGINT case would then train
# to its end.
CLI_AS_IN_A_TERMINAL = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "from plasticlab.cli import main; sys.exit(main(sys.argv[1:]))")


def children(pid: int) -> set[int]:
    kids = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids.update(int(k) for k in (task / "children").read_text().split())
    return kids


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def all_gone(pids: set[int], within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def wait_for_checkpoints(out: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list((out / "checkpoints").glob("*.ckpt"))) >= n:
            return
        assert proc.poll() is None, f"the sweep ended before checkpointing: {proc.stdout.read()}"
        time.sleep(0.05)
    raise AssertionError("no checkpoint appeared")


def results(out: Path) -> dict:
    with sqlite3.connect(out / "results.sqlite") as db:
        rows = db.execute("SELECT r.seed, a.summary FROM runs AS r JOIN attempts AS a USING (run_id) "
                          "WHERE a.status = 'finished'").fetchall()
    return {seed: json.loads(summary)["total_online_accuracy"] for seed, summary in rows}


def resume_here(tmp_path, data_dir, out: str, capsys, sweep: str = SWEEP, *options: str) -> str:
    """Run the sweep again in this process, to its end, and return what it printed. The
    resumes that are not about the processes that train (the inline executor by default:
    ``options`` may ask for workers) spare the driver's start, and the workers', ~2 s of a
    core each; what they check — what the stopped sweep left is picked up, nothing is
    trained twice, the runs end where an uninterrupted sweep ends — is the driver's and the
    engine's, the same in every executor."""
    from plasticlab.cli import main

    (tmp_path / "sweep.toml").write_text(sweep)
    capsys.readouterr()
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / out), "--data-dir",
                 str(data_dir), "--no-progress", *(options or ("--executor", "inline"))]) == 0
    captured = capsys.readouterr()
    return captured.out + captured.err


def uninterrupted(tmp_path, data_dir, out: str, sweep: str = SWEEP) -> dict:
    """The results of ``sweep`` run from start to end without a stop, to compare a resumed sweep
    with: trained in this process (the inline executor, one ensemble of all four seeds; member
    k is seed k alone, bit for bit, whatever the ensemble), which spares the three processes
    and the second ensemble a sweep on two workers takes."""
    from plasticlab.cli import main

    (tmp_path / f"{out}.toml").write_text(sweep)
    assert main(["sweep", str(tmp_path / f"{out}.toml"), "--out", str(tmp_path / out), "--data-dir",
                 str(data_dir), "--executor", "inline", "--workers", "1", "--no-progress"]) == 0
    return results(tmp_path / out)


@pytest.mark.slow
def test_killing_the_driver_leaves_no_process_and_a_resume_elsewhere_with_other_workers_is_bit_identical(
        tmp_path, data_dir, capsys):
    proc = start_sweep(tmp_path, data_dir, "killed", workers=2)
    wait_for_checkpoints(tmp_path / "killed", 2, proc)
    workers = children(proc.pid)
    assert workers
    proc.kill()
    proc.wait()
    assert all_gone(workers), "workers outlived their killed driver"
    assert lock_released(tmp_path / "killed")

    # Moved, as a study's folder is restored on another machine, and resumed there with one
    # worker (in this process: the plan is the driver's): the stored grouping (two ensembles
    # of two) is used, so both checkpoints are picked up and nothing is left behind.
    shutil.move(tmp_path / "killed", tmp_path / "restored")
    text = resume_here(tmp_path, data_dir, "restored", capsys, SWEEP, "--workers", "1",
                       "--executor", "inline")
    assert "0 finished, 4 to run) in 2 ensembles" in text
    assert not list((tmp_path / "restored" / "checkpoints").glob("*.ckpt"))
    resumed, whole = results(tmp_path / "restored"), uninterrupted(tmp_path, data_dir, "whole")
    assert len(whole) == 4 and resumed == whole


@pytest.mark.slow
# SIGTERM to the driver alone is test_a_signal_stops_workers_within_seconds_mid_task…'s case,
# which checks all this test does and more (a case here until 2026-11-29).
@pytest.mark.parametrize("sig,code,to", [(signal.SIGINT, 130, "driver"),
                                         (signal.SIGTERM, 143, "process group")])
def test_a_signalled_driver_stops_its_workers_at_a_task_end_and_records_the_runs_interrupted(
        tmp_path, data_dir, sig, code, to, capsys):
    # "process group": `timeout`, `kill -- -PGID` and batch schedulers signal the workers too.
    proc = start_sweep(tmp_path, data_dir, "stopped", workers=2)
    wait_for_checkpoints(tmp_path / "stopped", 2, proc)
    workers = children(proc.pid)
    sent = time.monotonic()
    if to == "driver":
        proc.send_signal(sig)
    else:
        os.killpg(proc.pid, sig)
    text = proc.communicate(timeout=60)[0]
    assert proc.returncode == code, text
    assert time.monotonic() - sent < 30
    assert "interrupted" in text and "Traceback" not in text and "leaked" not in text
    assert all_gone(workers)
    with sqlite3.connect(tmp_path / "stopped" / "results.sqlite") as db:
        statuses = dict(db.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall())
    assert "running" not in statuses and statuses.get("interrupted", 0) >= 1 \
        and statuses["interrupted"] + statuses.get("finished", 0) == 4, (statuses, text)
    checkpoints = list((tmp_path / "stopped" / "checkpoints").glob("*.ckpt"))
    assert checkpoints
    text = resume_here(tmp_path, data_dir, "stopped", capsys)
    assert "removed checkpoint" not in text
    assert len(results(tmp_path / "stopped")) == 4


LONG_TASKS = SWEEP.replace("tasks = 5", "tasks = 2").replace("steps_per_task = 300",
                                                             "steps_per_task = 4000")
assert "tasks = 2\n" in LONG_TASKS and "steps_per_task = 4000\n" in LONG_TASKS
# Shorter, for the tests that signal as soon as training is under way (no wait for a task's
# end): each ensemble's tasks still take seconds, as long again as a stop may take.
LONG_ENOUGH = LONG_TASKS.replace("steps_per_task = 4000", "steps_per_task = 2500")


@pytest.fixture(scope="module")
def long_tasks_whole(tmp_path_factory, data_dir) -> dict:
    """LONG_TASKS trained from start to end without a stop: what the sweep stopped mid-task
    must end as, and the stopped `plasticlab run` of the same configuration (its seeds 0 and 1;
    member k is seed k alone, bit for bit, in any ensemble). Planned as every test plans: without
    this machine's calibration."""
    from plasticlab.experiments import bench

    folder = tmp_path_factory.mktemp("long-tasks")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(bench, "default_path", lambda: folder / "no-calibration" / "bench.json")
        return uninterrupted(folder, data_dir, "whole", LONG_TASKS)


@pytest.mark.slow
def test_a_signal_stops_workers_within_seconds_mid_task_and_the_resume_is_bit_identical(
        tmp_path, data_dir, capsys, long_tasks_whole):
    # Tasks far longer than the stop may take (4,000 steps, ~2 s of a core; the signal comes
    # half a second into the second): each worker saves its task in flight between two steps
    # and stops; the sweep run again resumes there and ends where an uninterrupted sweep
    # ends, bit for bit.
    from plasticlab.checkpoint import read_header

    out = tmp_path / "mid"
    proc = start_sweep(tmp_path, data_dir, "mid", workers=2, sweep=LONG_TASKS)
    wait_for_checkpoints(out, 2, proc, timeout=400)  # task 0 ended; task 1 trains
    time.sleep(0.5)
    workers = children(proc.pid)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=60)[0]
    stopped_after = time.monotonic() - sent
    assert proc.returncode == 143, text
    assert stopped_after < 5, (stopped_after, text)
    assert "interrupted" in text and "Traceback" not in text and "leaked" not in text, text
    assert all_gone(workers)
    headers = [read_header(c) for c in sorted((out / "checkpoints").glob("*.ckpt"))]
    assert [h["next_task"] for h in headers] == [1, 1] and all(h["steps_in_task"] > 0 for h in headers)
    with sqlite3.connect(out / "results.sqlite") as db:
        notes = [n for (n,) in db.execute("SELECT error FROM attempts WHERE status = 'interrupted'")]
    assert len(notes) == 4 and all("stopped at step" in n for n in notes), notes
    assert "removed checkpoint" not in resume_here(tmp_path, data_dir, "mid", capsys, LONG_TASKS)
    assert results(out) == long_tasks_whole and len(results(out)) == 4


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (pip install 'plasticlab[ray]')")
def test_a_ray_sweep_stops_within_seconds_and_resumes_on_ray_from_its_save_between_steps(tmp_path, data_dir,
                                                                                        capsys):
    # the ray executor abandons the tasks in flight: they resume from their last save, here
    # at most a second old (--checkpoint-every 1). The resume runs on Ray too, to the end: the
    # ray executor's whole sweep (test_sweep_exec's until 2026-11-29, a Ray cluster of its own).
    # One cluster, started here: the stopped sweep's driver and the resume both join it, as
    # drivers do on a cluster (RAY_ADDRESS), and neither pays a cluster's start and stop.
    import ray

    cluster = ray.init(include_dashboard=False, log_to_driver=False)
    try:
        _stop_and_resume_on_ray(tmp_path, data_dir, capsys, cluster.address_info["address"])
    finally:
        ray.shutdown()


def _stop_and_resume_on_ray(tmp_path, data_dir, capsys, address: str) -> None:
    (tmp_path / "sweep.toml").write_text(LONG_ENOUGH)
    env = dict(os.environ, PLASTICLAB_DATA=str(data_dir), RAY_ADDRESS=address)
    out = tmp_path / "ray"
    proc = subprocess.Popen([sys.executable, "-c", CLI_AS_IN_A_TERMINAL, "sweep",
                             str(tmp_path / "sweep.toml"), "--out", str(out), "--executor", "ray",
                             "--checkpoint-every", "1", "--no-progress"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    wait_for_checkpoints(out, 1, proc, timeout=400)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143 and time.monotonic() - sent < 5, text
    with sqlite3.connect(out / "results.sqlite") as db:
        statuses = dict(db.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall())
    assert "running" not in statuses and statuses.get("interrupted", 0) >= 1, (statuses, text)
    text = resume_here(tmp_path, data_dir, "ray", capsys, LONG_ENOUGH, "--executor", "ray")
    assert "removed checkpoint" not in text
    assert len(results(out)) == 4


@pytest.mark.slow
def test_a_second_signal_kills_the_workers_at_once(tmp_path, data_dir):
    # the first signal asks the workers to stop (they save between two steps); the second
    # kills whatever is left, without waiting. Both workers are training: each has saved its
    # task in flight once, half a second in.
    out = tmp_path / "twice"
    proc = start_sweep(tmp_path, data_dir, "twice", workers=2, sweep=LONG_ENOUGH,
                       options=("--checkpoint-every", "0.5"))
    wait_for_checkpoints(out, 2, proc, timeout=400)
    workers = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    text = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "leaked" not in text, text
    assert all_gone(workers)
    with sqlite3.connect(out / "results.sqlite") as db:
        statuses = db.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall()
    assert statuses == [("interrupted", 4)], (statuses, text)


@pytest.mark.slow
def test_plasticlab_run_stops_at_once_and_resumes_from_its_save_between_steps_bit_identical(
        tmp_path, data_dir, long_tasks_whole):
    # the inline executor abandons the task in flight: it resumes from the last save, here
    # at most a second old (--checkpoint-every 1), and ends where an uninterrupted run ends.
    # Two tasks of 4,000 steps (~4 s of a core): the signal comes ~2.5 s in, after two saves.
    env = dict(os.environ, PLASTICLAB_DATA=str(data_dir))
    args = ["run", "--problem", "permuted_mnist", "--method", "l2_init", "--seeds", "0-1",
            "--tasks", "2", "--steps-per-task", "4000", "--set", "examples_per_task=1200",
            "--no-progress", "--checkpoint-every", "1"]
    proc = subprocess.Popen([sys.executable, "-c", CLI_AS_IN_A_TERMINAL, *args, "--out",
                             str(tmp_path / "run")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for_checkpoints(tmp_path / "run", 1, proc, timeout=400)
    time.sleep(1.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=60)[0]
    assert proc.returncode == 143 and time.monotonic() - sent < 5, text
    assert "Traceback" not in text, text
    # the resume: the same command, in this process; uninterrupted, these are LONG_TASKS's
    # seeds 0 and 1
    from plasticlab.cli import main

    assert main([*args, "--out", str(tmp_path / "run"), "--data-dir", str(data_dir)]) == 0
    assert results(tmp_path / "run") == {seed: long_tasks_whole[seed] for seed in (0, 1)}


@pytest.mark.slow
def test_a_killed_worker_fails_its_ensemble_and_the_ensembles_it_never_took_stay_unstarted(
        tmp_path, data_dir, capsys):
    # One worker, two ensembles (Layer Norm trains another network). The OOM killer takes the
    # worker during the first: that ensemble's runs fail; the second's were never started, so
    # they have no attempt, and the sweep says so and exits 1. The sweep run again ends both.
    sweep = SWEEP.replace('method = "l2_init"', 'methods = ["l2_init", "layer_norm"]').replace(
        'seeds = "0-3"', 'seeds = "0-1"')
    out = tmp_path / "broken"
    proc = start_sweep(tmp_path, data_dir, "broken", workers=1, sweep=sweep)
    wait_for_checkpoints(out, 1, proc)
    worker = [pid for pid in children(proc.pid)
              if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(worker) == 1, worker
    os.kill(worker[0], signal.SIGKILL)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1, text
    assert "not started: a worker of the pool died" in text
    assert "leaked" not in text  # the killed worker held no semaphore for the tracker to clean up
    with sqlite3.connect(out / "results.sqlite") as db:
        attempts = db.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall()
    assert attempts == [("failed", 2)], (attempts, text)
    text = resume_here(tmp_path, data_dir, "broken", capsys, sweep)
    assert "(0 finished, 4 to run) in 2 ensembles" in text
    with sqlite3.connect(out / "results.sqlite") as db:
        attempts = db.execute("SELECT status, COUNT(*) FROM attempts GROUP BY status").fetchall()
    assert attempts == [("failed", 2), ("finished", 4)]


# The worker's side of lifecycle.py needs the standard library alone: the module is loaded from
# its file, without the package, whose import (torch) takes ~2 s of a core.
WORKER_GIVEN_SIGTERM = """
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("lifecycle", sys.argv[2])
lifecycle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lifecycle)
assert "torch" not in sys.modules
lifecycle.STOP_REQUEST_WAIT_S = 0.3  # how long it waits for the driver's request: not the point
lifecycle.worker_init(sys.argv[1], os.getppid())
os.kill(os.getpid(), signal.SIGTERM)
try:
    lifecycle.check_stop(3)
except lifecycle.StopRequested as stop:
    print(stop)
"""


@pytest.mark.parametrize("driver_asked", [True, False])
def test_a_worker_given_sigterm_stops_at_its_task_end_only_if_its_driver_asks(tmp_path, driver_asked):
    stop_file = tmp_path / "stop"
    if driver_asked:
        stop_file.touch()
    from plasticlab.experiments import lifecycle

    proc = subprocess.run([sys.executable, "-c", WORKER_GIVEN_SIGTERM, str(stop_file), lifecycle.__file__],
                          capture_output=True, text=True, timeout=60)
    if driver_asked:  # a group-wide SIGTERM: the driver's request is there, the task ends
        assert proc.returncode == 0 and "stopped at the end of task 3" in proc.stdout
    else:  # meant for this worker alone: it ends, by the signal
        assert proc.returncode == -signal.SIGTERM and proc.stdout == ""
