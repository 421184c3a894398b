"""Full reset and head reset: start over at every task boundary (SPEC §10, *boundary oracle*).

The bluntest cure for lost plasticity: when a task ends, throw the learned parameters away.

- ``full_reset``: every parameter goes back to θ₀ (``reinit="initial"``) or to a fresh draw
  from the init distribution (``reinit="fresh"``);
- ``head_reset``: only the output layer does — the features are kept, the classifier restarts.

With ``reset_optimizer`` (the default, as the reference code rebuilds its optimizer) the
optimizer's whole state restarts too: Adam's moments and step counts are those of a new
optimizer.

Both are **boundary oracles**: they are told where tasks end (``on_task_end``), which no agent
of the paper's protocol is. Reports and ``plasticlab list`` mark them as using privileged
task-boundary information.
"""

from __future__ import annotations

import torch

from .. import philox
from ..nets import init as init_schemes
from ..params import Param
from .base import Method, Needs

REINIT_CHOICES = ("initial", "fresh")
REINIT = Param("reinit", "initial", str, "initial: copy θ₀ back; fresh: a new draw from the init "
               "distribution", choices=REINIT_CHOICES)
RESET_OPTIMIZER = Param("reset_optimizer", True, bool, "restart the optimizer's state at each "
                        "task end (as a rebuilt optimizer)")


def fresh_optimizer_state(optimizer) -> dict:
    """The state of a newly built ``optimizer`` — it is built just before the method, untouched
    yet — without its random streams (UPGD's noise generators): restarting the optimizer at a
    boundary must not replay the noise it has drawn."""
    state = optimizer.state_dict()
    state.pop("generators", None)
    return state


class BoundaryReset(Method):
    """Copy θ₀ (or a fresh draw) into :meth:`reset_layers` at every task end. A fresh draw comes
    from each member's generator, or with ``draws="philox"`` from the reset layers' Philox init
    streams (``method/NAME/i/weight|bias``, i the layer's place in the network) counted by the
    task ends before it."""

    hyperparameters = (REINIT, RESET_OPTIMIZER, philox.draws_param("a fresh draw (reinit=fresh)"))

    @classmethod
    def needs(cls, params):
        return Needs(task_end=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.layers = self.reset_layers(net)
        self.reinit = hp["reinit"]
        self.generators = context.generators(self.name)
        self.philox_keys = None
        if hp.get("draws", "generator") == "philox":
            every = net.philox_init_keys(context.seeds, f"method/{self.name}")
            places = [i for i, layer in enumerate(net.affine_layers)
                      if any(layer is reset for reset in self.layers)]
            self.philox_keys = every[:, [row for i in places for row in (2 * i, 2 * i + 1)]]
            self.task_ends = torch.zeros((), dtype=torch.int64, device=context.device)
        # θ₀ of the layers this method resets (only "initial" ever reads it back).
        self.initial = [t.detach().clone() for layer in self.layers for t in (layer.weight, layer.bias)]
        self.fresh_optimizer_state = fresh_optimizer_state(optimizer) if hp["reset_optimizer"] else None

    @staticmethod
    def reset_layers(net) -> list:
        """The affine layers this method resets."""
        raise NotImplementedError

    @torch.no_grad()
    def on_task_end(self, stream) -> None:
        """Reset the layers' weights and biases, and the optimizer's state if asked."""
        params = [t for layer in self.layers for t in (layer.weight, layer.bias)]
        if self.reinit == "initial":
            targets = self.initial
        elif self.philox_keys is not None:
            targets = init_schemes.draw_layers_philox(
                self.net.init, [(tuple(layer.weight.shape[1:]), layer.fan_in, layer.fan_out)
                                for layer in self.layers], self.philox_keys, self.task_ends,
                self.layers[0].weight.device)
            self.task_ends.add_(1)
        else:
            targets = [t for layer in self.layers for t in self.net.sample_layer_init(layer, self.generators)]
        for p, target in zip(params, targets, strict=True):
            p.copy_(target)
        if self.fresh_optimizer_state is not None:
            self.optimizer.load_state_dict(self.fresh_optimizer_state)


class FullReset(BoundaryReset):
    """Full reset: at each task end every parameter goes back to θ₀ (or a fresh draw)."""

    name = "full_reset"
    title = "full reset"
    description = "every parameter back to θ₀ (or a fresh draw) at each task end"

    @staticmethod
    def reset_layers(net) -> list:
        return list(net.affine_layers)


class HeadReset(BoundaryReset):
    """Head reset: at each task end only the output layer goes back to θ₀ (or a fresh draw)."""

    name = "head_reset"
    title = "head reset"
    description = "the output layer back to θ₀ (or a fresh draw) at each task end"

    @staticmethod
    def reset_layers(net) -> list:
        return [net.affine_layers[-1]]
