"""The task gradient, plain form: autograd through the network and the task loss.

One training step's loss is L = Σₖ mean_b ℓ(zₖ_b, yₖ_b): each member's mean loss over its
batch, summed over members, so member k's gradient is its own. ℓ is the problem's task loss
(:data:`plasticlab.problems.base.LOSSES`): the cross-entropy CE(z, y) of a classification
problem, or the squared error (z − y)² of a regression problem's one output (Dohare et al.'s
``F.mse_loss`` on one example). The ReLU MLP's hand-written backward
(:mod:`plasticlab.step.mlp_backprop`) is the fast path of this function for the cross-entropy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..problems.base import LOSSES


def check_loss(loss: str) -> str:
    """``loss`` if it is a task loss the step computes, else a ValueError listing them."""
    if loss not in LOSSES:
        raise ValueError(f"unknown task loss {loss!r}; valid: {', '.join(LOSSES)}")
    return loss


def task_losses(outputs: torch.Tensor, y: torch.Tensor, loss: str = "cross_entropy") -> torch.Tensor:
    """ℓ of every example, ``[K, B]``: CE(zₖ_b, yₖ_b) of the logits ``outputs`` ``[K, B, C]``
    and class labels ``y``, or (zₖ_b − yₖ_b)² of the one output ``[K, B, 1]`` and float targets."""
    K, B = y.shape
    if loss == "cross_entropy":
        return F.cross_entropy(outputs.flatten(0, 1), y.flatten(), reduction="none").view(K, B)
    return (outputs[..., 0] - y).square()


@torch.no_grad()
def online_tally(outputs: torch.Tensor, y: torch.Tensor, loss: str = "cross_entropy") -> torch.Tensor:
    """What a batch adds to each member's online measure before the update, ``[K]``: the
    number of argmax predictions equal to the label (cross-entropy), or Σ_b (ŷ − y)² of the
    first predictions (squared error); the engine divides the task's sum by its examples."""
    if loss == "cross_entropy":
        return (outputs.argmax(-1) == y).sum(1)
    return (outputs[..., 0] - y).square().sum(1)


def autograd_gradients(net, optimizer, x: torch.Tensor, y: torch.Tensor, features: bool,
                       loss: str = "cross_entropy") -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Forward, and backward of L = Σₖ mean_b ℓ(zₖ_b, yₖ_b) through autograd (ℓ:
    :func:`task_losses`): the outputs, the hidden features (when ``features``; else an empty
    list) and ∂L/∂θ in ``.grad`` (the optimizer's parameters' gradients dropped first)."""
    if features:
        logits, hidden = net(x, return_features=True)
    else:
        logits, hidden = net(x), []
    per_example = task_losses(logits, y, loss)
    optimizer.zero_grad()
    per_example.mean(1).sum().backward()
    return logits, hidden


__all__ = ["autograd_gradients", "check_loss", "online_tally", "task_losses"]
