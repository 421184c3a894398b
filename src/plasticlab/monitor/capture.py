"""The capture of a :class:`plasticlab.Monitor`: which modules' outputs are the hidden features
(:func:`feature_modules`), and the probe pass that reads them with forward hooks
(:class:`Capture`).

The hooks are attached for the probe pass only, so training forwards run without them (no
cost, and the model stays picklable); they measure each output at once
(:func:`~plasticlab.monitor.measurements.layer_measurements`) and keep no tensor of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from .measurements import layer_measurements

ACTIVATION_TYPES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.PReLU, nn.RReLU, nn.ELU, nn.CELU, nn.SELU, nn.GELU, nn.SiLU,
    nn.Mish, nn.Softplus, nn.Tanh, nn.Sigmoid, nn.Hardtanh, nn.Hardswish, nn.Hardsigmoid,
    nn.LogSigmoid, nn.Softsign, nn.Tanhshrink, nn.Threshold, nn.GLU,
)
"""The module types whose outputs the monitor treats as hidden features when ``layers`` is not
given. Functional activations (``F.relu`` inside ``forward``) have no module to hook: name the
modules to watch instead."""


def find_activation_modules(model: nn.Module, kinds: Iterable[type] = ACTIVATION_TYPES) -> list[str]:
    """Names of the modules of ``model`` that a :class:`Monitor` hooks by default."""
    kinds = tuple(kinds)
    return [name for name, m in model.named_modules() if isinstance(m, kinds)]


def feature_modules(model: nn.Module, layers: Sequence[str | nn.Module] | None) -> list[str]:
    """The names of the modules whose outputs are the hidden features: ``layers`` (names or
    modules of ``model``), each once, or by default every module of :data:`ACTIVATION_TYPES`;
    a ``ValueError`` that says what to pass where there are none."""
    named = list(model.named_modules())
    if layers is None:
        names = find_activation_modules(model)
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


def call(model: nn.Module, probe):
    """``model`` on the probe inputs: ``model(**probe)`` for a dict, ``model(*probe)`` for a
    tuple or list, else ``model(probe)``."""
    if isinstance(probe, dict):
        return model(**probe)
    if isinstance(probe, (tuple, list)):
        return model(*probe)
    return model(probe)


def to_device(probe, device: torch.device):
    """The probe inputs with every tensor (in a dict, tuple or list too) moved to ``device``."""
    if torch.is_tensor(probe):
        return probe.to(device)
    if isinstance(probe, dict):
        return {k: to_device(v, device) for k, v in probe.items()}
    if isinstance(probe, (tuple, list)):
        return type(probe)(to_device(v, device) for v in probe)
    return probe


@torch.no_grad()
def probe_pass(model: nn.Module, probe, cuda_devices: list[int]):
    """``model``'s output on ``probe`` in one no-grad pass in eval mode, under a forked RNG
    state (of the CPU and ``cuda_devices``), every module's mode restored after: training goes
    on as if it had not happened."""
    modes = [(m, m.training) for m in model.modules()]
    with torch.random.fork_rng(devices=cuda_devices):
        model.eval()
        try:
            return call(model, probe)
        finally:
            for m, training in modes:
                m.training = training


def remove_hooks(handles: list) -> None:
    """Remove the hooks of ``handles`` and empty the list."""
    for h in handles:
        h.remove()
    handles.clear()


class Capture:
    """What the hooks share: the per-layer measurements of the current probe pass, and the
    handles of the hooks attached now (empty outside a pass). The hooks hold this object, never
    the monitor, so a monitor that is no longer referenced is collected (and any hook left
    removed)."""

    def __init__(self, unit_dim: int, dormant_threshold: float, extras: frozenset[str] = frozenset(),
                 rules: dict[str, str | None] | None = None):
        self.unit_dim, self.dormant_threshold = unit_dim, dormant_threshold
        self.extras, self.rules = extras, dict(rules or {})  # optional measurements; rule per module
        self.layers: dict[str, dict] = {}
        self.calls: dict[str, int] = {}
        self.handles: list = []
        self.output = None  # the model's output in the last probe pass

    def hook(self, name: str) -> Callable:
        """The forward hook of module ``name``: measures its output into :attr:`layers`."""
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
            self.layers[key] = layer_measurements(output, self.unit_dim, self.dormant_threshold,
                                                  self.extras, self.rules.get(name))
        return record

    @torch.no_grad()
    def run(self, model: nn.Module, hooked: list[tuple[str, nn.Module]], probe,
            cuda_devices: list[int]) -> dict[str, dict]:
        """One no-grad pass of ``model`` over ``probe`` in eval mode, with the ``hooked``
        (name, module) pairs' hooks attached for it alone; the per-layer measurements they took.

        The pass runs under a forked RNG state (of the CPU and ``cuda_devices``) and every
        module's mode is restored after, so training goes on as if it had not happened."""
        self.layers, self.calls = {}, {}
        try:
            self.handles.extend(module.register_forward_hook(self.hook(name))
                                for name, module in hooked)
            output = probe_pass(model, probe, cuda_devices)
            self.output = output if "churn" in self.extras else None  # kept for churn alone
        finally:
            remove_hooks(self.handles)
        layers = self.layers
        self.layers, self.calls = {}, {}
        if not layers:
            raise RuntimeError(f"Monitor: none of the hooked modules ({', '.join(n for n, _ in hooked)}) "
                               "ran in the probe pass, or none returned a floating-point tensor")
        return layers
