"""Inside the network on Permuted MNIST: L2 Init vs L2 vs Baseline — final-task srank, weight
magnitude, dead units, test accuracy and forgetting (BWT), from one command.

    python benchmarks/internals_permuted_mnist.py --data-dir ../shared/data

Default: 20 tasks × 625 steps (full-length tasks), Adam α = 1e-3, seeds 0-2; L2 Init λ = 1e-2,
L2 λ = 1e-2, Baseline. Each method's seeds train as one ensemble (K = 3) with every task-end
measurement and forgetting on (at each task end every earlier task's 10,000-image test set is
evaluated: the accuracy matrix A[j, m]); ensembles run on one worker process per core with one
torch thread each, through plasticlab.experiments.executor.run_jobs. Results are stored in
``--out`` (a plasticlab results store). Numbers are mean ± 95 % CI over seeds (1.96·s/√n).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from plasticlab.experiments.config import parse_seeds, resolve_config
from plasticlab.experiments.executor import Job, default_workers, run_jobs
from plasticlab.report import mean_and_ci
from plasticlab.run_config import Members

METHODS = {"l2_init": {"strength": 1e-2}, "l2": {"strength": 1e-2}, "baseline": {}}


def fmt(values, scale: float = 1.0, digits: int = 1) -> str:
    mean, ci = mean_and_ci([scale * v for v in values])
    return f"{mean:.{digits}f} ± {ci:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--steps-per-task", type=int, default=625)
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", default="results/internals-permuted-mnist")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()

    seeds = parse_seeds(args.seeds)
    jobs = [Job(Members.from_config(resolve_config({"problem": "permuted_mnist", "method": method,
                                        "params": params, "optimizer": "adam", "lr": args.lr,
                                        "tasks": args.tasks, "steps_per_task": args.steps_per_task}),
                        seeds), label=method, options={"forgetting": True})
            for method, params in METHODS.items()]
    print(f"permuted_mnist, adam α={args.lr}; {args.tasks} tasks × {jobs[0].config.steps_per_task} steps, "
          f"batch {jobs[0].config.batch_size}; seeds {seeds} (K={len(seeds)} per ensemble); "
          f"forgetting on; {args.workers} worker process(es) × 1 torch thread; torch {torch.__version__}; "
          f"{platform.processor() or platform.machine()}", flush=True)
    start = time.perf_counter()
    done = run_jobs(jobs, out=Path(args.out), data_dir=args.data_dir, workers=args.workers,
                    progress=not args.no_progress)
    elapsed = time.perf_counter() - start

    last = args.tasks - 1
    head = (f"{'method':<22}{'srank L1':>14}{'srank L2':>14}{'|θ| mean':>18}{'dead %':>13}"
            f"{'test acc %':>15}{'BWT pp':>15}{'1-step BWT pp':>15}{'online acc %':>15}")
    print(f"\nend of task {last} (the last), mean ± 95% CI over {len(seeds)} seeds:")
    print(head)
    print("-" * len(head))
    for job in done:
        if job.error:
            print(f"{job.label:<22} FAILED\n{job.error}")
            continue
        r = job.records
        name = job.label + "".join(f" λ={v:g}" for v in job.config.params.values())
        print(f"{name:<22}"
              f"{fmt([x['srank'][last][0] for x in r]):>14}{fmt([x['srank'][last][1] for x in r]):>14}"
              f"{fmt([x['weight_magnitude'][last] for x in r], digits=4):>18}"
              f"{fmt([x['dead_fraction'][last] for x in r], 100):>13}"
              f"{fmt([x['task_test_accuracy'][last] for x in r], 100):>15}"
              f"{fmt([x['bwt'] for x in r], 100, 2):>15}{fmt([x['one_step_bwt'] for x in r], 100, 2):>15}"
              f"{fmt([x['total_online_accuracy'] for x in r], 100, 2):>15}")
    print(f"\nsrank: smallest k whose top-k singular values of a hidden layer's features (500 inputs "
          f"of the last task) reach 99 % of their sum (the authors' code reports k − 1); |θ| mean: "
          f"mean absolute weight and bias; BWT = mean over m<{last} of A[{last},m] − A[m,m]; "
          f"one-step BWT = mean of A[m+1,m] − A[m,m] (percentage points); {elapsed:.0f} s in all; "
          f"results in {args.out}/")


if __name__ == "__main__":
    main()
