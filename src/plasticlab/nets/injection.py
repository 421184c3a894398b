"""The frozen part of a plasticity-injected head (Nikishin et al., NeurIPS 2023), stacked over K
members.

Plasticity injection splits a network into an encoder φ and a head h_θ (here: the last
``layers`` affine blocks, all fully connected). At an injection the head's output becomes

    h_θ(z) + h_θ′(z) − h_θ′₀(z),          z = φ(x),

θ frozen, θ′ a fresh draw that is trained, θ′₀ a frozen copy of that draw: the function is
unchanged at the injection and the trainable parameters are as many as before. In the
network the trained head is the network's own last blocks (θ′ takes θ's place in them, so the
optimizer, the penalties and the measurements keep reading the same tensors); this module
holds everything frozen, Σ_j h_{θ_j}(z), which :meth:`plasticlab.nets.EnsembleNet.forward` adds
to the logits. Gradients flow through the frozen heads into z (their *parameters* are frozen,
the encoder keeps learning).

A later injection folds the whole current sum into the frozen part: h_θ + h_θ′ − h_θ′₀ becomes
the new θ. A one-layer head is linear, so the frozen sum is one linear map, kept as one
(weight, bias) pair that each injection adds W′ − W′₀ to. A deeper head's sum of heads is no
head of the same size: each injection keeps two more frozen heads (θ′ and −θ′₀, the sign folded
into the last layer's weight and bias), so after n injections the forward pass runs the head
2n + 1 times.

Member k's entries of a frozen head are zero where member k did not inject: a zero head adds
exactly 0 to member k's logits (and to its gradient), so its logits are those of member k
alone, to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .layers import ACTIVATIONS

Layer = tuple[torch.Tensor, torch.Tensor]  # (weight [K, out, in], bias [K, out])


def head_output(z: torch.Tensor, head: Sequence[Layer], activations: Sequence[str]) -> torch.Tensor:
    """h(z) for a stacked fully connected head: affine maps ``head`` (``[K, out, in]``, ``[K, out]``
    each) with ``activations[l]`` after each but the last; ``z`` ``[K, B, in]``."""
    h = z
    for i, (weight, bias) in enumerate(head):
        h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
        if i < len(head) - 1:
            h = ACTIVATIONS[activations[i]][0](h)
    return h


class FrozenHeads:
    """Σ_j h_{θ_j}(z), the frozen heads of a plasticity-injected network (module docstring).

    ``layers``: how many affine layers the head has; ``activations``: the head's hidden
    activations by name (``layers − 1`` of them). Not an ``nn.Module``: its tensors are no
    parameters (no optimizer sees them) and no part of the network's ``state_dict`` (their
    number grows); the method that injects holds this object and checkpoints it."""

    def __init__(self, layers: int, activations: Sequence[str]):
        if layers < 1 or len(activations) != layers - 1:
            raise ValueError(f"a head of {layers} layers needs {layers - 1} hidden activations, "
                             f"got {list(activations)}")
        self.layers, self.activations = int(layers), list(activations)
        self.heads: list[list[Layer]] = []

    def __call__(self, z: torch.Tensor) -> torch.Tensor | None:
        """Σ_j h_{θ_j}(z), summed in the order the heads were frozen; None before any injection."""
        total = None
        for head in self.heads:
            out = head_output(z, head, self.activations)
            total = out if total is None else total + out
        return total

    @torch.no_grad()
    def inject(self, trained: Sequence[Layer], fresh: Sequence[Layer], members: torch.Tensor) -> None:
        """Freeze h_θ − h_θ′₀ for the members flagged in ``members`` (``[K]`` bool): ``trained``
        the head's current θ, ``fresh`` the new draw θ′₀ (both ``[K, …]`` per layer). Other
        members' entries of what is added are zero."""
        def masked(t: torch.Tensor) -> torch.Tensor:
            return torch.where(members.view(-1, *([1] * (t.dim() - 1))), t, torch.zeros_like(t))

        if self.layers == 1:
            # linear: h_θ − h_θ′₀ is the map (W − W′₀, b − b′₀), folded into the one frozen map
            (w, b), (w0, b0) = trained[0], fresh[0]
            delta = (masked(w - w0), masked(b - b0))
            if not self.heads:
                self.heads.append([(torch.zeros_like(w), torch.zeros_like(b))])
            (fw, fb), = self.heads[0]
            self.heads[0] = [(fw + delta[0], fb + delta[1])]
            return
        plus = [(masked(w.clone()), masked(b.clone())) for w, b in trained]
        minus = [(masked(w.clone()), masked(b.clone())) for w, b in fresh]
        minus[-1] = (-minus[-1][0], -minus[-1][1])  # −h_θ′₀: the last layer negated (exact)
        self.heads += [plus, minus]


__all__ = ["FrozenHeads", "Layer", "head_output"]
