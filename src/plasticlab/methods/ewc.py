"""EWC (Kirkpatrick et al. 2017): at a task end, anchor the parameters θ* and weigh each by its
diagonal Fisher F; thereafter add (β/2)·Σ_i F_i (θ_i − θ*_i)² to the loss.

EWC is the one method of the paper that is told where tasks end: the engine's stream
bookkeeping calls ``on_task_end``. Its defaults are the authors' code (SPEC §9), where the
paper's forgetting numbers come from:

- ``anchor=last``: θ* and F are replaced at every task end (``sum``: one anchor per task,
  Kirkpatrick's form);
- ``fisher=empirical``: per-example scores with the data's labels (``true``: labels drawn from
  the model);
- ``fisher_data=test``: the examples are the finished task's **held-out test images** — the
  first ``fisher_samples`` (992, the authors' 62 batches of 16) of each seed's shuffled test set.
  This reads the test set during training, as the authors' code does; ``fisher_data=train``
  uses the task's training images instead. Problems without test sets use ``train`` and the
  run's manifest says so.

Kirkpatrick's form: ``--set anchor=sum --set fisher=true --set fisher_data=train``.
"""

from __future__ import annotations

from .. import regularizers
from ..fisher import FISHER_KINDS, diagonal_fisher
from ..params import Param
from .base import Method, Needs

EWC_STRENGTH = Param("ewc_strength", 10.0, float, "β: strength of the EWC penalty", per_member=True,
                     low=0)
ANCHOR = Param("anchor", "last", str, "last: θ*, F replaced at each task end (authors'); sum: one "
               "anchor per task (Kirkpatrick)", choices=regularizers.EWC.ANCHORS)
FISHER = Param("fisher", "empirical", str, "empirical: the data's labels (authors'); true: labels "
               "sampled from the model (Kirkpatrick)", choices=FISHER_KINDS)
FISHER_DATA = Param("fisher_data", "test", str, "test: the finished task's held-out test images "
                    "(authors'); train: its training images", choices=("test", "train"))
FISHER_SAMPLES = Param("fisher_samples", 992, int, "examples of the finished task used to estimate F",
                        low=1)


class EWCMethod(Method):
    """EWC: L_task + (β/2)·Σ_i F_i (θ_i − θ*_i)², with θ* and the diagonal Fisher F taken at each
    task end (``strength`` is β; ``anchor``, ``fisher``, ``fisher_data``: the module docstring)."""

    name = "ewc"
    title = "EWC"
    description = "Elastic Weight Consolidation (diagonal Fisher at a task end)"
    hyperparameters = (EWC_STRENGTH, ANCHOR, FISHER, FISHER_DATA, FISHER_SAMPLES)

    @classmethod
    def needs(cls, params):
        return Needs(penalties=True, task_end=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        if hp["fisher_samples"] < 1:
            raise ValueError(f"method {self.name}: fisher_samples must be >= 1, got {hp['fisher_samples']}")
        self.ewc = regularizers.EWC(net, hp["ewc_strength"], anchor=hp["anchor"], member_dim=True)
        self.generators = context.generators("ewc_fisher")
        self.fisher_data_used: str | None = None

    def penalties(self):
        return [self.ewc]

    def penalty(self):
        return self.ewc.value().detach()

    def on_task_end(self, stream):
        n = self.hp["fisher_samples"]
        examples = stream.test_examples(stream.task, n) if self.hp["fisher_data"] == "test" else None
        self.fisher_data_used = "test" if examples is not None else "train"
        if examples is None:  # fisher_data=train, or a problem without test sets
            examples = stream.sample_examples(n, "ewc_fisher")
        inputs, labels = examples
        labels = labels if self.hp["fisher"] == "empirical" else None
        fisher = diagonal_fisher(self.net, self.ewc.params, inputs, self.generators, labels)
        self.ewc.consolidate(fisher)

    def notes(self):
        if self.hp["fisher_data"] == "test" and self.fisher_data_used == "train":
            return {"fisher_data": "train: fisher_data=test fell back to the task's training "
                                   "images (this problem has no held-out test sets)"}
        return {}
