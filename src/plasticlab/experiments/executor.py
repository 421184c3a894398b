"""Run ensembles and record their runs: the one driver of ``plasticlab run``, ``sweep`` and
``demo``.

Four executors share one driver loop (start each run's attempt, train, record):

- ``inline``: one ensemble after another in this process (``plasticlab run``);
- ``local``: one worker process per core (spawned), one torch thread each;
- ``interleaved``: one process drives the device: every ensemble (or ``workers`` of them) at
  once, a step of each in turn, on CUDA each on a stream of its own — in place of several
  processes time-slicing one GPU;
- ``ray``: the same jobs as Ray tasks on a cluster (``--ray-address`` or ``$RAY_ADDRESS``; a
  local Ray instance when neither is set). Ray is an optional extra: ``pip install plasticlab[ray]``.

Before any job starts, the driver fetches the datasets the jobs read into the data directory its
workers read (with Ray, where a directory is named: else each node reads its own cache
directory): a missing dataset is one error, not a failed ensemble each.

Either way the driver process is the only writer of the results store: workers train and
return their :class:`~plasticlab.engine.EnsembleResult`; the driver records it. Workers save a
checkpoint of their ensemble at every task end under ``OUT/checkpoints/`` (on a cluster, OUT
must be on a shared file system) and resume from it when the sweep is started again. Jobs are
submitted longest first, and a failing job is recorded as failed without stopping the others.
A run's attempt starts (status ``'running'``) as a worker takes its ensemble — with Ray, as
the ensemble is submitted — so a run waiting for a worker has no attempt yet.

Stopping (:mod:`plasticlab.experiments.lifecycle`): on SIGINT or SIGTERM the driver asks every
local worker to stop; each stops within a step, its state saved between two steps (it resumes
there, bit-identical), records what finished as finished and the rest as interrupted, and
re-raises (exit 130/143). Workers that have not stopped within ``grace_s`` seconds, or a second
signal, are killed. The ``interleaved`` executor stops each of its ensembles the same way, within
a step, in its own process. The ``inline`` and ``ray`` executors stop at once and abandon the task in
flight: it resumes from the ensemble's last checkpoint — a task end, or a save between steps at
most :data:`CHECKPOINT_EVERY_S` old. Workers die with the driver, however it dies.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait
from concurrent.futures import TimeoutError as FuturesTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from ..data import fetch_datasets
from ..data.locate import ENV_VAR as DATA_ENV_VAR
from ..data.locate import resolve_data_dir
from ..device import MemoryAdmission, own_stream
from ..engine import EnsembleResult, TrainingStopped, ensemble_steps, run_to_end
from ..problems import get_problem
from ..run_config import Members, OfMembers
from .lifecycle import (
    StopRequested,
    check_stop,
    handle_sigterm,
    signal_name,
    signals_ask_to_stop,
    stop_asked,
    worker_init,
)
from .lock import writer_lock
from .manifest import code_identity, utc_now
from .oserrors import StorageError, storage_error
from .pace import PACE_EVERY_S, RATE_SPAN_S, AggregatePace, RateAdmission
from .progress_log import SweepLines, bars_shown
from .recording import checkpoint_path, progress_bar, record_result, record_start
from .store import CHECKPOINTS, ResultStore

EXECUTORS = ("inline", "local", "interleaved", "ray")


@dataclass
class Job(OfMembers):
    """One ensemble to train: its ``members`` (config, seeds, and each member's parameters,
    step size and method) and extra keyword options for :func:`~plasticlab.engine.train_ensemble`."""

    members: Members
    label: str = ""
    options: dict = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    error: str | None = None
    record: list[bool] | None = None  # per member: record its run (False: it finished before)
    interrupted: str | None = None
    exception: BaseException | None = None  # what failed it, when it trained in this process


CHECKPOINT_EVERY_S = 300.0
"""Seconds after which an ensemble's task in flight is saved between two steps (besides every
task end); ``--checkpoint-every`` sets it, 0 turns it off."""


def default_workers() -> int:
    """One worker per available core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def train_job(job: Job, data_dir=None, device: str = "cpu", position: int = 0,
              progress: bool = True) -> EnsembleResult:
    """Train one job in this process (what a worker runs)."""
    return run_to_end(job_steps(job, data_dir, device, position, progress))


