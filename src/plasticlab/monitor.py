"""Diagnose loss of plasticity in any PyTorch model: :class:`Monitor`.

::

    monitor = plasticlab.Monitor(model, probe=inputs, every=100)
    for x, y in stream:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(); loss.backward(); optimizer.step()
        monitor.step()                       # the only call the loop needs
    monitor.history.to_pandas()              # one row per (step, layer, metric)
    monitor.close()

What it measures (definitions: SPEC §5 and :mod:`plasticlab.metrics`, whose functions it calls):

- **features**, every ``every`` steps, in one no-grad forward pass over the probe batch with
  the model in eval mode: the output of each activation module (``nn.ReLU`` and friends, found
  automatically; or the modules named in ``layers``), read by a forward hook, is a hidden
  layer. The hooks are attached for that pass only: training forwards run without them (no
  cost, and the model stays picklable), and :meth:`Monitor.close` or the monitor's garbage
  collection removes any still there (after an interrupted pass). Per layer: the fraction
  of **dead** units (zero on every probe input, and at every position for a conv channel),
  of ReDo-**dormant** units (score E|hᵢ| / mean_k E|h_k| ≤ τ, τ = 0.1), the **srank** and the
  **effective rank** of the feature matrix Φ (rows = inputs, columns = units; a conv layer's
  rows are inputs × positions and its columns channels, :func:`plasticlab.metrics.feature_matrix`).
  The whole-network dead and dormant fractions weigh every unit once (Σ dead / Σ units).
- **weights**, per module that owns trainable parameters and over the whole model: the mean
  |θ| (``weight_magnitude``) and the drift from θ₀, ‖θ − θ₀‖ / ‖θ₀‖ (``weight_drift``), θ₀
  being the parameters when the monitor was made (make it before the first update, as L2 Init).
- **gradient**: ‖∇‖₂ of the last backward (``grad_norm``), read from the parameters' ``.grad``
  (no extra pass), overall and per module; NaN where no gradient is there.
- **trainability** (optional, off by default): every M steps a copy of the model is fitted for
  k full-batch steps to fresh random labels on the probe inputs; the loss reduction
  (L₀ − L_k) / L₀ is how much the network can still learn. It costs a model copy and k
  forward/backward/update steps on the probe batch per M training steps.

Monitoring does not change training: the probe pass runs without gradients, with the model in
eval mode (dropout off, batch-norm running statistics untouched; each module's mode is
restored after), under a forked RNG state, and the trainability probe trains a copy. A test
checks that gradients and parameters are bit-identical with and without a monitor.

Results: :meth:`Monitor.step` returns the measurements of the step as a flat dict
(``"srank/3"``: layer ``3``'s srank; ``"dead_fraction"``: the whole network's) or None;
:attr:`Monitor.history` keeps them all and exports a tidy table (CSV, pandas). Warnings
(:class:`PlasticityWarning`) flag dead layers, collapsing feature rank and weights drifting
from their initialisation, each with the fix; ``tensorboard=`` / ``wandb=`` mirror every
measurement (optional extras, as for runs).
"""

from __future__ import annotations

import collections
import copy
import csv
import math
import statistics
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import metrics
from .nets.units import dormant_mask, unit_activity

__all__ = ["ACTIVATION_TYPES", "Alert", "Monitor", "MonitorHistory", "PlasticityWarning", "Thresholds",
           "TrainabilityProbe", "find_activation_modules"]

ACTIVATION_TYPES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Softplus, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid,
    nn.LogSigmoid, nn.Softsign, nn.Tanhshrink, nn.Threshold, nn.GLU,
)
"""The module types whose outputs the monitor treats as hidden features when ``layers`` is not
given. Functional activations (``F.relu`` inside ``forward``) have no module to hook: name the
modules to watch instead."""

OVERALL = "all"
"""The ``layer`` of whole-network values in the tidy table."""

L2_INIT_FIX = ("Fix: L2 Init pulls the weights back toward θ₀ and keeps the network plastic — one line "
               "before training, `reg = plasticlab.L2Init(model, strength=1e-2)`, and "
               "`loss = loss + reg()` (mid-run: `reg = monitor.l2_init(1e-2)` keeps the true θ₀). "
               "See docs/monitor.md.")


class PlasticityWarning(UserWarning):
    """A sign of lost plasticity found by a :class:`Monitor` (filter it with :mod:`warnings`)."""


