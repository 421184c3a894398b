"""ReGraMa: reset neurons guided by the gradient magnitude (Liu, Wu, Obando-Ceron, Castro,
Courville & Pan, "Measure gradients, not activations! Enhancing neuronal activity in deep
reinforcement learning", 2025).

ReDo (:mod:`plasticlab.methods.redo`) calls a unit dormant when it is silent; ReGraMa calls it
inactive when it no longer *learns*: its incoming weights receive almost no gradient. The score
of unit i of a hidden layer with H units (GraMa) is its mean absolute incoming-weight gradient
on a step's batch, normalised by the layer's average:

    g_i = (1/|in_i|) Σ_{j ∈ in_i} |∂L/∂W_ij|,        s_i = g_i / ( (1/H) Σ_k g_k + 1e-9 )

(``in_i``: the unit's row of a Linear layer or its filter of a Conv layer; the bias is not
scored). A unit with s_i ≤ τ is recycled exactly as ReDo recycles a dormant unit — the same
machinery, :class:`~plasticlab.methods.redo.UnitRecycler`: incoming weights and bias redrawn
from the init distribution (or θ₀), outgoing weights set to 0, the optimizer moments of those
weights set to 0 (step counts kept). The output layer is never scored.

When: right after every ``period``-th optimizer step, on the gradient of that step's batch,
still in ``.grad`` after the update (SWR reads it there too). Both ``period`` and τ are per
member; a member whose period is not due neither recycles nor draws.

Two front ends, as ReDo's: :class:`ReGraMa` (the method ``regrama``) and
:class:`ReGraMaSequential`, a drop-in for a plain ``nn.Sequential`` and its optimizer.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..nets.units import HiddenLayer, dormancy_scores, hidden_layers, sequential_hidden_layers
from ..params import Param
from .base import Method, MethodContext
from .redo import LAYER_ORDERS, REINIT_CHOICES, UnitRecycler
from .schedule import OnItsPeriod, due_members, host_periods


def gradient_magnitude(layer: HiddenLayer) -> torch.Tensor:
    """g_i: each unit's mean |∂L/∂W| over its incoming weights (bias excluded), ``[K, U]``, from
    the gradient in ``.grad``; an error where the layer has none yet."""
    grad = layer.in_weight_param.grad
    if grad is None:
        raise ValueError("ReGraMa scores units by their incoming weights' gradient, and this "
                         "layer has none: call it after loss.backward() and before zero_grad()")
    if layer.member_view:
        grad = grad.unsqueeze(0)
    return grad.detach().abs().flatten(2).mean(dim=2)


PERIOD = Param("period", 1000, int, "optimizer steps between resets (both reference codes: 1000)",
               per_member=True, in_steps=True, low=1)
THRESHOLD = Param("threshold", 0.01, float, "τ: a unit whose normalised gradient magnitude is "
                  "≤ τ is reset (LucMc/continual-learning: 0.01)", per_member=True, low=0)
REINIT = Param("reinit", "fresh", str, "fresh: redraw a reset unit's incoming weights and bias from "
               "the init distribution; initial: restore θ₀", choices=REINIT_CHOICES)
RESET_OPTIMIZER = Param("reset_optimizer", True, bool, "zero the optimizer moments of a reset "
                        "unit's weights, as LucMc/continual-learning (the authors' code: false)")
LAYER_ORDER = Param("layer_order", "incoming_first", str,
                    "incoming_first: every layer's incoming side, then the outgoing zeros; "
                    "per_layer: layer by layer, as LucMc/continual-learning (a reset row keeps "
                    "its new weights where it reads a unit reset in the layer before)",
                    choices=LAYER_ORDERS)


class ReGraMa(OnItsPeriod, Method):
    """ReGraMa on an ensemble: every ``period`` steps, reset each member's hidden units whose
    normalised incoming-gradient magnitude s_i is at most τ.

    Hyper-parameters: ``period`` and ``threshold`` τ (per member, ``[K]``), ``reinit``,
    ``reset_optimizer`` and ``layer_order`` (shared; ReDo's, see
    :class:`~plasticlab.methods.redo.UnitRecycler`). After each reset :attr:`last_reset`
    ``[K]`` and :attr:`last_reset_per_layer` ``[K, L]`` hold how many units were reset (on the
    device). No host synchronisation: who is due is host arithmetic on the step count.
    """

    name = "regrama"
    title = "ReGraMa"
    description = "ReGraMa: reset units with a small normalised gradient magnitude every period steps"
    hyperparameters = (PERIOD, THRESHOLD, REINIT, RESET_OPTIMIZER, LAYER_ORDER)

    @classmethod
    def needs(cls, params):
        # the steps it acts after take the eager step, which leaves their gradient in .grad
        return cls.period_needs(params["period"])

    def __init__(self, net, optimizer, hp: dict, context: MethodContext):
        super().__init__(net, optimizer, hp, context)
        self.periods = host_periods(hp["period"], self.name)
        self.threshold = torch.as_tensor(hp["threshold"], dtype=torch.float32,
                                         device=context.device).reshape(-1)
        if bool((self.threshold < 0).any()):  # once, at construction
            raise ValueError("method regrama: threshold τ must be >= 0")
        layers = hidden_layers(net, "ReGraMa")
        generators = [context.generators(self.name, i) for i in range(len(layers))]
        self.recycler = UnitRecycler(layers, optimizer, hp["reinit"], net.init, generators,
                                     reset_optimizer=hp["reset_optimizer"],
                                     layer_order=hp["layer_order"])
        K, device = net.members, context.device
        self.last_reset_per_layer = torch.zeros(K, len(layers), dtype=torch.long, device=device)
        self.last_reset = torch.zeros(K, dtype=torch.long, device=device)

    def after_step(self, features, x, step):
        """On a step where some member's period is due, reset its units with s_i ≤ τ, scored on
        this step's gradient."""
        due = due_members(self.periods, step)
        if any(due):
            self.reset(due)

    def reset(self, members: Sequence[bool] | None = None) -> torch.Tensor:
        """Score every hidden unit on the gradient in ``.grad`` and reset the inactive ones of
        the members flagged in ``members`` (None: all); return ``[K, L]`` counts."""
        magnitudes = [gradient_magnitude(layer) for layer in self.recycler.layers]
        counts = self.recycler.recycle(magnitudes, self.threshold, members)
        self.last_reset_per_layer = counts
        self.last_reset = counts.sum(dim=1)
        return counts