def job_steps(job: Job, data_dir=None, device: str = "cpu", position: int = 0,
              progress: bool = True, stop: Callable[[], bool] = stop_asked,
              ) -> Generator[None, None, EnsembleResult]:
    """:func:`train_job` one step at a time (:func:`~plasticlab.engine.ensemble_steps`), with its
    progress bar; ``stop`` is asked between steps (by default, whether the driver asked this
    worker to stop: :func:`~.lifecycle.stop_asked`). A stop raises :class:`~.lifecycle.StopRequested`,
    the state saved between two steps."""
    bar, show_task = progress_bar(job.config, len(job.seeds), enabled=progress, position=position,
                                  label=job.label or None)
    last = job.config.tasks - 1

    def on_task_end(task: int, accuracies: list[float]) -> None:
        show_task(task, accuracies)
        if task < last:  # the checkpoint of this task end is saved by now
            check_stop(task)

    try:
        # a stop the driver asks for (a local worker's stop file) takes effect between steps
        return (yield from ensemble_steps(job.members, data_dir=data_dir, device=device,
                                          on_task_end=on_task_end, on_steps=bar.update,
                                          sitting=this_sitting(device), stop=stop, **job.options))
    except TrainingStopped as stopped:
        raise StopRequested(stopped.task, stopped.step) from None
    finally:
        bar.close()


def this_sitting(device) -> dict:
    """What trains in this process, as a run's manifest lists it under ``sittings`` (each with
    the first task it trained): the code (:func:`~plasticlab.experiments.manifest.code_identity`),
    the device, torch's version and the start time."""
    # plain str: torch.__version__ is a str subclass, which a checkpoint's safe load refuses
    return {"code": code_identity(), "device": str(device), "torch": str(torch.__version__),
            "started": utc_now()}


def job_cost(job: Job) -> float:
    """A job's cost in member-samples (tasks × steps × batch × K), the order of longest-first
    scheduling where no calibration prices the jobs in seconds
    (:func:`~plasticlab.experiments.bench.job_seconds`)."""
    c = job.config
    return c.tasks * c.steps_per_task * c.batch_size * len(job.seeds)


