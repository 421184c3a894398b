"""Wasserstein regularization toward θ₀ (Lewandowski, Kumar, Schuurmans, György & Machado,
"Learning Continually by Spectral Regularization", arXiv:2406.06811v1, 2024; first proposed as
the distributional regularizer of Lewandowski, Tanaka, Schuurmans & Machado, "Directions of
Curvature as an Explanation for Loss of Plasticity", 2023).

L2 Init pulls every weight back to its own initial value. What makes θ₀ easy to train is
arguably its *distribution*, not which weight holds which value, so this regularizer pulls the
distribution of each parameter tensor back to θ₀'s: the task loss plus

    (λ/2)·Σ_ℓ Σ_i (θ_ℓ,(i) − θ⁰_ℓ,(i))²      (θ_(i): the i-th smallest entry),

n_ℓ times the squared 2-Wasserstein distance between the empirical distributions of θ_ℓ and
θ⁰_ℓ, over every weight and bias tensor. Its gradient λ(θ − θ⁰_(rank θ)) — each entry pulled to
the initial value of the rank it holds now — is added to the task loss's through the
regularizer machinery (:class:`plasticlab.regularizers.WassersteinInit`, the same class as the
drop-in). λ is per member, in the code form of L2 Init (gradient λ·d).
"""

from .. import regularizers
from .base import STRENGTH, PenaltyMethod


class WassersteinInitMethod(PenaltyMethod):
    """Wasserstein Init: L_task + (λ/2)Σ_ℓ‖sort(θ_ℓ) − sort(θ⁰_ℓ)‖², θ⁰ the network's own
    initial parameters (``strength`` is λ)."""

    name = "wasserstein_init"
    title = "Wasserstein Init"
    description = "Wasserstein regularization toward θ₀'s distribution (sorted θ pulled to sorted θ₀)"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        return regularizers.WassersteinInit(net, hp["strength"], member_dim=True)
