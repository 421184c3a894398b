"""Progress in a log (plasticlab.experiments.progress_log): where stderr is no terminal, lines
that say how far each ensemble and the sweep have come, instead of a bar redrawn with carriage
returns."""

from __future__ import annotations

import io
import json

import pytest

from plasticlab.cli import main
from plasticlab.experiments.progress_log import SweepLines, TaskLines, bars_shown


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_an_ensemble_writes_a_line_at_a_task_end_once_a_minute_and_at_its_last_task():
    clock, out = Clock(), io.StringIO()
    lines = TaskLines("l2_init permuted_mnist K=2", tasks=5, steps_per_task=100, clock=clock, stream=out)
    for task, seconds in enumerate((30, 40, 20, 10, 10)):  # each task's time
        clock.now += seconds
        lines.update(100)
        lines.task_end(task, [0.8, 0.9])
    lines.close()
    # task 1 is 30 s in (too soon); task 2 at 70 s; task 3 at 90 s (20 s after: too soon);
    # task 4 at 100 s (too soon), task 5 the last
    assert out.getvalue().splitlines() == [
        "l2_init permuted_mnist K=2: task 2/5 acc 85.0%, 0h01m10s in, about 0h01m45s left",
        "l2_init permuted_mnist K=2: task 5/5 acc 85.0%, 0h01m50s in"]


def test_a_resumed_ensemble_is_paced_on_the_steps_it_trained_in_this_process():
    clock, out = Clock(), io.StringIO()
    lines = TaskLines("cbp random_label_cifar K=1", tasks=25, steps_per_task=1000, every_s=0,
                      clock=clock, stream=out)
    # resumed between two steps of task 7 (index 6): 400 of its steps left, 100 s
    clock.now += 100
    lines.update(400)
    lines.task_end(6, [0.25])
    assert out.getvalue() == ("cbp random_label_cifar K=1: task 7/25 acc 25.0%, 0h01m40s in, "
                              "about 1h15m00s left\n")  # 18 tasks × 1000 steps at 0.25 s a step


def test_a_regressions_lines_give_its_online_squared_error():
    out = io.StringIO()
    lines = TaskLines("baseline slowly_changing_regression K=1", tasks=1, steps_per_task=10,
                      regression=True, stream=out)
    lines.task_end(0, [0.01234567])
    assert "task 1/1 sq. error 0.01235," in out.getvalue()


def test_a_sweep_writes_a_line_as_each_ensemble_ends():
    clock, out = Clock(), io.StringIO()
    sweep = SweepLines(member_steps=4000, runs=8, clock=clock, stream=out)
    clock.now += 60
    sweep.ensemble_done(1000, 2)
    clock.now += 180
    sweep.ensemble_done(3000, 6)
    sweep.close()
    assert out.getvalue().splitlines() == [
        "sweep: 2/8 runs, 1,000 of 4,000 member-steps (25 %), 0h01m00s in, about 0h03m00s left",
        "sweep: 8/8 runs, 4,000 of 4,000 member-steps (100 %), 0h04m00s in"]


def test_the_sweeps_line_counts_the_runs_of_a_failed_ensemble_and_says_so():
    clock, out = Clock(), io.StringIO()
    sweep = SweepLines(member_steps=4000, runs=8, clock=clock, stream=out)
    clock.now += 60
    sweep.ensemble_done(1000, 2, failed=True)
    clock.now += 60
    sweep.ensemble_done(1000, 2)
    assert out.getvalue().splitlines() == [
        "sweep: 2/8 runs (2 failed), 1,000 of 4,000 member-steps (25 %), 0h01m00s in, about 0h03m00s left",
        "sweep: 4/8 runs (2 failed), 2,000 of 4,000 member-steps (50 %), 0h02m00s in, about 0h02m00s left"]


