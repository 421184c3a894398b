"""L2 Init + EWC: both penalties in the loss — (λ/2)‖θ − θ₀‖² keeps the network plastic,
EWC's Fisher-weighted anchors at each task end limit forgetting (SPEC §7, forgetting study)."""

from .. import regularizers
from .base import STRENGTH
from .ewc import EWCMethod


class L2InitEWC(EWCMethod):
    """L2 Init + EWC: L_task + (λ/2)‖θ − θ₀‖² + (β/2)·Σ_i F_i (θ_i − θ*_i)²."""

    name = "l2_init_ewc"
    title = "L2 Init + EWC"
    description = "L2 Init and EWC together"
    hyperparameters = (STRENGTH, *EWCMethod.hyperparameters)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.l2_init = regularizers.L2Init(net, hp["strength"], member_dim=True)

    def penalties(self):
        return [self.l2_init, *super().penalties()]  # λ(θ − θ₀) first, then EWC's

    def penalty(self):
        return self.l2_init.value().detach() + super().penalty()
