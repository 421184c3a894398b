"""A hidden block's ReLU then max-pooling, computed as max-pooling then ReLU.

Plain form: :meth:`plasticlab.nets.Block.forward`, the activation and then the pooling. Max
commutes with ReLU, so pooling first gives the same values and the same gradients (a window
whose maximum is ≤ 0 passes no gradient either way), and the ReLU and its backward touch a
quarter of the values: bit-identical.

Applies: a block with ReLU and pooling whose post-activation features are not asked for
(:meth:`plasticlab.nets.Block.output`, what ``EnsembleNet.forward`` runs without
``return_features``), outside :func:`plasticlab.fast.plain_forms`.
Test: ``tests/test_fast_kernels.py``, ``tests/test_nets.py`` (logits and gradients of the CNN).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..fast import enabled


def applies(activation: str | None, pool: bool) -> bool:
    """Whether a block with ``activation`` and ``pool`` pools before its activation."""
    return enabled() and pool and activation == "relu"


def pooled_relu(pre_activation: torch.Tensor, pool: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """ReLU(pool(``pre_activation``)): the block's pooled features."""
    return torch.relu(pool(pre_activation))


__all__ = ["applies", "pooled_relu"]
