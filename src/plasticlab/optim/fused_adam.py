"""Fast path: :class:`plasticlab.optim.Adam`'s update through torch's fused Adam kernel.

``torch._fused_adam_`` makes one pass over each tensor instead of the ~7 of the per-tensor ops
(docs/performance.md). It computes Adam's rule — :func:`plasticlab.optim.adam.adam_update_`,
the plain form — with its own order of floating-point operations, so the two agree up to
rounding, not to the bit. Tensors with restarted elements (per-element step counts after a
Continual Backprop or ReDo reset) take the kernel for their moments and a foreach update with
per-element bias corrections (:meth:`FusedAdam.restarted_step`).

Member independence: on the CPU the kernel runs a vector loop and finishes a tensor's last
``numel % 16`` elements in a scalar loop that rounds the second moment differently, so a
stacked ``[K, …]`` tensor is handed to it in member-aligned pieces (:func:`member_aligned`),
and one step size per member runs one kernel call per distinct α over its members' slabs.

Applies: ``Adam(fused=True)`` (the default) where torch has the kernel. Plain form:
``Adam(fused=False)``. Test: ``tests/test_optim.py`` (the kernel against the plain form for
1000 steps; restarted elements against dense per-element counts).
"""

from __future__ import annotations

import torch

from .stacked import lr_groups, members_of, same_tensors

MEMBER_ALIGNMENT_BYTES = 64
"""Bytes per member slab that keep torch's fused Adam kernel on the CPU from depending on K.

The CPU kernel runs a vector loop (16 floats a step with AVX-512) over a tensor's flattened
elements, split between threads in 64-byte units, and finishes the last ``numel % 16`` in a
scalar loop that rounds the second moment differently. Over a whole ``[K, …]`` tensor, which
of member k's elements land in that tail depends on K and k; a member slab of a multiple of 64
bytes (AVX-512's vector, the widest torch uses) starts and ends on a loop boundary in any
ensemble, as when run alone."""


def available() -> bool:
    """Whether this torch has the fused Adam kernel."""
    return hasattr(torch, "_fused_adam_")


