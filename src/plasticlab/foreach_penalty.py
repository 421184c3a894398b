"""A penalty over a whole model at once, with foreach kernels: the quadratic (λ/2)·Σ‖θ − target‖²
and the absolute λ·Σ‖θ − target‖₁.

``loss + reg()`` with :class:`plasticlab.L2Init` on a model of many parameter tensors builds, per
tensor, a subtraction, a square, a sum and a product into the autograd graph, and as many again
backward: for a hundred tensors over a thousand small operations a step, each a kernel launch
on a GPU. This form computes the same penalty as one autograd node: the differences
d = θ − target of every tensor in one ``torch._foreach_sub``, the value from their norms in one
``torch._foreach_norm`` (2-norms squared, or 1-norms), and the gradient — λ·d, or λ·sign(d) —
times ∂loss/∂penalty in one ``torch._foreach_mul``: the gradient
:class:`~plasticlab.regularizers.Regularizer` defines, d kept from the forward (and taken again
from θ for a gradient of the gradient, which must see it depend on θ).

Plain form: :meth:`plasticlab.regularizers.Regularizer.value` through autograd (the value up to
rounding — here from the norms — and the gradient λ·ρ′(d) to the bit in the tests' loops, or
within rounding where autograd orders λ, ½ and the incoming gradient otherwise). Applies: a
penalty whose ρ is the quadratic ½d² (L2, L2 Init, L2 Init + Resample, Wasserstein Init) or the
absolute |d| (L1 Init) — ``Regularizer.value`` asks, by ρ and ρ′ themselves — and
:func:`applies`: fast paths on (:func:`plasticlab.fast.enabled`), one model (no member
dimension), every parameter a floating tensor on one device, autograd recording, λ not learnt.
Test: ``tests/test_foreach_penalty.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from . import fast


def applies(params: Sequence[torch.Tensor], member_dim: bool, strength: torch.Tensor) -> bool:
    """Whether a penalty's value over ``params`` may be :func:`penalty`: fast
    paths on, one model's parameters (no member dimension), floating tensors on one device,
    autograd recording, a λ that is not itself learnt (this node gives λ no gradient). (That ρ
    is one of :data:`KINDS` is the penalty's to say.)"""
    if not fast.enabled() or member_dim or not torch.is_grad_enabled() or strength.requires_grad:
        return False
    device = params[0].device
    return all(p.is_floating_point() and p.device == device for p in params)


KINDS = ("quadratic", "absolute")
"""The penalties this form computes: ρ(d) = ½d² (ρ′ = d) and ρ(d) = |d| (ρ′ = sign d)."""


def penalty(kind: str, strength: torch.Tensor, params: Sequence[torch.Tensor],
            targets: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """λ·Σᵢ Σ ρ(θᵢ − targetᵢ) for ρ of ``kind`` (a target None: 0), a scalar whose gradient for
    θᵢ is λ·ρ′(θᵢ − targetᵢ) times the incoming gradient, as one autograd node."""
    if kind not in KINDS:
        raise ValueError(f"penalty: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if len(targets) != len(params):  # as the plain form's zip(strict=True) refuses
        raise ValueError(f"penalty: {len(targets)} targets for {len(params)} parameters")
    return _Penalty.apply(kind, strength, len(params), *params, *targets)


class _Penalty(torch.autograd.Function):
    """Forward: the penalty from the differences' norms; backward: λ·ρ′(d) for every parameter —
    from the d the forward kept, or, for a gradient of the gradient (``create_graph``: a
    Hessian-vector product), from d taken again from θ and the targets, so that it depends on θ."""

    @staticmethod
    def forward(ctx, kind, strength, count, *tensors):
        params, targets = tensors[:count], tensors[count:]
        pulled = [i for i, t in enumerate(targets) if t is not None]
        with torch.no_grad():
            differences = _differences(params, pulled, [targets[i] for i in pulled])
            if kind == "quadratic":
                value = 0.5 * strength * torch.stack(torch._foreach_norm(differences)).square().sum()
            else:
                value = strength * torch.stack(torch._foreach_norm(differences, 1)).sum()
        ctx.kind, ctx.count, ctx.pulled = kind, count, pulled
        # θ and the targets are the caller's own tensors (no copies), d the one the forward made
        ctx.save_for_backward(strength, *differences, *params, *(targets[i] for i in pulled))
        return value

    @staticmethod
    def backward(ctx, grad):
        strength, *saved = ctx.saved_tensors
        count = ctx.count
        differences = saved[:count]
        if torch.is_grad_enabled():  # create_graph: d as a function of θ
            differences = _differences(saved[count:2 * count], ctx.pulled, saved[2 * count:])
        slopes = list(differences) if ctx.kind == "quadratic" else torch._foreach_sign(differences)
        scaled = torch._foreach_mul(slopes, strength * grad)
        needs = ctx.needs_input_grad[3:3 + count]
        return (None, None, None, *(g if need else None for g, need in zip(scaled, needs, strict=True)),
                *([None] * count))


def _differences(params, pulled: list[int], targets) -> list[torch.Tensor]:
    """θ − target for the parameters ``pulled`` (their ``targets`` in that order), in one
    ``_foreach_sub``; θ itself for the rest (pulled toward 0)."""
    differences = list(params)
    if pulled:
        for i, d in zip(pulled, torch._foreach_sub([params[i] for i in pulled], list(targets)), strict=True):
            differences[i] = d
    return differences


__all__ = ["KINDS", "applies", "penalty"]
