"""The slowly-changing regression problem of Dohare et al. (Nature 2024, Extended Data Fig. 2;
earlier the bit-flipping problem): synthetic, no data set.

Each run has a target network with fixed random weights. An input is m bits: the first f
("flipping") bits change only at task boundaries — every T examples — and the other m − f are
drawn afresh, i.i.d. uniform, for every example. The target is the target network's output;
the learner predicts it online and is trained on the squared error (ŷ − y)². A task is one
period of T examples between two changes of the flipping bits.

Every setting, read from shibhansh/loss-of-plasticity ``lop/slowly_changing_regression``
(``slowly_changing_regression.py``, ``cfg/prob.json``, ``cfg/flip_one/*.json``, ``expr.py``),
``lop/nets/fix_ltu_net.py``, ``lop/utils/ltu.py``, ``lop/nets/ffnn.py``, ``lop/algos/bp.py``:

- **input**: m = 20 bits (``num_inputs``), the first f = 15 flipping (``num_flipping_bits``);
  the input is ``cat(flipping bits, random bits)``, bits 0/1 as floats.
- **flips**, every T = 10,000 examples (``flip_after``): with ``flip_one`` (``cfg/flip_one``,
  "the new SCR problem", and the paper's Extended Data Fig. 2: "one of the flipping bits is
  chosen after every T time steps and its value is flipped") one of the f bits, uniformly
  chosen, is flipped; without it (``cfg/prob.json``, the README's recipe) all f bits are drawn
  afresh. ``flip = "one" | "redraw"`` here, ``one`` by default. The first period's bits are
  uniform random either way.
- **target network** (``FixLTUNet``): one hidden layer of 100 LTUs (``num_target_features``),
  one linear output; every weight and bias drawn from {−1, +1}. Hidden unit i is 1 when
  (W x + b)_i > τ_i, else 0, with τ_i = β (m + 1) − S_i, β = 0.7 (``beta``) and
  S_i = (m − Σ_j W_ij + b_i) / 2 (the code's comment: "number of '-1's in the input weights").
  y = v·h + c. No noise: y is a whole number.
- **learner** (``FFNN``): one hidden layer of 5 units (``num_features``), ReLU (and other
  activations in other configs), then one linear output — plasticlab's ``shallow_mlp``
  (:data:`plasticlab.nets.network.SHALLOW_MLP_HIDDEN`). Hidden weights Kaiming-uniform with the
  activation's gain, output weights Kaiming-uniform with gain 1, biases 0.
- **training**: one example per step (batch 1), ``F.mse_loss`` (the squared error of the one
  output), SGD (``cfg/sgd``) or Adam (``cfg/adam``) with step sizes {0.01, 0.003, 0.001},
  1,000,000 examples (``cfg/sgd/bp``: 100 periods) or 3,000,000 (``cfg/flip_one``: 300).
- **measurement**: the squared error of each example before its update (``errs``), plotted
  in bins of 2T = 20,000 examples. Here: each task's mean — the online squared error.

Where plasticlab differs: the paper's input has an (m + 1)-th bit that is always one; the code
has none (its networks' biases play that part), nor has this problem. plasticlab's
``kaiming_uniform`` init gives the output layer the ReLU gain √2 where ``FFNN`` uses 1. The
random draws are plasticlab's seeded streams (member k draws what seed k draws alone), not
torch's global generator, so the reference's bits are not reproduced bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch

from ..params import Param
from ..rng import np_rng
from .base import Problem, TaskData

FLIPS = ("one", "redraw")


class SlowlyChangingRegression(Problem):
    """Slowly-changing regression: a fixed LTU target network's output from m input bits, the
    first f of which change only at task boundaries (the module docstring gives every
    setting)."""

    name = "slowly_changing_regression"
    title = "Slowly-Changing Regression"
    description = "regress a fixed random LTU network; f of m input bits flip every T steps"
    arch = "shallow_mlp"
    input_shape = (20,)  # m; an instance with another input_bits has its own
    num_outputs = 1
    loss = "squared_error"
    # T = 10,000 examples per task, one per step; 300 periods as cfg/flip_one's 3,000,000
    defaults = {"tasks": 300, "steps_per_task": 10_000, "batch_size": 1}
    parameters = (
        Param("input_bits", 20, int, "m: input bits", low=1),
        Param("flipping_bits", 15, int, "f: the first f input bits, which change only at task "
              "boundaries", low=0),
        Param("flip", "one", str, "one: one flipping bit flipped per task (the paper, "
              "cfg/flip_one); redraw: all of them drawn afresh (cfg/prob.json)", choices=FLIPS),
        Param("target_units", 100, int, "LTUs in the target network's hidden layer", low=1),
        Param("beta", 0.7, float, "β of the LTU thresholds τ_i = β(m + 1) − S_i", low=0),
    )

    def load(self) -> None:
        m, f = self.params["input_bits"], self.params["flipping_bits"]
        if f > m:
            raise ValueError(f"{self.name}: flipping_bits ({f}) must be at most input_bits ({m})")
        self.input_shape = (m,)
        self.source = "synthetic (no data files)"
        self.targets = [self.target_network(seed) for seed in self.seeds]
        self.slow_bits = [self.flipping_bits(seed) for seed in self.seeds]

    def target_network(self, seed: int) -> tuple[np.ndarray, ...]:
        """The run's target network (W ``[H, m]``, b ``[H]``, v ``[H]``, c, τ ``[H]``): every
        weight and bias from {−1, +1}, τ_i = β(m + 1) − S_i with S_i = (m − Σ_j W_ij + b_i)/2."""
        m, units = self.params["input_bits"], self.params["target_units"]
        rng = np_rng(seed, self.name, "target")
        w, b, v, c = (rng.integers(0, 2, size) * 2 - 1 for size in ((units, m), units, units, 1))
        s = (m - w.sum(1) + b) / 2
        tau = self.params["beta"] * (m + 1) - s
        return w, b, v, c[0], tau

    def flipping_bits(self, seed: int) -> np.ndarray:
        """The f flipping bits of every task, ``[tasks, f]`` uint8: uniform random in task 0;
        then each task one bit, uniformly chosen, flipped (``flip="one"``) or all drawn afresh
        (``"redraw"``)."""
        f = self.params["flipping_bits"]
        rng = np_rng(seed, self.name, "flipping_bits")
        bits = np.empty((self.tasks, f), dtype=np.uint8)
        bits[0] = rng.integers(0, 2, f)
        for t in range(1, self.tasks):
            if self.params["flip"] == "redraw":
                bits[t] = rng.integers(0, 2, f)
            else:
                bits[t] = bits[t - 1]
                if f:
                    i = rng.integers(f)
                    bits[t, i] = 1 - bits[t, i]
        return bits

    def target(self, member: int, x: np.ndarray) -> np.ndarray:
        """The member's target network on input bits ``x`` ``[N, m]``: y = v·h + c with
        h_i = 1 where (W x + b)_i > τ_i (an LTU), float32 ``[N]`` (whole numbers)."""
        w, b, v, c, tau = self.targets[member]
        h = (x.astype(np.int64) @ w.T + b) > tau
        return (h.astype(np.int64) @ v + c).astype(np.float32)

    def member_task(self, member, seed, task):
        m, f = self.params["input_bits"], self.params["flipping_bits"]
        n = self.steps_per_task * self.batch_size  # T examples: one period of the flipping bits
        fast = np_rng(seed, self.name, "random_bits", task).integers(0, 2, (n, m - f), dtype=np.uint8)
        slow = np.broadcast_to(self.slow_bits[member][task], (n, f))
        x = np.concatenate([slow, fast], axis=1)
        return TaskData(torch.from_numpy(x), torch.from_numpy(self.target(member, x)))

    def normalize(self, x):
        return x.float()


__all__ = ["FLIPS", "SlowlyChangingRegression"]
