"""L2: the task loss plus (λ/2)‖θ‖², a pull toward the origin."""

from .. import regularizers
from .base import STRENGTH, PenaltyMethod


class L2Method(PenaltyMethod):
    """L2: L_task + (λ/2)‖θ‖² (``strength`` is λ)."""

    name = "l2"
    title = "L2"
    description = "L2 regularization toward 0"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        return regularizers.L2(net, hp["strength"], member_dim=True)