def run_jobs(jobs: Sequence[Job], *, out: str | Path, data_dir=None, device: str = "cpu",
             workers: int | None = None, progress: bool = True, executor: str = "local",
             ray_address: str | None = None, on_done: Callable[[Job], None] | None = None,
             loggers: Sequence = (), grace_s: float = 60.0,
             cost: Callable[[Job], float] | None = None) -> list[Job]:
    """Train ``jobs`` with ``executor`` and record every run in ``out``'s store, the costliest
    first by ``cost`` (default :func:`job_cost`) so that the last to finish is a short one.

    Returns the jobs with their ``records`` (or ``error``) filled in. On SIGINT/SIGTERM (see
    the module docstring) the interrupt propagates once every job is recorded. ``out`` is held
    (:func:`~.lock.writer_lock`) while the jobs train. An operating-system error in ``out`` —
    a full disk, a store that cannot be written (:class:`~.oserrors.StorageError`) — stops
    every job (local workers are killed: they resume from their last checkpoint), records the
    runs in flight as interrupted where the store still can, and is raised.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}")
    jobs = list(jobs)
    if not jobs:
        return jobs
    if executor != "ray" or data_dir is not None or os.environ.get(DATA_ENV_VAR):
        # Every worker reads this data directory: what is missing is fetched once, here, and a
        # dataset that cannot be had is one error before any run starts, not a failed ensemble
        # each. (Ray's workers are given the driver's directory where one is named, and else
        # read their own cache directories: each fetches its own.)
        fetch_datasets((get_problem(job.config.problem).reads(job.config.problem_params)
                        for job in jobs), data_dir)
    cost = cost or job_cost
    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))
    for job in jobs:
        # Checkpoints at every task end and, every CHECKPOINT_EVERY_S, between two steps: a
        # killed sweep loses at most that much of each ensemble.
        job.options.setdefault("checkpoint", str(checkpoint_path(out, job.members, kind="ensemble")))
        job.options["checkpoint_every"] = job.options.get("checkpoint_every", CHECKPOINT_EVERY_S) or None
    workers = workers or (len(jobs) if executor == "interleaved" else default_workers())
    steps_left = [member_steps_left(job) for job in jobs]
    per_job_bars, overall = _progress(jobs, steps_left, executor, workers) if progress else (False, None)
    # One writer per results folder (a command that holds it already only counts it again).
    with writer_lock(out), ResultStore(out) as store:
        run_ids: dict[int, list[str | None]] = {}

        def start(i: int) -> None:
            # Called as a worker takes the job, so that 'running' in the store means training,
            # not waiting in a queue.
            run_ids[i] = record_start(store, jobs[i].members, device=device,
                                      threads=jobs[i].options.get("threads"), record=jobs[i].record)

        def finish(i: int, get_result: Callable[[], EnsembleResult]) -> None:
            job = jobs[i]
            try:
                result = get_result()
            except StopRequested as stop:
                job.interrupted = f"interrupted: {stop}; {job.options['checkpoint']} resumes it"
                for rid in filter(None, run_ids.get(i, ())):  # none if stopped before its start
                    store.interrupt_run(rid, job.interrupted)
                return
            except Exception as exc:
                _raise_storage_error(exc, out)  # a full disk stops the command, not this job
                result = None
                job.error, job.exception = traceback.format_exc(), exc
            try:
                if result is not None:
                    job.records = record_result(store, job.config, run_ids[i], result)
                    for logger in loggers:
                        for record in job.records:
                            logger.log(record)
                    Path(job.options["checkpoint"]).unlink(missing_ok=True)
            except Exception as exc:
                _raise_storage_error(exc, out)
                job.error, job.exception = traceback.format_exc(), exc
            if job.error is not None:
                for rid in filter(None, run_ids.get(i, ())):
                    store.fail_run(rid, job.error)
            if overall is not None:
                overall.ensemble_done(steps_left[i], len(job.seeds), failed=job.error is not None)
            if on_done is not None:
                on_done(job)

        try:
            if executor == "ray":
                _run_ray(jobs, order, start, finish, data_dir, device, ray_address)
            elif executor == "inline":
                _run_inline(jobs, order, start, finish, data_dir, device, progress)
            else:  # local or interleaved: a bar per job while they all train at once
                run = _run_interleaved if executor == "interleaved" else partial(_run_local, grace_s=grace_s)
                run(jobs, order, start, finish, data_dir, device, workers, per_job_bars)
        except KeyboardInterrupt as exc:
            _interrupt_started(jobs, order, run_ids, store, exc)
            raise
        except StorageError as exc:
            raise _interrupt_in_flight(store, exc) from exc.__cause__
        finally:
            if overall is not None:
                overall.close()
    return jobs


def _interrupt_started(jobs: Sequence[Job], order: Sequence[int], run_ids: dict, store: ResultStore,
                       exc: KeyboardInterrupt) -> None:
    """Record the runs of every job a worker started as interrupted by ``exc`` (a signal), with
    the checkpoint it resumes from: those still training, and those whose end was being
    recorded when the signal came (a second signal during the first's stop) — an attempt that
    ended stays as it ended."""
    for i in order:
        if i not in run_ids:  # never started: nothing to say
            continue
        job = jobs[i]
        if job.records is None and job.error is None and job.interrupted is None:
            path = Path(job.options["checkpoint"])
            job.interrupted = (f"interrupted by {signal_name(exc)}; " + (
                f"{path} resumes it" if path.is_file() else "no task had ended: it restarts"))
        reason = job.interrupted or f"interrupted by {signal_name(exc)}"
        for rid in filter(None, run_ids[i]):
            store.interrupt_run(rid, reason)


def _raise_storage_error(exc: BaseException, out) -> None:
    """Raise ``exc`` as a :class:`~.oserrors.StorageError` (naming ``out`` when it names no
    file) if it is one — a full disk, a read-only or missing folder —: it stops every job, not
    only the one that met it. Else return."""
    error = storage_error(exc, out)
    if error is not None:
        raise error from exc


def _interrupt_in_flight(store: ResultStore, exc: StorageError) -> StorageError:
    """Record every run still training as interrupted by ``exc`` as far as the store can still
    be written; ``exc`` with a note saying whether it could. The attempts the store holds as
    'running' are this command's: it holds the folder's lock (those of a command killed before
    it are stopped as well, which they are)."""
    reason = f"interrupted: {exc}"
    # A checkpoint whose write failed is a partial temporary file (the one before it is
    # whole): removed, it gives its space back, for the store to write in.
    try:
        for partial in (Path(store.path).parent / CHECKPOINTS).glob("*.ckpt.tmp"):
            partial.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only folder has none; the store below says what it can
    try:
        in_flight = store.running_attempts()
        for run in in_flight:
            store.interrupt_run(run["run_id"], reason, attempt=run["attempt"])
    except (OSError, sqlite3.Error):
        exc.note = ("the store could not record the runs training as interrupted: they read "
                    "'running' until the same command starts them again")
    else:
        exc.note = "the runs training were recorded as interrupted" if in_flight else ""
    return exc


def member_steps_left(job: Job) -> int:
    """The member-steps ``job`` has left to train: tasks × steps per task × K, less what its
    checkpoint (``job.options["checkpoint"]``) holds; all of them without a readable one."""
    from ..checkpoint import saved_steps

    c = job.config
    path = job.options.get("checkpoint")
    done = (saved_steps(path, c.steps_per_task) or 0) if path else 0
    return max(c.tasks * c.steps_per_task - done, 0) * len(job.seeds)


def _progress(jobs, steps_left: Sequence[int], executor: str, workers: int) -> tuple[bool, object | None]:
    """How a sweep shows its progress: whether each ensemble shows its own, and the driver's
    overall progress (or None). A bar per ensemble while they all run at once; beyond that one
    overall bar in the driver (runs done / total, member-steps/s, ETA), advanced as ensembles
    finish. In a log (no terminal: :mod:`.progress_log`) each ensemble writes its lines
    wherever it trains but on Ray, and the driver one as each of several ensembles ends.
    ``steps_left``: each job's member-steps left (:func:`member_steps_left`), what the overall
    progress counts, so that a resumed sweep's pace is its own."""
    lines = not bars_shown()
    per_job = executor == "inline" or (executor != "ray" and (len(jobs) <= workers or lines))
    shown = len(jobs) > 1 if lines else not per_job
    if not shown:
        return per_job, None
    # over the member-steps left (``steps_left``, job by job), advanced as each ensemble ends
    total, runs = sum(steps_left), sum(len(j.seeds) for j in jobs)
    return per_job, SweepLines(total, runs) if lines else _OverallBar(total, runs)


class _OverallBar:
    """The sweep's tqdm bar: member-steps, and the runs done in its postfix."""

    def __init__(self, member_steps: int, runs: int):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=member_steps, unit="member-step", unit_scale=True, file=sys.stderr,
                        dynamic_ncols=True, desc="sweep")
        self.runs, self.failed, self.total_runs = 0, 0, runs
        self.bar.set_postfix_str(f"runs 0/{runs}")

    def ensemble_done(self, member_steps: int, runs: int, failed: bool = False) -> None:
        """An ensemble of ``runs`` runs and ``member_steps`` member-steps ended, finished or
        ``failed``."""
        self.bar.update(member_steps)
        self.runs += runs
        self.failed += runs if failed else 0
        self.bar.set_postfix_str(f"runs {self.runs}/{self.total_runs}"
                                 + (f", {self.failed} failed" if self.failed else ""))

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()


