"""The optional measurements of a :class:`plasticlab.Monitor` (``measurements=[...]``): the
engine's optional task-end measurements (:mod:`plasticlab.measure.optional`, whose functions
these call) measured on any ``nn.Module`` at each of the monitor's measurements.

- per hidden layer, from the probe pass (:func:`layer_extras`, called by the hooks): feature
  norm and variance, the active fraction under the rule of the layer's activation module
  (:data:`plasticlab.measure.active_units.MODULE_RULES`; a layer whose module has none is left
  out), the rank variants from the layer's one SVD;
- per module that owns parameters (:func:`row_extras`): the effective learning rate
  ‖g‖/‖θ‖ and the zero-gradient ratio of the last backward's ``.grad`` (the gradient the
  optimizer followed, FIRE's and Hare & Tortoise's form; NaN where there is none), the
  distance ‖θ − θ₀‖ to the parameters when the monitor was made;
- churn: the model's outputs on the probe now against its outputs when the probe was set (the
  monitor made, or :meth:`~plasticlab.Monitor.set_probe` at a task change).

The Hessian's top eigenvalue is the costly one; it is asked for with ``hessian=``
(:mod:`plasticlab.monitor.hessian_probe`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ..measure import active_units, churn, effective_lr, feature_stats, init_distance, zero_gradient
from ..measure.optional import ALL, MEASUREMENTS, parse_measurements
from ..measure.rank_variants import RANK_VARIANTS, rank_variants

MONITOR_MEASUREMENTS = tuple(n for n in MEASUREMENTS if n != "hessian")
"""What ``Monitor(measurements=...)`` takes (``all``: every one of them)."""

FEATURE_MEASUREMENTS = frozenset({"feature_stats", "active_fraction", "rank_variants"})
"""The ones the probe pass's hooks measure, layer by layer."""

COUNTS = frozenset(RANK_VARIANTS)
"""Optional metrics whose values are whole numbers."""


