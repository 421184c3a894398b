"""Parseval regularization (Chung, Lin, Bhatt, Xu & Lam, NeurIPS 2024; SPEC §10).

Keeping each hidden layer's weight matrix close to a scaled orthogonal one keeps its singular
values spread, so the features stay diverse and gradients keep flowing. The penalty is

    L_Parseval = λ · Σ_ℓ ‖W_ℓ W_ℓᵀ − s·I‖²_F,      ∂/∂W_ℓ = 4λ · (W_ℓ W_ℓᵀ − s·I) · W_ℓ,

over the hidden layers' weight matrices W_ℓ (out × in; a conv filter bank is out × in·kh·kw),
never the output layer and never a bias. λ (``strength``) and s (``scale``; the reference
code uses s = 2 with orthogonal init of gain √2, the default here is 1) are per member. The
reference's optional learnable per-unit scale layer is not part of this method.

The engine adds the closed-form gradient to ``.grad``; :func:`parseval_penalty` is the same
quantity for autograd (the drop-in :class:`plasticlab.dropin_field.Parseval`), and a test keeps
the two equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..params import Param
from .base import CapturedTransform, Method, Needs


def as_matrices(weight: torch.Tensor) -> torch.Tensor:
    """A stacked weight ``[K, out, in]`` or conv filter bank ``[K, out, in, kh, kw]`` as
    ``[K, out, in·kh·kw]`` matrices (a view: the gradient written through it lands in place)."""
    return weight.flatten(2)


def gram_residual(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W Wᵀ − s·I for ``[K, out, n]`` matrices and per-member s ``[K]`` → ``[K, out, out]``."""
    eye = torch.eye(w.shape[1], dtype=w.dtype, device=w.device)
    return torch.bmm(w, w.transpose(1, 2)) - scale.to(w.dtype).view(-1, 1, 1) * eye


def parseval_penalty(weights: Sequence[torch.Tensor], strength, scale) -> torch.Tensor:
    """λ·Σ_ℓ ‖W_ℓ W_ℓᵀ − s·I‖²_F per member, ``[K]``, for stacked hidden weights ``[K, …]``;
    λ and s are floats or ``[K]`` tensors. Differentiable (autograd's gradient is the penalty's)."""
    ref = weights[0]
    strength = torch.as_tensor(strength, dtype=ref.dtype, device=ref.device).reshape(-1)
    scale = torch.as_tensor(scale, dtype=ref.dtype, device=ref.device).reshape(-1)
    total = sum(gram_residual(as_matrices(w), scale).square().sum(dim=(1, 2)) for w in weights)
    return strength * total


def parseval_grad(weight: torch.Tensor, strength: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """∂L_Parseval/∂W = 4λ (W Wᵀ − s·I) W for one stacked hidden weight, shaped like it."""
    w = as_matrices(weight)
    grad = torch.bmm(gram_residual(w, scale), w)
    return (4 * strength.to(w.dtype).view(-1, 1, 1) * grad).view_as(weight)


STRENGTH = Param("strength", 1e-3, float, "λ: strength of the Parseval penalty", per_member=True, low=0.0)
SCALE = Param("scale", 1.0, float, "s: the target W Wᵀ = s·I (the reference code uses 2)",
              per_member=True, low=0.0, low_open=True)


class ParsevalMethod(Method):
    """Adds 4λ (W Wᵀ − s·I) W to each hidden weight's gradient at every step."""

    name = "parseval"
    title = "Parseval"
    description = "Parseval regularization: λ‖W Wᵀ − s·I‖² on hidden weight matrices"
    hyperparameters = (STRENGTH, SCALE)

    @classmethod
    def needs(cls, params):
        return Needs(gradient_hook=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.weights = [block.affine.weight for block in net.hidden_blocks]
        self.strength = torch.as_tensor(hp["strength"], device=context.device).reshape(-1)
        self.scale = torch.as_tensor(hp["scale"], device=context.device).reshape(-1)
        if bool((self.strength < 0).any()):  # once, at construction
            raise ValueError("method parseval: strength λ must be >= 0")

    def add_penalty_grad(self) -> None:
        with torch.no_grad():
            for w in self.weights:
                grad = parseval_grad(w, self.strength, self.scale)
                if w.grad is None:
                    w.grad = grad
                else:
                    w.grad.add_(grad)

    def captured_gradient_transform(self) -> CapturedTransform:
        """4λ (W Wᵀ − s·I) W is tensor operations alone: a compiled step captures it whole."""
        def add(grads, task_loss):
            for w, g in zip(self.weights, grads, strict=True):
                g.add_(parseval_grad(w, self.strength, self.scale))

        return CapturedTransform(run=add, params=tuple(self.weights), reads=(self.strength, self.scale))

    def penalty(self) -> torch.Tensor:
        with torch.no_grad():
            return parseval_penalty(self.weights, self.strength, self.scale)
