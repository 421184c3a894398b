"""What drawing from the init distribution in place (``nets.init.draw_members``) saves.

Shrink & Perturb and L2 Init + Resample draw a fresh θ for every member at every step. The
draw used to go through the formula ``(rand · 2 − 1) · bound`` per member and a stack; it now
fills each member's row in place — the same bits (``tests/test_nets.py`` pins them). This
times both forms on one MLP's layers, then whole Shrink & Perturb runs with each form swapped
in, alternately, best of ``--rounds``, one torch thread. Prints the setup and both figures.

    python benchmarks/fresh_draws.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import math
import time

import torch

import plasticlab.nets.init as init_schemes
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.run_config import Members

LAYERS = [((100, 784), 784, 100), ((100, 100), 100, 100), ((10, 100), 100, 10)]  # the paper's MLP


def formula_draw_members(scheme, weight_shape, fan_in, fan_out, generators, device):
    """The earlier form (``torch_default`` only): per member ``(rand · 2 − 1) · bound`` for the
    weight, then the bias, and a stack of the members."""
    if scheme != "torch_default":
        raise ValueError("the benchmark's earlier form covers torch_default only")
    bound = 1.0 / math.sqrt(fan_in)
    weights, biases = [], []
    for g in generators:
        weights.append((torch.rand(weight_shape, generator=g) * 2 - 1) * bound)
        biases.append((torch.rand(weight_shape[0], generator=g) * 2 - 1) * bound)
    return torch.stack(weights).to(device), torch.stack(biases).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", type=int, default=12)
    parser.add_argument("--steps-per-task", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    generators = [torch.Generator().manual_seed(k) for k in range(args.members)]
    forms = {"formula and stack": formula_draw_members, "in place": init_schemes.draw_members}

    def draw_ms(form) -> float:
        start = time.perf_counter()
        for _ in range(20):
            for shape, fan_in, fan_out in LAYERS:
                form("torch_default", shape, fan_in, fan_out, generators, "cpu")
        return (time.perf_counter() - start) / 20 * 1e3

    config = resolve_config({"problem": "permuted_mnist", "method": "shrink_perturb", "tasks": 1,
                             "steps_per_task": args.steps_per_task,
                             "params": {"shrink": 1 - 1e-4, "noise": 1e-2}})

    def run_s(form) -> float:
        init_schemes.draw_members = form  # nets.network looks it up at every draw
        try:
            start = time.perf_counter()
            train_ensemble(Members.from_config(config, list(range(args.members))),
                           data_dir=args.data_dir, measure=False)
            return time.perf_counter() - start
        finally:
            init_schemes.draw_members = forms["in place"]

    run_s(forms["in place"])  # warm-up: data loading, allocator
    best = {name: [math.inf, math.inf] for name in forms}
    for _ in range(args.rounds):
        for name, form in forms.items():
            best[name][0] = min(best[name][0], draw_ms(form))
            best[name][1] = min(best[name][1], run_s(form))
    print(f"device cpu, {torch.get_num_threads()} thread, K={args.members}, batch 16, the paper's "
          f"MLP; Shrink & Perturb, 1 task × {args.steps_per_task} steps, no measurements, best of "
          f"{args.rounds}")
    for name, (draw, run) in best.items():
        print(f"{name:>18}: one fresh draw {draw:6.2f} ms   whole run {run:6.2f} s")
    (d0, r0), (d1, r1) = best["formula and stack"], best["in place"]
    print(f"in place: the draw {d1 / d0:.2f}×, the run {r1 / r0:.2f}× the time")


if __name__ == "__main__":
    main()
