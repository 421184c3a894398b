"""Normalize-and-Project, NaP (Lyle, Zheng, Khetarpal, Martens, van Hasselt, Pascanu & Dabney,
"Normalization and effective learning rates in reinforcement learning", NeurIPS 2024).

A layer followed by a normalization is scale-invariant: LN(c·Wx) = LN(Wx), so as ‖W‖ grows
the same gradient step moves the function less — the *effective* learning rate decays like
1/‖W‖², an implicit schedule that starves a continual learner. NaP makes the schedule explicit:

1. **normalize** — a LayerNorm before every hidden nonlinearity (the network of
   :class:`plasticlab.methods.layer_norm.LayerNorm`: after each hidden Linear/Conv, over C, H, W
   for convolutions);
2. **project** — after every optimizer step, each layer's weight goes back to its initial norm,

       W_ℓ ← W_ℓ · ‖W_ℓ⁰‖ / ‖W_ℓ‖          (Frobenius norm of the whole tensor, per member),

   every layer, the output layer included; and each LayerNorm's scale and offset (γ_ℓ, β_ℓ)
   jointly back to their initial joint norm, (γ, β) ← (γ, β)·‖(γ⁰, β⁰)‖ / ‖(γ, β)‖ — with a ReLU
   (homogeneous) after it, scaling the pair scales only what the next layer sees.

Biases of the Linear/Conv layers are not projected, as in every public implementation read
(docs/methods.md lists them). The optimizer's state is left as it is. NaP has no numeric
setting; a tensor whose norm is 0 is left as it is (no direction to project).

The drop-in :class:`plasticlab.dropin_field.NormalizeProject` projects a plain model that
already has its normalization layers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import CapturedHook, Method, Needs


def joint_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """‖(t₁, t₂, …)‖ per member, ``[K]``: the Frobenius norm of stacked tensors ``[K, …]`` taken
    together, member by member."""
    squares = [torch.linalg.vector_norm(t.flatten(1), dim=1).square() for t in tensors]
    return torch.stack(squares).sum(0).sqrt()


def project_to_norm_(tensors: Sequence[torch.Tensor], target: torch.Tensor) -> None:
    """(t₁, t₂, …) ← (t₁, t₂, …)·target/‖(t₁, t₂, …)‖ in place, member by member (``target``
    ``[K]``); a member whose norm is 0 is left as it is."""
    norm = joint_norm(tensors)
    scale = torch.where(norm > 0, target.to(norm.dtype) / norm, torch.ones_like(norm))
    for t in tensors:
        t.mul_(scale.view(-1, *[1] * (t.dim() - 1)))


class NormalizeProjectMethod(Method):
    """LayerNorm before every hidden activation; after every step each weight back to its initial
    norm, and each LayerNorm's (γ, β) jointly back to theirs."""

    name = "normalize_project"
    title = "Normalize-and-Project"
    description = "Normalize-and-Project: LayerNorm, weights projected to their initial norm after every step"

    @classmethod
    def architecture(cls, hp, net):
        return {"layer_norm": True}

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        norms = [block.norm for block in net.hidden_blocks]
        if any(n is None for n in norms):
            raise ValueError("method normalize_project needs a LayerNorm before every hidden "
                             "activation: build the network with layer_norm=True (what its "
                             "architecture() asks the engine for)")
        # what is projected, and onto which norm: each weight alone, each (γ, β) pair together
        self.groups = ([[layer.weight] for layer in net.affine_layers]
                       + [[n.weight, n.bias] for n in norms])
        with torch.no_grad():
            self.initial_norms = [joint_norm(group) for group in self.groups]

    def after_step(self, features, x, step):
        """Project every group back onto its initial norm."""
        self.project()

    @torch.no_grad()
    def project(self) -> None:
        """Every weight back to its initial norm, every LayerNorm's (γ, β) to theirs."""
        for group, target in zip(self.groups, self.initial_norms, strict=True):
            project_to_norm_(group, target)

    def captured_after_step(self) -> CapturedHook:
        """The projection is tensor operations alone (a member whose norm is 0 kept by a
        ``where``, not a branch): a compiled step captures it whole."""
        return CapturedHook(run=lambda features, x: self.project(),
                            params=tuple(t for group in self.groups for t in group),
                            reads=tuple(self.initial_norms))
