"""What a :class:`plasticlab.Monitor` measures (definitions: SPEC §5 and :mod:`plasticlab.metrics`,
whose functions it calls): per hidden layer, from one probe pass, the dead and dormant units,
srank and effective rank (:func:`layer_measurements`, called by the hooks); per module and over
the model, the weight magnitude, the drift from θ₀ (:class:`ParameterBaseline`) and the gradient
norm; all read back in one transfer (:func:`measure`)."""

from __future__ import annotations

import math
import types

import torch
from torch import nn

from .. import metrics
from ..nets.units import dormant_mask, unit_activity
from .extras import COUNTS, layer_extras


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


def layer_measurements(features: torch.Tensor, unit_dim: int, dormant_threshold: float,
                       extras: frozenset[str] = frozenset(), rule: str | None = None) -> dict:
    """Per-layer measurements of one probe pass (device tensors; nothing read back): the
    ``dead`` and ``dormant`` unit masks, ``srank`` and ``effective_rank`` (NaN where the
    features are not finite), and the optional ``extras`` asked for
    (:func:`~plasticlab.monitor.extras.layer_extras`; ``rule``: the activation's rule of active)."""
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
        **(layer_extras(f, phi, sv, finite, extras, rule) if extras else {}),
    }


class ParameterBaseline:
    """A model's trainable parameters in groups (one per module that owns some, named as in
    ``model.named_modules()``, the root ``"(root)"``) and θ₀, their values when this was made.
    A parameter tied between modules (an embedding and the output layer) is in the first one's
    group only, as ``model.named_parameters()`` names it: the model's totals count it once."""

    def __init__(self, model: nn.Module):
        self.groups: list[tuple[str, list[nn.Parameter]]] = []
        seen: set[int] = set()
        for name, module in model.named_modules():
            params = [p for p in module.parameters(recurse=False) if p.requires_grad and id(p) not in seen]
            seen.update(map(id, params))
            if params:
                self.groups.append((name or "(root)", params))
        self.params = [p for _, group in self.groups for p in group]
        if not self.params:
            raise ValueError("Monitor: the model has no trainable parameters")
        self._take_initial([p.detach().clone() for p in self.params])
        self.counts = torch.tensor([sum(p.numel() for p in params) for _, params in self.groups],
                                   dtype=torch.float64)
        self.group_of = torch.tensor([g for g, (_, params) in enumerate(self.groups) for _ in params])

    def _take_initial(self, initial: list[torch.Tensor]) -> None:
        """θ₀ (one tensor per parameter, in :attr:`params`' order) and ‖θ₀‖² per module."""
        with torch.no_grad():
            self.initial = {id(p): t for p, t in zip(self.params, initial, strict=True)}
            self.start_sq = torch.stack([sum(self.initial[id(p)].double().pow(2).sum() for p in params)
                                         for _, params in self.groups])

    def state_dict(self) -> dict:
        """θ₀, one tensor per parameter in :attr:`params`' order (‖θ₀‖² follows from it)."""
        return {"initial": [self.initial[id(p)].clone() for p in self.params]}

    def load_state_dict(self, state: dict) -> None:
        """Put :meth:`state_dict`'s output back: θ₀ onto each parameter's device and dtype;
        another number of parameters, or another shape, is a ``ValueError``."""
        initial = state["initial"]
        shapes = [tuple(p.shape) for p in self.params]
        saved = [tuple(t.shape) for t in initial] if isinstance(initial, list) else None
        if saved != shapes:
            raise ValueError(f"Monitor.load_state_dict: θ₀ is of parameters shaped {saved}, this "
                             f"model's are {shapes}: was the state saved from another model?")
        self._take_initial([t.to(p.device, p.dtype) for p, t in zip(self.params, initial, strict=True)])

    @property
    def device(self) -> torch.device:
        """Where the model is now (its first parameter's device)."""
        return self.params[0].device

    def cuda_devices(self) -> list[int]:
        """The CUDA devices the parameters are on (whose RNG states a probe pass forks)."""
        return sorted({p.device.index or 0 for p in self.params if p.device.type == "cuda"})

    def theta0(self, p: torch.Tensor) -> torch.Tensor:
        """θ₀ of parameter ``p``, on ``p``'s device (the model may have moved since)."""
        t = self.initial[id(p)]
        if t.device != p.device:
            t = self.initial[id(p)] = t.to(p.device)
        return t