@dataclass(frozen=True)
class Thresholds:
    """When a :class:`Monitor` warns; ``None`` switches a check off. Each check warns once per
    layer (the drift check once per model).

    dead_fraction: warn when more than this fraction of a layer's units are dead.
    srank_drop: warn when a layer's srank has fallen by at least this fraction from its highest
        value since ``warmup`` (0.5: it halved since the step of that peak). The srank compared
        is the median of the layer's last ``window`` measurements, so one odd probe pass does
        not warn.
    warmup: steps before srank peaks count — the features of a fresh network have a high rank
        that any learning lowers, which is not a loss of plasticity.
    weight_drift: warn when the model's ‖θ − θ₀‖ / ‖θ₀‖ exceeds this.

    The defaults were set on ``examples/monitor_any_model.py`` (a 784-100-100-10 MLP with Adam
    on Permuted MNIST, measured every 100 steps): in its 20 tasks Adam alone gets all three
    warnings and Adam with L2 Init none (docs/monitor.md). Other models and streams may need
    other values.
    """

    dead_fraction: float | None = 0.75
    srank_drop: float | None = 0.5
    warmup: int = 2000
    window: int = 3
    weight_drift: float | None = 1.5


@dataclass(frozen=True)
class Alert:
    """One warning a :class:`Monitor` raised: at ``step``, check ``kind`` ("dead", "srank",
    "drift"), on ``layer``, with the ``message`` shown."""

    step: int
    kind: str
    layer: str
    message: str


@dataclass(frozen=True)
class TrainabilityProbe:
    """The optional trainability probe: every ``every`` steps, a copy of the model is fitted
    for ``steps`` full-batch steps of ``optimizer`` (``"adam"``, ``"sgd"`` or a callable
    ``params → torch.optim.Optimizer``) at ``lr`` to fresh random targets on the probe inputs.

    ``target="labels"``: uniform random classes over the output's last dimension, cross-entropy
    (the output must be ``[n, classes]``); ``"regression"``: standard normal targets shaped like
    the output, mean squared error. Reported: ``trainability_loss_start`` (L₀, before fitting),
    ``trainability_loss_end`` (L_k, after the k steps) and ``trainability`` = (L₀ − L_k) / L₀.

    Cost per probe: one deep copy of the model plus ``steps`` forward/backward/update passes
    on the whole probe batch (measured for the example in docs/monitor.md).
    """

    every: int
    steps: int = 100
    lr: float = 1e-3
    optimizer: str | Callable = "adam"
    target: str = "labels"

    def __post_init__(self):
        if int(self.every) < 1 or int(self.steps) < 1:
            raise ValueError(f"trainability probe: every and steps must be >= 1, got {self.every}, "
                             f"{self.steps}")
        if self.target not in ("labels", "regression"):
            raise ValueError(f"trainability probe: target must be 'labels' or 'regression', "
                             f"got {self.target!r}")
        if not callable(self.optimizer) and self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"trainability probe: optimizer must be 'adam', 'sgd' or a callable, "
                             f"got {self.optimizer!r}")

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        if callable(self.optimizer):
            return self.optimizer(params)
        cls = torch.optim.Adam if self.optimizer == "adam" else torch.optim.SGD
        return cls(params, lr=self.lr)


# --- the hooks --------------------------------------------------------------------------------

def _as_units(f: torch.Tensor, unit_dim: int) -> torch.Tensor:
    """One layer's output ``[n, …]`` as the project's feature layout: ``[1, n, U]`` (one
    feature per unit) or ``[1, n, U, P, 1]`` (every unit seen at P positions, like a conv
    channel's ``[1, n, C, H, W]``), the units taken along ``unit_dim``."""
    if f.dim() == 1:
        return f.reshape(1, -1, 1)
    if f.dim() == 2:
        return f.unsqueeze(0)
    if f.dim() == 4 and unit_dim in (1, -3):
        return f.unsqueeze(0)  # a conv layer's [n, C, H, W] as it is
    f = f.movedim(unit_dim, 1)
    return f.reshape(f.shape[0], f.shape[1], -1, 1).unsqueeze(0)


