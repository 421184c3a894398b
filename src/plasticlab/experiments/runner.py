"""Run an ensemble and record every member in the results store (one row per run): the driver
of ``plasticlab run``, above the executor (:mod:`~plasticlab.experiments.executor`) that trains
and records it (:mod:`~plasticlab.experiments.recording`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import checkpoint as ckpt
from ..run_config import Members
from .config import RunConfig
from .executor import Job, run_jobs
from .recording import checkpoint_path


def run_ensemble(
    config: RunConfig,
    seeds: Sequence[int],
    *,
    out: str | Path,
    data_dir=None,
    device: str = "cpu",
    threads: int | None = None,
    progress: bool = True,
    measure: bool = True,
    measure_every: int | None = None,
    forgetting: bool = False,
    measurements: Sequence[str] = (),
    backprop: str = "auto",
    compile: bool = False,
    checkpoint_every: float | None = None,
    loggers: Sequence = (),
    resume: bool = True,
    on_resume: Callable[[Path, dict], None] | None = None,
) -> list[dict]:
    """Train ``seeds`` as one ensemble in this process and store each run; return the records.

    This is :func:`~plasticlab.experiments.executor.run_jobs` with one job and the ``inline``
    executor — the driver ``sweep`` uses — plus what ``plasticlab run`` adds: ``threads``,
    resuming, and re-raising a failure.

    ``loggers`` (:mod:`plasticlab.loggers`) mirror each recorded run.

    ``measure``, ``measure_every``, ``forgetting`` and ``measurements`` are passed to
    :func:`~plasticlab.engine.train_ensemble` (task-end measurements, every-N-steps
    measurements, the accuracy matrix, the optional measurements); they change what is
    recorded, never the training.
    ``backprop`` (``auto`` | ``autograd`` | ``manual``) and ``compile`` (the compiled step,
    :mod:`plasticlab.step.compiled`) are passed on too.

    A new attempt at each run is marked 'running' before training, and its metrics and
    'finished' status are committed together at the end; earlier attempts are kept. The
    ensemble saves a checkpoint at every task end
    (:func:`~plasticlab.experiments.recording.checkpoint_path`) and, with ``resume``, continues
    from one left by an interrupted attempt (``on_resume(path, header)`` is told, with the
    checkpoint's header: ``next_task``, the code of its sittings). On
    SIGINT/SIGTERM (:class:`~plasticlab.experiments.lifecycle.Terminated`) the attempts are
    marked 'interrupted' — the checkpoint resumes them — and the interrupt propagates; on any
    other exception they are marked 'failed' with the traceback, and the exception propagates.
    """
    members = Members.from_config(config, seeds)
    path = checkpoint_path(out, members)
    if not resume:
        path.unlink(missing_ok=True)
    elif path.is_file() and on_resume is not None:
        on_resume(path, ckpt.read_header(path))
    options = dict(threads=threads, measure=measure, measure_every=measure_every,
                   forgetting=forgetting, backprop=backprop, compile=compile,
                   **({} if checkpoint_every is None else {"checkpoint_every": checkpoint_every}),
                   **({"measurements": tuple(measurements)} if measurements else {}),
                   checkpoint=str(path))
    job = Job(members, options=options)
    run_jobs([job], out=out, data_dir=data_dir, device=device, progress=progress,
             executor="inline", loggers=loggers)
    if job.exception is not None:
        raise job.exception
    return job.records


def strict_json(value):
    """``value`` with every non-finite float (NaN, ±inf) replaced by None: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value
