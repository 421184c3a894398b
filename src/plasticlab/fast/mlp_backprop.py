"""Backpropagation of the ensemble ReLU MLP written out by hand.

For the paper's MLP (affine → ReLU blocks, an affine output layer, no LayerNorm) one training
step's gradients of L = Σₖ mean_b CE(zₖ_b, yₖ_b) are, layer by layer from the top::

    δ_L = (softmax(z) − onehot(y)) / B          ∂L/∂W_l = δ_lᵀ h_{l−1}    ∂L/∂b_l = Σ_b δ_l
    δ_{l−1} = (δ_l W_l) ⊙ [h_{l−1} > 0]

with h_0 = x and h_l = ReLU(h_{l−1} W_lᵀ + b_l). :class:`ManualBackprop` computes exactly
this with one batched matmul per product, writing each gradient straight into a ``.grad``
buffer that lives as long as the network.

Plain form: autograd through the network and the cross-entropy (the engine's
``backprop="autograd"``). The same logits and features, and the same gradients up to rounding;
autograd's graph bookkeeping, the cross-entropy's separate reductions and a fresh gradient
allocation per step make its whole step slower (``benchmarks/speed.py``, the
``l2_init, autograd`` rows; docs/performance.md).

Applies: a network :func:`supports` accepts, with the engine's ``backprop`` ``"auto"`` or
``"manual"``, outside :func:`plasticlab.fast.plain_forms` (:func:`applies`).
Test: ``tests/test_backprop.py``.
"""

from __future__ import annotations

import torch

from ..nets.layers import EnsembleLinear
from ..nets.network import EnsembleNet
from . import enabled


def supports(net: EnsembleNet) -> bool:
    """Whether ``net`` is an ensemble ReLU MLP that :class:`ManualBackprop` can train: every
    block a bare :class:`EnsembleLinear`, ReLU on the hidden ones, nothing on the last."""
    blocks = list(net.blocks)
    return (all(isinstance(b.affine, EnsembleLinear) and b.norm is None and not b.pool
                and not b.flatten for b in blocks)
            and all(b.activation == "relu" for b in blocks[:-1])
            and blocks[-1].activation is None)


def applies(net: EnsembleNet) -> bool:
    """Whether the engine trains ``net`` with :class:`ManualBackprop` (unless told to use
    autograd): :func:`supports` it, outside :func:`plasticlab.fast.plain_forms`."""
    return enabled() and supports(net)


class ManualBackprop:
    """Forward and backward of one training step of an ensemble ReLU MLP, without autograd.

    ``step(x, y)`` returns the logits ``[K, B, outputs]`` and the hidden features (as
    ``net(x, return_features=True)`` does) and leaves ∂L/∂θ of the summed per-member mean
    cross-entropy in every parameter's ``.grad``, like ``loss.backward()`` after
    ``zero_grad()``.
    """

    def __init__(self, net: EnsembleNet):
        if not supports(net):
            raise ValueError("ManualBackprop needs an ensemble ReLU MLP (EnsembleLinear blocks, "
                             "ReLU, no LayerNorm); train other networks with autograd")
        self.layers = [b.affine for b in net.blocks]
        self.grads = [(torch.zeros_like(layer.weight), torch.zeros_like(layer.bias))
                      for layer in self.layers]
        self._minus_one: torch.Tensor | None = None

    @torch.no_grad()
    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One forward and backward pass on inputs ``x`` ``[K, B, in]``, labels ``y`` ``[K, B]``."""
        inputs = [x]  # h_0 … h_{L−1}: what each layer reads
        for layer in self.layers[:-1]:
            inputs.append(torch.baddbmm(layer.bias.unsqueeze(1), inputs[-1],
                                        layer.weight.transpose(1, 2)).relu_())
        last = self.layers[-1]
        logits = torch.baddbmm(last.bias.unsqueeze(1), inputs[-1], last.weight.transpose(1, 2))

        delta = torch.softmax(logits, dim=-1)
        if self._minus_one is None or self._minus_one.shape != y.shape:
            self._minus_one = torch.full((*y.shape, 1), -1.0, dtype=delta.dtype, device=delta.device)
        delta.scatter_add_(-1, y.unsqueeze(-1), self._minus_one).div_(y.shape[1])
        for index in range(len(self.layers) - 1, -1, -1):
            layer, (grad_w, grad_b), h = self.layers[index], self.grads[index], inputs[index]
            torch.bmm(delta.transpose(1, 2), h, out=grad_w)
            torch.sum(delta, dim=1, out=grad_b)
            layer.weight.grad, layer.bias.grad = grad_w, grad_b
            if index:
                delta = torch.ops.aten.threshold_backward(torch.bmm(delta, layer.weight), h, 0)
        return logits, inputs[1:]


__all__ = ["ManualBackprop", "applies", "supports"]
