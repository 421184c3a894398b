"""The task gradient, plain form: autograd through the network and the cross-entropy.

One training step's loss is L = Σₖ mean_b CE(zₖ_b, yₖ_b): each member's mean loss over its
batch, summed over members, so member k's gradient is its own. The ReLU MLP's hand-written
backward (:mod:`plasticlab.step.mlp_backprop`) is the fast path of this function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def autograd_gradients(net, optimizer, x: torch.Tensor, y: torch.Tensor, features: bool
                       ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Forward, and backward of L = Σₖ mean_b CE(zₖ_b, yₖ_b) through autograd: the logits, the
    hidden features (when ``features``; else an empty list) and ∂L/∂θ in ``.grad`` (the
    optimizer's parameters' gradients dropped first)."""
    if features:
        logits, hidden = net(x, return_features=True)
    else:
        logits, hidden = net(x), []
    K, B = y.shape
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
    optimizer.zero_grad()
    loss.view(K, B).mean(1).sum().backward()
    return logits, hidden


__all__ = ["autograd_gradients"]
