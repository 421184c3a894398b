"""Plasticity injection (Nikishin, Oh, Ostrovski, Lyle, Pascanu, Dabney & Barreto, "Deep
Reinforcement Learning with Plasticity Injection", NeurIPS 2023).

The network is an encoder φ and a head h_θ — here the last ``layers`` affine layers (fully
connected). At an injection θ is frozen and a fresh head θ′ (a new draw from the network's
init distribution) is added, together with a frozen copy θ′₀ of that draw:

    y(x) = h_θ(φ(x)) + h_θ′(φ(x)) − h_θ′₀(φ(x)).

At the injection θ′ = θ′₀, so the function is unchanged (up to rounding), and only θ′ (with
φ) trains: the trainable parameters are as many as before. θ′ starts with fresh optimizer state,
as a newly created parameter would. Gradients reach φ through all three heads (their
parameters, not their outputs, are frozen).

Injected again, the whole current sum h_θ + h_θ′ − h_θ′₀ becomes the frozen part and a new θ′
is drawn (:mod:`plasticlab.nets.injection`: folded into one linear map for a one-layer head,
two more frozen heads per injection for a deeper one).

When: ``schedule="task_end"`` injects at every task end — a **boundary oracle**, told where
tasks end, which reports and ``plasticlab list`` mark; ``schedule="steps"`` injects every
``period`` optimizer steps (per member), after the step, knowing nothing of tasks.

:class:`PlasticityInjection` does the same to the head module of a plain PyTorch model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..nets.init import draw_members
from ..nets.injection import FrozenHeads
from ..nets.layers import EnsembleLinear
from ..nets.units import parameter_index
from ..params import Param
from .base import Method, Needs
from .schedule import OnItsPeriod, due_members, host_periods

SCHEDULES = ("task_end", "steps")
LAYERS = Param("layers", 2, int, "how many of the last affine layers form the injected head h_θ "
               "(all fully connected; the network's shape, so one value for the ensemble)", low=1)
SCHEDULE = Param("schedule", "task_end", str, "task_end: inject at every task end (boundary "
                 "oracle); steps: every `period` optimizer steps", choices=SCHEDULES)
PERIOD = Param("period", 1000, int, "optimizer steps between injections (schedule=steps)",
               per_member=True, in_steps=True, low=1)


def head_blocks(net, layers: int, method: str = "plasticity_injection") -> list:
    """The last ``layers`` blocks of ``net``, the head h_θ; each must be a bare fully connected
    layer (no LayerNorm, no pooling), else a ValueError saying what the method needs."""
    blocks = list(net.blocks)
    linear = 0
    for block in reversed(blocks):
        if not isinstance(block.affine, EnsembleLinear) or block.norm is not None or block.pool:
            break
        linear += 1
    if layers > linear:
        raise ValueError(f"method {method}: layers={layers} needs the last {layers} layers to be "
                         f"fully connected without LayerNorm; this network's last {linear} are")
    return blocks[-layers:]


class PlasticityInjectionMethod(OnItsPeriod, Method):
    """At each injection: freeze the head θ, add a fresh trained head θ′ and subtract its frozen
    copy θ′₀ (module docstring)."""

    name = "plasticity_injection"
    title = "Plasticity Injection"
    description = "Plasticity injection: freeze the head, add a fresh head minus its frozen copy"
    hyperparameters = (LAYERS, SCHEDULE, PERIOD)

    @classmethod
    def needs(cls, params):
        if params["schedule"] == "task_end":
            return Needs(task_end=True)
        return cls.period_needs(params["period"])

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        blocks = head_blocks(net, int(hp["layers"]), self.name)
        self.head = [block.affine for block in blocks]
        # the network adds the frozen heads to its logits; set before the step is built, so the
        # step trains it with autograd (the hand-written MLP backward knows no frozen heads)
        self.frozen = FrozenHeads(len(blocks), [block.activation for block in blocks[:-1]])
        net.head_offset = self.frozen
        self.generators = context.generators(self.name)
        self.periods = host_periods(hp["period"], self.name) if hp["schedule"] == "steps" else None
        self.injections = [0] * net.members

    def on_task_end(self, stream) -> None:
        """schedule=task_end: every member injects."""
        self.inject([True] * self.net.members)

    def after_step(self, features, x, step):
        """schedule=steps: the members whose period divides ``step`` inject."""
        due = due_members(self.periods, step)
        if any(due):
            self.inject(due)

    @torch.no_grad()
    def inject(self, due: Sequence[bool]) -> None:
        """Freeze h_θ − h_θ′₀ for the members flagged in ``due``, put the fresh draw θ′₀ into the
        trained head and restart its optimizer state. Only due members draw, from their own
        streams, layer by layer, weight then bias."""
        members = [k for k, d in enumerate(due) if d]
        mask = torch.tensor(list(due), device=self.head[0].weight.device)
        trained = [(layer.weight.detach(), layer.bias.detach()) for layer in self.head]
        fresh = [self.fresh_layer(layer, members) for layer in self.head]
        self.frozen.inject(trained, fresh, mask)
        for layer, (weight, bias) in zip(self.head, fresh, strict=True):
            for param, new in ((layer.weight, weight), (layer.bias, bias)):
                member = mask.view(-1, *([1] * (param.dim() - 1)))
                param.copy_(torch.where(member, new, param))
                # θ′ is a new parameter: its optimizer state starts afresh
                self.optimizer.reset(parameter_index(self.optimizer, param), member)
        for k in members:
            self.injections[k] += 1

    def fresh_layer(self, layer, members: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh init draw of ``layer``'s (weight, bias) for ``members`` (zeros elsewhere)."""
        weight, bias = draw_members(self.net.init, tuple(layer.weight.shape[1:]), layer.fan_in,
                                    layer.fan_out, [self.generators[k] for k in members],
                                    layer.weight.device)
        index = torch.tensor(members, device=layer.weight.device)
        out_w, out_b = torch.zeros_like(layer.weight), torch.zeros_like(layer.bias)
        out_w[index], out_b[index] = weight.to(out_w.dtype), bias.to(out_b.dtype)
        return out_w, out_b

    def load_state_dict(self, state: dict) -> None:
        """:meth:`Method.load_state_dict`; the frozen heads' stacked copy (a compiled step's) is
        rebuilt from the restored heads."""
        super().load_state_dict(state)
        self.frozen.unstack()

    def notes(self) -> dict:
        """How many injections each member made and how many frozen heads the forward pass runs."""
        return {"injections": list(self.injections), "frozen_heads": len(self.frozen.heads)}


