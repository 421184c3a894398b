"""Optional mirrors to TensorBoard and Weights & Biases: the writers and runs they share, and the
loggers of recorded runs.

The SQLite results store is the source of truth; these are mirrors for people who browse runs
in those tools. Both are opt-in extras (``pip install plasticlab[tensorboard]`` /
``plasticlab[wandb]``).

- :class:`TensorBoardScalars` and :class:`WandbRun` open (or take the caller's) event writer or
  W&B run and close what they opened. :class:`plasticlab.Monitor`'s mirrors are these with the
  monitor's tags (:mod:`plasticlab.monitor.mirrors`).
- :class:`TensorBoardLogger` and :class:`WandbLogger` are written by the driver process after a
  run is recorded, one scalar series per per-task metric (x axis: task), plus the run's summary.

This module imports nothing from plasticlab, so every layer of the package can use it.
"""

from __future__ import annotations

import numbers
from pathlib import Path


def summary_writer_class() -> type:
    """torch's ``SummaryWriter``; a ``RuntimeError`` that names the extra to install where the
    tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise RuntimeError("TensorBoard logging needs the tensorboard package: "
                           "pip install 'plasticlab[tensorboard]'") from None
    return SummaryWriter


def import_wandb():
    """The ``wandb`` module; a ``RuntimeError`` that names the extra to install where it is missing."""
    try:
        import wandb
    except ImportError:
        raise RuntimeError("W&B logging needs the wandb package: "
                           "pip install 'plasticlab[wandb]'") from None
    return wandb


class TensorBoardScalars:
    """Scalars written to TensorBoard. ``target``: a log directory (a ``SummaryWriter`` of its
    own, closed by :meth:`close`) or the caller's own ``SummaryWriter`` (or anything with
    ``add_scalar`` and ``flush``), which :meth:`close` flushes and leaves open."""

    def __init__(self, target):
        if isinstance(target, (str, Path)):
            self.writer, self.owned = summary_writer_class()(str(target)), True
        else:
            self.writer, self.owned = target, False

    def add(self, tag: str, value: float, step: int) -> None:
        """One scalar ``value`` of series ``tag`` at x = ``step``."""
        self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        """Close the writer opened here; flush the caller's (it goes on writing with it)."""
        if self.owned:
            self.writer.close()
        else:
            self.writer.flush()


class WandbRun:
    """A W&B run to log to. ``target``: a project name or ``None`` — a run started here,
    ``wandb.init(project=target, reinit=True, **settings)``, which :meth:`close` finishes;
    ``True`` — the active run (``wandb.run``) if there is one, else a new run as for ``None``;
    any other object — the caller's own run. A run that was not started here is left open."""

    def __init__(self, target=None, **settings):
        if target is None or target is True or isinstance(target, str):
            wandb = import_wandb()
            if target is True and wandb.run is not None:
                self.run, self.owned = wandb.run, False
            else:
                project = target if isinstance(target, str) else None
                self.run, self.owned = wandb.init(project=project, reinit=True, **settings), True
        else:
            self.run, self.owned = target, False

    def log(self, values: dict) -> None:
        """One ``run.log`` call."""
        self.run.log(values)

    def close(self) -> None:
        """Finish the run if it was started here."""
        if self.owned:
            self.run.finish()


# --- the loggers of recorded runs ------------------------------------------------------------

def _scalars(record: dict) -> dict[str, list[float]]:
    """The per-task numeric series of a run record (lists of numbers; per-layer lists are
    split into ``name/layer_i``)."""
    series: dict[str, list[float]] = {}
    for key, value in record.items():
        if not isinstance(value, list) or not value:
            continue
        if all(isinstance(v, numbers.Number) for v in value):
            series[key] = [float(v) for v in value]
        elif key != "accuracy_matrix" and all(isinstance(v, list) for v in value):
            for layer in range(len(value[0])):
                series[f"{key}/layer_{layer}"] = [float(v[layer]) for v in value]
    return series


def _totals(record: dict) -> dict[str, float]:
    """A run record's total online measure: ``total_online_accuracy``, or on a regression
    problem ``total_online_squared_error``."""
    return {k: record[k] for k in ("total_online_accuracy", "total_online_squared_error") if k in record}


def _run_name(record: dict) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(record["params"].items()))
    return f"{record['problem']}/{record['method']}/{params or 'default'}/seed{record['seed']}"


class TensorBoardLogger:
    """Writes each run to ``DIR/<problem>/<method>/<params>/seed<k>`` as TensorBoard scalars."""

    def __init__(self, log_dir: str | Path):
        summary_writer_class()  # a missing package fails here, before any run, not after the first
        self.log_dir = Path(log_dir)

    def log(self, record: dict) -> None:
        """Mirror one run record."""
        scalars = TensorBoardScalars(self.log_dir / _run_name(record))
        try:
            for name, values in _scalars(record).items():
                for task, v in enumerate(values):
                    scalars.add(name, v, task)
            for name, total in _totals(record).items():
                scalars.add(name, total, 0)
        finally:
            scalars.close()


class WandbLogger:
    """Logs each run as a W&B run in ``project`` (set ``WANDB_MODE=offline`` to keep it local)."""

    def __init__(self, project: str):
        self.wandb, self.project = import_wandb(), project  # a missing package fails here, as above

    def log(self, record: dict) -> None:
        """Mirror one run record."""
        config = {k: record[k] for k in ("problem", "method", "params", "optimizer", "lr", "seed")}
        run = WandbRun(self.project, name=_run_name(record), config=config)
        try:
            series = _scalars(record)
            tasks = max((len(v) for v in series.values()), default=0)
            for task in range(tasks):
                run.log({k: v[task] for k, v in series.items() if task < len(v)} | {"task": task})
            for name, total in _totals(record).items():
                run.run.summary[name] = total
        finally:
            run.close()


def make_loggers(tensorboard: str | None = None, wandb_project: str | None = None) -> list:
    """The loggers asked for (an empty list when none)."""
    loggers = []
    if tensorboard:
        loggers.append(TensorBoardLogger(tensorboard))
    if wandb_project:
        loggers.append(WandbLogger(wandb_project))
    return loggers
