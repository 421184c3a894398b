"""Adam on stacked ensemble parameters, with per-element state.

Same update as ``torch.optim.Adam`` (defaults β = (0.9, 0.999), ε = 1e-8, no weight decay):

    m ← β₁m + (1−β₁)g,   v ← β₂v + (1−β₂)g²,
    θ ← θ − α · (m / (1−β₁ᵗ)) / (√v / √(1−β₂ᵗ) + ε)

with one difference that resetting methods need: the step count t is kept **per element**, so
that Continual Backprop and ReDo can restart a single unit's moments *and* its bias correction
(:meth:`Adam.reset`). Until the first reset every element shares one scalar count, which is
cheaper and gives the same numbers.

The step size α is one for all members, or one per member (``lr=[α_1, …, α_K]``): the
members of a step-size grid then train in one ensemble, each updated as it is alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .stacked import StackedOptimizer, lr_groups, members_of, same_tensors, step_sizes

MEMBER_ALIGNMENT_BYTES = 64
"""Bytes per member slab that keep torch's fused Adam kernel on the CPU from depending on K.

The CPU kernel runs a vector loop (16 floats a step with AVX-512) over a tensor's flattened
elements, split between threads in 64-byte units, and finishes the last ``numel % 16`` in a
scalar loop that rounds the second moment differently. Over a whole ``[K, …]`` tensor, which
of member k's elements land in that tail depends on K and k; a member slab of a multiple of 64
bytes (AVX-512's vector, the widest torch uses) starts and ends on a loop boundary in any
ensemble, as when run alone."""


def member_aligned(t: torch.Tensor) -> list[torch.Tensor]:
    """A stacked ``[K, …]`` tensor as operands for the fused kernel whose per-member results do
    not depend on K: the tensor itself when each member's slab is a multiple of
    :data:`MEMBER_ALIGNMENT_BYTES`, else its K members as separate tensors (so each member's
    vector loop starts at its own first element and ends in its own tail, as when alone)."""
    if (t.numel() // t.shape[0]) * t.element_size() % MEMBER_ALIGNMENT_BYTES == 0:
        return [t]
    return list(t.unbind(0))


def _addcdiv_members(p: torch.Tensor, m: torch.Tensor, denom: torch.Tensor, rate: float,
                     members: list[int] | None) -> None:
    """θ ← θ − rate · m / denom, on the whole tensor (members None) or on ``members``' slabs."""
    if members is None:
        p.addcdiv_(m, denom, value=-rate)
    else:
        torch._foreach_addcdiv_([p[k] for k in members], [m[k] for k in members],
                                [denom[k] for k in members], value=-rate)


def _still_valid(last: tuple | None, indices: list[int], grads: list, steps: list) -> bool:
    """Whether operands cut last step, ``last = (indices, grads, steps, operands)``, serve
    again: the same tensors stepped, the same gradient buffers and step-count tensors."""
    return (last is not None and last[0] == indices and same_tensors(last[1], grads)
            and same_tensors(last[2], steps))


class Adam(StackedOptimizer):
    """Adam over a list of tensors whose gradients are in ``.grad``.

    ``member_dim``: the tensors are stacked ensemble members ``[K, …]`` (the engine's);
    member k's update is then the same to the bit as in an ensemble of its own
    (:func:`member_aligned`).
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: float,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, fused: bool = True,
                 weight_decay: float = 0.0, member_dim: bool = False):
        if not weight_decay >= 0:
            raise ValueError(f"Adam weight_decay must be >= 0, got {weight_decay}")
        self.params = list(params)
        # α: a float, or member k's α_k in lr[k]; then each update runs once per distinct α,
        # on the slabs of the members that have it (members_of)
        self.lr = step_sizes(lr, member_dim, "Adam")
        self.betas, self.eps = betas, eps
        # g ← g + wd·θ before the moments, as torch.optim.Adam's weight_decay (L2, not AdamW).
        self.weight_decay = float(weight_decay)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # Steps taken by each tensor (like torch.optim.Adam, a tensor without a gradient in a
        # step is skipped and its count does not advance).
        self.step_counts = [0] * len(self.params)
        # Per-element step counts, created for a tensor on its first reset, kept factored: a list
        # of count tensors broadcastable to the parameter, one per restart pattern (a row of
        # units' incoming weights, a column of outgoing weights …); an element's count is the
        # minimum over them (the steps since the latest restart that covered it).
        self.restart_counts: list[list[torch.Tensor] | None] = [None] * len(self.params)
        self.fused = fused and hasattr(torch, "_fused_adam_")
        # Stacked ensemble parameters [K, …]: the fused kernel then runs on member-aligned
        # pieces (member_aligned), so that a member's update does not depend on K.
        self.member_dim = bool(member_dim)
        self._member_parts: list[tuple[list, list, list]] | None = None  # (θ, m, v) pieces, from first use
        self._last_operands: tuple | None = None
        self._member_lr_last: tuple | None = None  # _member_lr_operands' last answer
        self._steps_by_count: dict[int, torch.Tensor] = {}
        # The step count handed to the α = 0 moment update after restarts (its value is unused).
        self._unit_step = torch.ones((), device=self.params[0].device) if self.params else None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter from its ``.grad``."""
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not self.fused:
            for i in active:
                self._single_step(i, self.params[i])
            return
        fused = [i for i in active if self.restart_counts[i] is None]
        restarted = [i for i in active if self.restart_counts[i] is not None]
        if fused:
            self._fused_step(fused)
        if restarted:
            self._restarted_step(restarted)

    def _restarted_step(self, indices: list[int]) -> None:
        # The tensors with restarted elements, all at once: the moments in one fused call (with
        # α = 0 it leaves θ as it is; its bias correction multiplies α, so the step count it
        # reads does not matter), then the per-element bias-corrected update as foreach ops.
        beta1, beta2 = self.betas
        params, grads, ms, vs, steps = self._kernel_operands(indices, [self._unit_step] * len(indices))
        torch._fused_adam_(params, grads, ms, vs, [], steps, lr=0.0, beta1=beta1, beta2=beta2,
                           weight_decay=self.weight_decay, eps=self.eps, amsgrad=False,
                           maximize=False)
        params = [self.params[i] for i in indices]
        ms, vs = [self.exp_avg[i] for i in indices], [self.exp_avg_sq[i] for i in indices]
        bc1, bc2_sqrt = zip(*(self._corrections(i) for i in indices), strict=True)
        # θ ← θ − α · m / (bc1 · (√v / √bc2 + ε))
        denom = torch._foreach_sqrt(vs)
        torch._foreach_div_(denom, list(bc2_sqrt))
        torch._foreach_add_(denom, self.eps)
        torch._foreach_mul_(denom, list(bc1))
        for rate, members in self._rates():
            if members is None:
                torch._foreach_addcdiv_(params, ms, denom, value=-rate)
            else:
                torch._foreach_addcdiv_(members_of(params, members), members_of(ms, members),
                                        members_of(denom, members), value=-rate)

    def _corrections(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance tensor i's step counts by one and return its per-element bias corrections
        (1 − β₁ᵗ, √(1 − β₂ᵗ)), broadcastable to the parameter.

        1 − βᵗ = −expm1(t·ln β) is accurate to rounding even for small t (where 1 − exp(·)
        would cancel). It is computed on the factored counts (a few hundred values, not every
        element) and combined with a minimum: 1 − βᵗ grows with t, so the minimum over the
        patterns is the correction of the element's own count."""
        beta1, beta2 = self.betas
        self.step_counts[i] += 1
        bc1 = bc2_sqrt = None
        for c in self.restart_counts[i]:
            c.add_(1)
            b1 = torch.expm1(c * math.log(beta1)).neg_()
            b2 = torch.expm1(c * math.log(beta2)).neg_().sqrt_()
            bc1 = b1 if bc1 is None else torch.minimum(bc1, b1)
            bc2_sqrt = b2 if bc2_sqrt is None else torch.minimum(bc2_sqrt, b2)
        return bc1, bc2_sqrt

    def _fused_step(self, indices: list[int]) -> None:
        # torch's fused Adam kernel: one pass over each tensor instead of ~7 (docs/performance.md).
        # Same update, checked against torch.optim.Adam in the tests.
        for i in indices:
            self.step_counts[i] += 1
        beta1, beta2 = self.betas
        if not isinstance(self.lr, float):
            self._fused_member_lr_step(indices)
            return
        params, grads, ms, vs, steps = self._kernel_operands(indices, self._step_tensors(indices))
        torch._fused_adam_(params, grads, ms, vs, [], steps, lr=self.lr, beta1=beta1, beta2=beta2,
                           weight_decay=self.weight_decay, eps=self.eps, amsgrad=False,
                           maximize=False)

    def _fused_member_lr_step(self, indices: list[int]) -> None:
        # One fused call per distinct α over its members' slabs: a slab is exactly the tensor
        # the member has alone, so the kernel's vector loop and tail fall as they do there.
        beta1, beta2 = self.betas
        for rate, params, grads, ms, vs, steps in self._member_lr_operands(indices):
            torch._fused_adam_(params, grads, ms, vs, [], steps, lr=rate, beta1=beta1,
                               beta2=beta2, weight_decay=self.weight_decay, eps=self.eps,
                               amsgrad=False, maximize=False)

    def _member_lr_operands(self, indices: list[int]) -> list[tuple]:
        """Per distinct α: (α, and the slabs of its members' θ, g, m, v and step counts)."""
        grads = [self.params[i].grad for i in indices]
        steps = self._step_tensors(indices)
        last = self._member_lr_last
        # As in _kernel_operands: the same gradient buffers and step tensors as last step
        # (the hand-written backward's) let last step's slabs serve again.
        if _still_valid(last, indices, grads, steps):
            return last[3]
        params = [self.params[i] for i in indices]
        ms, vs = [self.exp_avg[i] for i in indices], [self.exp_avg_sq[i] for i in indices]
        operands = [(rate, members_of(params, members), members_of(grads, members),
                     members_of(ms, members), members_of(vs, members),
                     [t for t in steps for _ in members]) for rate, members in lr_groups(self.lr)]
        self._member_lr_last = (list(indices), grads, list(steps), operands)
        return operands

    def _kernel_operands(self, indices: list[int], steps: list[torch.Tensor]) -> tuple[list, ...]:
        """The fused kernel's operand lists (θ, g, m, v, t) for tensors ``indices``, each
        tensor cut by :func:`member_aligned` when the parameters are stacked members on the
        CPU (the CUDA kernel computes every element alike: it has no scalar tail)."""
        if not (self.member_dim and self.params[indices[0]].is_cpu):
            return ([self.params[i] for i in indices], [self.params[i].grad for i in indices],
                    [self.exp_avg[i] for i in indices], [self.exp_avg_sq[i] for i in indices], steps)
        grads = [self.params[i].grad for i in indices]
        last = self._last_operands
        # The hand-written backward writes into the same gradient buffers at every step, and the
        # step-count tensors advance in place: then last step's lists serve again as they are.
        if _still_valid(last, indices, grads, steps):
            return last[3]
        if self._member_parts is None:
            # θ, m and v live as long as the optimizer (updated in place): cut once.
            self._member_parts = [tuple(map(member_aligned, tensors)) for tensors in
                                  zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True)]
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

    def __getstate__(self) -> dict:
        # The pieces are views into θ, m, v and g: cut again after unpickling (a checkpoint).
        return {**self.__dict__, "_member_parts": None, "_last_operands": None,
                "_member_lr_last": None}

    def _step_tensors(self, indices: list[int]) -> list[torch.Tensor]:
        # The kernel reads each tensor's t from a device tensor. One tensor per distinct count
        # (usually one for all), advanced in place from the previous step's, so a step costs
        # one add and no host→device copy; the host counts stay the truth.
        previous, current = self._steps_by_count, {}
        for t in sorted({self.step_counts[i] for i in indices}):
            tensor = previous.pop(t - 1, None)
            current[t] = (torch.tensor(float(t), device=self.params[indices[0]].device)
                          if tensor is None else tensor.add_(1))
        self._steps_by_count = current
        return [current[self.step_counts[i]] for i in indices]

    def _single_step(self, i: int, p: torch.Tensor) -> None:
        # The simple form (fused=False), one tensor at a time.
        beta1, beta2 = self.betas
        # g + wd·θ in one fused multiply-add, rounded as the fused kernel and addcmul_ round it
        g = p.grad if not self.weight_decay else p.grad.add(p, alpha=self.weight_decay)
        m, v = self.exp_avg[i], self.exp_avg_sq[i]
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        if self.restart_counts[i] is None:
            self.step_counts[i] += 1
            t = self.step_counts[i]
            bc1 = 1 - beta1 ** t
            bc2_sqrt = (1 - beta2 ** t) ** 0.5
            denom = (v.sqrt() / bc2_sqrt).add_(self.eps)
            for rate, members in self._rates():
                _addcdiv_members(p, m, denom, rate / bc1, members)
        else:
            bc1, bc2_sqrt = self._corrections(i)
            denom = (v.sqrt() / bc2_sqrt).add_(self.eps)
            for rate, members in self._rates():
                _addcdiv_members(p, m / bc1, denom, rate, members)

    def _rates(self) -> list[tuple[float, list[int] | None]]:
        """(α, members) pairs: one pair (α, None = all members) for a shared step size."""
        return [(self.lr, None)] if isinstance(self.lr, float) else lr_groups(self.lr)

    @property
    def element_steps(self) -> list[torch.Tensor | None]:
        """Each tensor's per-element step counts (None until its first restart), materialised."""
        out = []
        for p, counts in zip(self.params, self.restart_counts, strict=True):
            if counts is None:
                out.append(None)
                continue
            full = counts[0].expand_as(p)
            for c in counts[1:]:
                full = torch.minimum(full, c)
            out.append(full.clone())
        return out

    @torch.no_grad()
    def take_weight_decay(self, strength: float) -> None:
        """From now on add ``strength``·θ to every gradient inside this optimizer's own pass
        (g + wd·θ before the moments, ``torch.optim.Adam``'s weight decay): how a quadratic
        penalty's decay λθ rides along (:mod:`plasticlab.fast.quadratic_penalty`)."""
        if self.weight_decay:
            raise ValueError(f"Adam already has a weight decay ({self.weight_decay}); a penalty's "
                             "decay cannot be added to it")
        if not strength >= 0:
            raise ValueError(f"weight decay must be >= 0, got {strength}")
        self.weight_decay = float(strength)

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Restart Adam for the elements of parameter ``index`` where ``mask`` is true.

        Moments go to 0 and, with ``restart_count`` (Continual Backprop), the step count too,
        so the next update is bias-corrected as a first step (the public AdamGnT leaves the
        bias correction stale; we do not). ReDo zeroes the moments only
        (``restart_count=False``).
        """
        p = self.params[index]
        mask = mask.expand_as(p)
        self.exp_avg[index].masked_fill_(mask, 0.0)
        self.exp_avg_sq[index].masked_fill_(mask, 0.0)
        if not restart_count:
            return
        # The dims the mask varies along (expanded dims have stride 0): restarting whole units
        # gives a [K, U, 1] or [K, 1, U] pattern, kept as a count tensor of that shape.
        shape = tuple(1 if stride == 0 else size
                      for stride, size in zip(mask.stride(), mask.shape, strict=True))
        pattern = mask[tuple(slice(0, 1) if n == 1 else slice(None) for n in shape)]
        counts = self.restart_counts[index]
        if counts is None:
            counts = self.restart_counts[index] = []
        match = next((c for c in counts if tuple(c.shape) == shape), None)
        if match is None:
            match = torch.full(shape, float(self.step_counts[index]), dtype=p.dtype, device=p.device)
            counts.append(match)
        match.masked_fill_(pattern, 0.0)

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly (for checkpoints)."""
        return {"lr": self.lr, "betas": self.betas, "eps": self.eps, "weight_decay": self.weight_decay,
                "member_dim": self.member_dim,
                "step_counts": list(self.step_counts),
                "exp_avg": [m.clone() for m in self.exp_avg],
                "exp_avg_sq": [v.clone() for v in self.exp_avg_sq],
                "restart_counts": [None if c is None else [t.clone() for t in c]
                                   for c in self.restart_counts]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.lr, self.betas, self.eps = state["lr"], tuple(state["betas"]), state["eps"]
        self.weight_decay = state.get("weight_decay", 0.0)
        self.member_dim = state.get("member_dim", False)
        self.step_counts = list(state["step_counts"])
        for dst, src in zip(self.exp_avg + self.exp_avg_sq, state["exp_avg"] + state["exp_avg_sq"],
                            strict=True):
            dst.copy_(src)
        self.restart_counts = [None if c is None else [t.clone() for t in c]
                               for c in state["restart_counts"]]
        self._steps_by_count = {}
        self._member_lr_last = None
