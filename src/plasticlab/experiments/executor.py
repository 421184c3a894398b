"""Run several ensembles at once: one worker process per core, one torch thread each.

The parent process is the only writer of the results store: workers train and return their
:class:`~plasticlab.engine.EnsembleResult`; the parent records it.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import EnsembleResult, train_ensemble
from .config import RunConfig
from .runner import progress_bar, record_result, record_start
from .store import ResultStore


@dataclass
class Job:
    """One ensemble to train: a config, its members' seeds and per-member parameters."""

    config: RunConfig
    seeds: list[int]
    member_params: list[dict] | None = None
    label: str = ""
    records: list[dict] = field(default_factory=list)
    error: str | None = None


def default_workers() -> int:
    """One worker per available core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _train(job: Job, data_dir, device: str, position: int, progress: bool) -> EnsembleResult:
    bar, on_task_end = progress_bar(job.config, len(job.seeds), enabled=progress, position=position,
                                    label=job.label or None)
    try:
        return train_ensemble(job.config, job.seeds, job.member_params, data_dir=data_dir,
                              device=device, on_task_end=on_task_end, on_steps=bar.update)
    finally:
        bar.close()


def run_jobs(jobs: Sequence[Job], *, out: str | Path, data_dir=None, device: str = "cpu",
             workers: int | None = None, progress: bool = True,
             on_done: Callable[[Job], None] | None = None) -> list[Job]:
    """Train ``jobs`` on ``workers`` processes (default: one per core), longest first, and
    record every run in ``out``'s store. A failing job is recorded as failed (its traceback
    in ``job.error``) and the others go on. Returns the jobs with their records filled in."""
    workers = workers or default_workers()
    order = sorted(range(len(jobs)), key=lambda i: -_cost(jobs[i]))
    with ResultStore(out) as store:
        run_ids = {i: record_start(store, jobs[i].config, jobs[i].seeds, device=device,
                                   member_params=jobs[i].member_params) for i in order}
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)) or 1, mp_context=ctx) as pool:
            futures = {pool.submit(_train, jobs[i], data_dir, device, slot % workers, progress): i
                       for slot, i in enumerate(order)}
            for fut in as_completed(futures):
                i = futures[fut]
                job = jobs[i]
                try:
                    job.records = record_result(store, job.config, run_ids[i], fut.result())
                except Exception:
                    job.error = traceback.format_exc()
                    for rid in run_ids[i]:
                        store.fail_run(rid, job.error)
                if on_done is not None:
                    on_done(job)
    return list(jobs)


def _cost(job: Job) -> float:
    c = job.config
    return c.tasks * c.steps_per_task * c.batch_size * len(job.seeds)
