"""The diagonal Fisher information that EWC weights its penalty with.

    F_i = E_x E_{y ~ p_θ(·|x)} [ (∂ log p_θ(y | x) / ∂θ_i)² ]

estimated on N inputs of the finished task, one example at a time (the square of a batch's
gradient is not the mean of per-example squares), with y drawn from the model's own predictive
distribution — the "true" Fisher of Kirkpatrick et al. (2017), not the empirical Fisher with
the data's labels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def diagonal_fisher(
    forward: Callable[[torch.Tensor], torch.Tensor],
    params: Sequence[torch.Tensor],
    inputs: torch.Tensor,
    generators: Sequence[torch.Generator],
) -> list[torch.Tensor]:
    """Diagonal Fisher of each tensor in ``params`` for K models at once.

    ``inputs`` is ``[K, N, …]``; ``forward(x)`` maps ``[K, 1, …]`` to logits ``[K, 1, C]``
    (one example per member); member k samples its labels with ``generators[k]``, so its
    estimate does not depend on the other members. Returns tensors shaped like ``params``.
    """
    K, N = inputs.shape[:2]
    if len(generators) != K:
        raise ValueError(f"need one generator per member ({K}), got {len(generators)}")
    fisher = [torch.zeros_like(p) for p in params]
    members = torch.arange(K, device=inputs.device)
    for n in range(N):
        logits = forward(inputs[:, n:n + 1])[:, 0]
        log_probs = torch.log_softmax(logits, dim=-1)
        u = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators])
        cdf = log_probs.detach().exp().cumsum(-1)
        y = (cdf < u.to(cdf.device)[:, None]).sum(-1).clamp_(max=logits.shape[-1] - 1)
        # Summing over members gives each member its own gradient (they share no parameters).
        grads = torch.autograd.grad(log_probs[members, y].sum(), list(params))
        for f, g in zip(fisher, grads, strict=True):
            f.add_(g * g, alpha=1.0 / N)
    return fisher