def _run_inline(jobs, order, start, finish, data_dir, device, progress) -> None:
    for i in order:
        start(i)
        # An interrupt propagates from here, before ``finish``: the job is then recorded as
        # interrupted, like a local worker's.
        try:
            result = train_job(jobs[i], data_dir, device, progress=progress)
        except Exception as exc:
            finish(i, lambda exc=exc: _reraise(exc))
        else:
            finish(i, lambda result=result: result)


def _reraise(exc: BaseException):
    raise exc


def _run_interleaved(jobs, order, start, finish, data_dir, device, slots, progress) -> None:
    """Train every job in this process: up to ``slots`` ensembles at once — on CUDA, while the
    device has room for another (:func:`memory_admission`) and the last one started raised the
    aggregate pace (:func:`rate_admission`) — a step of each in turn (longest first). On CUDA
    each ensemble queues its work on a stream of its own
    (:func:`~plasticlab.device.own_stream`): one ensemble's kernels run while the host queues
    the next one's, and an ensemble at a task end steps aside while its measurements run
    (:func:`~plasticlab.engine.ensemble_steps` pauses there), the others training meanwhile.

    A signal asks every ensemble in flight to stop: each saves its state between two steps
    (it resumes there, bit-identical) and is recorded as interrupted, the jobs not started stay
    so, and the signal is raised then; a second signal is raised at once
    (:func:`~.lifecycle.signals_ask_to_stop`)."""
    queue = list(order)
    flight: dict[int, tuple[Generator, Callable]] = {}  # job → its steps, its stream
    bars: dict[int, int] = {}  # job → the line of its progress bar
    admission = memory_admission(device)
    # on CUDA, the pace of all the ensembles in flight every few seconds, and as many in flight
    # as raise it (rate_admission)
    cuda = torch.device(device).type == "cuda"
    pace = AggregatePace(PACE_EVERY_S if cuda else None)
    rate = rate_admission(device)
    samples = {i: len(jobs[i].seeds) * jobs[i].config.batch_size for i in queue}  # a step's

    def advance(i: int) -> None:
        """Job ``i``'s next step (its set-up, the first time); its end recorded when it ends."""
        steps, on_stream = flight[i]
        try:
            with on_stream():
                next(steps)
        except StopIteration as end:
            del flight[i], bars[i]
            finish(i, lambda result=end.value: result)
        except Exception as exc:
            del flight[i], bars[i]
            finish(i, lambda exc=exc: _reraise(exc))

    with signals_ask_to_stop() as asked:
        try:
            while queue or flight:
                # one more while the device has room for it and the last one raised the pace
                # (the first always)
                while queue and len(flight) < slots and not asked and (
                        not flight or (admission.fits() and rate.allows(len(flight)))):
                    i = queue.pop(0)
                    bar = min(set(range(slots)) - set(bars.values()))  # a free line for its bar
                    bars[i] = bar
                    flight[i] = (job_steps(jobs[i], data_dir, device, bar, progress,
                                           stop=lambda: bool(asked)), ensemble_stream(jobs[i], device))
                    start(i)
                    admission.measure(lambda i=i: advance(i))  # its set-up and first step
                    rate.started(len(flight))
                if not flight:
                    break  # asked to stop before the rest started
                stepping = list(flight)
                for i in stepping:
                    advance(i)
                stepped = sum(samples[i] for i in stepping)
                pace.round(stepped, len(stepping))
                rate.round(stepped, len(flight))
        finally:
            for steps, on_stream in flight.values():  # a second signal, a full disk
                with on_stream():
                    steps.close()
    if asked:
        raise asked[0]


