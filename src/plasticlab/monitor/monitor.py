"""The :class:`Monitor`: the one object a training loop holds. It counts steps, and at a
measurement runs the capture's probe pass, the measurements, the trainability probe, the checks
and the mirrors, and keeps the row in its history; the rest of the package does each of these."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
from torch import nn

from .. import metrics
from ..measure.active_units import rule_for_module
from ..state import check_keys
from .alerts import AlertChecks, Thresholds
from .capture import Capture, feature_modules, probe_pass, remove_hooks, to_device
from .extras import FEATURE_MEASUREMENTS, parse_monitor_measurements, row_extras
from .figure import DEFAULT_METRICS, plot
from .hessian_probe import HessianProbe, hessian_eigenvalue
from .history import MonitorHistory
from .measurements import ParameterBaseline, measure
from .mirrors import make_mirrors
from .probe import TrainabilityProbe, output_tensor, trainability


def _close_all(closers: list) -> None:
    for close in closers:
        try:
            close()
        except Exception:  # noqa: BLE001 - best effort at collection/exit
            pass
    closers.clear()


def _finalize(handles: list, closers: list) -> None:
    # Holds the hook handles and the mirrors' close methods, never the monitor, so that it can
    # run when the monitor is collected.
    remove_hooks(handles)
    _close_all(closers)


class Monitor:
    """Watches a model's plasticity while it trains; see :mod:`plasticlab.monitor`.

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
    measurements:
        optional measurements to add at each measurement, by name (``all``: every one):
        ``effective_lr``, ``feature_stats``, ``active_fraction``, ``rank_variants``, ``churn``,
        ``zero_grad_ratio``, ``distance_to_init`` (:mod:`plasticlab.monitor.extras`; none by
        default). Churn compares the outputs with those when the probe was set.
    hessian:
        ``None`` (default: off) or a :class:`HessianProbe`: the Hessian's top eigenvalue
        every M steps.
    """

    def __init__(self, model: nn.Module, probe, *, every: int = 100,
                 layers: Sequence[str | nn.Module] | None = None, unit_dim: int = 1,
                 dormant_threshold: float = metrics.DORMANT_THRESHOLD,
                 thresholds: Thresholds | None = Thresholds(),  # noqa: B008 - frozen, shared safely
                 trainability: TrainabilityProbe | int | None = None,
                 tensorboard=None, wandb=None, seed: int = 0,
                 measurements: Sequence[str] | str = (), hessian: HessianProbe | None = None):
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
        if hessian is not None and not isinstance(hessian, HessianProbe):
            raise TypeError(f"hessian must be None or a HessianProbe, got {hessian!r}")
        self.hessian = hessian
        self.measurements = frozenset(parse_monitor_measurements(measurements))
        self.steps = 0
        self.history = MonitorHistory()
        self._checks = AlertChecks()
        self.alerts = self._checks.alerts
        self._generator = torch.Generator().manual_seed(int(seed))

        # The feature modules. Their forward hooks are attached for the probe pass only
        # (Capture.run), so training forwards run without them and the model stays picklable.
        self.layer_names = feature_modules(model, layers)
        modules = dict(model.named_modules())
        self._hooked = [(name, modules[name]) for name in self.layer_names]
        rules = {name: rule_for_module(module) for name, module in self._hooked}
        if "active_fraction" in self.measurements and not any(rules.values()):
            raise ValueError("Monitor: active_fraction is defined for the outputs of nn.ReLU, "
                             "nn.ReLU6, nn.Tanh, nn.Hardtanh, nn.Sigmoid and nn.Hardsigmoid; none "
                             "of the hooked layers is one")
        self._capture = Capture(unit_dim, float(dormant_threshold),
                                self.measurements & (FEATURE_MEASUREMENTS | {"churn"}), rules)
        self._handles = self._capture.handles  # the hooks attached now (empty outside a probe pass)

        # θ₀ and the parameter groups (one per module owning trainable parameters).
        self._baseline = ParameterBaseline(model)
        self._reference = self._reference_outputs()  # churn: the outputs when the probe was set

        # Mirrors, then the finalizer that undoes hooks and closes mirrors at close() or GC.
        self._mirrors = make_mirrors(tensorboard, wandb)
        self._finalizer = weakref.finalize(self, _finalize, self._handles,
                                           [m.close for m in self._mirrors])

    # --- set-up ---------------------------------------------------------------------------------
    def set_probe(self, probe) -> None:
        """Use ``probe`` for the measurements from now on (e.g. inputs of a new task)."""
        self.probe, self._probe_cache = probe, None
        self._reference = self._reference_outputs()

    def _reference_outputs(self) -> torch.Tensor | None:
        """With churn asked for, the model's outputs on the probe now (a probe pass), else None."""
        if "churn" not in self.measurements:
            return None
        out = probe_pass(self.model, self._probe_on_device(), self._baseline.cuda_devices())
        return output_tensor(out).detach()

    def _probe_on_device(self):
        device = self._baseline.device
        if self._probe_cache is None or self._probe_cache[0] != device:
            self._probe_cache = (device, to_device(self.probe, device))
        return self._probe_cache[1]

    # --- the loop's one call ----------------------------------------------------------------------
    def step(self) -> dict | None:
        """Count one training step (call it after ``optimizer.step()``); every ``every`` steps
        measure, every M steps run the trainability probe. Returns the step's measurements
        (see :meth:`measure`) or None."""
        self.steps += 1
        measure = self.steps % self.every == 0
        train = self.trainability is not None and self.steps % self.trainability.every == 0
        curvature = self.hessian is not None and self.steps % self.hessian.every == 0
        if not (measure or train or curvature):
            return None
        return self._record(measure, train, stacklevel=3, curvature=curvature)

    def measure(self, trainability: bool = False) -> dict:
        """Measure now, at the current step count (e.g. once before training for step 0);
        with ``trainability`` also run the trainability probe. Returns a flat dict: ``step``,
        whole-network values under their metric's name and per-layer values under
        ``metric/layer``."""
        if trainability and self.trainability is None:
            raise ValueError("measure(trainability=True) needs Monitor(..., trainability=...)")
        return self._record(True, trainability, stacklevel=3)

    def _record(self, measure_now: bool, train: bool, stacklevel: int, curvature: bool = False) -> dict:
        if self.closed:
            raise RuntimeError("Monitor: closed; make a new one to go on measuring")
        row: dict = {"step": self.steps}
        if measure_now:
            layers = self._capture.run(self.model, self._hooked, self._probe_on_device(),
                                       self._baseline.cuda_devices())
            output = self._capture.output
            extras = row_extras(layers, self._baseline, self.measurements, self._reference,
                                None if output is None else output_tensor(output))
            row |= measure(layers, self._baseline, extras)
        if curvature:
            row |= hessian_eigenvalue(self.model, self._probe_on_device(), self.hessian,
                                      self._baseline.cuda_devices())
        if train:
            row |= trainability(self.model, self._probe_on_device(), self.trainability,
                                self._generator, self._baseline.cuda_devices())
        self.history.append(row)
        for mirror in self._mirrors:
            mirror.log(row)
        if measure_now and self.thresholds is not None:
            self._checks.check(row, self.thresholds, stacklevel + 1)
        return row

    # --- resuming --------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What this monitor counted, measured and kept — the step count, the history, the
        alerts and what their checks remember, θ₀, churn's reference outputs, the trainability
        probe's generator — as tensors and plain values (``torch.save``-able, readable with
        ``weights_only=True``), for resuming a training loop. The probe and the settings are not
        in it: they come from the constructor."""
        return {"layers": list(self.layer_names), "steps": self.steps,
                "history": self.history.state_dict(), "checks": self._checks.state_dict(),
                "baseline": self._baseline.state_dict(), "generator": self._generator.get_state(),
                "reference": None if self._reference is None else self._reference.clone()}

    def load_state_dict(self, state: dict) -> None:
        """Put :meth:`state_dict`'s output back into this monitor, made as the saved one was (on
        the same model and layers, with the same measurements): from here on it measures drift
        from the saved θ₀ and numbers its steps on from the saved count. A mismatch is a
        ``ValueError`` naming it, raised before anything is written."""
        check_keys("Monitor", state, ("layers", "steps", "history", "checks", "baseline",
                                      "generator", "reference"))
        if list(state["layers"]) != list(self.layer_names):
            raise ValueError(f"Monitor.load_state_dict: the state was saved by a monitor of layers "
                             f"{list(state['layers'])}, this one watches {self.layer_names}")
        if (state["reference"] is None) != (self._reference is None):
            raise ValueError("Monitor.load_state_dict: the state was saved by a monitor "
                             f"{'without' if state['reference'] is None else 'with'} churn among its "
                             "measurements, and this one is not: make it with the same measurements")
        # each part loaded into a fresh one first, so that a bad part leaves this monitor as it was
        baseline = ParameterBaseline(self.model)
        baseline.load_state_dict(state["baseline"])
        history = MonitorHistory()
        history.load_state_dict(state["history"])
        checks = AlertChecks()
        checks.load_state_dict(state["checks"], self.thresholds.window if self.thresholds else 1)
        generator = torch.Generator()
        generator.set_state(state["generator"])
        self._baseline, self.history, self._generator = baseline, history, generator
        self.alerts[:] = checks.alerts  # the list a caller may hold stays the monitor's
        checks.alerts = self.alerts
        self._checks = checks
        self.steps = int(state["steps"])
        if self._reference is not None:
            self._reference = state["reference"].to(self._reference.device, self._reference.dtype)

    # --- the fix, and the end -------------------------------------------------------------------
    def l2_init(self, strength: float):
        """An :class:`plasticlab.L2Init` on ``model`` anchored at the θ₀ this monitor kept (the
        parameters when it was made), for adding L2 Init after training began:
        ``reg = monitor.l2_init(1e-2)``; ``loss = loss + reg()``."""
        from ..regularizers import L2Init, regularized_parameters

        params = regularized_parameters(self.model)
        missing = [p for p in params if id(p) not in self._baseline.initial]
        if missing:
            raise ValueError("Monitor.l2_init: some parameters of the model were not there when the "
                             "monitor was made; its θ₀ does not cover them")
        return L2Init(params, strength, initial=[self._baseline.theta0(p) for p in params])

    def plot(self, path=None, metrics: Sequence[str] = DEFAULT_METRICS, *, task_steps: int | None = None,
             title: str | None = None):
        """A figure of this monitor's history, one panel per measurement against the step (each
        layer a line style where measured per layer), written to ``path`` when given: see
        :func:`plasticlab.monitor.plot`, which overlays several runs."""
        return plot(self.history, path, metrics, task_steps=task_steps, title=title)

    def close(self) -> None:
        """Remove the hooks and close the mirrors (also done when the monitor is collected)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (a closed monitor measures no more)."""
        return not self._finalizer.alive

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Monitor(layers={self.layer_names}, every={self.every}, steps={self.steps}, "
                f"measured={len(self.history)})")