def member_aligned(t: torch.Tensor) -> list[torch.Tensor]:
    """A stacked ``[K, …]`` tensor as operands for the fused kernel whose per-member results do
    not depend on K: the tensor itself when each member's slab is a multiple of
    :data:`MEMBER_ALIGNMENT_BYTES`, else its K members as separate tensors (so each member's
    vector loop starts at its own first element and ends in its own tail, as when alone)."""
    if (t.numel() // t.shape[0]) * t.element_size() % MEMBER_ALIGNMENT_BYTES == 0:
        return [t]
    return list(t.unbind(0))


def _still_valid(last: tuple | None, indices: list[int], grads: list, steps: list) -> bool:
    """Whether operands cut last step, ``last = (indices, grads, steps, operands)``, serve
    again: the same tensors stepped, the same gradient buffers and step-count tensors."""
    return (last is not None and last[0] == indices and same_tensors(last[1], grads)
            and same_tensors(last[2], steps))


class FusedAdam:
    """The fused kernel's side of one :class:`~plasticlab.optim.Adam`: its operand lists, cut
    once and reused while the tensors they view stay the same, and its device step counts."""

    def __init__(self, adam):
        self.adam = adam
        self._member_parts: list[tuple[list, list, list]] | None = None  # (θ, m, v) pieces, from first use
        self._last_operands: tuple | None = None
        self._member_lr_last: tuple | None = None  # _member_lr_operands' last answer
        self._steps_by_count: dict[int, torch.Tensor] = {}
        # The step count handed to the α = 0 moment update after restarts (its value is unused).
        params = adam.params
        self._unit_step = torch.ones((), device=params[0].device) if params else None

    def forget(self) -> None:
        """Drop every cached operand (the tensors they view were replaced: a checkpoint's load)."""
        self._member_parts = self._last_operands = self._member_lr_last = None
        self._steps_by_count = {}

    def _kernel(self, params, grads, ms, vs, steps, lr: float, weight_decay: float) -> None:
        adam = self.adam
        torch._fused_adam_(params, grads, ms, vs, [], steps, lr=lr, beta1=adam.betas[0],
                           beta2=adam.betas[1], weight_decay=weight_decay, eps=adam.eps,
                           amsgrad=False, maximize=False)

    def step(self, indices: list[int], weight_decay: float) -> None:
        """Tensors ``indices`` (no restarted element; their counts already advanced): one
        kernel pass each, or one per distinct step size over its members' slabs; g + wd·θ
        before the moments."""
        lr = self.adam.lr
        if not isinstance(lr, float):
            for rate, params, grads, ms, vs, steps in self._member_lr_operands(indices):
                self._kernel(params, grads, ms, vs, steps, rate, weight_decay)
            return
        params, grads, ms, vs, steps = self._operands(indices, self._step_tensors(indices))
        self._kernel(params, grads, ms, vs, steps, lr, weight_decay)

    def restarted_step(self, indices: list[int], weight_decay: float) -> None:
        """Tensors ``indices`` with restarted elements: the moments in one kernel call (with
        α = 0 it leaves θ as it is; its bias correction multiplies α, so the step count it reads
        does not matter), then θ ← θ − α · m / (bc1 · (√v / √bc2 + ε)) with per-element bias
        corrections, as foreach ops."""
        adam = self.adam
        params, grads, ms, vs, steps = self._operands(indices, [self._unit_step] * len(indices))
        self._kernel(params, grads, ms, vs, steps, 0.0, weight_decay)
        params = [adam.params[i] for i in indices]
        ms, vs = [adam.exp_avg[i] for i in indices], [adam.exp_avg_sq[i] for i in indices]
        bc1, bc2_sqrt = zip(*(adam.corrections(i) for i in indices), strict=True)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, list(bc2_sqrt))
        torch._foreach_add_(denom, adam.eps)
        torch._foreach_mul_(denom, list(bc1))
        for rate, members in adam.rates():
            if members is None:
                torch._foreach_addcdiv_(params, ms, denom, value=-rate)
            else:
                torch._foreach_addcdiv_(members_of(params, members), members_of(ms, members),
                                        members_of(denom, members), value=-rate)

    def _member_lr_operands(self, indices: list[int]) -> list[tuple]:
        """Per distinct α: (α, and the slabs of its members' θ, g, m, v and step counts). A
        slab is exactly the tensor the member has alone, so the kernel's vector loop and tail
        fall as they do there."""
        adam = self.adam
        grads = [adam.params[i].grad for i in indices]
        steps = self._step_tensors(indices)
        last = self._member_lr_last
        # As in _operands: the same gradient buffers and step tensors as last step
        # (the hand-written backward's) let last step's slabs serve again.
        if _still_valid(last, indices, grads, steps):
            return last[3]
        params = [adam.params[i] for i in indices]
        ms, vs = [adam.exp_avg[i] for i in indices], [adam.exp_avg_sq[i] for i in indices]
        operands = [(rate, members_of(params, members), members_of(grads, members),
                     members_of(ms, members), members_of(vs, members),
                     [t for t in steps for _ in members]) for rate, members in lr_groups(adam.lr)]
        self._member_lr_last = (list(indices), grads, list(steps), operands)
        return operands

    def _operands(self, indices: list[int], steps: list[torch.Tensor]) -> tuple[list, ...]:
        """The kernel's operand lists (θ, g, m, v, t) for tensors ``indices``, each tensor cut
        by :func:`member_aligned` when the parameters are stacked members on the CPU (the CUDA
        kernel computes every element alike: it has no scalar tail)."""
        adam = self.adam
        if not (adam.member_dim and adam.params[indices[0]].is_cpu):
            return ([adam.params[i] for i in indices], [adam.params[i].grad for i in indices],
                    [adam.exp_avg[i] for i in indices], [adam.exp_avg_sq[i] for i in indices], steps)
        grads = [adam.params[i].grad for i in indices]
        last = self._last_operands
        # The hand-written backward writes into the same gradient buffers at every step, and the
        # step-count tensors advance in place: then last step's lists serve again as they are.
        if _still_valid(last, indices, grads, steps):
            return last[3]
        if self._member_parts is None:
            # θ, m and v live as long as the optimizer (updated in place): cut once.
            self._member_parts = [tuple(map(member_aligned, tensors)) for tensors in
                                  zip(adam.params, adam.exp_avg, adam.exp_avg_sq, strict=True)]
        params, grad_parts, ms, vs, ts = [], [], [], [], []
        for i, g, t in zip(indices, grads, steps, strict=True):
            p_parts, m_parts, v_parts = self._member_parts[i]
            params += p_parts
            grad_parts += member_aligned(g)
            ms += m_parts
            vs += v_parts
            ts += [t] * len(p_parts)
        operands = (params, grad_parts, ms, vs, ts)
        self._last_operands = (list(indices), grads, list(steps), operands)
        return operands

    def _step_tensors(self, indices: list[int]) -> list[torch.Tensor]:
        # The kernel reads each tensor's t from a device tensor. One tensor per distinct count
        # (usually one for all), advanced in place from the previous step's, so a step costs
        # one add and no host→device copy; the host counts stay the truth.
        adam = self.adam
        previous, current = self._steps_by_count, {}
        for t in sorted({adam.step_counts[i] for i in indices}):
            tensor = previous.pop(t - 1, None)
            current[t] = (torch.tensor(float(t), device=adam.params[indices[0]].device)
                          if tensor is None else tensor.add_(1))
        self._steps_by_count = current
        return [current[adam.step_counts[i]] for i in indices]

    def __getstate__(self) -> dict:
        # The pieces are views into θ, m, v and g: cut again after unpickling (a checkpoint).
        return {**self.__dict__, "_member_parts": None, "_last_operands": None,
                "_member_lr_last": None}


__all__ = ["MEMBER_ALIGNMENT_BYTES", "FusedAdam", "available", "member_aligned"]
