"""L2: the task loss plus (λ/2)‖θ‖², a pull toward the origin."""

from ..regularizers import L2 as L2Penalty
from .base import STRENGTH, PenaltyMethod


class L2(PenaltyMethod):
    name = "l2"
    description = "L2 regularization toward 0"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        return L2Penalty(net, hp["strength"], member_dim=True)
