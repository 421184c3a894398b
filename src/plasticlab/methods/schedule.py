"""Per-member schedules: periods in optimizer steps that may differ between the members of an
ensemble (SWR's reinitialization period, Hare & Tortoise's reset period, SNR's adaptation
period).

A period arrives as a ``[K]`` tensor like every per-member parameter; it is read back to the
host once, at construction, so deciding at each step which members act is host arithmetic on
the step count — no device round trip in the per-step path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import Needs


def host_periods(values: torch.Tensor, method: str, name: str = "period") -> list[int]:
    """A per-member period ``[K]`` as host integers, each ≥ 1 (an error names the method)."""
    periods = [int(round(v)) for v in torch.as_tensor(values).reshape(-1).tolist()]
    if any(p < 1 for p in periods):
        raise ValueError(f"method {method}: {name} must be >= 1 step, got {periods}")
    return periods


def shared_period(values) -> int | None:
    """The period every member has (a number, or a per-member ``[K]`` tensor of them), or None
    where the members' periods differ: with one period, the steps a hook acts after are the
    ensemble's, the same as each member's alone."""
    periods = {int(round(v)) for v in torch.as_tensor(values).reshape(-1).tolist()}
    return periods.pop() if len(periods) == 1 else None


def due_members(periods: Sequence[int], step: int) -> list[bool]:
    """Which members act at optimizer step ``step`` (≥ 1): those whose period divides it."""
    return [step % p == 0 for p in periods]


def member_mask(due: Sequence[bool] | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``due`` (host booleans, or a ``[K]`` bool tensor on ``like``'s device) as a bool mask
    ``[K, 1, …]`` broadcastable to ``like`` ``[K, …]``."""
    mask = due if isinstance(due, torch.Tensor) else torch.tensor(list(due), device=like.device)
    return mask.view(-1, *([1] * (like.dim() - 1)))


def due_on_device(periods: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """:func:`due_members` as a tensor operation, ``[K]`` bool: ``periods`` ``[K]`` and the step
    count ``step`` (a 0-d tensor) on the device, for a hook a compiled step captures."""
    return step % periods == 0


class OnItsPeriod:
    """For a method whose post-step hook acts after the steps its members' periods divide
    (``self.periods``, host integers: :func:`host_periods`): SWR, ReGraMa, plasticity
    injection's ``schedule=steps``. Mixed in before :class:`~plasticlab.methods.base.Method`."""

    @staticmethod
    def period_needs(period) -> Needs:
        """The post-step hook on a per-member ``period``: with one period for every member it
        acts after the same steps for all of them (and for each alone), so a compiled step
        computes the others and takes the eager step on those (``Needs.some_steps``); with
        periods that differ every step is eager (member k would otherwise take other forms
        than alone)."""
        return Needs(after_step=True, some_steps=shared_period(period) is not None)

    def acts_after(self, step: int) -> bool:
        """After the steps some member's period divides (with ``Needs.some_steps``: every
        member's)."""
        return any(due_members(self.periods, step))

