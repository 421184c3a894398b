"""Spectral regularization (Lewandowski, Bortkiewicz, Kumar, György, Schuurmans, Ostaszewski &
Machado, "Learning Continually by Spectral Regularization", ICLR 2025).

At initialization the singular values of each layer sit near one, which keeps gradients
diverse; training spreads them. The spectral regularizer keeps each layer's largest singular
value near one — and every bias near zero — with the penalty

    R(θ) = λ · Σ_ℓ [ (σ_ℓ^k − 1)² + ‖b_ℓ‖^{2k} ],      σ_ℓ = σ_max(W_ℓ),

over every layer ℓ, the output layer included (W_ℓ out × in; a conv filter bank out × in·kh·kw;
a bias is a 1 × out matrix whose one singular value is its norm, pulled to 0). Its gradient

    ∂R/∂W_ℓ = 2kλ (σ_ℓ^k − 1) σ_ℓ^{k−1} · u_ℓ v_ℓᵀ,       ∂R/∂b_ℓ = 2kλ ‖b_ℓ‖^{2k−2} · b_ℓ

is added to ``.grad`` at every step. σ_ℓ and its singular vectors come from power iteration
(:func:`power_iteration`) as in spectral normalization (Miyato et al. 2018): the left vector u_ℓ
persists across steps, ``power_iterations`` rounds v ← Wᵀu/‖Wᵀu‖, u ← Wv/‖Wv‖ per step, then
σ = uᵀWv; u_ℓ starts as a normal draw from the member's own stream. λ (``strength``), k
(``exponent``) and the number of rounds are per member.

:func:`spectral_penalty` is the same quantity for autograd (the drop-in
:class:`plasticlab.dropin_field.Spectral`), with u and v held fixed; a test keeps the two
gradients equal.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..params import Param
from .base import CapturedTransform, Method, Needs
from .parseval import as_matrices

EPS = 1e-12
"""Norms below this are taken to be EPS when normalizing (torch's spectral_norm uses the same)."""


def _normalize(x: torch.Tensor) -> torch.Tensor:
    """x/‖x‖ row by row for ``[K, n]`` (‖x‖ at least :data:`EPS`)."""
    return x / torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min(EPS)


def _apply(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """W x for ``[K, m, n]`` matrices and ``[K, n]`` vectors → ``[K, m]``, as a product and a sum:
    a batched matrix-vector product (``bmm``) adds in another order for another K, and member k
    would differ from seed k alone (measured: benchmarks/member_independence.py)."""
    return (w * x.unsqueeze(1)).sum(2)


def _apply_t(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Wᵀ x for ``[K, m, n]`` matrices and ``[K, m]`` vectors → ``[K, n]`` (as :func:`_apply`)."""
    return (w * x.unsqueeze(2)).sum(1)


def power_iteration(w: torch.Tensor, u: torch.Tensor, iters: int | Sequence[int]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(u, v, σ) after ``iters`` rounds of v ← Wᵀu/‖Wᵀu‖, u ← Wv/‖Wv‖ from the left vector ``u``
    ``[K, m]`` for matrices ``w`` ``[K, m, n]``; σ = uᵀWv ``[K]``. ``iters``: an int, or one
    count per member held on the host (each member stops at its own; at least 1, so v is
    defined) — host numbers, so deciding who iterates reads nothing back from the device."""
    counts = [int(iters)] * w.shape[0] if isinstance(iters, int) else [int(c) for c in iters]
    v = _normalize(_apply_t(w, u))
    u = _normalize(_apply(w, v))
    for i in range(1, max(counts)):
        v_next = _normalize(_apply_t(w, u))
        u_next = _normalize(_apply(w, v_next))
        if min(counts) > i:  # every member takes this round
            v, u = v_next, u_next
        else:
            more = torch.tensor([c > i for c in counts], device=w.device).view(-1, 1)
            v, u = torch.where(more, v_next, v), torch.where(more, u_next, u)
    sigma = (u * _apply(w, v)).sum(1)
    return u, v, sigma


def _per_member(value, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).reshape(-1)


def spectral_penalty(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor],
                     vectors: Sequence[tuple[torch.Tensor, torch.Tensor]], strength, exponent
                     ) -> torch.Tensor:
    """λ·Σ_ℓ [(σ_ℓ^k − 1)² + ‖b_ℓ‖^{2k}] per member ``[K]``, σ_ℓ = u_ℓᵀW_ℓv_ℓ for stacked weights
    ``[K, …]`` and the singular vectors ``vectors[ℓ] = (u, v)`` (held fixed); λ and k are floats
    or ``[K]`` tensors. Differentiable: autograd's gradient is the closed form of the module
    docstring."""
    ref = weights[0]
    lam, k = _per_member(strength, ref), _per_member(exponent, ref)
    total = 0
    for w, (u, v) in zip(weights, vectors, strict=True):
        sigma = (u.detach() * _apply(as_matrices(w), v.detach())).sum(1)
        total = total + (sigma.pow(k) - 1).square()
    for b in biases:
        total = total + torch.linalg.vector_norm(b.flatten(1), dim=1).pow(2 * k)
    return lam * total


def spectral_weight_grad(weight: torch.Tensor, u: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor,
                         strength: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """∂R/∂W = 2kλ (σ^k − 1) σ^{k−1} · u vᵀ for one stacked weight, shaped like it."""
    k = exponent.to(weight.dtype)
    coef = 2 * k * strength.to(weight.dtype) * (sigma.pow(k) - 1) * sigma.pow(k - 1)
    return (coef.view(-1, 1, 1) * u.unsqueeze(2) * v.unsqueeze(1)).view_as(weight)


def spectral_bias_grad(bias: torch.Tensor, strength: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """∂R/∂b = 2kλ ‖b‖^{2k−2} · b for one stacked bias ``[K, out]``."""
    k = exponent.to(bias.dtype)
    norm = torch.linalg.vector_norm(bias, dim=1)
    return (2 * k * strength.to(bias.dtype) * norm.pow(2 * k - 2)).view(-1, 1) * bias


STRENGTH = Param("strength", 1e-3, float, "λ: strength of the spectral penalty", per_member=True,
                 low=0.0)
EXPONENT = Param("exponent", 2.0, float, "k: the penalty is (σ_max^k − 1)² per layer, ‖b‖^{2k} per bias",
                 per_member=True, low=1.0)
ITERATIONS = Param("power_iterations", 1, int, "power-iteration rounds per step for σ_max",
                   per_member=True, low=1)


def _add_grad(p: torch.Tensor, grad: torch.Tensor) -> None:
    if p.grad is None:
        p.grad = grad
    else:
        p.grad.add_(grad)


class SpectralMethod(Method):
    """Adds the spectral penalty's gradient to every weight's and bias's at every step."""

    name = "spectral"
    title = "spectral regularisation"
    description = "Spectral regularization: λ Σ (σ_max(W)^k − 1)² + ‖b‖^{2k}, σ_max by power iteration"
    hyperparameters = (STRENGTH, EXPONENT, ITERATIONS)

    @classmethod
    def needs(cls, params):
        return Needs(gradient_hook=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        device = context.device
        self.strength = torch.as_tensor(hp["strength"], device=device).reshape(-1)
        self.exponent = torch.as_tensor(hp["exponent"], device=device).reshape(-1)
        # the rounds per member, read back to the host once, here
        self.iters = [int(c) for c in torch.as_tensor(hp["power_iterations"]).reshape(-1).round().tolist()]
        if bool((self.strength < 0).any()) or bool((self.exponent < 1).any()) or min(self.iters) < 1:
            raise ValueError("method spectral: need strength λ >= 0, exponent k >= 1 and "
                             "power_iterations >= 1")  # once, at construction
        self.weights = [layer.weight for layer in net.affine_layers]
        self.biases = [layer.bias for layer in net.affine_layers]
        # each layer's left singular vector, a normal draw from the member's own stream
        generators = context.generators(self.name)
        self.u = [initial_vectors(w.shape[1], generators, w) for w in self.weights]

    @torch.no_grad()
    def add_penalty_grad(self) -> None:
        """One step's power iteration per layer, then the penalty's gradient added to ``.grad``."""
        for p, grad in self._gradients():
            _add_grad(p, grad)

    def _gradients(self):
        # (parameter, its penalty gradient) for every weight, then every bias; each layer's
        # left vector u advanced in place (a compiled step reads it at a fixed address)
        for i, w in enumerate(self.weights):
            u, v, sigma = power_iteration(as_matrices(w), self.u[i], self.iters)
            self.u[i].copy_(u)
            yield w, spectral_weight_grad(w, u, v, sigma, self.strength, self.exponent)
        for b in self.biases:
            yield b, spectral_bias_grad(b, self.strength, self.exponent)

    def captured_gradient_transform(self) -> CapturedTransform:
        """The power iteration and the gradient are tensor operations alone (the members'
        round counts are host numbers): a compiled step captures them whole."""
        def add(grads, task_loss):
            for g, (_, grad) in zip(grads, self._gradients(), strict=True):
                g.add_(grad)

        return CapturedTransform(run=add, params=(*self.weights, *self.biases),
                                 reads=(*self.u, self.strength, self.exponent))

    def penalty(self) -> torch.Tensor:
        """R(θ) per member, σ_ℓ from a power iteration started at the kept u_ℓ (which stays)."""
        with torch.no_grad():
            vectors = [power_iteration(as_matrices(w), u, self.iters)[:2]
                       for w, u in zip(self.weights, self.u, strict=True)]
            return spectral_penalty(self.weights, self.biases, vectors, self.strength, self.exponent)


def initial_vectors(size: int, generators: Sequence[torch.Generator], like: torch.Tensor) -> torch.Tensor:
    """u₀ ``[K, size]``: member k's row a unit-norm N(0, I) draw from ``generators[k]`` (on the
    host, so a member draws the same numbers on any device), in ``like``'s dtype and device."""
    rows = [torch.randn(size, generator=g, device=g.device) for g in generators]
    return _normalize(torch.stack(rows).to(device=like.device, dtype=like.dtype))
