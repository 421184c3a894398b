"""Plain SGD on stacked ensemble parameters: θ ← θ − α g (``torch.optim.SGD`` defaults), with
α one for all members or one per member.

The rule is written once, in :func:`sgd_update_` (the plain form, which the compiled training
step compiles too). By default :class:`SGD` takes it as one fused multiply-add per element,
θ + (−α)·g (``torch.add`` with ``alpha``: one pass over θ and g instead of a product into a
temporary and a subtraction); that fast path rounds once where the plain form rounds twice, so
the two agree up to rounding. Applies: ``SGD(fused=True)``, the default. Test:
``tests/test_optim.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .stacked import StackedOptimizer, lr_groups, members_of, per_member, same_tensors, step_sizes


def sgd_update_(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr) -> None:
    """θ ← θ − α·g for every θ in ``params``, in place; ``lr``: α, a number or a ``[K]``
    tensor (member k's α_k). The plain form of :class:`SGD`'s update, and what the compiled
    training step compiles."""
    for p, g in zip(params, grads, strict=True):
        p.sub_(per_member(lr, p) * g)


class SGD(StackedOptimizer):
    """Stateless gradient descent; :meth:`reset` exists so methods can treat every optimizer
    alike, and does nothing because there is no state to restart. ``fused``: the fused
    multiply-add fast path (module docstring); False: the plain form, :func:`sgd_update_`."""

    title = "SGD"

    def __init__(self, params: Sequence[torch.Tensor], lr: float | Sequence[float],
                 member_dim: bool = False, fused: bool = True):
        self.params = list(params)
        # α: a float, or member k's α_k in lr[k] (stacked members)
        self.lr = step_sizes(lr, member_dim, "SGD")
        # Stacked members need nothing special here: the update θ + (−α)·g rounds the same in
        # torch's vector loop and in its scalar tail, so a member's result does not depend on
        # where its elements fall (tests/test_member_independence.py).
        self.member_dim = bool(member_dim)
        self.fused = bool(fused)
        self._member_lr_last: tuple | None = None  # _member_lr_operands' last answer
        self._lr_tensor: torch.Tensor | None = None  # the plain form's per-member α, from first use

    @torch.no_grad()
    def step(self) -> None:
        """θ ← θ − α·∇ for every parameter with a gradient (θ_k ← θ_k − α_k·∇_k per member)."""
        params = [p for p in self.params if p.grad is not None]
        if not self.fused:
            sgd_update_(params, [p.grad for p in params], self._rate_tensor())
            return
        if isinstance(self.lr, float):
            for p in params:
                p.add_(p.grad, alpha=-self.lr)
            return
        for rate, slabs, grad_slabs in self._member_lr_operands(params):
            torch._foreach_add_(slabs, grad_slabs, alpha=-rate)

    def _rate_tensor(self) -> float | torch.Tensor:
        """α as :func:`sgd_update_` takes it: the float, or the members' rates as a ``[K]`` tensor."""
        if isinstance(self.lr, float):
            return self.lr
        if self._lr_tensor is None:
            self._lr_tensor = torch.tensor(self.lr, dtype=self.params[0].dtype,
                                           device=self.params[0].device)
        return self._lr_tensor

    def _member_lr_operands(self, params: list[torch.Tensor]) -> list[tuple]:
        """Per distinct α: (α, its members' slabs of θ and of g), kept while the gradient
        buffers stay the same (the hand-written backward's)."""
        grads = [p.grad for p in params]
        last = self._member_lr_last
        if last is not None and same_tensors(last[0], grads):
            return last[1]
        operands = [(rate, members_of(params, members), members_of(grads, members))
                    for rate, members in lr_groups(self.lr)]
        self._member_lr_last = (grads, operands)
        return operands

    def __getstate__(self) -> dict:
        # The slabs are views into θ and g: cut again after unpickling (a checkpoint).
        return {**self.__dict__, "_member_lr_last": None}

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """No state to restart."""

    def state_dict(self) -> dict:
        """The step size (SGD has no other state)."""
        return {"lr": self.lr}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.lr = state["lr"]
        self._member_lr_last = self._lr_tensor = None
