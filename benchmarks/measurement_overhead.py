"""What the task-end measurements cost: the same Permuted MNIST ensemble trained with and
without them, in one process, and the wall-time ratio.

    python benchmarks/measurement_overhead.py --data-dir ../shared/data

Default: K = 8 members (seeds 0…K−1), L2 Init (λ = 1e-2), Adam α = 1e-3, 10 tasks × 625 steps
(full-length Permuted MNIST tasks: 10,000 images, batch 16), one torch thread. "With" means
every task-end measurement of a run (weight magnitude, srank, effective rank, dead and dormant
units on 500 inputs per member, the gradient norm, and the test accuracy on the task's 10,000
test images); the run length only multiplies both times, so the per-task ratio is what counts.
Runs alternate (without, with, without, with, …) so that drifts of the machine hit both. On a
shared machine noise only ever adds time, so the ratio of the *fastest* run with measurements to
the fastest without is the headline; the median ratio and the engine's own account of the time
spent inside measurements (per task end, and as a fraction of the rest of the run) are printed
beside it. ``--members 1,8`` repeats the comparison for several ensemble sizes.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.measure import DEFAULT_SAMPLES, Measurer, network_internals, to_host
from plasticlab.nets import build_network
from plasticlab.problems import PermutedMNIST
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members


def breakdown(seeds: list[int], data_dir, cfg) -> dict[str, float]:
    """Seconds (median of 5) of one task end's parts: the test-set accuracy, and everything
    else (measurement batch, srank, effective rank, dead/dormant units, weight magnitude)."""
    problem = PermutedMNIST(seeds, tasks=cfg.tasks, data_dir=data_dir)
    problem.start_task(0)
    net = build_network("mlp", len(seeds), problem.input_shape, problem.num_outputs,
                        generators=[torch_generator(s, "init") for s in seeds])
    measurer = Measurer(net, problem)

    def timed(fn) -> float:
        fn()
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def internals():  # what Measurer.internals does at a task end, measurement batch included
        to_host(network_internals(net, problem.sample_inputs(DEFAULT_SAMPLES, "measure")))

    return {"test": timed(lambda: to_host({"a": measurer.test_accuracy(0)})),
            "internals": timed(internals)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", default="8", help="ensemble sizes K to compare, e.g. 1,8")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--steps-per-task", type=int, default=625)
    parser.add_argument("--repeats", type=int, default=2, help="pairs of runs per K")
    parser.add_argument("--forgetting", action="store_true",
                        help="measure with the accuracy matrix too (not part of the 10%% budget)")
    args = parser.parse_args()

    sizes = [int(k) for k in args.members.split(",")]
    cfg = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "params": {"strength": 1e-2},
                          "optimizer": "adam", "lr": 1e-3, "tasks": args.tasks,
                          "steps_per_task": args.steps_per_task})
    torch.set_num_threads(1)
    print(f"permuted_mnist, l2_init λ=1e-2, adam α=1e-3; {cfg.tasks} tasks × {cfg.steps_per_task} "
          f"steps, batch {cfg.batch_size}; K in {sizes}; {args.repeats} pair(s) of runs per K; "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device cpu; "
          f"{platform.processor() or platform.machine()}", flush=True)
    lines = []
    for K in sizes:
        seeds = list(range(K))
        # A short warm-up so that one-off costs (data, LAPACK initialisation) hit neither side.
        warm = resolve_config({**cfg.to_dict(), "tasks": 1, "steps_per_task": 10})
        train_ensemble(Members.from_config(warm, seeds), data_dir=args.data_dir, forgetting=args.forgetting)
        walls: dict[bool, list[float]] = {False: [], True: []}
        inside: list[float] = []
        for _ in range(args.repeats):
            for measured in (False, True):
                start = time.perf_counter()
                result = train_ensemble(Members.from_config(cfg, seeds),
                                        data_dir=args.data_dir, measure=measured,
                                        forgetting=args.forgetting and measured)
                walls[measured].append(time.perf_counter() - start)
                if measured:
                    inside.append(result.measure_time)
                print(f"  K={K} measurements {'on ' if measured else 'off'}: {walls[measured][-1]:6.1f} s "
                      f"({walls[measured][-1] / cfg.tasks:.3f} s/task"
                      + (f", {result.measure_time / cfg.tasks:.3f} s/task inside measurements)"
                         if measured else ")"), flush=True)
        parts = breakdown(seeds, args.data_dir, cfg)
        best = min(walls[True]) / min(walls[False])
        median = statistics.median(walls[True]) / statistics.median(walls[False])
        i = walls[True].index(min(walls[True]))
        share = inside[i] / (walls[True][i] - inside[i])
        lines.append(f"K={K}: wall time with / without measurements {best:.3f} (+{100 * (best - 1):.1f} %, "
                     f"fastest runs; medians {median:.3f}); inside measurements "
                     f"{min(inside) / cfg.tasks:.3f} s per task end = {100 * share:.1f} % of the "
                     f"rest of the run; training {min(walls[False]) / cfg.tasks:.2f} s per task; of a task "
                     f"end: test accuracy {parts['test']:.3f} s, everything else {parts['internals']:.3f} s")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
