"""The one protocol by which unit-resetting methods (CBP, ReDo, SNR) restart an optimizer's
state for single units: an object with ``params`` and ``reset(index, mask, restart_count)``.

plasticlab's optimizers have it (per-element moments and step counts). A ``torch.optim``
optimizer gets it through :class:`TorchOptimizerState` (moments and momentum buffers zeroed;
its step count is one per tensor, so a per-element count restart is impossible), no optimizer
through :class:`NoOptimizerState`. :func:`unit_reset_state` picks the right one and checks that
every weight a reset touches is one of the optimizer's parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..nets.units import HiddenLayer, parameter_index

ADAM_REFUSED = (
    "{name} keeps one step count per parameter tensor, so after Continual Backprop restarts a "
    "replaced unit's moments their bias correction would use the whole run's step count (the "
    "bug of the public AdamGnT). Use plasticlab.optim.Adam instead — same arguments "
    "(params, lr, betas, eps), a drop-in with per-element step counts.")


class TorchOptimizerState:
    """A ``torch.optim`` optimizer seen through the ``params`` / ``reset(index, mask)``
    interface of :mod:`plasticlab.optim`.

    ``reset`` sets to 0 every per-element state tensor of the parameter (tensors shaped like
    it: Adam/AdamW's ``exp_avg``, ``exp_avg_sq`` and ``max_exp_avg_sq``, SGD's
    ``momentum_buffer``) where ``mask`` is true. A per-element step-count restart is refused
    where the optimizer keeps a step count (one per tensor in ``torch.optim``).
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]

    @torch.no_grad()
    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Zero the per-element state of parameter ``index`` where ``mask`` is true."""
        p = self.params[index]
        state = self.optimizer.state.get(p, {})  # appears lazily at the first step
        if restart_count and "step" in state:
            raise NotImplementedError("torch.optim keeps one step count per tensor; it cannot be "
                                      "restarted for single elements")
        mask = mask.expand_as(p)
        for value in state.values():
            if torch.is_tensor(value) and value.shape == p.shape:
                value.masked_fill_(mask, 0.0)


class NoOptimizerState:
    """Stand-in when there is no optimizer state to reset."""

    def __init__(self, params: Sequence[torch.Tensor]):
        self.params = list(params)

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Nothing to reset."""


def touched(layer: HiddenLayer) -> tuple[torch.Tensor, ...]:
    """The parameters a unit reset writes: incoming weights and bias, outgoing weights."""
    return layer.in_weight_param, layer.in_bias_param, layer.out_weight_param


def unit_reset_state(optimizer, layers: Sequence[HiddenLayer], who: str, *,
                     restarts_counts: bool = False):
    """What restarts the state of reset units' weights: a :mod:`plasticlab.optim` optimizer as
    it is, a ``torch.optim`` one through :class:`TorchOptimizerState`, ``None`` as no state.

    ``restarts_counts``: the method restarts per-element step counts too (Continual
    Backprop), so ``torch.optim`` optimizers that keep one count per tensor (Adam, AdamW) or
    whose momentum would carry the old units' gradients are refused. Every weight a reset
    touches must be one of the optimizer's parameters (else its moments would silently survive
    the reset); a missing one is an error naming the layer.
    """
    if optimizer is None:
        return NoOptimizerState([t for layer in layers for t in touched(layer)])
    if hasattr(optimizer, "reset") and hasattr(optimizer, "params"):
        state = optimizer
    elif isinstance(optimizer, torch.optim.Optimizer):
        if restarts_counts and isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
            raise TypeError(ADAM_REFUSED.format(name=f"torch.optim.{type(optimizer).__name__}"))
        if restarts_counts and (type(optimizer) is not torch.optim.SGD or any(
                group.get("momentum", 0) != 0 for group in optimizer.param_groups)):
            raise TypeError(f"{who}: unsupported optimizer {type(optimizer).__name__} (with momentum, "
                            "its buffers would carry the old units' gradients); use "
                            "plasticlab.optim.Adam, plasticlab.optim.SGD or torch.optim.SGD "
                            "without momentum")
        state = TorchOptimizerState(optimizer)
    else:
        raise TypeError(f"{who} needs a torch.optim optimizer, a plasticlab.optim optimizer or None, "
                        f"got {type(optimizer).__name__}")
    for i, layer in enumerate(layers):
        for tensor in touched(layer):
            try:
                parameter_index(state, tensor)
            except ValueError:
                raise ValueError(f"{who}: a parameter of hidden layer {i} (or of the layer after it) "
                                 "is not in the optimizer; give the optimizer all of the model's "
                                 "weights") from None
    return state


__all__ = ["NoOptimizerState", "TorchOptimizerState", "touched", "unit_reset_state"]
