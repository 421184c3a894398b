"""L2 Init + Resample: (λ/2)‖θ − φₜ‖² with φₜ a fresh draw from the init distribution at every
step — the ablation that shows the pull must be toward the *same* θ₀.

Where φₜ comes from (``draws``, :mod:`plasticlab.methods.init_draws`): each member's torch
generator on the host (``generator``, the default: the committed studies' numbers), or Philox on
the parameters' device (``philox``), counted by the step it is drawn for (the updates before it,
set in :meth:`L2InitResampleMethod.before_step`).
"""

from .. import regularizers
from .base import STRENGTH, Needs, PenaltyMethod
from .init_draws import draws_param, init_sampler


class L2InitResampleMethod(PenaltyMethod):
    """L2 Init + Resample: L_task + (λ/2)‖θ − φₜ‖², φₜ a fresh draw from the init distribution
    at every step t (``strength`` is λ; ``draws``: where φₜ comes from)."""

    name = "l2_init_resample"
    title = "L2 Init + Resample"
    description = "L2 toward a fresh init draw every step"
    hyperparameters = (STRENGTH, draws_param("its target φₜ"))

    @classmethod
    def needs(cls, params):
        # with Philox, the step t is set before φₜ is drawn
        return Needs(penalties=True, before_step=params.get("draws") == "philox")

    def make_regularizer(self, net, hp, context):
        sampler, self.draws = init_sampler(net, context, self.name, hp["draws"])
        # with Philox, the draw is tensor operations on the device: a compiled step draws φₜ
        on_device = None if self.draws is None else (self.draws.keys, self.draws.step)
        return regularizers.L2InitResample(net, hp["strength"], member_dim=True, sampler=sampler,
                                           on_device=on_device)

    def before_step(self, step):
        if self.draws is not None:
            self.draws.step.fill_(step)

    def before_step_prepares(self) -> bool:
        return self.draws is not None  # it sets the Philox counter, nothing else
