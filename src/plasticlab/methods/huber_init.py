"""Huber Init: the task loss plus λ·Σ huber_δ(θ − θ₀), quadratic near θ₀ and linear beyond δ."""

from .. import regularizers
from ..params import Param
from .base import STRENGTH, PenaltyMethod


class HuberInitMethod(PenaltyMethod):
    """Huber Init: L_task + λ·Σ_i huber_δ(θ_i − θ₀_i) (``strength`` is λ, ``delta`` δ)."""

    name = "huber_init"
    title = "Huber Init"
    description = "Huber regularization toward θ₀"
    hyperparameters = (STRENGTH, Param("delta", 1.0, float, "δ: where the penalty turns linear",
                                       per_member=True, low=0, low_open=True))

    def make_regularizer(self, net, hp, context):
        return regularizers.HuberInit(net, hp["strength"], hp["delta"], member_dim=True)
