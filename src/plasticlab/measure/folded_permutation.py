"""Test accuracy of an ensemble whose members share one stored image set under their own input
permutations (Permuted MNIST), with each permutation moved into the first layer's weights.

Plain form: :func:`plasticlab.measure.held_out_accuracy` through
:func:`plasticlab.measure.evaluate_accuracy` — chunks of each member's permuted test set
(:func:`plasticlab.measure.held_out_batches`) through the network. Here instead
x[perm_k] · W_kᵀ = x · (W_k[:, perm_k⁻¹])ᵀ, so all K members read the one normalised image chunk
in a single matmul and no per-member copy of the test set is ever made. The same function: the
first layer's outputs equal up to rounding (a different matmul), so the accuracies agree up to
predictions whose top two logits are that close.

Applies: members whose test examples share one image set under per-member permutations, a
network whose first layer is an :class:`plasticlab.nets.EnsembleLinear` and that adds no
frozen heads to its logits, outside
:func:`plasticlab.fast.plain_forms`.
Test: ``tests/test_measurements.py`` (every MLP variant against the test set),
``tests/test_fast_kernels.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .. import metrics
from ..fast import enabled
from ..nets import EnsembleNet
from ..nets.layers import EnsembleLinear
from ..nets.network import Block
from ..problems.base import Problem, TaskData


def applies(net: EnsembleNet, parts: Sequence[TaskData]) -> bool:
    """Whether :func:`held_out_accuracy` evaluates ``net`` on the members' test ``parts``."""
    # the blocks are run here one by one: a network with frozen heads added to its logits
    # (plasticity injection) is evaluated through its own forward
    return (enabled() and isinstance(net.blocks[0].affine, EnsembleLinear) and net.head_offset is None
            and parts[0].perm is not None and all(p.x is parts[0].x for p in parts))


class SharedInputLinear(nn.Module):
    """K linear maps of ONE shared input ``[c, D]`` → ``[K, c, U]``, as a single matmul."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.weight, self.bias = weight, bias  # [K, U, D], [K, U]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K, U, D = self.weight.shape
        y = torch.addmm(self.bias.reshape(1, K * U), x, self.weight.reshape(K * U, D).t())
        return y.view(x.shape[0], K, U).transpose(0, 1).contiguous()


@torch.no_grad()
def held_out_accuracy(net: EnsembleNet, problem: Problem, parts: Sequence[TaskData],
                      chunk: int) -> torch.Tensor:
    """Every member's accuracy on its test ``parts``, ``[K]`` float64 on the device, ``chunk``
    examples per forward pass: the first layer reads the shared images through its unpermuted
    weights; the other layers run as in :meth:`EnsembleNet.forward`."""
    device = problem.device
    first = net.blocks[0]
    perm = torch.stack([p.perm for p in parts]).to(device)
    inverse = torch.argsort(perm, dim=1)
    w = first.affine.weight
    unpermuted = torch.gather(w, 2, inverse[:, None, :].expand(w.shape)).contiguous()
    block = Block(SharedInputLinear(unpermuted, first.affine.bias), first.norm, first.activation,
                  first.pool, first.flatten)
    labels = torch.stack([p.y for p in parts]).to(device)
    correct = torch.zeros(len(parts), dtype=torch.int64, device=device)
    for i in range(0, labels.shape[1], chunk):
        _, h = block(problem.normalize(parts[0].x[i:i + chunk].to(device)))
        for b in net.blocks[1:-1]:
            _, h = b(h)
        correct += metrics.correct_counts(net.blocks[-1].pre_activation(h), labels[:, i:i + chunk])
    return correct.double() / labels.shape[1]


__all__ = ["SharedInputLinear", "applies", "held_out_accuracy"]