def parse_monitor_measurements(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The monitor's optional measurements asked for: names of :data:`MONITOR_MEASUREMENTS`
    (a comma-separated string or a list; ``all``: every one). ``hessian`` is refused with what
    to pass instead."""
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value or [])]
    if "hessian" in names:
        raise ValueError("Monitor: the Hessian's top eigenvalue needs a loss and targets: pass "
                         "hessian=plasticlab.monitor.HessianProbe(loss_fn, targets, every=M)")
    if ALL in names:
        return MONITOR_MEASUREMENTS
    return parse_measurements(names)


def layer_extras(f: torch.Tensor, phi: torch.Tensor, sv: torch.Tensor, finite: torch.Tensor,
                 names: frozenset[str], rule: str | None) -> dict:
    """One layer's optional measurements (device tensors, nothing read back): ``f`` its
    features as ``[1, n, U(, P, 1)]``, ``phi`` its feature matrix, ``sv`` the singular values
    srank took, ``finite`` whether the features are finite, ``rule`` the activation's rule of
    active (None: none)."""
    out: dict = {}
    if "feature_stats" in names:
        out["feature_norm"] = feature_stats.feature_norm(f)
        out["feature_variance"] = feature_stats.feature_variance(f)
    if "active_fraction" in names and rule is not None:
        out["active_fraction"] = active_units.layer_active_fraction(f, rule)
        out["units"] = f.shape[2]
    if "rank_variants" in names:
        nan = torch.full(finite.shape, math.nan, dtype=torch.float64, device=f.device)
        ranks = rank_variants(sv, phi.shape[1], phi.shape[2], f.dtype)
        out |= {k: torch.where(finite, v, nan) for k, v in ranks.items()}
    return out


def _feature_rows(layers: dict[str, dict], names: frozenset[str]) -> dict[str, torch.Tensor]:
    """The per-layer values the hooks measured, under ``metric/layer``, and the whole-network
    ones: feature norm and variance of the last layer (the penultimate features), the active
    fraction over the layers with a rule (each unit once)."""
    out: dict[str, torch.Tensor] = {}
    last = list(layers)[-1]
    if "feature_stats" in names:
        out["feature_norm"] = layers[last]["feature_norm"]
        out["feature_variance"] = layers[last]["feature_variance"]
        for metric in ("feature_norm", "feature_variance"):
            out |= {f"{metric}/{n}": m[metric] for n, m in layers.items()}
    if "active_fraction" in names:
        ruled = {n: m for n, m in layers.items() if "active_fraction" in m}
        if ruled:
            units = sum(m["units"] for m in ruled.values())
            out["active_fraction"] = sum(m["active_fraction"] * m["units"] for m in ruled.values()) / units
            out |= {f"active_fraction/{n}": m["active_fraction"] for n, m in ruled.items()}
    if "rank_variants" in names:
        for metric in RANK_VARIANTS:
            out |= {f"{metric}/{n}": m[metric] for n, m in layers.items()}
    return out


def _parameter_rows(base, names: frozenset[str], device) -> dict[str, torch.Tensor]:
    """Per module (``metric/module``) and over the model, from ``base`` (the monitor's
    :class:`~plasticlab.monitor.measurements.ParameterBaseline`): effective learning rate and
    zero-gradient ratio of the ``.grad`` there (NaN for a module without one), distance to θ₀."""
    out: dict[str, torch.Tensor] = {}
    nan = torch.tensor([math.nan], dtype=torch.float64, device=device)
    modules = [name for name, _ in base.groups]
    with_grad = [[(p.detach().unsqueeze(0), p.grad.detach().unsqueeze(0)) for p in params
                  if p.grad is not None] for _, params in base.groups]
    if names & {"effective_lr", "zero_grad_ratio"}:
        have = [i for i, pairs in enumerate(with_grad) if pairs]
        params = [[p for p, _ in with_grad[i]] for i in have]
        grads = [[g for _, g in with_grad[i]] for i in have]
        if "effective_lr" in names:
            total, per = effective_lr.layer_effective_lr(grads, params) if have else (nan, None)
            out["effective_lr"] = total
            out |= {f"effective_lr/{m}": per[0, have.index(i)].reshape(1) if i in have else nan
                    for i, m in enumerate(modules)}
        if "zero_grad_ratio" in names:
            total, per = zero_gradient.zero_gradient_ratio(grads) if have else (nan, None)
            out["zero_grad_ratio"] = total
            out |= {f"zero_grad_ratio/{m}": per[0, have.index(i)].reshape(1) if i in have else nan
                    for i, m in enumerate(modules)}
    if "distance_to_init" in names:
        now = [[p.detach().unsqueeze(0) for p in params] for _, params in base.groups]
        start = [[base.theta0(p).unsqueeze(0) for p in params] for _, params in base.groups]
        total, per = init_distance.distance_to_init(now, start)
        out["distance_to_init"] = total
        out |= {f"distance_to_init/{m}": per[0, i].reshape(1) for i, m in enumerate(modules)}
    return out


def row_extras(layers: dict[str, dict], base, names: frozenset[str],
               reference: torch.Tensor | None, output: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """Every optional measurement of one monitor row as ``key → one-value tensor`` (keys as in a
    row: ``metric`` for the whole model, ``metric/name`` per layer or module), for
    :func:`~plasticlab.monitor.measurements.measure` to read back with the rest. ``reference``:
    the outputs when the probe was set; ``output``: the probe pass's outputs (churn)."""
    device = base.device
    out = _feature_rows(layers, names) if names & FEATURE_MEASUREMENTS else {}
    out |= _parameter_rows(base, names, device)
    if "churn" in names and reference is not None and output is not None:
        before = reference.reshape(1, reference.shape[0], -1)
        after = output.detach().reshape(1, output.shape[0], -1)
        out["churn"] = churn.churn(before, after)
        if output.dim() == 2:  # [n, classes]: a prediction per input
            out["prediction_churn"] = churn.prediction_churn(before, after)
    return {k: v.reshape(1).double().to(device) for k, v in out.items()}


__all__ = ["COUNTS", "FEATURE_MEASUREMENTS", "MONITOR_MEASUREMENTS", "layer_extras",
           "parse_monitor_measurements", "row_extras"]