def _layer_measurements(features: torch.Tensor, unit_dim: int, dormant_threshold: float) -> dict:
    """Per-layer measurements of one probe pass (device tensors; nothing read back)."""
    f = features.detach()
    if f.dtype not in (torch.float32, torch.float64):
        f = f.float()
    f = _as_units(f, unit_dim)
    activity = unit_activity(f)  # E|h_i| [1, U]
    phi = metrics.feature_matrix(f)
    try:
        sv = metrics.singular_values(phi)
    except torch.linalg.LinAlgError:  # non-finite features of a diverged model
        sv = metrics.singular_values(torch.nan_to_num(phi, nan=0.0, posinf=0.0, neginf=0.0))
    finite = torch.isfinite(activity).all(1)
    nan = torch.full(finite.shape, math.nan, dtype=torch.float64, device=f.device)
    return {
        "dead": activity == 0,  # metrics.dead_units: E|h_i| = 0, zero on every input
        "dormant": dormant_mask(activity, dormant_threshold),
        "srank": torch.where(finite, metrics.srank(sv).double(), nan),
        "effective_rank": torch.where(finite, metrics.effective_rank(sv), nan),
    }


class _Capture:
    """What the hooks share: the per-layer measurements of the current probe pass. The hooks
    hold this object, never the monitor, so a monitor that is no longer referenced is
    collected (and any hook left removed)."""

    def __init__(self, unit_dim: int, dormant_threshold: float):
        self.unit_dim, self.dormant_threshold = unit_dim, dormant_threshold
        self.layers: dict[str, dict] = {}
        self.calls: dict[str, int] = {}

    def hook(self, name: str) -> Callable:
        def record(module, inputs, output):
            if isinstance(output, (tuple, list)):
                output = output[0] if output and torch.is_tensor(output[0]) else None
            if not torch.is_tensor(output) or not output.is_floating_point():
                return
            # A module called more than once per forward (one nn.ReLU shared by several
            # layers) is one layer per call: "act", "act#1", …
            calls = self.calls.get(name, 0)
            self.calls[name] = calls + 1
            key = name if calls == 0 else f"{name}#{calls}"
            # Measured here, at once: a later in-place op (x += skip) cannot change it.
            self.layers[key] = _layer_measurements(output, self.unit_dim, self.dormant_threshold)
        return record


def _remove_hooks(handles: list) -> None:
    for h in handles:
        h.remove()
    handles.clear()


def _close_all(closers: list) -> None:
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001 - best effort at collection/exit
            pass
    closers.clear()


def _finalize(handles: list, closers: list) -> None:
    _remove_hooks(handles)
    _close_all(closers)


# --- the history --------------------------------------------------------------------------------

def _split_key(key: str) -> tuple[str, str]:
    metric, _, layer = key.partition("/")
    return metric, layer or OVERALL


