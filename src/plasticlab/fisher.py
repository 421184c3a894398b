"""The diagonal Fisher information that EWC weights its penalty with.

    F_i = E_x E_y [ (∂ log p_θ(y | x) / ∂θ_i)² ]

estimated on N examples of the finished task, one example at a time (the square of a batch's
gradient is not the mean of per-example squares), averaged over the examples. Two choices of y:

- ``true`` Fisher (Kirkpatrick et al. 2017): y drawn from the model's own predictive
  distribution p_θ(·|x);
- ``empirical`` Fisher (the authors' code, SPEC §9): y the data's own label.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

FISHER_KINDS = ("empirical", "true")
"""``empirical``: the data's labels; ``true``: labels sampled from the model."""


def diagonal_fisher(
    forward: Callable[[torch.Tensor], torch.Tensor],
    params: Sequence[torch.Tensor],
    inputs: torch.Tensor,
    generators: Sequence[torch.Generator] | None = None,
    labels: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """Diagonal Fisher of each tensor in ``params`` for K models at once.

    ``inputs`` is ``[K, N, …]``; ``forward(x)`` maps ``[K, 1, …]`` to logits ``[K, 1, C]``
    (one example per member). With ``labels`` ``[K, N]`` this is the empirical Fisher (the
    data's labels); without, the true Fisher: member k samples its labels with
    ``generators[k]``, so its estimate does not depend on the other members. Returns tensors
    shaped like ``params``: the mean over the N examples of the squared per-example scores.
    """
    K, N = inputs.shape[:2]
    if labels is None:
        if generators is None or len(generators) != K:
            raise ValueError(f"the true Fisher needs one generator per member ({K}), "
                             f"got {0 if generators is None else len(generators)}")
    elif tuple(labels.shape) != (K, N):
        raise ValueError(f"labels must be [K, N] = [{K}, {N}], got {list(labels.shape)}")
    fisher = [torch.zeros_like(p) for p in params]
    members = torch.arange(K, device=inputs.device)
    for n in range(N):
        logits = forward(inputs[:, n:n + 1])[:, 0]
        if logits.shape[-1] < 2:  # log_softmax of one output is 0: a Fisher of zeros, silently
            raise ValueError("the Fisher of a softmax needs at least 2 outputs (classes); this "
                             f"network has {logits.shape[-1]} (a regression problem's): EWC does "
                             "not apply to it")
        log_probs = torch.log_softmax(logits, dim=-1)
        if labels is None:
            u = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators])
            cdf = log_probs.detach().exp().cumsum(-1)
            y = (cdf < u.to(cdf.device)[:, None]).sum(-1).clamp_(max=logits.shape[-1] - 1)
        else:
            y = labels[:, n]
        # Summing over members gives each member its own gradient (they share no parameters).
        grads = torch.autograd.grad(log_probs[members, y].sum(), list(params))
        for f, g in zip(fisher, grads, strict=True):
            f.add_(g * g, alpha=1.0 / N)
    return fisher
