"""L2 Init + Resample: (λ/2)‖θ − φₜ‖² with φₜ a fresh draw from the init distribution at every
step — the ablation that shows the pull must be toward the *same* θ₀."""

from functools import partial

from .. import regularizers
from .base import STRENGTH, PenaltyMethod


class L2InitResampleMethod(PenaltyMethod):
    """L2 Init + Resample: L_task + (λ/2)‖θ − φₜ‖², φₜ a fresh draw from the init distribution
    at every step t (``strength`` is λ)."""

    name = "l2_init_resample"
    description = "L2 toward a fresh init draw every step"
    hyperparameters = (STRENGTH,)

    def make_regularizer(self, net, hp, context):
        generators = context.generators(self.name)
        return regularizers.L2InitResample(net, hp["strength"], member_dim=True,
                                     sampler=partial(net.sample_init, generators))