class MonitorHistory:
    """Every measurement of a :class:`Monitor`, one dict per measured step (as :meth:`Monitor.step`
    returned it), with a tidy long table: one row per (step, layer, metric) — ``layer`` is
    ``"all"`` for whole-network values."""

    COLUMNS = ("step", "layer", "metric", "value")

    def __init__(self):
        self.steps: list[dict] = []

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def __getitem__(self, i):
        return self.steps[i]

    def append(self, row: dict) -> None:
        self.steps.append(row)

    def rows(self) -> list[dict]:
        """The tidy table as a list of ``{"step", "layer", "metric", "value"}`` dicts."""
        out = []
        for row in self.steps:
            for key, value in row.items():
                if key == "step":
                    continue
                metric, layer = _split_key(key)
                out.append({"step": row["step"], "layer": layer, "metric": metric, "value": value})
        return out

    def series(self, metric: str, layer: str = OVERALL) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric of one layer (``"all"``: the whole network), for plots."""
        key = metric if layer == OVERALL else f"{metric}/{layer}"
        pairs = [(row["step"], row[key]) for row in self.steps if key in row]
        return [s for s, _ in pairs], [v for _, v in pairs]

    def layers(self, metric: str) -> list[str]:
        """The layers that have ``metric``, in the order they were first measured."""
        seen: dict[str, None] = {}
        for row in self.steps:
            for key in row:
                m, layer = _split_key(key)
                if m == metric and layer != OVERALL:
                    seen.setdefault(layer)
        return list(seen)

    def to_pandas(self, wide: bool = False):
        """The tidy table as a ``pandas.DataFrame`` (``wide=True``: one row per step, one
        column per ``metric/layer`` key, as the dicts are)."""
        try:
            import pandas as pd
        except ImportError:
            raise RuntimeError("MonitorHistory.to_pandas needs pandas: pip install pandas") from None
        if wide:
            return pd.DataFrame(self.steps)
        return pd.DataFrame(self.rows(), columns=list(self.COLUMNS))

    def to_csv(self, path: str | Path, wide: bool = False) -> Path:
        """Write the tidy table (or, ``wide=True``, one row per step) to ``path`` as CSV."""
        path = Path(path)
        with path.open("w", newline="") as fh:
            if wide:
                keys: dict[str, None] = {}
                for row in self.steps:
                    keys.update(dict.fromkeys(row))
                writer = csv.DictWriter(fh, fieldnames=list(keys))
                writer.writeheader()
                writer.writerows(self.steps)
            else:
                writer = csv.DictWriter(fh, fieldnames=list(self.COLUMNS))
                writer.writeheader()
                writer.writerows(self.rows())
        return path


# --- the mirrors ------------------------------------------------------------------------------

PREFIX = "plasticity"


class _TensorBoardMirror:
    def __init__(self, target):
        if isinstance(target, (str, Path)):
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise RuntimeError("TensorBoard logging needs the tensorboard package: "
                                   "pip install 'plasticlab[tensorboard]'") from None
            self.writer, self.owned = SummaryWriter(str(target)), True
        else:
            self.writer, self.owned = target, False  # the user's own SummaryWriter

    def log(self, row: dict) -> None:
        step = row["step"]
        for key, value in row.items():
            if key != "step":
                self.writer.add_scalar(f"{PREFIX}/{key}", value, step)

    def close(self) -> None:
        if self.owned:
            self.writer.close()
        else:
            self.writer.flush()


class _WandbMirror:
    def __init__(self, target):
        if target is True or isinstance(target, str):
            try:
                import wandb
            except ImportError:
                raise RuntimeError("W&B logging needs the wandb package: "
                                   "pip install 'plasticlab[wandb]'") from None
            if target is True and wandb.run is not None:
                self.run, self.owned = wandb.run, False
            else:
                project = target if isinstance(target, str) else None
                self.run, self.owned = wandb.init(project=project, reinit=True), True
        else:
            self.run, self.owned = target, False  # the user's own run
        # The monitor's own x axis, so the user's wandb.log calls keep theirs.
        if hasattr(self.run, "define_metric"):
            self.run.define_metric(f"{PREFIX}/step")
            self.run.define_metric(f"{PREFIX}/*", step_metric=f"{PREFIX}/step")

    def log(self, row: dict) -> None:
        self.run.log({f"{PREFIX}/{k}": v for k, v in row.items()})

    def close(self) -> None:
        if self.owned:
            self.run.finish()


# --- the monitor --------------------------------------------------------------------------------

def _call(model: nn.Module, probe):
    if isinstance(probe, dict):
        return model(**probe)
    if isinstance(probe, (tuple, list)):
        return model(*probe)
    return model(probe)


def _to_device(probe, device: torch.device):
    if torch.is_tensor(probe):
        return probe.to(device)
    if isinstance(probe, dict):
        return {k: _to_device(v, device) for k, v in probe.items()}
    if isinstance(probe, (tuple, list)):
        return type(probe)(_to_device(v, device) for v in probe)
    return probe


def _first_tensor(out) -> torch.Tensor:
    if torch.is_tensor(out):
        return out
    if isinstance(out, (tuple, list)) and out and torch.is_tensor(out[0]):
        return out[0]
    if isinstance(out, dict) and "logits" in out:
        return out["logits"]
    raise TypeError(f"the trainability probe needs the model to return a tensor, got {type(out).__name__}")


class Monitor:
    """Watches a model's plasticity while it trains; see the module docstring.

    Parameters
    ----------
    model:
        any ``nn.Module``.
    probe:
        the inputs of the measurement pass: a tensor (``model(probe)``), a tuple of tensors
        (``model(*probe)``) or a dict (``model(**probe)``). Moved to the model's device when
        measured. A few hundred inputs from the training distribution; the srank of a layer
        cannot exceed the number of rows of its feature matrix. :meth:`set_probe` replaces it
        (e.g. at a task change).
    every:
        measure every this many calls of :meth:`step`.
    layers:
        the modules whose outputs are the hidden features, by name (``model.named_modules()``)
        or as modules; default: every module of :data:`ACTIVATION_TYPES`.
    unit_dim:
        the dimension of a feature tensor ``[n, …]`` that holds the units (default 1: the
        feature of a linear layer, the channel of a conv layer; ``-1`` for ``[n, T, d]``
        sequence features). Every other dimension but the first is a position.
    dormant_threshold:
        τ of the ReDo dormant score (default 0.1).
    thresholds:
        when to warn (:class:`Thresholds`); ``None`` never warns.
    trainability:
        ``None`` (default: off), a :class:`TrainabilityProbe`, or an int M for one every M steps
        with the defaults.
    tensorboard:
        a log directory or a ``SummaryWriter``: every measurement is mirrored as scalars
        ``plasticity/<metric>[/<layer>]`` at its step (``pip install 'plasticlab[tensorboard]'``).
    wandb:
        ``True`` (the active W&B run, else a new one), a project name, or a run object
        (``pip install 'plasticlab[wandb]'``); the monitor logs against its own x axis
        ``plasticity/step``.
    seed:
        seed of the trainability probe's random targets (drawn from a generator of the
        monitor's own, never from the global RNG).
    """

    def __init__(self, model: nn.Module, probe, *, every: int = 100,
                 layers: Sequence[str | nn.Module] | None = None, unit_dim: int = 1,
                 dormant_threshold: float = metrics.DORMANT_THRESHOLD,
                 thresholds: Thresholds | None = Thresholds(),
                 trainability: TrainabilityProbe | int | None = None,
                 tensorboard=None, wandb=None, seed: int = 0):
        if not isinstance(model, nn.Module):
            raise TypeError(f"Monitor needs an nn.Module, got {type(model).__name__}")
        if int(every) < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.model, self.every = model, int(every)
        self.probe = probe
        self._probe_cache: tuple[torch.device, object] | None = None
        self.thresholds = thresholds
        if isinstance(trainability, int) and not isinstance(trainability, bool):
            trainability = TrainabilityProbe(every=trainability)
        if trainability is not None and not isinstance(trainability, TrainabilityProbe):
            raise TypeError(f"trainability must be None, a TrainabilityProbe or a number of steps, "
                            f"got {trainability!r}")
        self.trainability = trainability
        self.steps = 0
        self.history = MonitorHistory()
        self.alerts: list[Alert] = []
        self._warned: set[tuple[str, str]] = set()
        self._srank_peak: dict[str, tuple[float, int]] = {}  # layer → (smoothed peak, its step)
        self._srank_recent: dict[str, collections.deque] = {}
        self._generator = torch.Generator().manual_seed(int(seed))

        # The feature modules. Their forward hooks are attached for the probe pass only
        # (_features), so training forwards run without them and the model stays picklable.
        self._capture = _Capture(unit_dim, float(dormant_threshold))
        self.layer_names = self._feature_modules(layers)
        modules = dict(model.named_modules())
        self._hooked = [(name, modules[name]) for name in self.layer_names]
        self._handles: list = []  # the hooks attached now (empty outside a probe pass)

        # θ₀ and the parameter groups (one per module owning trainable parameters).
        self._groups: list[tuple[str, list[nn.Parameter]]] = []
        for name, module in model.named_modules():
            params = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if params:
                self._groups.append((name or "(root)", params))
        self._params = [p for _, group in self._groups for p in group]
        if not self._params:
            raise ValueError("Monitor: the model has no trainable parameters")
        with torch.no_grad():
            self._initial = {id(p): p.detach().clone() for p in self._params}
            self._start_sq = torch.stack([sum(p.detach().double().pow(2).sum() for p in params)
                                          for _, params in self._groups])  # ‖θ₀‖² per module
        self._counts = torch.tensor([sum(p.numel() for p in params) for _, params in self._groups],
                                    dtype=torch.float64)
        self._group_of = torch.tensor([g for g, (_, params) in enumerate(self._groups) for _ in params])

        # Mirrors, then the finalizer that undoes hooks and closes mirrors at close() or GC.
        self._mirrors: list = []
        if tensorboard is not None:
            self._mirrors.append(_TensorBoardMirror(tensorboard))
        if wandb is not None and wandb is not False:
            self._mirrors.append(_WandbMirror(wandb))
        self._finalizer = weakref.finalize(self, _finalize, self._handles,
                                           [m.close for m in self._mirrors])

    # --- set-up ---------------------------------------------------------------------------------
    def _feature_modules(self, layers) -> list[str]:
        named = list(self.model.named_modules())
        if layers is None:
            names = find_activation_modules(self.model)
            if not names:
                raise ValueError(
                    "Monitor: the model has no activation modules (nn.ReLU, nn.GELU, …) to hook; "
                    "functional activations (F.relu in forward) cannot be seen. Name the modules "
                    "whose outputs are the hidden features: Monitor(model, probe, layers=[...]) ")
            return names
        by_id = {id(m): name for name, m in named}
        names = []
        for layer in layers:
            if isinstance(layer, nn.Module):
                if id(layer) not in by_id:
                    raise ValueError(f"Monitor: layer {type(layer).__name__} is not a module of the model")
                names.append(by_id[id(layer)])
            elif layer in dict(named):
                names.append(layer)
            else:
                raise ValueError(f"Monitor: no module named {layer!r}; the model's modules are: "
                                 f"{', '.join(repr(n) for n, _ in named if n)}")
        if not names:
            raise ValueError("Monitor: layers is empty")
        return list(dict.fromkeys(names))  # a module named twice is hooked once

    def set_probe(self, probe) -> None:
        """Use ``probe`` for the measurements from now on (e.g. inputs of a new task)."""
        self.probe, self._probe_cache = probe, None

    def _device(self) -> torch.device:
        return self._params[0].device

    def _probe_on_device(self):
        device = self._device()
        if self._probe_cache is None or self._probe_cache[0] != device:
            self._probe_cache = (device, _to_device(self.probe, device))
        return self._probe_cache[1]

    def _theta0(self, p: torch.Tensor) -> torch.Tensor:
        """θ₀ of parameter ``p``, on ``p``'s device (the model may have moved since)."""
        t = self._initial[id(p)]
        if t.device != p.device:
            t = self._initial[id(p)] = t.to(p.device)
        return t

    def _rng_devices(self) -> list[int]:
        return sorted({p.device.index or 0 for p in self._params if p.device.type == "cuda"})

    # --- the loop's one call ----------------------------------------------------------------------
    def step(self) -> dict | None:
        """Count one training step (call it after ``optimizer.step()``); every ``every`` steps
        measure, every M steps run the trainability probe. Returns the step's measurements
        (see :meth:`measure`) or None."""
        self.steps += 1
        measure = self.steps % self.every == 0
        train = self.trainability is not None and self.steps % self.trainability.every == 0
        if not (measure or train):
            return None
        return self._record(measure, train, stacklevel=3)

    def measure(self, trainability: bool = False) -> dict:
        """Measure now, at the current step count (e.g. once before training for step 0);
        with ``trainability`` also run the trainability probe. Returns a flat dict: ``step``,
        whole-network values under their metric's name and per-layer values under
        ``metric/layer``."""
        if trainability and self.trainability is None:
            raise ValueError("measure(trainability=True) needs Monitor(..., trainability=...)")
        return self._record(True, trainability, stacklevel=3)

    def _record(self, measure: bool, train: bool, stacklevel: int) -> dict:
        if self.closed:
            raise RuntimeError("Monitor: closed; make a new one to go on measuring")
        row: dict = {"step": self.steps}
        if measure:
            row |= self._measurements()
        if train:
            row |= self._trainability()
        self.history.append(row)
        for mirror in self._mirrors:
            mirror.log(row)
        if measure and self.thresholds is not None:
            self._check(row, stacklevel + 1)
        return row

    # --- measurements -------------------------------------------------------------------------
    @torch.no_grad()
    def _features(self) -> dict[str, dict]:
        """One no-grad probe pass in eval mode; the per-layer measurements the hooks took."""
        modes = [(m, m.training) for m in self.model.modules()]
        capture = self._capture
        capture.layers, capture.calls = {}, {}
        with torch.random.fork_rng(devices=self._rng_devices()):
            self.model.eval()
            try:
                self._handles.extend(module.register_forward_hook(capture.hook(name))
                                     for name, module in self._hooked)
                _call(self.model, self._probe_on_device())
            finally:
                _remove_hooks(self._handles)
                for m, training in modes:
                    m.training = training
        layers = capture.layers
        capture.layers, capture.calls = {}, {}
        if not layers:
            raise RuntimeError(f"Monitor: none of the hooked modules ({', '.join(self.layer_names)}) "
                               "ran in the probe pass, or none returned a floating-point tensor")
        return layers

    @torch.no_grad()
    def _measurements(self) -> dict:
        layers = self._features()
        names = list(layers)
        dead, dead_layers = metrics.unit_fractions([layers[n]["dead"] for n in names])
        dormant, dormant_layers = metrics.unit_fractions([layers[n]["dormant"] for n in names])
        srank = torch.cat([layers[n]["srank"] for n in names])
        erank = torch.cat([layers[n]["effective_rank"] for n in names])

        # Weights: mean |θ| per module (metrics.layer_weight_magnitude on [1, …] views); the
        # model's is their mean weighted by parameter count, Σ|θ| / |θ| over every parameter.
        device = self._device()
        counts = self._counts.to(device)
        groups = [[p.detach().unsqueeze(0) for p in params] for _, params in self._groups]
        group_magnitude = metrics.layer_weight_magnitude(groups)[0]
        magnitude = ((group_magnitude * counts).sum() / counts.sum()).reshape(1)
        # Drift: ‖θ − θ₀‖ of every parameter, squared and summed per module; ‖θ₀‖² is fixed.
        moved = torch.stack([torch.linalg.vector_norm(p.detach() - self._theta0(p)) for p in self._params])
        moved = torch.zeros(len(self._groups), dtype=torch.float64, device=device).index_add_(
            0, self._group_of.to(device), moved.double().pow(2))
        start = self._start_sq.to(device)
        group_drift = (moved / start).sqrt()
        drift = (moved.sum() / start.sum()).sqrt().reshape(1)

        # Gradient of the last backward, from .grad: per module metrics.gradient_norm on [1, …]
        # views; the model's is sqrt(Σ module²) over the modules that have gradients.
        nan = torch.tensor([math.nan], dtype=torch.float64, device=device)
        has_grad = torch.tensor([any(p.grad is not None for p in params) for _, params in self._groups],
                                device=device)

        def grad_norm(params):
            grads = [types.SimpleNamespace(grad=p.grad.detach().unsqueeze(0))
                     for p in params if p.grad is not None]
            return metrics.gradient_norm(grads) if grads else nan
        group_grad = torch.cat([grad_norm(params) for _, params in self._groups])
        squares = torch.where(has_grad, group_grad.pow(2), torch.zeros_like(group_grad))
        grad = torch.where(has_grad.any(), squares.sum().sqrt(), nan[0]).reshape(1)

        # One read-back for everything.
        values = torch.cat([t.to(device) for t in (dead, dormant, dead_layers[0], dormant_layers[0], srank,
                                                   erank, magnitude, drift, group_magnitude, group_drift,
                                                   grad, group_grad)]).tolist()
        it = iter(values)
        out = {"dead_fraction": next(it), "dormant_fraction": next(it)}
        per_layer = {m: [next(it) for _ in names] for m in ("dead_fraction", "dormant_fraction")}
        per_layer["srank"] = [int(v) if math.isfinite(v) else v for v in (next(it) for _ in names)]
        per_layer["effective_rank"] = [next(it) for _ in names]
        out["weight_magnitude"], out["weight_drift"] = next(it), next(it)
        modules = [name for name, _ in self._groups]
        per_module = {"weight_magnitude": [next(it) for _ in modules],
                      "weight_drift": [next(it) for _ in modules]}
        out["grad_norm"] = next(it)
        per_module["grad_norm"] = [next(it) for _ in modules]
        for metric, vals in per_layer.items():
            out |= {f"{metric}/{n}": v for n, v in zip(names, vals, strict=True)}
        for metric, vals in per_module.items():
            out |= {f"{metric}/{n}": v for n, v in zip(modules, vals, strict=True)}
        return out

    def _trainability(self) -> dict:
        """Fit a copy of the model to fresh random targets on the probe inputs (module docstring)."""
        probe = self._probe_on_device()
        cfg = self.trainability
        with torch.random.fork_rng(devices=self._rng_devices()):
            clone = copy.deepcopy(self.model)
            params = [p for p in clone.parameters() if p.requires_grad]
            for p in params:
                p.grad = None
            optimizer = cfg.make_optimizer(params)
            with torch.no_grad():
                out = _first_tensor(_call(clone, probe))
            if cfg.target == "labels":
                if out.dim() != 2 or out.shape[1] < 2:
                    raise ValueError(f"trainability probe with random labels needs [n, classes] "
                                     f"outputs, got {tuple(out.shape)} (use target='regression')")
                targets = torch.randint(out.shape[1], (out.shape[0],), generator=self._generator)
                loss_fn = nn.functional.cross_entropy
            else:
                targets = torch.randn(out.shape, generator=self._generator, dtype=out.dtype)
                loss_fn = nn.functional.mse_loss
            targets = targets.to(out.device)

            def loss():
                return loss_fn(_first_tensor(_call(clone, probe)), targets)

            with torch.no_grad():
                start = loss().item()
            with torch.enable_grad():
                for _ in range(cfg.steps):
                    optimizer.zero_grad(set_to_none=True)
                    loss().backward()
                    optimizer.step()
            with torch.no_grad():
                end = loss().item()
        reduction = (start - end) / start if start > 0 else math.nan
        return {"trainability": reduction, "trainability_loss_start": start,
                "trainability_loss_end": end}

    # --- warnings ---------------------------------------------------------------------------------
    def _warn(self, step: int, kind: str, layer: str, message: str, stacklevel: int) -> None:
        if (kind, layer) in self._warned:
            return
        self._warned.add((kind, layer))
        text = f"plasticlab.Monitor, step {step}: {message} {L2_INIT_FIX}"
        self.alerts.append(Alert(step, kind, layer, text))
        warnings.warn(text, PlasticityWarning, stacklevel=stacklevel + 1)

    def _check(self, row: dict, stacklevel: int) -> None:
        t, step = self.thresholds, row["step"]
        for key, value in row.items():
            metric, layer = _split_key(key)
            if layer == OVERALL:
                continue
            if metric == "dead_fraction" and t.dead_fraction is not None and value > t.dead_fraction:
                self._warn(step, "dead", layer,
                           f"{100 * value:.0f} % of the units of layer {layer!r} are dead (zero on every "
                           f"probe input; threshold {100 * t.dead_fraction:.0f} %). Dead units get no "
                           f"gradient and stop learning.", stacklevel)
            elif metric == "srank" and t.srank_drop is not None and math.isfinite(value):
                recent = self._srank_recent.setdefault(layer, collections.deque(maxlen=max(1, t.window)))
                recent.append(value)
                if step < t.warmup:
                    continue
                smooth = statistics.median(recent)
                peak, peak_step = self._srank_peak.get(layer, (-1.0, step))
                if smooth > peak:
                    self._srank_peak[layer] = (smooth, step)
                elif smooth <= (1 - t.srank_drop) * peak:
                    self._warn(step, "srank", layer,
                               f"the feature rank (srank) of layer {layer!r} fell by "
                               f"{100 * (1 - smooth / peak):.0f} % since step {peak_step} ({peak:g} → "
                               f"{smooth:g}, median of the last {len(recent)} measurements; threshold "
                               f"{100 * t.srank_drop:.0f} %). Collapsing features leave fewer "
                               f"directions to learn the next task with.", stacklevel)
        drift = row.get("weight_drift")
        if t.weight_drift is not None and drift is not None and drift > t.weight_drift:
            self._warn(step, "drift", OVERALL,
                       f"the weights are drifting away from their initialisation: ‖θ − θ₀‖ / ‖θ₀‖ = "
                       f"{drift:.2f} (threshold {t.weight_drift:g}). Large, growing weights make a "
                       f"network hard to retrain.", stacklevel)

    # --- the fix, and the end -------------------------------------------------------------------
    def l2_init(self, strength: float):
        """An :class:`plasticlab.L2Init` on ``model`` anchored at the θ₀ this monitor kept (the
        parameters when it was made), for adding L2 Init after training began:
        ``reg = monitor.l2_init(1e-2)``; ``loss = loss + reg()``."""
        from .regularizers import L2Init, regularized_parameters

        params = regularized_parameters(self.model)
        missing = [p for p in params if id(p) not in self._initial]
        if missing:
            raise ValueError("Monitor.l2_init: some parameters of the model were not there when the "
                             "monitor was made; its θ₀ does not cover them")
        return L2Init(params, strength, initial=[self._theta0(p) for p in params])

    def close(self) -> None:
        """Remove the hooks and close the mirrors (also done when the monitor is collected)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Monitor(layers={self.layer_names}, every={self.every}, steps={self.steps}, "
                f"measured={len(self.history)})")


def find_activation_modules(model: nn.Module, kinds: Iterable[type] = ACTIVATION_TYPES) -> list[str]:
    """Names of the modules of ``model`` that a :class:`Monitor` hooks by default."""
    kinds = tuple(kinds)
    return [name for name, m in model.named_modules() if isinstance(m, kinds)]
