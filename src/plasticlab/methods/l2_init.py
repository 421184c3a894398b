"""L2 Init (regenerative regularization): the task loss plus (λ/2)‖θ − θ₀‖².

θ₀ is the network's own initial draw, copied before the first update; every weight and bias is
pulled back toward it at every step — the gradient λ(θ − θ₀) is added to the task loss's
(:class:`plasticlab.regularizers.L2Init`; the engine adds it through
:mod:`plasticlab.step`) — so parameters that recent losses do not need drift
home and stay ready to learn the next task.
"""

from .. import regularizers
from .base import STRENGTH, PenaltyMethod


class L2InitMethod(PenaltyMethod):
    """L2 Init: L_task + (λ/2)‖θ − θ₀‖², θ₀ the network's own initial parameters
    (``strength`` is λ)."""

    name = "l2_init"
    title = "L2 Init"
    description = "L2 regularization toward the initial parameters θ₀"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        return regularizers.L2Init(net, hp["strength"], member_dim=True)
