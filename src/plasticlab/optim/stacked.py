"""What every optimizer on stacked ``[K, …]`` parameters shares: its ``params`` list,
dropping their gradients, and the step size α — one for every member, or one per member (the
rest — the update and the per-element state — is each one's own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch


def step_sizes(lr: float | Sequence[float], member_dim: bool, name: str) -> float | list[float]:
    """The step size α as an optimizer keeps it: a float shared by every member, or — for
    stacked members (``member_dim``) given one rate each, not all equal — the list of the K
    members' rates. Every rate must be > 0."""
    rates = [float(lr)] if isinstance(lr, int | float) else [float(x) for x in lr]
    if not rates or not all(r > 0 for r in rates):
        raise ValueError(f"{name} step size lr must be > 0, got {lr}")
    if len(set(rates)) == 1:
        return rates[0]
    if not member_dim:
        raise ValueError(f"{name}: one step size per member needs stacked members "
                         f"(member_dim=True), got lr={list(rates)}")
    return rates


def same_tensors(a: Sequence, b: Sequence) -> bool:
    """Whether ``a`` and ``b`` hold the very same tensor objects, in order (a cached list of
    views into them then serves again)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def lr_groups(lr: float | list[float]) -> list[tuple[float, list[int]]]:
    """(α, members with that α) for a per-member step size, in order of first appearance."""
    groups: dict[float, list[int]] = {}
    for k, rate in enumerate(lr):
        groups.setdefault(rate, []).append(k)
    return list(groups.items())


def per_member(values, like: torch.Tensor):
    """``values`` shaped to broadcast against a stacked ``[K, …]`` tensor ``like``: a ``[K]``
    tensor (one value per member) as ``[K, 1, …]``; a number or 0-d tensor as it is."""
    if isinstance(values, torch.Tensor) and values.dim() == 1:
        return values.view(-1, *([1] * (like.dim() - 1)))
    return values


def members_of(tensors: Sequence[torch.Tensor], members: Sequence[int]) -> list[torch.Tensor]:
    """Member ``k``'s slab ``t[k]`` of every stacked tensor, for every k in ``members``: views
    that an in-place update writes through. A member's slab is what its tensors are when it runs
    alone, so a kernel applied to slabs gives each member its own run's numbers."""
    return [t[k] for t in tensors for k in members]


class StackedOptimizer:
    """Base of plasticlab's optimizers: ``params`` is the list of tensors they update, ``lr``
    their step size (a float, or one per member)."""

    title: ClassVar[str]  # as papers and reports name it ("Adam", "non-protecting UPGD")
    params: list[torch.Tensor]
    lr: float | list[float]

    def member_rates(self) -> torch.Tensor:
        """Each member's step size α_k as a ``[K]`` tensor on the parameters' device (stacked
        members; a shared α repeated)."""
        first = self.params[0]
        rates = [self.lr] * first.shape[0] if isinstance(self.lr, float) else self.lr
        return torch.tensor(rates, dtype=first.dtype, device=first.device)

    def check_state_current(self, state: torch.Tensor) -> None:
        """``state``, a tensor this optimizer made beside its first parameter when it was
        built, is still on that parameter's device and in its dtype; else a ``RuntimeError``:
        the model was moved or converted (``model.to(device)``, ``model.double()``) after the
        optimizer was built, and its state was not. Checked on the first parameter (a model is
        moved and converted whole), at every step, so kept to two comparisons."""
        first = self.params[0]
        if state.device != first.device or state.dtype != first.dtype:
            raise RuntimeError(
                f"{self.title}: its parameters were moved or converted after it was built (they "
                f"are now {first.dtype} on {first.device}, its state {state.dtype} on "
                f"{state.device}); build the optimizer after model.to(device) or model.double(), "
                "as torch.optim's documentation advises")

    def zero_grad(self) -> None:
        """Drop every parameter's gradient."""
        for p in self.params:
            p.grad = None
