"""FIRE (ICLR 2026; SPEC §10, *boundary oracle*): re-orthogonalise the weights at each task end.

At a task boundary every weight matrix W (d_out × d_in; the output layer included, biases
untouched) is replaced by the nearest semi-orthogonal matrix, rescaled to the layer's shape:

    W ← √(d_out / d_in) · NS(W),

NS being ``iters`` Newton–Schulz iterations toward the orthogonal polar factor U Vᵀ of
W = U Σ Vᵀ:

    X₀ = W / ‖W‖_F   (transposed so that X is tall),     X ← 1.5·X − 0.5·X XᵀX.

Dividing by the Frobenius norm puts every singular value in (0, 1], where the iteration
drives each one to 1 while keeping the singular vectors. A conv filter bank
[out, in, kh, kw] is treated one spatial slice [out, in] at a time, each scaled by
√(out/in)/(kh·kw). The optimizer's state restarts at the boundary.

FIRE is told where tasks end; reports and ``plasticlab list`` mark it as using privileged
task-boundary information. ``iters`` is per member (a member stops iterating at its own count).
"""

from __future__ import annotations

import math

import torch

from ..params import Param
from .base import Method, Needs
from .full_reset import fresh_optimizer_state


def newton_schulz(w: torch.Tensor, iters: torch.Tensor | int) -> torch.Tensor:
    """NS(W) for a batch of matrices ``[N, a, b]``: ``iters`` Newton–Schulz steps from
    W/‖W‖_F, computed on the tall orientation; ``iters`` an int or an ``[N]`` tensor (each
    matrix stops at its own count)."""
    tall = w.shape[-2] >= w.shape[-1]
    x = w if tall else w.transpose(-2, -1)
    x = x / x.flatten(-2).norm(dim=-1).clamp_min(torch.finfo(x.dtype).tiny).view(-1, 1, 1)
    counts = torch.as_tensor(iters, device=w.device).reshape(-1).expand(w.shape[0])
    for i in range(int(counts.max())):
        step = 1.5 * x - 0.5 * torch.bmm(x, torch.bmm(x.transpose(1, 2), x))
        x = torch.where((counts > i).view(-1, 1, 1), step, x)
    return x if tall else x.transpose(-2, -1)


def fire_weight(weight: torch.Tensor, iters: torch.Tensor | int) -> torch.Tensor:
    """FIRE's replacement of a stacked weight ``[K, out, in]`` or conv bank ``[K, out, in, kh, kw]``;
    ``iters`` an int or per member ``[K]``."""
    K, out, fan = weight.shape[:3]
    counts = torch.as_tensor(iters, device=weight.device).reshape(-1).expand(K)
    if weight.dim() == 3:
        return math.sqrt(out / fan) * newton_schulz(weight, counts)
    kh, kw = weight.shape[3:]
    # [K, out, in, kh, kw] → one [out, in] matrix per member and spatial position
    # contiguous: for K = 1 the reshape is a strided view, for K > 1 a copy, and the norm would
    # sum the two in another order (member k would leave seed k alone)
    slices = weight.permute(0, 3, 4, 1, 2).reshape(K * kh * kw, out, fan).contiguous()
    ortho = newton_schulz(slices, counts.repeat_interleave(kh * kw))
    ortho = ortho.view(K, kh, kw, out, fan).permute(0, 3, 4, 1, 2)
    return (math.sqrt(out / fan) / (kh * kw)) * ortho


ITERS = Param("iters", 10, int, "Newton–Schulz iterations", per_member=True, low=1)


class FIRE(Method):
    """At every task end: each weight matrix ← √(d_out/d_in)·NS(W); optimizer state restarted."""

    name = "fire"
    title = "FIRE"
    description = "FIRE: weights re-orthogonalised (Newton–Schulz) at each task end"
    hyperparameters = (ITERS,)

    @classmethod
    def needs(cls, params):
        return Needs(task_end=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.iters = torch.as_tensor(hp["iters"], device=context.device).reshape(-1).round().long()
        if bool((self.iters < 0).any()):  # once, at construction
            raise ValueError("method fire: iters must be >= 0")
        self.fresh_optimizer_state = fresh_optimizer_state(optimizer)

    @torch.no_grad()
    def on_task_end(self, stream) -> None:
        """Re-orthogonalise every weight matrix and restart the optimizer."""
        for layer in self.net.affine_layers:
            layer.weight.copy_(fire_weight(layer.weight, self.iters))
        self.optimizer.load_state_dict(self.fresh_optimizer_state)
