"""Does splitting the members' fresh init draws between host threads pay (``plasticlab.fast.threaded_draws``)?

Shrink & Perturb draws every parameter of every member on the host at every step. This times,
for each K, the draw of the paper's MLP alone (its three layers, for ``--device``, copy
included) and whole ``train_ensemble`` runs of Shrink & Perturb on Permuted MNIST, with the
draw on one thread (``MAX_THREADS = 1``, the plain loop) and split between up to
``--threads`` threads, interleaved, best of ``--rounds``. Prints the setup (device, torch
threads, K, batch, tasks × steps) and both rates with their ratio. The split applies on CUDA
only; ``--device cpu`` forces it on, to see the host's side alone.

    python benchmarks/threaded_draws.py --data-dir ../shared/data --device cuda --members 10 96
"""

from __future__ import annotations

import argparse
import time

import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.fast import threaded_draws
from plasticlab.nets.init import draw_members
from plasticlab.rng import torch_generator

MLP_LAYERS = (((100, 784), 784, 100), ((100, 100), 100, 100), ((10, 100), 100, 10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--members", type=int, nargs="+", default=[10])
    parser.add_argument("--threads", type=int, default=threaded_draws.MAX_THREADS)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--steps-per-task", type=int, default=625)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the engine runs each worker
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if not cuda:
        threaded_draws.applies = lambda device, members: threaded_draws.threads() >= 2
    config = resolve_config({"problem": "permuted_mnist", "method": "shrink_perturb",
                             "tasks": args.tasks, "steps_per_task": args.steps_per_task})

    def draw_ms(k: int) -> float:
        generators = [torch_generator(s, "method", "bench") for s in range(k)]
        sync()
        start = time.perf_counter()
        for _ in range(20):
            for shape, fan_in, fan_out in MLP_LAYERS:
                draw_members("torch_default", shape, fan_in, fan_out, generators, args.device)
        sync()
        return (time.perf_counter() - start) / 20 * 1e3

    def run_rate(k: int) -> float:
        sync()
        start = time.perf_counter()
        train_ensemble(config, list(range(k)), data_dir=args.data_dir, device=args.device, measure=False)
        sync()
        return args.tasks * args.steps_per_task * k * 16 / (time.perf_counter() - start)

    print(f"device {args.device}, {torch.get_num_threads()} torch thread(s), batch 16, "
          f"{args.tasks} tasks × {args.steps_per_task} steps, draws split between up to "
          f"{args.threads} threads, best of {args.rounds}")
    for k in args.members:
        best = {}
        for measure, pick in ((draw_ms, min), (run_rate, max)):
            for round_ in range(args.rounds + 1):  # round 0 warms up
                for n in (1, args.threads):
                    threaded_draws.MAX_THREADS = n
                    value = measure(k)
                    if round_:
                        key = (measure.__name__, n)
                        best[key] = pick(best.get(key, value), value)
        one, split = best[("draw_ms", 1)], best[("draw_ms", args.threads)]
        print(f"K={k}: the MLP's draw {one:.2f} ms on one thread, {split:.2f} ms split ({one / split:.2f}×); "
              f"Shrink & Perturb {best[('run_rate', 1)]:,.0f} → {best[('run_rate', args.threads)]:,.0f} "
              f"member-samples/s ({best[('run_rate', args.threads)] / best[('run_rate', 1)]:.2f}×)")


if __name__ == "__main__":
    main()
