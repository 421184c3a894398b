"""Optional run logging to TensorBoard and Weights & Biases.

The SQLite results store is the source of truth; these are mirrors for people who browse runs
in those tools. Both are opt-in extras (``pip install plasticlab[tensorboard]`` /
``plasticlab[wandb]``) and are written by the driver process after a run is recorded, one
scalar series per per-task metric (x axis: task), plus the run's summary.
"""

from __future__ import annotations

import numbers
from pathlib import Path


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


def _run_name(record: dict) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(record["params"].items()))
    return f"{record['problem']}/{record['method']}/{params or 'default'}/seed{record['seed']}"


class TensorBoardLogger:
    """Writes each run to ``DIR/<problem>/<method>/<params>/seed<k>`` as TensorBoard scalars."""

    def __init__(self, log_dir: str | Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise RuntimeError("TensorBoard logging needs the tensorboard package: "
                               "pip install 'plasticlab[tensorboard]'") from None
        self._writer_cls = SummaryWriter
        self.log_dir = Path(log_dir)

    def log(self, record: dict) -> None:
        """Mirror one run record."""
        writer = self._writer_cls(str(self.log_dir / _run_name(record)))
        try:
            for name, values in _scalars(record).items():
                for task, v in enumerate(values):
                    writer.add_scalar(name, v, task)
            writer.add_scalar("total_online_accuracy", record["total_online_accuracy"], 0)
        finally:
            writer.close()


class WandbLogger:
    """Logs each run as a W&B run in ``project`` (set ``WANDB_MODE=offline`` to keep it local)."""

    def __init__(self, project: str):
        try:
            import wandb
        except ImportError:
            raise RuntimeError("W&B logging needs the wandb package: "
                               "pip install 'plasticlab[wandb]'") from None
        self.wandb, self.project = wandb, project

    def log(self, record: dict) -> None:
        """Mirror one run record."""
        config = {k: record[k] for k in ("problem", "method", "params", "optimizer", "lr", "seed")}
        run = self.wandb.init(project=self.project, name=_run_name(record), config=config,
                              reinit=True)
        try:
            series = _scalars(record)
            tasks = max((len(v) for v in series.values()), default=0)
            for task in range(tasks):
                run.log({k: v[task] for k, v in series.items() if task < len(v)} | {"task": task})
            run.summary["total_online_accuracy"] = record["total_online_accuracy"]
        finally:
            run.finish()


def make_loggers(tensorboard: str | None = None, wandb_project: str | None = None) -> list:
    """The loggers asked for (an empty list when none)."""
    loggers = []
    if tensorboard:
        loggers.append(TensorBoardLogger(tensorboard))
    if wandb_project:
        loggers.append(WandbLogger(wandb_project))
    return loggers