class PlasticityInjection(nn.Module):
    """Plasticity injection on the head of a plain PyTorch model: wrap the head module,
    ``model.fc = PlasticityInjection(model.fc, optimizer)``, and call :meth:`inject` when to
    inject. The output is head(z) + Σ_j ±h_{θ_j}(z) over the frozen copies; the wrapped head keeps
    its parameter objects (θ′ is written into them), so the optimizer keeps training them.

    θ′ is drawn by each submodule's ``reset_parameters()`` (PyTorch's own init, from the global
    random stream). With ``optimizer`` (a ``torch.optim.Optimizer``), the head's optimizer state
    is dropped at each injection, so it restarts as for a new parameter. The frozen copies are
    plain tensors, not parameters nor buffers: no optimizer or penalty sees them, and the
    module's ``state_dict`` does not hold them."""

    def __init__(self, head: nn.Module, optimizer: torch.optim.Optimizer | None = None):
        super().__init__()
        if not any(True for _ in head.parameters()):
            raise ValueError("PlasticityInjection: the head module has no parameters to inject")
        self.head, self.optimizer = head, optimizer
        # (sign, frozen parameters and buffers by name); a linear head keeps one folded map
        self.frozen: list[tuple[float, dict[str, torch.Tensor]]] = []

    def forward(self, *args):
        """head(z) plus every frozen copy's output, with its sign."""
        out = self.head(*args)
        for sign, state in self.frozen:
            frozen = torch.func.functional_call(self.head, state, args)
            out = out + frozen if sign > 0 else out - frozen
        return out

    def _state(self) -> dict[str, torch.Tensor]:
        return {name: t.detach().clone() for name, t in
                [*self.head.named_parameters(), *self.head.named_buffers()]}

    @torch.no_grad()
    def inject(self) -> None:
        """Freeze the head's current θ, draw θ′ into it and freeze a copy θ′₀: the output is
        unchanged (up to rounding)."""
        theta = self._state()
        for module in self.head.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
        theta0 = self._state()
        if isinstance(self.head, nn.Linear):  # linear: h_θ − h_θ′₀ is one map, folded in
            delta = {name: theta[name] - theta0[name] for name in theta}
            if self.frozen:
                delta = {name: self.frozen[0][1][name] + d for name, d in delta.items()}
            self.frozen = [(1.0, delta)]
        else:
            self.frozen += [(1.0, theta), (-1.0, theta0)]
        if self.optimizer is not None:
            for p in self.head.parameters():
                self.optimizer.state.pop(p, None)
