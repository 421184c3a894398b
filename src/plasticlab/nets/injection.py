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

Fast path, for a compiled step (:mod:`plasticlab.step.compiled`): the frozen heads stacked
into slots and run at once — their first layers side by side as one wide layer, their last
layers as one map from the wide features, the layers between slot by slot — so the sums over
heads are inside matrix products. The slot count C (the *capacity*) doubles as heads are
added — 2, 4, 8, … — so the compiled step's graph is traced again at each doubling, not at
each injection (a graph per head count would be one per task); the slots past the heads are
zero, and a head whose last layer is zero adds exactly 0. The stacked copy is derived state
(:meth:`FrozenHeads.stack` rebuilds it from the heads; checkpoints hold the heads alone).
Plain form: the heads one by one, summed in order (:meth:`FrozenHeads.__call__` outside
compilation); the two agree up to the order of the sums (tested,
``tests/test_compiled_step.py``). Applies: inside a compiled step, after
:meth:`FrozenHeads.stack`.
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
        self.version = 0  # how many times the heads changed: when the stacked copy is stale
        self.unstack()

    derived_state = ("stacked", "slots", "stacked_count", "stacked_version")
    """Attributes rebuilt from the others, never checkpointed (:func:`plasticlab.checkpoint.capture`)."""

    def __call__(self, z: torch.Tensor) -> torch.Tensor | None:
        """Σ_j h_{θ_j}(z), summed in the order the heads were frozen; None before any injection.
        Inside a compiled step, :meth:`captured` computes it (the module docstring's fast path)."""
        if torch.compiler.is_compiling():
            return self.captured(z)
        total = None
        for head in self.heads:
            out = head_output(z, head, self.activations)
            total = out if total is None else total + out
        return total

    def captured(self, z: torch.Tensor) -> torch.Tensor | None:
        """Σ_j h_{θ_j}(z) from :meth:`stack`'s slots, every head at once: the heads' first layers
        side by side as one wide layer, their last layers as one map from the wide features
        (its bias Σ_j b_j), the layers between block by block; None before any injection. The
        sums over heads are inside matrix products, as every other sum over units is (so member
        k's numbers do not depend on the other members). A compiled step's form: its graph
        reads the slots alone, so :meth:`stack` must have run since the heads last changed (the
        compiled step calls it before each step)."""
        if not self.stacked:  # (what the graph reads of this object: its guards check no count)
            return None
        if self.layers == 1:
            (weight, bias), = self.stacked
            return torch.baddbmm(bias.unsqueeze(1), z, weight.transpose(1, 2))
        (first_w, first_b), *middle, (last_w, last_b) = self.stacked
        members, batch, slots = z.shape[0], z.shape[1], self.slots
        h = torch.baddbmm(first_b.unsqueeze(1), z, first_w.transpose(1, 2))  # [K, B, C·hidden]
        # each slot's activation on its own features (along dim 2: Concat ReLU's doubling stays
        # within each head), then [K, B, C, features]
        activate = [ACTIVATIONS[name][0] for name in self.activations]
        h = activate[0](h.view(members, batch * slots, -1)).view(members, batch, slots, -1)
        for (weight, bias), activation in zip(middle, activate[1:], strict=True):
            # slot by slot: [K·C, B, in] through each slot's own layer
            h = h.transpose(1, 2).reshape(members * slots, batch, -1)
            h = torch.baddbmm(bias.flatten(0, 1).unsqueeze(1), h, weight.flatten(0, 1).transpose(1, 2))
            h = activation(h).view(members, slots, batch, -1).transpose(1, 2)
        return torch.baddbmm(last_b.unsqueeze(1), h.reshape(members, batch, -1), last_w.transpose(1, 2))

    @property
    def capacity(self) -> int:
        """How many heads the stacked copy has slots for (0: not stacked, or no heads)."""
        return self.slots

    @torch.no_grad()
    def stack(self) -> None:
        """Bring the stacked copy (:meth:`captured` reads it) up to date with the heads: their
        values copied into its slots, which double in number when the heads outgrow them (new
        tensors then; on CUDA at static addresses, as a CUDA graph reads them). A no-op while
        the heads are unchanged."""
        if self.stacked_version == self.version or not self.heads:
            return
        needed = len(self.heads)
        if self.layers == 1:  # the one folded map, rewritten in place at each injection
            if not self.stacked:
                self._allocate([(w.new_zeros(w.shape), b.new_zeros(b.shape)) for w, b in self.heads[0]], 1)
            (slot_w, slot_b), = self.stacked
            (w, b), = self.heads[0]
            slot_w.copy_(w)
            slot_b.copy_(b)
        else:
            first = self.stacked_count
            if needed > self.slots:
                slots = max(2, 1 << (needed - 1).bit_length())
                self._allocate(self._zeros(slots), slots)
                first = 0
            (first_w, first_b), *middle, (last_w, last_b) = self.stacked
            for j in range(first, needed):
                (w, b), *between, (w_last, _) = self.heads[j]
                rows, cols = w.shape[1], w_last.shape[2]
                first_w[:, j * rows:(j + 1) * rows].copy_(w)
                first_b[:, j * rows:(j + 1) * rows].copy_(b)
                for (slot_w, slot_b), (w_mid, b_mid) in zip(middle, between, strict=True):
                    slot_w[:, j].copy_(w_mid)
                    slot_b[:, j].copy_(b_mid)
                last_w[:, :, j * cols:(j + 1) * cols].copy_(w_last)
            last_b.zero_()
            for head in self.heads:  # Σ_j b_j in the order the heads were frozen
                last_b.add_(head[-1][1])
        self.stacked_count, self.stacked_version = needed, self.version

    def _zeros(self, slots: int) -> list[Layer]:
        # the slots' tensors, zero: the first layer [K, C·out, in], those between [K, C, out, in],
        # the last [K, out, C·in] with one bias
        (w, b), *between, (w_last, b_last) = self.heads[0]
        members, rows, cols = w.shape[0], w.shape[1], w_last.shape[2]
        return [(w.new_zeros((members, slots * rows, w.shape[2])), b.new_zeros((members, slots * rows))),
                *((wm.new_zeros((members, slots, *wm.shape[1:])), bm.new_zeros((members, slots, bm.shape[1])))
                  for wm, bm in between),
                (w_last.new_zeros((members, w_last.shape[1], slots * cols)), b_last.new_zeros(b_last.shape))]

    def _allocate(self, stacked: list[Layer], slots: int) -> None:
        self.stacked, self.slots = stacked, slots
        if stacked[0][0].device.type == "cuda":
            for tensor in (t for layer in stacked for t in layer):
                torch._dynamo.mark_static_address(tensor)

    def unstack(self) -> None:
        """Forget the stacked copy (after the heads were written in place, by a checkpoint's
        restore): the next :meth:`stack` rebuilds it."""
        self.stacked: list[Layer] = []
        self.slots = self.stacked_count = 0
        self.stacked_version = -1

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
            self.version += 1
            return
        plus = [(masked(w.clone()), masked(b.clone())) for w, b in trained]
        minus = [(masked(w.clone()), masked(b.clone())) for w, b in fresh]
        minus[-1] = (-minus[-1][0], -minus[-1][1])  # −h_θ′₀: the last layer negated (exact)
        self.heads += [plus, minus]
        self.version += 1


__all__ = ["FrozenHeads", "Layer", "head_output"]
