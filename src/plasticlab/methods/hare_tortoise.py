"""Hare & Tortoise (Lee, Cho, Kim, Kim & Choo, ICML 2024; SPEC §10).

Two copies of the network, inspired by the brain's fast hippocampus and slow neocortex. The
*hare* θ_h is the network that is trained and that predicts (online accuracy is the hare's).
The *tortoise* θ_t receives no gradients; it follows the hare slowly,

    θ_t ← m·θ_t + (1 − m)·θ_h            after every optimizer step,

and every ``reset_period`` steps the hare is sent back to it, θ_h ← θ_t (a copy: the two never
share storage — the reference code's assignment that aliases them is a bug). The optimizer's
state is left as it is. m (``momentum``) and ``reset_period`` are per member; both copies start
at θ₀.

Online accuracy is the hare's. Where the problem has test sets, each task end also measures the
tortoise on the finished task's test set, ``tortoise_test_accuracy`` (beside the hare's
``task_test_accuracy``), through :meth:`HareTortoiseMethod.extra_measurements`. The drop-in
:class:`plasticlab.dropin_field.HareTortoise` runs the same two updates on a plain model.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..params import Param
from .base import CapturedHook, Method, Needs
from .schedule import due_members, due_on_device, host_periods, member_mask

MOMENTUM = Param("momentum", 0.999, float, "m: the tortoise's EMA coefficient", per_member=True,
                 low=0.0, high=1.0)
RESET_PERIOD = Param("reset_period", 1000, int, "optimizer steps between resets of the hare to "
                     "the tortoise", per_member=True, in_steps=True, low=1)


def follow_hare_(tortoise: Sequence[torch.Tensor], hare: Sequence[torch.Tensor],
                 momentum: torch.Tensor) -> None:
    """θ_t ← m·θ_t + (1 − m)·θ_h for stacked ``[K, …]`` tensors, m per member ``[K]``, in place."""
    for t, h in zip(tortoise, hare, strict=True):
        m = momentum.to(t.dtype).view(-1, *([1] * (t.dim() - 1)))
        # lerp: θ_t + (1−m)(θ_h − θ_t), the EMA in one pass
        t.lerp_(h, 1 - m)


def reset_hare_(hare: Sequence[torch.Tensor], tortoise: Sequence[torch.Tensor],
                due: Sequence[bool] | torch.Tensor) -> None:
    """θ_h ← θ_t (a copy) for the members flagged in ``due`` (host booleans or a ``[K]`` bool
    tensor), in place."""
    for h, t in zip(hare, tortoise, strict=True):
        h.copy_(torch.where(member_mask(due, h), t, h))


class HareTortoiseMethod(Method):
    """The trained network is the hare; :attr:`tortoise` is its slow EMA, copied into it every
    ``reset_period`` steps."""

    name = "hare_tortoise"
    title = "Hare & Tortoise"
    description = "Hare & Tortoise: a slow EMA copy; the trained net is reset to it periodically"
    hyperparameters = (MOMENTUM, RESET_PERIOD)

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.hare = list(net.parameters())
        self.tortoise = [p.detach().clone() for p in self.hare]
        self.momentum = torch.as_tensor(hp["momentum"], device=context.device).reshape(-1)
        if bool(((self.momentum < 0) | (self.momentum > 1)).any()):  # once, at construction
            raise ValueError("method hare_tortoise: momentum m must be in [0, 1]")
        self.periods = host_periods(hp["reset_period"], self.name, "reset_period")
        # the captured form's schedule: the periods and the update count on the device (the
        # count written before each step), so which members are due is a tensor operation
        self.periods_on_device = torch.tensor(self.periods, device=context.device)
        self.step_on_device = torch.zeros((), dtype=torch.int64, device=context.device)

    @torch.no_grad()
    def after_step(self, features, x, step):
        """θ_t ← m·θ_t + (1−m)·θ_h; then, for members whose period is due, θ_h ← θ_t."""
        follow_hare_(self.tortoise, self.hare, self.momentum)
        due = due_members(self.periods, step)
        if any(due):
            reset_hare_(self.hare, self.tortoise, due)

    def captured_after_step(self) -> CapturedHook:
        """The EMA, then the reset of the members whose period divides the update count, as
        tensor operations: every step copies θ_t into θ_h where a member is due and keeps θ_h
        elsewhere (a ``where``, not a host branch); a compiled step captures it whole."""
        def follow_and_reset(features, x):
            follow_hare_(self.tortoise, self.hare, self.momentum)
            reset_hare_(self.hare, self.tortoise, due_on_device(self.periods_on_device, self.step_on_device))

        return CapturedHook(run=follow_and_reset, params=tuple(self.hare),
                            reads=(*self.tortoise, self.momentum, self.periods_on_device,
                                   self.step_on_device),
                            prepare=lambda step: self.step_on_device.fill_(step))

    @torch.no_grad()
    def extra_measurements(self, measurer, task: int) -> dict[str, torch.Tensor]:
        """``tortoise_test_accuracy`` ``[K]``: the tortoise's accuracy on ``task``'s test set,
        measured as ``task_test_accuracy`` is (same examples); nothing without test sets.

        The tortoise is measured in the hare's place — its values copied into the network and
        the hare's copied back after — so the measurement reuses every path of the measurer
        and training resumes on exactly the hare it left."""
        if not measurer.problem.has_test_sets:
            return {}
        hare = [h.clone() for h in self.hare]
        for h, t in zip(self.hare, self.tortoise, strict=True):
            h.copy_(t)
        try:
            accuracy = measurer.test_accuracy(task)
        finally:
            for h, saved in zip(self.hare, hare, strict=True):
                h.copy_(saved)
        return {} if accuracy is None else {"tortoise_test_accuracy": accuracy}