def ensemble_stream(job: Job, device) -> Callable:
    """What an ensemble's work runs in on ``device`` beside the others: a stream of its own
    (:func:`~plasticlab.device.own_stream`), except with ``--compile`` on CUDA — its steps are
    then CUDA graph replays whose outputs share one memory pool with every other compiled
    step's, and that pool's reuse is ordered on one stream only (a replay on another stream
    could overwrite an output before its reader ran), so every compiled ensemble queues on the
    current stream."""
    if job.options.get("compile") and torch.device(device).type == "cuda":
        return nullcontext
    return own_stream(device)


def rate_admission(device) -> RateAdmission:
    """How the interleaved executor finds how many ensembles in flight raise the pace on
    ``device`` (:class:`~.pace.RateAdmission`, over :data:`~.pace.RATE_SPAN_S` of steps at each
    count; every ensemble off CUDA; a name tests can replace)."""
    return RateAdmission(RATE_SPAN_S if torch.device(device).type == "cuda" else None)


def memory_admission(device) -> MemoryAdmission:
    """How the interleaved executor decides that one more ensemble fits on ``device``
    (:class:`~plasticlab.device.MemoryAdmission`; a name tests can replace)."""
    return MemoryAdmission.on(device)


def _run_local(jobs, order, start, finish, data_dir, device, workers, progress, grace_s) -> None:
    ctx = multiprocessing.get_context("spawn")
    # The stop request is a file, not a multiprocessing.Event: nothing to release at exit.
    stop = Path(tempfile.gettempdir()) / f"plasticlab-stop-{os.getpid()}-{uuid.uuid4().hex}"
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx,
                               initializer=_init_worker, initargs=(str(stop), os.getpid()))
    queue = list(order)  # longest first
    futures: dict = {}

    def dispatch() -> None:
        """Hand the next job to the pool, which has a free worker: one job per worker, so a
        job is started (:func:`run_jobs`'s ``start``) when it starts training."""
        i = queue.pop(0)
        try:
            fut = pool.submit(train_job, jobs[i], data_dir, device, len(futures) % workers, progress)
        except BrokenProcessPool as exc:
            # A worker died (the OOM killer, a kill -9): the jobs not started stay so, for the
            # same command to start them; the sweep reports them with the failed ones.
            for j in (i, *queue):
                jobs[j].error = f"not started: a worker of the pool died ({exc})"
            queue.clear()
            return
        futures[fut] = i  # first: a signal from here on finds the job among the running ones
        start(i)

    handled = set()
    try:
        for _ in range(min(workers, len(queue))):
            dispatch()
        while pending := [f for f in futures if f not in handled]:
            for fut in wait(pending, return_when=FIRST_COMPLETED).done:
                handled.add(fut)
                finish(futures[fut], fut.result)
                if queue:
                    dispatch()
    except StorageError:
        # The disk is full or cannot be written: nothing more can be recorded, and each
        # ensemble resumes from its last checkpoint.
        queue.clear()
        _kill_workers(pool)
        raise
    except KeyboardInterrupt:
        # Stop within a step: what finishes in the meantime is recorded as finished, what stops
        # as interrupted (its state saved between two steps); the jobs not dispatched never start.
        stop.touch()
        queue.clear()
        deadline = time.monotonic() + grace_s
        try:
            running = [f for f in futures if f not in handled]
            for fut in as_completed(running, timeout=grace_s):
                handled.add(fut)
                finish(futures[fut], fut.result)
                if time.monotonic() > deadline:
                    break
        except (FuturesTimeout, KeyboardInterrupt):
            pass  # a second signal, or workers far from a task end: they resume from the last
        if not all(f.done() for f in futures):
            _kill_workers(pool)  # else they are idle and the shutdown below ends them cleanly
        raise
    finally:
        # Every worker has returned or been killed by now: waiting is short, and lets the
        # pool release its semaphores before the driver exits.
        pool.shutdown(wait=True, cancel_futures=True)
        stop.unlink(missing_ok=True)


