"""The interleaved executor: one process trains several ensembles, a step of each in turn."""

from __future__ import annotations

import os
import signal
from contextlib import nullcontext

import pytest

from plasticlab import engine
from plasticlab.device import MemoryAdmission
from plasticlab.engine import ensemble_steps, run_to_end, train_ensemble
from plasticlab.experiments import ResultStore
from plasticlab.experiments import executor as executor_module
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.executor import Job, run_jobs
from plasticlab.experiments.lifecycle import Terminated, signals_ask_to_stop
from plasticlab.run_config import Members

SMALL = {"problem": "permuted_mnist", "tasks": 3, "steps_per_task": 12, "batch_size": 4,
         "problem_params": {"examples_per_task": 48}}

# Methods that never share an ensemble (each its own job), one with per-step draws and one that
# replaces units, so that interleaving would show in their numbers if their states mixed.
METHODS = ("l2_init", "shrink_perturb", "cbp")


def jobs() -> list[Job]:
    return [Job(Members.from_config(resolve_config({**SMALL, "method": m}), [0, 1]), label=m,
                options={"measure_every": 5}) for m in METHODS]


def stored(out) -> dict:
    """Each finished run's summary (its online accuracies and measurements), by run id, less its
    timings."""
    timings = {"measure_time_s", "steps_per_second", "wall_time_s"}
    with ResultStore(out) as store:
        return {r["run_id"]: {k: v for k, v in r["summary"].items() if k not in timings}
                for r in store.runs(status="finished")}


