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
- **optional measurements** (``measurements=[...]``, none by default; :mod:`~plasticlab.monitor.extras`):
  effective learning rate ‖g‖/‖θ‖ and zero-gradient ratio of the last backward per module,
  distance to θ₀ per module, feature norm and variance, the active fraction suited to each
  activation (ReLU h > 0, tanh |h| ≤ 0.99, sigmoid in [0.01, 0.99]) and the rank variants per
  layer, churn of the outputs since the probe was set; and ``hessian=HessianProbe(...)``, the
  Hessian's top eigenvalue every M steps (definitions: docs/measurements.md).
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

The package, one concern a module (each imports only from those listed before it):

- :mod:`~plasticlab.monitor.history` — :class:`MonitorHistory`, the tidy table (CSV, pandas);
- :mod:`~plasticlab.monitor.extras` — the optional measurements, per layer and per module;
- :mod:`~plasticlab.monitor.measurements` — what one probe pass and the parameters measure, read
  back in one transfer; θ₀ and the parameter groups;
- :mod:`~plasticlab.monitor.capture` — the feature modules and the forward hooks of the probe pass;
- :mod:`~plasticlab.monitor.probe` — :class:`TrainabilityProbe` and its fit of a model copy;
- :mod:`~plasticlab.monitor.hessian_probe` — :class:`HessianProbe`, the Hessian's top eigenvalue;
- :mod:`~plasticlab.monitor.alerts` — :class:`Thresholds`, :class:`PlasticityWarning`, the checks;
- :mod:`~plasticlab.monitor.mirrors` — TensorBoard and W&B, :mod:`plasticlab.loggers`' writer and
  run with the monitor's tags;
- :mod:`~plasticlab.monitor.figure` — :func:`plot`, histories as a figure, runs overlaid;
- :mod:`~plasticlab.monitor.monitor` — :class:`Monitor`, which ties them together.
"""

# The names that are not in __all__ are imported from here too (PREFIX by the Lightning callback).
from .alerts import L2_INIT_FIX as L2_INIT_FIX
from .alerts import Alert, PlasticityWarning, Thresholds
from .capture import ACTIVATION_TYPES, find_activation_modules
from .figure import plot
from .hessian_probe import HessianProbe
from .history import OVERALL as OVERALL
from .history import MonitorHistory
from .mirrors import PREFIX as PREFIX
from .monitor import Monitor
from .probe import TrainabilityProbe

__all__ = ["ACTIVATION_TYPES", "Alert", "HessianProbe", "Monitor", "MonitorHistory", "PlasticityWarning",
           "Thresholds", "TrainabilityProbe", "find_activation_modules", "plot"]
