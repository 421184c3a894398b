"""EWC (Kirkpatrick et al. 2017): at the end of every task, anchor the parameters θ*_t and
weigh each by its diagonal Fisher F_t; thereafter add (β/2)·Σ_t Σ_i F_i,t (θ_i − θ*_i,t)².

EWC is the one method that is told where tasks end: the engine's stream bookkeeping calls
``on_task_end`` and EWC estimates F on ``fisher_samples`` inputs of the finished task (labels
drawn from the model's own predictive distribution). No other method uses that signal.
"""

from __future__ import annotations

from ..fisher import diagonal_fisher
from ..params import Param
from ..regularizers import EWC as EWCPenalty
from .base import Method

EWC_STRENGTH = Param("ewc_strength", 10.0, float, "β: strength of the EWC penalty", per_member=True)
FISHER_SAMPLES = Param("fisher_samples", 200, int, "inputs of the finished task used to estimate F")


class EWC(Method):
    name = "ewc"
    description = "Elastic Weight Consolidation (diagonal Fisher at every task end)"
    hyperparameters = (EWC_STRENGTH, FISHER_SAMPLES)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.ewc = EWCPenalty(net, hp["ewc_strength"], member_dim=True)
        self.generators = context.generators("ewc_fisher")

    def add_penalty_grad(self):
        self.ewc.add_grad_()

    def penalty(self):
        return self.ewc.value().detach()

    def on_task_end(self, stream):
        inputs = stream.sample_inputs(self.hp["fisher_samples"], "ewc_fisher")
        fisher = diagonal_fisher(self.net, self.ewc.params, inputs, self.generators)
        self.ewc.consolidate(fisher)