class ReGraMaSequential:
    """ReGraMa for a plain ``nn.Sequential`` of Linear/Conv2d, ReLU, pooling, flatten and dropout.

    ::

        regrama = ReGraMaSequential(model, optimizer, threshold=0.01, seed=0)
        ...
        loss.backward(); optimizer.step()
        if step % 1000 == 0:
            regrama.reset()        # score on the gradients in .grad, reset now

    Call :meth:`reset` after ``backward()`` and before the next ``zero_grad()``. ``optimizer``,
    ``reinit``, ``init``, ``reset_optimizer`` and ``layer_order`` as
    :class:`~plasticlab.methods.redo.ReDoSequential`'s; fresh draws come from the streams of
    member ``seed`` of an ensemble, so the drop-in draws what the method draws.
    """

    def __init__(self, model: nn.Sequential, optimizer=None, threshold: float = 0.01,
                 reinit: str = "fresh", seed: int = 0, init: str = "torch_default",
                 reset_optimizer: bool = True, layer_order: str = "incoming_first"):
        if not threshold >= 0:
            raise ValueError(f"ReGraMa: threshold τ must be >= 0, got {threshold}")
        self.model, self.threshold = model, float(threshold)
        layers, _ = sequential_hidden_layers(model, "ReGraMa")
        context = MethodContext([seed], torch.device("cpu"))
        generators = [context.generators(ReGraMa.name, i) for i in range(len(layers))]
        self.recycler = UnitRecycler(layers, optimizer, reinit, init, generators,
                                     reset_optimizer=reset_optimizer, layer_order=layer_order)
        self.last_reset = [0] * len(layers)

    def scores(self) -> list[torch.Tensor]:
        """s_i of every hidden layer's units on the gradients in ``.grad``, ``[U]`` each."""
        return [dormancy_scores(gradient_magnitude(layer))[0] for layer in self.recycler.layers]

    def reset(self) -> list[int]:
        """Reset the units with s_i ≤ τ now; return how many in each hidden layer."""
        magnitudes = [gradient_magnitude(layer) for layer in self.recycler.layers]
        self.last_reset = self.recycler.recycle(magnitudes, self.threshold)[0].tolist()
        return self.last_reset
