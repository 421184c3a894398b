"""The warnings of a :class:`plasticlab.Monitor`: when it warns (:class:`Thresholds`), what it
raises (:class:`PlasticityWarning`) and keeps (:class:`Alert`), and the checks of each measured
row (:class:`AlertChecks`), every warning with the fix."""

from __future__ import annotations

import collections
import math
import statistics
import warnings
from dataclasses import dataclass

from .history import OVERALL, split_key

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


class AlertChecks:
    """The checks of the measured rows of one monitor and what they remember: the warnings
    given (each check warns once per layer), each layer's last srank values and their peak.
    :attr:`alerts` keeps every warning raised."""

    def __init__(self):
        self.alerts: list[Alert] = []
        self._warned: set[tuple[str, str]] = set()
        self._srank_peak: dict[str, tuple[float, int]] = {}  # layer → (smoothed peak, its step)
        self._srank_recent: dict[str, collections.deque] = {}

    def state_dict(self) -> dict:
        """The warnings raised and what the checks remember, as plain values."""
        return {"alerts": [[a.step, a.kind, a.layer, a.message] for a in self.alerts],
                "warned": [list(w) for w in sorted(self._warned)],
                "srank_peak": {layer: list(peak) for layer, peak in self._srank_peak.items()},
                "srank_recent": {layer: list(values) for layer, values in self._srank_recent.items()}}

    def load_state_dict(self, state: dict, window: int) -> None:
        """Put :meth:`state_dict`'s output back (``window``: the thresholds' median window, the
        length the recent sranks are kept to)."""
        self.alerts[:] = [Alert(int(step), kind, layer, message)
                          for step, kind, layer, message in state["alerts"]]
        self._warned = {(kind, layer) for kind, layer in state["warned"]}
        self._srank_peak = {layer: (float(peak), int(step))
                            for layer, (peak, step) in state["srank_peak"].items()}
        self._srank_recent = {layer: collections.deque(values, maxlen=max(1, window))
                              for layer, values in state["srank_recent"].items()}

    def _warn(self, step: int, kind: str, layer: str, message: str, stacklevel: int) -> None:
        if (kind, layer) in self._warned:
            return
        self._warned.add((kind, layer))
        text = f"plasticlab.Monitor, step {step}: {message} {L2_INIT_FIX}"
        self.alerts.append(Alert(step, kind, layer, text))
        warnings.warn(text, PlasticityWarning, stacklevel=stacklevel + 1)

    def check(self, row: dict, t: Thresholds, stacklevel: int) -> None:
        """Check one measured ``row`` against ``t``. ``stacklevel`` is :func:`warnings.warn`'s,
        counted from this method (1), so that a warning points at the user's call of the monitor."""
        step = row["step"]
        for key, value in row.items():
            metric, layer = split_key(key)
            if layer == OVERALL:
                continue
            if metric == "dead_fraction" and t.dead_fraction is not None and value > t.dead_fraction:
                self._warn(step, "dead", layer,
                           f"{100 * value:.0f} % of the units of layer {layer!r} are dead (zero on every "
                           f"probe input; threshold {100 * t.dead_fraction:.0f} %). Dead units get no "
                           f"gradient and stop learning.", stacklevel)
            elif metric == "srank" and t.srank_drop is not None and math.isfinite(value):
                self._check_srank(step, layer, value, t, stacklevel + 1)
        drift = row.get("weight_drift")
        if t.weight_drift is not None and drift is not None and drift > t.weight_drift:
            self._warn(step, "drift", OVERALL,
                       f"the weights are drifting away from their initialisation: ‖θ − θ₀‖ / ‖θ₀‖ = "
                       f"{drift:.2f} (threshold {t.weight_drift:g}). Large, growing weights make a "
                       f"network hard to retrain.", stacklevel)

    def _check_srank(self, step: int, layer: str, value: float, t: Thresholds, stacklevel: int) -> None:
        # The median of the last `window` values, so that one odd probe pass does not warn, is
        # compared with its own peak since the warm-up (a fresh network's rank falls with any
        # learning, which is not a loss of plasticity).
        recent = self._srank_recent.setdefault(layer, collections.deque(maxlen=max(1, t.window)))
        recent.append(value)
        if step < t.warmup:
            return
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
