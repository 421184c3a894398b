"""L2 Init + EWC: both penalties in the loss — (λ/2)‖θ − θ₀‖² keeps the network plastic,
EWC's Fisher-weighted anchors at each task end limit forgetting (SPEC §7, forgetting study)."""

from .. import regularizers
from ..fast.quadratic_penalty import penalty_gradient
from .base import STRENGTH
from .ewc import EWCMethod


class L2InitEWC(EWCMethod):
    """L2 Init + EWC: L_task + (λ/2)‖θ − θ₀‖² + (β/2)·Σ_i F_i (θ_i − θ*_i)²."""

    name = "l2_init_ewc"
    description = "L2 Init and EWC together"
    hyperparameters = (STRENGTH, *EWCMethod.hyperparameters)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.l2_init = regularizers.L2Init(net, hp["strength"], member_dim=True)
        # λ(θ − θ₀) through the split-decay fast path (EWC's penalty is added after it)
        self.l2_init_gradient = penalty_gradient(self.l2_init)

    def add_penalty_grad(self):
        self.l2_init_gradient.add_()
        super().add_penalty_grad()

    def penalty(self):
        return self.l2_init.value().detach() + super().penalty()
