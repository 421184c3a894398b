"""What plasticity injection costs per training step after n injections (issue 47).

A head of two or more layers keeps two frozen heads per injection (the forward pass runs the
head 2n + 1 times after n injections); a one-layer head folds every injection into one frozen
map. This times one training step of the paper's MLP (784 → 100 → 100 → 10, batch 16, Adam,
autograd: the step injection trains with) on random inputs, for the Baseline and for
``plasticity_injection`` with ``layers`` 1 and 2 after n injections, median of ``--repeats``
timed rounds of ``--steps`` steps each::

    python benchmarks/injection_cost.py --members 1 --injections 0 1 10 100
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from plasticlab.methods import METHODS, MethodContext
from plasticlab.nets import build_network
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import stack_hyperparameters
from plasticlab.step import Step


def setup(method: str, params: dict, members: int):
    """A (step, method) pair for ``method`` on the paper's MLP, trained with autograd."""
    cls = METHODS[method]
    hp = stack_hyperparameters(cls.hyperparameters, [dict(cls.default_params(), **params)] * members,
                               "cpu", method)
    net = build_network("mlp", members, (784,), 10,
                        generators=[torch_generator(s, "init") for s in range(members)])
    optimizer = Adam(list(net.parameters()), lr=1e-3)
    m = cls(net, optimizer, hp, MethodContext(list(range(members)), torch.device("cpu")))
    return Step(net, m, optimizer, backprop="autograd"), m


def time_steps(step: Step, members: int, steps: int, repeats: int) -> float:
    """Median milliseconds per step over ``repeats`` rounds of ``steps`` steps."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(members, 16, 784, generator=g)
    y = torch.randint(0, 10, (members, 16), generator=g)
    correct = torch.zeros(members, dtype=torch.long)
    step(x, y, correct, 0)  # warm-up
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for t in range(steps):
            step(x, y, correct, t + 1)
        rounds.append((time.perf_counter() - start) / steps * 1e3)
    return statistics.median(rounds)


def main() -> None:
    """Print ms per step for the Baseline and for injection after each n of ``--injections``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1)
    parser.add_argument("--injections", type=int, nargs="+", default=[0, 1, 10, 100])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"MLP 784-100-100-10, batch 16, K={args.members}, Adam, autograd, 1 thread; "
          f"ms per step, median of {args.repeats} x {args.steps} steps")
    step, _ = setup("baseline", {}, args.members)
    print(f"{'baseline':<28}{time_steps(step, args.members, args.steps, args.repeats):8.3f}")
    for layers in (1, 2):
        step, method = setup("plasticity_injection", {"layers": layers}, args.members)
        done = 0
        for n in sorted(args.injections):
            while done < n:
                method.on_task_end(None)
                done += 1
            ms = time_steps(step, args.members, args.steps, args.repeats)
            print(f"{f'layers={layers}, n={n}':<28}{ms:8.3f}")


if __name__ == "__main__":
    main()
