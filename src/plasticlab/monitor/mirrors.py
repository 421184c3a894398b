"""The mirrors of a :class:`plasticlab.Monitor`: every measured row to TensorBoard or W&B.

They are :mod:`plasticlab.loggers`' writer and run (the same optional extras, opened and closed
as for runs) with the monitor's tags: ``plasticity/<metric>[/<layer>]`` at the row's step. What
differs from a run's logger: a run's is a fresh writer or W&B run per recorded run, x = task; a
monitor's lives as long as the monitor, may be the user's own, and x = the monitor's step.
"""

from __future__ import annotations

from ..loggers import TensorBoardScalars, WandbRun

PREFIX = "plasticity"
"""The first part of every tag a mirror writes (and the Lightning callback logs)."""


class TensorBoardMirror(TensorBoardScalars):
    """``tensorboard=``: a log directory (a ``SummaryWriter`` of the monitor's own, closed with
    it) or the user's ``SummaryWriter`` (flushed when the monitor closes, left open). Each
    measurement is the scalar ``plasticity/<key>`` at the row's step."""

    def log(self, row: dict) -> None:
        """Write one measured row."""
        step = row["step"]
        for key, value in row.items():
            if key != "step":
                self.add(f"{PREFIX}/{key}", value, step)


class WandbMirror(WandbRun):
    """``wandb=``: ``True`` (the active run, else a new one), a project name (a new run), or the
    user's run object; a run the monitor started is finished when it closes. Each row is one
    ``run.log`` of ``plasticity/<key>``, ``plasticity/step`` included."""

    def __init__(self, target):
        super().__init__(target)
        # The monitor's own x axis, so the user's wandb.log calls keep theirs.
        if hasattr(self.run, "define_metric"):
            self.run.define_metric(f"{PREFIX}/step")
            self.run.define_metric(f"{PREFIX}/*", step_metric=f"{PREFIX}/step")

    def log(self, row: dict) -> None:
        """Log one measured row."""
        super().log({f"{PREFIX}/{k}": v for k, v in row.items()})


def make_mirrors(tensorboard=None, wandb=None) -> list:
    """The mirrors a :class:`plasticlab.Monitor` was asked for by ``tensorboard=`` and ``wandb=``
    (``None`` for none; ``wandb=False`` too)."""
    mirrors: list = []
    if tensorboard is not None:
        mirrors.append(TensorBoardMirror(tensorboard))
    if wandb is not None and wandb is not False:
        mirrors.append(WandbMirror(wandb))
    return mirrors
