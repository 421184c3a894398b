"""The ensemble linear layer y = x Wᵀ + b with a backward that writes ∂L/∂W in W's own layout.

Plain form: :meth:`plasticlab.nets.EnsembleLinear.forward`, ``torch.baddbmm(b, x, Wᵀ)``
through autograd. Autograd's backward of that product is a transposed ``[K, in, out]`` gradient
that AccumulateGrad then copies element by element into W's ``[K, out, in]`` layout (why that
matters: docs/performance.md). :class:`EnsembleLinearFunction` computes ∂L/∂W = δᵀx straight in
``[K, out, in]``: the same forward, and the same gradients up to rounding.

Applies: every ensemble linear layer, on any device, outside :func:`plasticlab.fast.plain_forms`,
run eagerly. Traced by ``torch.compile`` (the compiled step's gradient through an MLP,
:func:`plasticlab.step.compiled.functional_gradients`) the layer is :func:`traced_linear`
instead: dynamo's trace of :class:`EnsembleLinearFunction` under ``torch.func.grad`` gave zero
gradients to every layer but the first (torch 2.13).
Test: ``tests/test_fast_kernels.py``.
"""

from __future__ import annotations

import torch

from ..fast import enabled


def applies(x: torch.Tensor) -> bool:
    """Whether the ensemble linear layer runs :class:`EnsembleLinearFunction` on input ``x``:
    eagerly, outside the plain forms."""
    return enabled() and not torch.compiler.is_compiling()


class EnsembleLinearFunction(torch.autograd.Function):
    """y = x Wᵀ + b per member for ``x`` ``[K, B, in]``, ``W`` ``[K, out, in]``, ``b``
    ``[K, out]``; the backward gives ∂L/∂x = δW, ∂L/∂W = δᵀx, ∂L/∂b = Σ_b δ."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad_out, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad_out.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        grad_b = grad_out.sum(1) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def traced(x: torch.Tensor) -> bool:
    """Whether the ensemble linear layer is :func:`traced_linear` on input ``x``: inside
    ``torch.compile``, outside the plain forms."""
    return enabled() and torch.compiler.is_compiling()


def traced_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y = (b + W xᵀ)ᵀ per member: the plain form's product written so that autograd's formulas,
    traced by the compiler, compute ∂L/∂W = δᵀx in W's own ``[K, out, in]`` layout, as
    :class:`EnsembleLinearFunction` does. Through ``baddbmm(b, x, Wᵀ)`` the traced ∂W (xᵀδ,
    transposed) rounded differently at different places in the ensemble (Layer Norm's MLP:
    member k was not seed k alone); this form keeps member k's gradient its own."""
    return torch.baddbmm(bias.unsqueeze(-1), weight, x.transpose(1, 2)).transpose(1, 2)


def ensemble_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """x Wᵀ + b per member, through :class:`EnsembleLinearFunction`."""
    return EnsembleLinearFunction.apply(x, weight, bias)


__all__ = ["EnsembleLinearFunction", "applies", "ensemble_linear", "traced", "traced_linear"]
