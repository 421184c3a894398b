"""A :class:`plasticlab.Monitor` as a PyTorch Lightning callback (``pip install 'plasticlab[lightning]'``)::

    from plasticlab.integrations.lightning import PlasticityCallback

    callback = PlasticityCallback(probe=inputs, every=100)
    trainer = lightning.Trainer(callbacks=[callback], ...)
    trainer.fit(module, data)
    callback.monitor.history.to_pandas()

The monitor is made when training starts, before the first update (θ₀ is the weights then),
and hooks the LightningModule's activation modules; it counts one step per optimizer step
(``trainer.global_step``: with gradient accumulation, once per accumulated update) and reads
``.grad`` after the update, where Lightning leaves the last backward's gradients. Every
measurement also goes to the trainer's loggers (TensorBoard, W&B, CSV, …) as
``plasticity/<metric>[/<layer>]`` at the global step. The hooks are removed when training ends;
the history stays on ``callback.monitor``.

The monitor's state (θ₀, the history, the alerts, the probe taken from the first batch) goes
into Lightning's checkpoints, so ``trainer.fit(..., ckpt_path=…)`` goes on measuring as the
uninterrupted run would — drift from the first θ₀, not from the resumed weights.

This module imports Lightning (``lightning.pytorch``, else the older ``pytorch_lightning``);
``import plasticlab`` never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        import pytorch_lightning as pl
    except ImportError:
        raise ImportError("plasticlab.integrations.lightning needs PyTorch Lightning: "
                          "pip install 'plasticlab[lightning]'") from None

from ..monitor import PREFIX, Monitor

__all__ = ["PlasticityCallback"]


def batch_inputs(batch: Any):
    """The inputs of a training batch: the batch itself if it is a tensor, its first element if
    it is a tuple or list (``(x, y)``), its ``"x"`` / ``"input"`` / ``"inputs"`` entry if it is
    a dict."""
    if torch.is_tensor(batch):
        return batch
    if isinstance(batch, (tuple, list)) and batch:
        return batch[0]
    if isinstance(batch, dict):
        for key in ("x", "input", "inputs"):
            if key in batch:
                return batch[key]
    raise TypeError(f"PlasticityCallback cannot tell the inputs of a {type(batch).__name__} batch; "
                    "pass probe=... or inputs_of=lambda batch: ...")


def _detached(x):
    if torch.is_tensor(x):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _detached(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_detached(v) for v in x)
    return x


class PlasticityCallback(pl.Callback):
    """Watches a LightningModule's plasticity during ``fit``; see the module docstring.

    ``probe``: the measurement inputs (as for :class:`plasticlab.Monitor`); default: the inputs
    of the first training batch (``inputs_of(batch)``, :func:`batch_inputs` unless given), kept
    for the whole run — a few hundred inputs of your own measure better than one batch.
    ``every``: measure every this many optimizer steps. ``log``: also send each measurement to
    the trainer's loggers. Other keyword arguments go to :class:`plasticlab.Monitor`
    (``layers``, ``thresholds``, ``trainability``, ``tensorboard``, ``wandb``, …).
    """

    def __init__(self, probe=None, every: int = 100, *, log: bool = True,
                 inputs_of: Callable[[Any], Any] = batch_inputs, **monitor_kwargs):
        super().__init__()
        if int(every) < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.probe, self.every, self.log = probe, int(every), bool(log)
        self.inputs_of, self.monitor_kwargs = inputs_of, monitor_kwargs
        self.monitor: Monitor | None = None
        self._global_step: int | None = None
        self._loaded: dict | None = None  # a checkpoint's state, until the monitor is made

    def _start(self, trainer, pl_module, probe) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None and self.probe is None:
            probe = loaded["probe"]  # the first batch's inputs of the run this one resumes
        self.monitor = Monitor(pl_module, probe=probe, every=self.every, **self.monitor_kwargs)
        if loaded is not None:
            self.monitor.load_state_dict(loaded["monitor"])
        self.monitor.steps = trainer.global_step  # the monitor's steps are the trainer's (resumed runs)

    def state_dict(self) -> dict:
        """For Lightning's checkpoints: the monitor's state (:meth:`plasticlab.Monitor.state_dict`)
        and the probe it measures on when that was taken from the first batch."""
        if self.monitor is None:
            return dict(self._loaded or {})
        return {"monitor": self.monitor.state_dict(),
                "probe": None if self.probe is not None else self.monitor.probe}

    def load_state_dict(self, state_dict: dict) -> None:
        """A checkpoint's :meth:`state_dict`, loaded into the monitor when training starts."""
        self._loaded = dict(state_dict) or None

    def on_train_start(self, trainer, pl_module) -> None:
        self._global_step = trainer.global_step
        if self.probe is not None:
            self._start(trainer, pl_module, self.probe)
        else:
            self.monitor = None  # made at the first batch, from its inputs

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.monitor is None or self.monitor.closed:
            self._start(trainer, pl_module, _detached(self.inputs_of(batch)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.monitor is None or trainer.global_step == self._global_step:
            return  # no optimizer step in this batch (gradient accumulation)
        self._global_step = trainer.global_step
        row = self.monitor.step()
        if row is not None and self.log:
            metrics = {f"{PREFIX}/{k}": v for k, v in row.items() if k != "step"}
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        if self.monitor is not None:
            self.monitor.close()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if self.monitor is not None:
            self.monitor.close()