def test_ensemble_steps_pauses_after_every_step_and_returns_what_train_ensemble_returns(data_dir):
    members = Members.from_config(resolve_config({**SMALL, "method": "l2_init"}), [0, 1])
    steps = ensemble_steps(members, data_dir=data_dir)
    pauses = 0
    while True:
        try:
            next(steps)
        except StopIteration as end:
            stepped = end.value
            break
        pauses += 1
    assert pauses == SMALL["tasks"] * SMALL["steps_per_task"]
    whole = train_ensemble(members, data_dir=data_dir)
    for a, b in zip(stepped.members, whole.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics
    assert run_to_end(iter(())) is None  # a generator that ends at once returns None


def test_interleaved_ensembles_give_each_run_exactly_what_one_ensemble_at_a_time_gives(
        data_dir, tmp_path):
    run_jobs(jobs(), out=tmp_path / "inline", data_dir=data_dir, executor="inline", progress=False)
    interleaved = run_jobs(jobs(), out=tmp_path / "interleaved", data_dir=data_dir,
                           executor="interleaved", progress=False)
    assert all(job.error is None and job.interrupted is None for job in interleaved)
    alone, together = stored(tmp_path / "inline"), stored(tmp_path / "interleaved")
    assert len(together) == 2 * len(METHODS)
    assert together == alone  # to the bit: every accuracy and measurement


def test_interleaved_with_fewer_slots_than_ensembles_trains_them_all(data_dir, tmp_path):
    done = run_jobs(jobs(), out=tmp_path / "out", data_dir=data_dir, executor="interleaved",
                    workers=2, progress=False)
    assert [job.error for job in done] == [None] * len(METHODS)
    assert len(stored(tmp_path / "out")) == 2 * len(METHODS)


def test_sweep_and_its_plan_with_the_interleaved_executor(data_dir, tmp_path, capsys):
    # the CLI's path: one process, so the plan is not split for workers, and every ensemble
    # trains at once unless --workers says how many
    import json

    from plasticlab.cli import main

    sweep = tmp_path / "sweep.toml"
    sweep.write_text('problem = "permuted_mnist"\nmethod = "l2_init"\nseeds = "0-3"\n'
                     'tasks = 2\nsteps_per_task = 6\n[problem_params]\nexamples_per_task = 48\n')
    said = {}
    for executor in ("local", "interleaved"):
        assert main(["sweep", str(sweep), "--out", str(tmp_path / executor), "--data-dir",
                     str(data_dir), "--workers", "2", "--executor", executor,
                     "--dry-run" if executor == "local" else "--no-progress"]) == 0
        said[executor] = capsys.readouterr().out
    # two worker processes split the ensemble of 4 in two; one process interleaving keeps it
    assert "in 2 ensembles" in said["local"] and "in 1 ensembles" in said["interleaved"]
    plan = json.loads((tmp_path / "interleaved" / "plan.json").read_text())
    assert [len(e["run_ids"]) for e in plan["ensembles"]] == [4]
    with ResultStore(tmp_path / "interleaved") as store:
        assert len(store.runs(status="finished")) == 4


class FakeMemory:
    """A device whose every ensemble takes 100 bytes at its first step, with ``free`` bytes free."""

    def __init__(self, free: int):
        self.free_bytes, self.now, self.top = free, 0, 0

    def free(self) -> int:
        return self.free_bytes

    def allocated(self) -> int:
        return self.now

    def reset_peak(self) -> None:
        self.top = self.now

    def peak(self) -> int:
        return self.top + 100


def most_at_once(monkeypatch) -> list[int]:
    """Count the ensembles training at once (their steps begun, not ended): [now, most]."""
    count = [0, 0]
    steps = executor_module.job_steps

    def counted(*args, **kwargs):
        count[0] += 1
        count[1] = max(count)
        try:
            return (yield from steps(*args, **kwargs))
        finally:
            count[0] -= 1

    monkeypatch.setattr(executor_module, "job_steps", counted)
    return count


@pytest.mark.parametrize("free, most", [(None, 3), (150, 1)],
                         ids=["host memory: all at once", "room for one"])
def test_ensembles_start_while_the_device_has_room_for_another(data_dir, tmp_path, monkeypatch,
                                                               free, most):
    # room: free memory at least twice the largest first-step footprint seen (100 bytes here)
    memory = None if free is None else FakeMemory(free)
    monkeypatch.setattr(executor_module, "memory_admission", lambda device: MemoryAdmission(memory))
    count = most_at_once(monkeypatch)
    done = run_jobs(jobs(), out=tmp_path / "out", data_dir=data_dir, executor="interleaved",
                    progress=False)
    assert [job.error for job in done] == [None] * len(METHODS)
    assert count == [0, most]


def test_a_device_admission_admits_the_first_and_then_what_fits_twice_over():
    admission = MemoryAdmission(FakeMemory(199))
    assert admission.fits()  # nothing measured yet
    stepped = []
    admission.measure(lambda: stepped.append(1))
    assert stepped == [1] and admission.largest == 100 and not admission.fits()
    admission.memory.free_bytes = 200
    assert admission.fits()
    assert MemoryAdmission.on("cpu").memory is None and MemoryAdmission.on("cpu").fits()


def test_a_failing_ensemble_is_recorded_and_the_others_train_on(data_dir, tmp_path):
    failing = jobs()
    failing[1].options["measure_every"] = 0  # rejected when the ensemble is set up
    done = run_jobs(failing, out=tmp_path / "out", data_dir=data_dir, executor="interleaved",
                    progress=False)
    assert "measure_every must be >= 1" in done[1].error
    assert done[0].error is None and done[2].error is None
    assert len(stored(tmp_path / "out")) == 2 * (len(METHODS) - 1)


@pytest.fixture
def sigint_as_in_a_terminal():
    """SIGINT raising KeyboardInterrupt, as in a terminal, however the suite was started (a
    process started with SIGINT ignored keeps ignoring it); restored after the test."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def signal_at_entry(n: int, signum: int):
    """A stand-in for :func:`plasticlab.device.own_stream` that sends this process ``signum``
    as the n-th piece of work of any ensemble starts: a signal at a known point of the run."""
    count = {"entries": 0}

    def own_stream(device):
        def enter():
            count["entries"] += 1
            if count["entries"] == n:
                os.kill(os.getpid(), signum)
            return nullcontext()
        return enter
    return own_stream


def test_a_signal_stops_every_ensemble_within_a_step_and_the_resume_ends_as_an_uninterrupted_run(
        data_dir, tmp_path, monkeypatch):
    # SIGTERM here; SIGINT takes the same path (test_the_first_signal_asks_and_a_second_is_raised)
    signum, raised = signal.SIGTERM, Terminated
    run_jobs(jobs(), out=tmp_path / "whole", data_dir=data_dir, executor="inline", progress=False)
    out = tmp_path / "stopped"
    # the signal comes as the third ensemble starts its 15th step (3 ensembles in turn, 12
    # steps a task); the stop is asked for after every step (not every 0.2 s)
    monkeypatch.setattr(executor_module, "own_stream", signal_at_entry(3 * 15, signum))
    monkeypatch.setattr(engine, "STOP_POLL_S", 0.0)
    stopped = jobs()
    with pytest.raises(raised):
        run_jobs(stopped, out=out, data_dir=data_dir, executor="interleaved", progress=False)
    assert [job.interrupted.split(" (")[0] for job in stopped] == [
        "interrupted: stopped at step 4 of task 1", "interrupted: stopped at step 4 of task 1",
        "interrupted: stopped at step 3 of task 1"]
    assert stored(out) == {}
    with ResultStore(out) as store:
        assert {r["status"] for r in store.runs()} == {"interrupted"}
    monkeypatch.undo()
    resumed = run_jobs(jobs(), out=out, data_dir=data_dir, executor="interleaved", progress=False)
    assert all(job.error is None for job in resumed)
    assert stored(out) == stored(tmp_path / "whole")


@pytest.mark.parametrize("first, second", [(signal.SIGTERM, signal.SIGINT),
                                           (signal.SIGINT, signal.SIGTERM)])
def test_the_first_signal_asks_and_a_second_is_raised(sigint_as_in_a_terminal, first, second):
    kind = {signal.SIGTERM: Terminated, signal.SIGINT: KeyboardInterrupt}
    with signals_ask_to_stop() as asked:
        os.kill(os.getpid(), first)
        assert len(asked) == 1 and type(asked[0]) is kind[first]
        with pytest.raises(kind[second]):
            os.kill(os.getpid(), second)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


@pytest.mark.cuda
def test_on_cuda_interleaved_ensembles_on_their_own_streams_give_what_one_at_a_time_gives(
        data_dir, tmp_path):
    # the same kernels on other streams: the same numbers (a run repeated on CUDA is identical)
    run_jobs(jobs(), out=tmp_path / "inline", data_dir=data_dir, device="cuda", executor="inline",
             progress=False)
    run_jobs(jobs(), out=tmp_path / "interleaved", data_dir=data_dir, device="cuda",
             executor="interleaved", progress=False)
    assert stored(tmp_path / "interleaved") == stored(tmp_path / "inline")


@pytest.mark.cuda
def test_on_cuda_each_ensemble_queues_on_a_stream_of_its_own():
    import torch

    from plasticlab.device import own_stream
    first, second = own_stream("cuda"), own_stream("cuda")
    with first():
        a = torch.cuda.current_stream()
    with second():
        b = torch.cuda.current_stream()
    assert a != b and torch.cuda.default_stream() not in (a, b)


@pytest.mark.cuda
def test_on_cuda_the_admission_measures_the_peak_of_an_ensembles_first_step():
    import torch

    admission = MemoryAdmission.on("cuda")
    admission.measure(lambda: torch.ones(1 << 20, device="cuda").sum())  # 4 MiB, freed at once
    assert admission.largest >= 4 << 20
    assert admission.fits() == (admission.memory.free() >= 2 * admission.largest)
    assert admission.memory.free() >= torch.cuda.mem_get_info()[0]  # with the cache's unused


def test_the_aggregate_pace_is_written_every_span_with_the_ensembles_in_flight():
    from plasticlab.experiments.pace import AggregatePace, read_pace

    now, lines = [0.0], []
    pace = AggregatePace(10.0, write=lines.append, clock=lambda: now[0])
    for _ in range(4):  # 4 rounds of one ensemble of 8 members × batch 16, 2 s apart
        now[0] += 2.0
        pace.round(128, 1)
    assert lines == []  # 8 s: not a span yet
    now[0] += 2.0
    pace.round(2 * 128, 2)  # a second ensemble admitted
    # (4 × 128 + 256) / 10 s
    assert lines == ["interleaved: 1–2 ensemble(s) in flight, 77 member-samples/s over 10.0 s"]
    for _ in range(5):
        now[0] += 2.0
        pace.round(256, 2)
    assert lines[1] == "interleaved: 2 ensemble(s) in flight, 128 member-samples/s over 10.0 s"
    # what a script reads back (benchmarks/grid_pace.py --log)
    assert read_pace(["noise", *lines]) == [
        {"in_flight": [1, 2], "member_samples_per_s": 77, "span_s": 10.0},
        {"in_flight": [2, 2], "member_samples_per_s": 128, "span_s": 10.0}]
    quiet = AggregatePace(None, write=lines.append, clock=lambda: now[0])
    now[0] += 100.0
    quiet.round(256, 2)  # none asked for: the CPU's
    assert len(lines) == 2
    with pytest.raises(ValueError, match="> 0 seconds"):
        AggregatePace(0.0)


def test_compiled_ensembles_on_cuda_share_the_current_stream_and_the_others_get_their_own():
    # CUDA graph replays share one memory pool, whose reuse is ordered on one stream only
    from contextlib import nullcontext

    from plasticlab.experiments import executor

    members = Members.from_config(resolve_config({**SMALL, "method": "l2_init"}), [0])
    compiled, eager = (executor.Job(members, options=options) for options in ({"compile": True}, {}))
    assert executor.ensemble_stream(compiled, "cuda") is nullcontext
    assert executor.ensemble_stream(eager, "cpu") is nullcontext  # no streams on the CPU
    assert executor.ensemble_stream(compiled, "cpu") is nullcontext


def test_the_rate_admission_climbs_while_one_more_ensemble_raises_the_pace_and_keeps_that_count():
    from plasticlab.experiments.pace import RateAdmission, read_settled

    now, lines = [0.0], []
    rate = RateAdmission(10.0, gain=0.05, write=lines.append, clock=lambda: now[0])

    def train(in_flight: int, per_second: float, seconds: float = 10.0) -> None:
        # rounds 1 s apart at per_second member-samples/s in all
        for _ in range(int(seconds)):
            now[0] += 1.0
            rate.round(int(per_second), in_flight)

    assert rate.allows(0) and not rate.allows(1)  # one at first
    rate.started(1)
    train(1, 100)
    assert rate.allows(1) and not rate.allows(2)  # 100/s with one: try a second
    rate.started(2)
    train(2, 180)
    assert rate.allows(2)  # 180 ≥ 1.05 × 100: try a third
    rate.started(3)
    train(2, 500, 3)  # an ensemble ended: the window restarts at the new count …
    rate.round(180, 3)  # … and again when the third is back
    train(3, 185)
    assert lines == ["interleaved: 3 ensemble(s) in flight gave 185 member-samples/s, 2 gave 180: "
                     "keeping 3 in flight"]  # +3 %: not worth a fourth, not worse than two
    assert not rate.allows(3) and rate.allows(2)  # an ensemble that ends is replaced, up to 3
    train(3, 10)
    assert not rate.allows(3)  # settled: no more climbing
    # what a script reads back (benchmarks/grid_pace.py --log)
    assert read_settled(["noise", *lines]) == {"tried": 3, "member_samples_per_s": 185, "fewer": 2,
                                               "fewer_member_samples_per_s": 180, "kept": 3}
    assert read_settled(["noise"]) is None


def test_the_rate_admission_steps_back_when_one_more_ensemble_lowered_the_pace():
    from plasticlab.experiments.pace import RateAdmission

    now, lines = [0.0], []
    rate = RateAdmission(5.0, write=lines.append, clock=lambda: now[0])
    for in_flight, per_second in ((1, 100), (2, 90)):
        rate.started(in_flight)
        for _ in range(5):
            now[0] += 1.0
            rate.round(per_second, in_flight)
    assert rate.limit == 1 and not rate.allows(1) and "keeping 1 in flight" in lines[0]
    assert RateAdmission(None).allows(1000)  # the CPU: every ensemble
    with pytest.raises(ValueError, match="> 0 seconds"):
        RateAdmission(0.0)


def test_the_interleaved_executor_keeps_no_more_in_flight_than_the_rate_admission_allows(
        data_dir, tmp_path, monkeypatch):
    from plasticlab.experiments.pace import RateAdmission

    class TwoAtMost(RateAdmission):
        def __init__(self):
            super().__init__(None)

        def allows(self, in_flight):
            return in_flight < 2

    monkeypatch.setattr(executor_module, "rate_admission", lambda device: TwoAtMost())
    count = most_at_once(monkeypatch)
    done = run_jobs(jobs(), out=tmp_path / "out", data_dir=data_dir, executor="interleaved",
                    progress=False)
    assert [job.error for job in done] == [None] * len(METHODS)
    assert count == [0, 2]


def test_a_second_signal_while_the_first_stop_is_being_recorded_leaves_no_run_running(
        data_dir, tmp_path, monkeypatch):
    # The first signal stops an ensemble (StopRequested); the second comes while its runs are
    # being recorded as interrupted — before the first of them is. None may stay 'running'.
    def stopped(job, *args, **kwargs):
        raise executor_module.StopRequested(1, 4)

    record = ResultStore.interrupt_run
    calls = []

    def second_signal_first(self, run_id, reason, attempt=None):
        calls.append(run_id)
        if len(calls) == 1:
            raise KeyboardInterrupt
        record(self, run_id, reason, attempt)

    monkeypatch.setattr(executor_module, "train_job", stopped)
    monkeypatch.setattr(ResultStore, "interrupt_run", second_signal_first)
    job = Job(Members.from_config(resolve_config({**SMALL, "method": "l2_init"}), [0, 1]), label="l2_init")
    with pytest.raises(KeyboardInterrupt):
        run_jobs([job], out=tmp_path / "out", data_dir=data_dir, executor="inline", progress=False)
    with ResultStore(tmp_path / "out") as store:
        assert [r["status"] for r in store.runs()] == ["interrupted", "interrupted"]
    assert job.interrupted.startswith("interrupted: stopped at step 4 of task 1")