def _init_worker(stop_file: str, parent_pid: int) -> None:
    """Set up a worker of the local pool: how it stops (:func:`~.lifecycle.worker_init`), and a
    thread lock for its progress bar."""
    worker_init(stop_file, parent_pid)
    # tqdm's default lock holds a named semaphore, which a killed worker (after the grace, by a
    # second signal, by the OOM killer) never unlinks: the resource tracker then warns of a
    # leak at the driver's exit. A spawned worker's lock is its own, so it coordinated nothing.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes now (they resume from their last checkpoint)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.kill()


def _run_ray(jobs, order, start, finish, data_dir, device, address) -> None:
    try:
        import ray
    except ImportError:
        raise RuntimeError("the ray executor needs Ray: pip install 'plasticlab[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 log_to_driver=False)
        # Ray's own SIGTERM handler logs and aborts the driver: take the signal back, so that
        # SIGTERM stops a Ray sweep as it stops the others (its runs recorded as interrupted)
        handle_sigterm()
    if data_dir is not None or os.environ.get(DATA_ENV_VAR):
        # the driver's data directory, resolved here: a cluster's workers run with the
        # cluster's environment (not this driver's PLASTICLAB_DATA) and their own working folder
        data_dir = str(resolve_data_dir(data_dir))
    try:
        gpus = 1 if str(device).startswith("cuda") else 0
        remote = ray.remote(num_cpus=1, num_gpus=gpus)(_ray_train)
        # Ray queues what the cluster cannot start yet: a job is started as it is submitted.
        refs = {}
        for i in order:
            start(i)
            refs[remote.remote(jobs[i], data_dir, device)] = i
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ref = done[0]
            finish(refs[ref], lambda ref=ref: ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()


def _ray_train(job: Job, data_dir, device: str) -> EnsembleResult:
    return train_job(job, data_dir, device, progress=False)
