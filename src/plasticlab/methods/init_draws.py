"""Fresh draws from the network's init distribution during training: Shrink & Perturb's noise
ε and L2 Init + Resample's target φₜ, each step.

Where they come from is the method's ``draws`` parameter:

- ``generator`` (the default: the committed studies' numbers) — each member's own torch
  generator (:meth:`plasticlab.methods.MethodContext.generators`), on the host, member by
  member, then copied to the device;
- ``philox`` — Philox-4x32-10 (:mod:`plasticlab.philox`) on the parameters' device, one draw
  for every member and layer at once (:meth:`plasticlab.nets.EnsembleNet.sample_init_philox`),
  keyed by (member's seed, ``method/NAME/LAYER/weight|bias``) and counted by a step the method
  sets (:class:`CountedInitDraws`): other numbers, the same bits on the CPU and on CUDA, member
  k still seed k alone, nothing drawn on the host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch

from ..philox import DRAWS, draws_param


class CountedInitDraws:
    """A fresh init draw with Philox at counter :attr:`step`: an int64 tensor on the device,
    which the method sets (``step.fill_(t)``: no wait on the host) before each draw."""

    def __init__(self, net, keys: torch.Tensor):
        self.net, self.keys = net, keys
        self.step = torch.zeros((), dtype=torch.int64, device=keys.device)

    def __call__(self) -> list[torch.Tensor]:
        return self.net.sample_init_philox(self.keys, self.step)


def init_sampler(net, context, method: str, draws: str
                 ) -> tuple[Callable[[], Sequence[torch.Tensor]], CountedInitDraws | None]:
    """A sampler of fresh init draws shaped like ``net.regularized_parameters()`` for method
    ``method``, from where ``draws`` says, and its Philox counter (None with the generators)."""
    if draws == "philox":
        counted = CountedInitDraws(net, net.philox_init_keys(context.seeds, f"method/{method}"))
        return counted, counted
    if draws != "generator":
        raise ValueError(f"draws must be one of {', '.join(DRAWS)}, got {draws!r}")
    return partial(net.sample_init, context.generators(method)), None


__all__ = ["DRAWS", "CountedInitDraws", "draws_param", "init_sampler"]