def test_a_resumed_ensemble_counts_only_the_member_steps_its_checkpoint_leaves(tmp_path):
    from plasticlab import checkpoint
    from plasticlab.experiments.executor import Job, member_steps_left
    from plasticlab.experiments.orchestrate import plan
    from plasticlab.experiments.sweep import expand

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-2", "tasks": 4,
                   "steps_per_task": 100})
    (ensemble,) = plan(runs, tmp_path, max_members=16).ensembles
    job = Job(ensemble.members, options={"checkpoint": str(tmp_path / "e.ckpt")})
    assert member_steps_left(job) == 3 * 400  # no checkpoint: every step
    # saved 30 steps into the second task: 400 - 130 steps left for each of the 3 members
    checkpoint.save(tmp_path / "e.ckpt", "x", {"next_task": 1, "in_flight": {"step": 30}})
    assert member_steps_left(job) == 3 * 270
    (tmp_path / "e.ckpt").write_bytes(b"not a checkpoint")  # trained from the start: all of them
    assert member_steps_left(job) == 3 * 400


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_bars_are_drawn_on_a_terminal_only():
    assert bars_shown(_Stream(True)) and not bars_shown(_Stream(False))
    assert not bars_shown(io.StringIO())
    closed = io.StringIO()
    closed.close()  # isatty raises ValueError
    assert not bars_shown(closed)
    assert not bars_shown(object())


SWEEP = """
name = "lines"
problem = "permuted_mnist"
methods = ["baseline", "concat_relu", "layer_norm"]
seeds = "0-1"
tasks = 3
steps_per_task = 10
[problem_params]
examples_per_task = 160
"""


@pytest.mark.parametrize("executor", ["inline", "local"])
def test_a_sweep_in_a_log_writes_lines_not_a_bar(data_dir, tmp_path, capfd, executor):
    # three ensembles, one worker: each ensemble's lines (from the worker process on `local`)
    # and the driver's as each ends; no carriage return anywhere
    (tmp_path / "sweep.toml").write_text(SWEEP)
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "out"),
                 "--data-dir", str(data_dir), "--workers", "1", "--executor", executor]) == 0
    err = capfd.readouterr().err
    assert "\r" not in err
    ends = [line for line in err.splitlines() if ": task 3/3 acc " in line]
    assert sorted(line.split(":")[0] for line in ends) == [
        "baseline permuted_mnist lr=0.001 K=2", "concat_relu permuted_mnist lr=0.001 K=2",
        "layer_norm permuted_mnist lr=0.001 K=2"]
    sweep = [line for line in err.splitlines() if line.startswith("sweep: ")]
    assert [line.split(",")[0] for line in sweep] == ["sweep: 2/6 runs", "sweep: 4/6 runs", "sweep: 6/6 runs"]
    assert sweep[-1].endswith("(100 %), " + sweep[-1].rsplit(", ", 1)[1])  # no time left


def test_a_run_in_a_log_writes_its_last_tasks_line(data_dir, tmp_path, capfd):
    assert main(["run", "--problem", "permuted_mnist", "--method", "l2_init", "--seeds", "0-1",
                 "--tasks", "2", "--steps-per-task", "10", "--set", "examples_per_task=160",
                 "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"]) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["runs"]
    (line,) = [line for line in captured.err.splitlines() if ": task " in line]
    assert line.startswith("l2_init permuted_mnist K=2: task 2/2 acc ") and "\r" not in captured.err


def test_on_a_terminal_the_sweep_draws_its_bar(data_dir, tmp_path, capfd, monkeypatch):
    # more ensembles than workers: one overall bar in the driver, redrawn in place
    from plasticlab.experiments import executor, progress_log

    monkeypatch.setattr(executor, "bars_shown", lambda: True)
    monkeypatch.setattr(progress_log, "bars_shown", lambda stream=None: True)
    (tmp_path / "sweep.toml").write_text(SWEEP)
    assert main(["sweep", str(tmp_path / "sweep.toml"), "--out", str(tmp_path / "out"),
                 "--data-dir", str(data_dir), "--workers", "1"]) == 0
    err = capfd.readouterr().err
    assert "\rsweep: 100%" in err and "runs 6/6" in err and "member-step/s" in err
    assert ": task 3/3 acc" not in err and "\nsweep: " not in err
