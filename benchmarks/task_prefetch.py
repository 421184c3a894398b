"""Does preparing the next task in the background (``plasticlab.problems.task_prefetch``) pay?

Whole ``train_ensemble`` runs of L2 Init on Permuted MNIST, with the next task prepared while
the current one trains and without, interleaved, best of ``--rounds``; task-end measurements on
or off (``--measure``). Prints the setup (device, threads, K, batch, tasks × steps) and the
member-samples/s of both, and their ratio. On a GPU the preparation's host work (numpy shuffles,
index arrays, kernel launches) can overlap the device's; on the CPU the engine keeps it off.

    python benchmarks/task_prefetch.py --data-dir ../shared/data --device cuda --members 256
"""

from __future__ import annotations

import argparse
import time

import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.run_config import Members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--steps-per-task", type=int, default=625)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help="task-end measurements on")
    args = parser.parse_args()
    config = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "tasks": args.tasks,
                             "steps_per_task": args.steps_per_task})
    seeds = list(range(args.members))
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def rate(prefetch: bool) -> float:
        sync()
        start = time.perf_counter()
        train_ensemble(Members.from_config(config, seeds), data_dir=args.data_dir, device=args.device,
                       measure=args.measure, prefetch=prefetch)
        sync()
        return args.tasks * args.steps_per_task * args.members * 16 / (time.perf_counter() - start)

    rate(False)  # warm-up: data loading, allocator, kernels
    best = {True: 0.0, False: 0.0}
    for _ in range(args.rounds):
        for prefetch in (False, True):
            best[prefetch] = max(best[prefetch], rate(prefetch))
    print(f"device {args.device}, {torch.get_num_threads()} thread(s), K={args.members}, batch 16, "
          f"{args.tasks} tasks × {args.steps_per_task} steps, measurements "
          f"{'on' if args.measure else 'off'}, best of {args.rounds}")
    print(f"without prefetch: {best[False]:,.0f} member-samples/s")
    print(f"with prefetch:    {best[True]:,.0f} member-samples/s ({best[True] / best[False]:.2f}×)")


if __name__ == "__main__":
    main()
