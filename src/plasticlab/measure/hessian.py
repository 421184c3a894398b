"""The Hessian's top eigenvalue on a probe batch, by power iteration on Hessian-vector products
(dojeon-ai/Hare-Tortoise, ``src/common/hessian/``: ``HVPOperator`` — double backward of the
batch loss — and ``power_iteration``, 20 steps, stopping at a relative change below 1e-4).

H = ∇²_θ L(θ) of the mean loss on the batch is never formed: Hv = ∇_θ ⟨∇_θ L, v⟩ costs one
extra backward through the gradient's graph, and power iteration vₜ₊₁ = Hvₜ / ‖Hvₜ‖ converges
to the eigenvector of the eigenvalue of largest magnitude; λ = vᵀHv (‖v‖ = 1) is reported.

For an ensemble, L = Σₖ Lₖ with Lₖ depending on member k's parameters only, so H is block
diagonal and one batched Hessian-vector product gives every member's Hₖvₖ at once. Each
member iterates on its own block from its own start vector and stops at its own convergence
(its estimate frozen while the others go on), so member k's eigenvalue is the one seed k gets
alone. Definitions: docs/measurements.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

ITERATIONS = 20
"""Power-iteration steps at most (Hare & Tortoise's ``power_iter_steps``)."""

TOLERANCE = 1e-4
"""A member stops when |λₜ − λₜ₋₁| / |λₜ| falls below this (Hare & Tortoise's
``power_iter_err_threshold``)."""


def _rows(t: torch.Tensor, member_dim: bool) -> torch.Tensor:
    """``t`` as one row per member: ``[K, …]`` → ``[K, n]``, or a plain tensor → ``[1, n]``."""
    return t.flatten(1) if member_dim else t.reshape(1, -1)


def _per_member_dot(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], member_dim: bool) -> torch.Tensor:
    """Σ over the tensors of ⟨a, b⟩ per member, ``[K]`` float64."""
    return sum((_rows(x, member_dim).double() * _rows(y, member_dim).double()).sum(1)
               for x, y in zip(a, b, strict=True))


def _scale(vectors: Sequence[torch.Tensor], factor: torch.Tensor, member_dim: bool) -> list[torch.Tensor]:
    """Each member's part of ``vectors`` multiplied by its ``factor[k]``."""
    out = []
    for v in vectors:
        f = factor.to(v.dtype)
        out.append(v * (f.reshape(-1, *[1] * (v.dim() - 1)) if member_dim else f.reshape(())))
    return out


def start_vectors(params: Sequence[torch.Tensor], generators: Sequence[torch.Generator],
                  member_dim: bool = True) -> list[torch.Tensor]:
    """Standard normal start vectors shaped like ``params``: member k's part drawn from
    ``generators[k]`` alone (on the CPU, then moved), tensor by tensor; unit norm per member."""
    if member_dim:
        raw = [torch.stack([torch.randn(p.shape[1:], generator=g, dtype=p.dtype) for g in generators]
                           ).to(p.device) for p in params]
    else:
        if len(generators) != 1:
            raise ValueError("a network without a member dimension needs exactly one generator")
        raw = [torch.randn(p.shape, generator=generators[0], dtype=p.dtype).to(p.device) for p in params]
    return _scale(raw, _per_member_dot(raw, raw, member_dim).rsqrt(), member_dim)


def top_eigenvalue(loss: Callable[[], torch.Tensor], params: Sequence[torch.Tensor],
                   generators: Sequence[torch.Generator], *, member_dim: bool = True,
                   iterations: int = ITERATIONS, tolerance: float = TOLERANCE) -> torch.Tensor:
    """The eigenvalue of largest magnitude of ∇²_θ ``loss()`` by power iteration, per member,
    ``[K]`` float64 (K = 1 when ``member_dim`` is False: ``params`` of a plain module).

    ``loss()`` builds the scalar loss (for an ensemble: Σₖ Lₖ) from ``params`` with grad
    enabled; ``generators[k]`` draws member k's start vector. At most ``iterations`` Hessian-
    vector products; member k stops once |λₜ − λₜ₋₁| / |λₜ| < ``tolerance``, its λ then frozen.
    A member whose Hv is 0 gets λ = 0. Nothing is written into any ``.grad``."""
    if iterations < 1:
        raise ValueError(f"power iteration needs at least one step, got {iterations}")
    params = list(params)
    with torch.enable_grad():
        grads = torch.autograd.grad(loss(), params, create_graph=True)
        v = start_vectors(params, generators, member_dim)
        members = len(generators)
        device = params[0].device
        value = torch.full((members,), float("nan"), dtype=torch.float64, device=device)
        done = torch.zeros(members, dtype=torch.bool, device=device)
        for _ in range(iterations):
            hv = torch.autograd.grad(grads, params, grad_outputs=v, retain_graph=True, allow_unused=True)
            hv = [torch.zeros_like(p) if h is None else h for h, p in zip(hv, params, strict=True)]
            estimate = _per_member_dot(v, hv, member_dim)  # vᵀHv, ‖v‖ = 1
            norm = _per_member_dot(hv, hv, member_dim).sqrt()
            null = norm == 0
            estimate = torch.where(null, torch.zeros_like(estimate), estimate)
            change = (estimate - value).abs() / estimate.abs()
            moving = ~done
            value = torch.where(moving, estimate, value)
            done = done | (moving & (null | (change < tolerance)))
            if bool(done.all()):
                break
            factor = torch.where(moving & ~null, norm.reciprocal(), torch.ones_like(norm))
            step = _scale(hv, factor, member_dim)
            keep = moving & ~null
            v = [torch.where(keep.reshape(-1, *[1] * (s.dim() - 1)) if member_dim else keep.reshape(()),
                             s.detach(), old) for s, old in zip(step, v, strict=True)]
    return value


__all__ = ["ITERATIONS", "TOLERANCE", "start_vectors", "top_eigenvalue"]
