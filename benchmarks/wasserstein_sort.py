"""What Wasserstein Init's per-step sort costs, and what sorting from the last step's order saves
(:mod:`plasticlab.rank_order`; the orders are the same, ``tests/test_toolkit_wasserstein_init.py``).

    python benchmarks/wasserstein_sort.py --data-dir ../shared/data

Permuted MNIST, the paper's MLP (784-100-100-10), K members (seeds 0…K−1), Adam α = 1e-3, batch 16, one torch
thread. A training step's time is the difference between a run of ``--steps`` + 100 steps and
one of 100 steps, divided by ``--steps`` (setup, the first steps and the task end cancel), the
median of ``--repeats``, the forms alternating so that a shared machine's drifts hit each:
L2 Init (λ 1e-2, the same penalty toward a fixed target), Wasserstein Init (λ 1e-2) as it runs,
and Wasserstein Init with every sort the plain stable argsort.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from unittest import mock

import torch

from plasticlab import rank_order
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.run_config import Members


def run_seconds(method: str, steps: int, members: int, data_dir: str, plain_sort: bool) -> float:
    """Wall seconds of one task of ``steps`` steps of ``method`` on ``members`` seeds."""
    cfg = resolve_config({"problem": "permuted_mnist", "tasks": 1, "steps_per_task": steps, "lr": 1e-3,
                          "method": method, "params": {"strength": 1e-2}})
    patch = (mock.patch.object(rank_order, "applies", lambda flat, hint: False) if plain_sort
             else mock.MagicMock())
    with patch:
        start = time.perf_counter()
        train_ensemble(Members.from_config(cfg, list(range(members))), data_dir=data_dir, measure=False)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"device cpu ({platform.processor() or platform.machine()}), torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, K = {args.members}, batch 16, the paper's MLP "
          f"(784-100-100-10), {args.steps} steps measured, {args.repeats} repeats")
    forms = {"L2 Init": ("l2_init", False),
             "Wasserstein Init, sorted from the last order": ("wasserstein_init", False),
             "Wasserstein Init, plain stable argsort": ("wasserstein_init", True)}
    per_step: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(args.repeats):
        for name, (method, plain) in forms.items():
            long = run_seconds(method, args.steps + 100, args.members, args.data_dir, plain)
            short = run_seconds(method, 100, args.members, args.data_dir, plain)
            per_step[name].append((long - short) / args.steps)
    base = statistics.median(per_step["L2 Init"])
    print(f"{'form':<48} {'ms a step':>10} {'× L2 Init':>10}")
    for name, times in per_step.items():
        ms = statistics.median(times)
        print(f"{name:<48} {1e3 * ms:>10.1f} {ms / base:>10.1f}")


if __name__ == "__main__":
    main()