def _weights(base: ParameterBaseline, device: torch.device) -> list[torch.Tensor]:
    """[model's mean |θ|, model's drift, per-module mean |θ|, per-module drift]."""
    # Mean |θ| per module (metrics.layer_weight_magnitude on [1, …] views); the model's is their
    # mean weighted by parameter count, Σ|θ| / |θ| over every parameter.
    counts = base.counts.to(device)
    groups = [[p.detach().unsqueeze(0) for p in params] for _, params in base.groups]
    group_magnitude = metrics.layer_weight_magnitude(groups)[0]
    magnitude = ((group_magnitude * counts).sum() / counts.sum()).reshape(1)
    # Drift: ‖θ − θ₀‖ of every parameter, squared and summed per module; ‖θ₀‖² is fixed.
    moved = torch.stack([torch.linalg.vector_norm(p.detach() - base.theta0(p)) for p in base.params])
    moved = torch.zeros(len(base.groups), dtype=torch.float64, device=device).index_add_(
        0, base.group_of.to(device), moved.double().pow(2))
    start = base.start_sq.to(device)
    group_drift = (moved / start).sqrt()
    drift = (moved.sum() / start.sum()).sqrt().reshape(1)
    return [magnitude, drift, group_magnitude, group_drift]


def _gradients(base: ParameterBaseline, device: torch.device) -> list[torch.Tensor]:
    """[model's ‖∇‖, per-module ‖∇‖] of the last backward, from ``.grad`` (NaN where none)."""
    # Per module metrics.gradient_norm on [1, …] views; the model's is sqrt(Σ module²) over the
    # modules that have gradients.
    nan = torch.tensor([math.nan], dtype=torch.float64, device=device)
    has_grad = torch.tensor([any(p.grad is not None for p in params) for _, params in base.groups],
                            device=device)

    def grad_norm(params):
        grads = [types.SimpleNamespace(grad=p.grad.detach().unsqueeze(0))
                 for p in params if p.grad is not None]
        return metrics.gradient_norm(grads) if grads else nan
    group_grad = torch.cat([grad_norm(params) for _, params in base.groups])
    squares = torch.where(has_grad, group_grad.pow(2), torch.zeros_like(group_grad))
    grad = torch.where(has_grad.any(), squares.sum().sqrt(), nan[0]).reshape(1)
    return [grad, group_grad]


@torch.no_grad()
def measure(layers: dict[str, dict], base: ParameterBaseline,
            extras: dict[str, torch.Tensor] | None = None) -> dict:
    """The measurements of a step as a flat dict (whole-network values under their metric's
    name, per-layer and per-module ones under ``metric/name``), from the per-layer
    :func:`layer_measurements` of a probe pass and the parameters now; ``extras``: the optional
    measurements as ``key → one-value tensor`` (:func:`~plasticlab.monitor.extras.row_extras`),
    read back in the same transfer."""
    names = list(layers)
    dead, dead_layers = metrics.unit_fractions([layers[n]["dead"] for n in names])
    dormant, dormant_layers = metrics.unit_fractions([layers[n]["dormant"] for n in names])
    srank = torch.cat([layers[n]["srank"] for n in names])
    erank = torch.cat([layers[n]["effective_rank"] for n in names])
    device = base.device
    # One read-back for everything.
    extras = extras or {}
    tensors = [dead, dormant, dead_layers[0], dormant_layers[0], srank, erank,
               *_weights(base, device), *_gradients(base, device), *extras.values()]
    it = iter(torch.cat([t.to(device) for t in tensors]).tolist())
    out = {"dead_fraction": next(it), "dormant_fraction": next(it)}
    per_layer = {m: [next(it) for _ in names] for m in ("dead_fraction", "dormant_fraction")}
    per_layer["srank"] = [int(v) if math.isfinite(v) else v for v in (next(it) for _ in names)]
    per_layer["effective_rank"] = [next(it) for _ in names]
    out["weight_magnitude"], out["weight_drift"] = next(it), next(it)
    modules = [name for name, _ in base.groups]
    per_module = {"weight_magnitude": [next(it) for _ in modules],
                  "weight_drift": [next(it) for _ in modules]}
    out["grad_norm"] = next(it)
    per_module["grad_norm"] = [next(it) for _ in modules]
    for metric, vals in per_layer.items():
        out |= {f"{metric}/{n}": v for n, v in zip(names, vals, strict=True)}
    for metric, vals in per_module.items():
        out |= {f"{metric}/{n}": v for n, v in zip(modules, vals, strict=True)}
    for key in extras:
        v = next(it)
        out[key] = int(v) if key.partition("/")[0] in COUNTS and math.isfinite(v) else v
    return out
