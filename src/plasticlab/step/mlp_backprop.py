"""Fast path: backpropagation of the ensemble ReLU MLP written out by hand.

For the paper's MLP (affine → ReLU blocks, an affine output layer, no LayerNorm) one training
step's gradients of L = Σₖ mean_b CE(zₖ_b, yₖ_b) are, layer by layer from the top::

    δ_L = (softmax(z) − onehot(y)) / B          ∂L/∂W_l = δ_lᵀ h_{l−1}    ∂L/∂b_l = Σ_b δ_l
    δ_{l−1} = (δ_l W_l) ⊙ [h_{l−1} > 0]

with h_0 = x and h_l = ReLU(h_{l−1} W_lᵀ + b_l). :func:`mlp_gradients` computes exactly this
with one batched matmul per product; :class:`ManualBackprop` (the eager step) has it write
each gradient straight into a ``.grad`` buffer that lives as long as the network, and the
compiled step (:mod:`plasticlab.step.compiled`) compiles the same function.

Plain form: autograd through the network and the cross-entropy
(:func:`plasticlab.step.backward.autograd_gradients`, the engine's ``backprop="autograd"``).
The same logits and features, and the same gradients up to rounding; autograd's graph
bookkeeping, the cross-entropy's separate reductions and a fresh gradient allocation per step
make its whole step slower (``benchmarks/speed.py``, the ``l2_init, autograd`` rows;
docs/performance.md).

Applies: a network :func:`supports` accepts, trained with the cross-entropy (a problem's
``loss``; the squared error of a regression problem is autograd's), with the engine's
``backprop`` ``"auto"`` or ``"manual"``, outside :func:`plasticlab.fast.plain_forms`
(:func:`applies`).
Test: ``tests/test_backprop.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..fast import enabled
from ..nets.layers import EnsembleLinear
from ..nets.network import EnsembleNet


def supports(net: EnsembleNet) -> bool:
    """Whether ``net`` is an ensemble ReLU MLP that :class:`ManualBackprop` can train: every
    block a bare :class:`EnsembleLinear`, ReLU on the hidden ones, nothing on the last, and no
    frozen heads added to its logits (plasticity injection), no growing head masking its
    outputs."""
    if net.output_mask is not None or net.head_offset is not None:
        return False
    blocks = list(net.blocks)
    return (all(isinstance(b.affine, EnsembleLinear) and b.norm is None and not b.pool
                and not b.flatten for b in blocks)
            and all(b.activation == "relu" for b in blocks[:-1])
            and blocks[-1].activation is None)


def applies(net: EnsembleNet, loss: str = "cross_entropy") -> bool:
    """Whether the engine trains ``net`` with :class:`ManualBackprop` (unless told to use
    autograd): :func:`supports` it, the task loss is the cross-entropy (the backward written
    here is its gradient; a regression's squared error trains with autograd), outside
    :func:`plasticlab.fast.plain_forms`."""
    return enabled() and loss == "cross_entropy" and supports(net)


def mlp_gradients(x: torch.Tensor, y: torch.Tensor, weights: Sequence[torch.Tensor],
                  biases: Sequence[torch.Tensor], minus_one: torch.Tensor,
                  out: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None
                  ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """Forward and backward of the ensemble ReLU MLP (the module docstring's formulas) on
    inputs ``x`` ``[K, B, in]`` and labels ``y`` ``[K, B]``: the logits ``[K, B, outputs]``, the
    hidden features h_1 … h_{L−1}, and ∂L/∂θ as ``[∂W_1, ∂b_1, ∂W_2, …]``.

    ``minus_one``: a ``[K, B, 1]`` tensor of −1 (the one-hot subtracted from the softmax);
    ``out``: per layer a (∂W, ∂b) pair of buffers to write the gradients into (None: new
    tensors)."""
    inputs = [x]  # h_0 … h_{L−1}: what each layer reads
    for w, b in zip(weights[:-1], biases[:-1], strict=True):
        inputs.append(torch.baddbmm(b.unsqueeze(1), inputs[-1], w.transpose(1, 2)).relu_())
    logits = torch.baddbmm(biases[-1].unsqueeze(1), inputs[-1], weights[-1].transpose(1, 2))

    delta = torch.softmax(logits, dim=-1)
    delta.scatter_add_(-1, y.unsqueeze(-1), minus_one).div_(y.shape[1])
    grads: list[torch.Tensor] = [x] * (2 * len(weights))  # filled from the top
    for index in range(len(weights) - 1, -1, -1):
        grad_w, grad_b = out[index] if out is not None else (None, None)
        grads[2 * index] = torch.bmm(delta.transpose(1, 2), inputs[index], out=grad_w)
        grads[2 * index + 1] = torch.sum(delta, dim=1, out=grad_b)
        if index:
            delta = torch.ops.aten.threshold_backward(torch.bmm(delta, weights[index]), inputs[index], 0)
    return logits, inputs[1:], grads


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
        if self._minus_one is None or self._minus_one.shape[:2] != y.shape:
            self._minus_one = minus_ones(y, self.layers[0].weight.dtype)
        logits, hidden, _ = mlp_gradients(x, y, [layer.weight for layer in self.layers],
                                          [layer.bias for layer in self.layers], self._minus_one,
                                          out=self.grads)
        for layer, (grad_w, grad_b) in zip(self.layers, self.grads, strict=True):
            layer.weight.grad, layer.bias.grad = grad_w, grad_b
        return logits, hidden


def minus_ones(y: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ``[K, B, 1]`` tensor of −1 that :func:`mlp_gradients` adds at each example's label."""
    return torch.full((*y.shape, 1), -1.0, dtype=dtype, device=y.device)


__all__ = ["ManualBackprop", "applies", "minus_ones", "mlp_gradients", "supports"]
