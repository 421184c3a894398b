"""L1 Init: the task loss plus λ‖θ − θ₀‖₁ (ablation of L2 Init's penalty shape)."""

from .. import regularizers
from .base import STRENGTH, PenaltyMethod


class L1InitMethod(PenaltyMethod):
    """L1 Init: L_task + λ‖θ − θ₀‖₁ (``strength`` is λ)."""

    name = "l1_init"
    title = "L1 Init"
    description = "L1 regularization toward θ₀"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        return regularizers.L1Init(net, hp["strength"], member_dim=True)
