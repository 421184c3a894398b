"""Every method of the paper's comparison at its best configuration (SPEC §6) on one problem:
total average online accuracy (mean ± 95 % CI over seeds) and speed, from one command.

    python benchmarks/compare_methods.py --problem permuted_mnist --optimizer adam \\
        --tasks 20 --seeds 0-2 --data-dir ../shared/data

Each method's seeds train as one ensemble; ensembles run on one worker process per core with one
torch thread each. Speed is reported per ensemble (ensemble steps/s: each step advances every
member by one batch) and per member (member-steps/s = ensemble steps/s × K).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch

from plasticlab.experiments.config import parse_seeds, resolve_config
from plasticlab.experiments.executor import Job, default_workers, run_jobs
from plasticlab.experiments.paper import COMPARED_METHODS, best_config
from plasticlab.methods import METHODS
from plasticlab.report import mean_and_ci
from plasticlab.run_config import Members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="permuted_mnist")
    parser.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    parser.add_argument("--methods", default=",".join(COMPARED_METHODS))
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--steps-per-task", type=int)
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--data-dir")
    parser.add_argument("--out", default="results/compare-methods")
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()

    seeds = parse_seeds(args.seeds)
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        sys.exit(f"unknown method(s) {unknown}; registered: {', '.join(METHODS)}")
    jobs = []
    for method in methods:
        raw = best_config(args.problem, method, args.optimizer) | {"tasks": args.tasks}
        if args.steps_per_task:
            raw["steps_per_task"] = args.steps_per_task
        jobs.append(Job(Members.from_config(resolve_config(raw), seeds), label=method))
    cfg0 = jobs[0].config
    print(f"{args.problem}, {args.optimizer}, paper's best configs (SPEC §6); {cfg0.tasks} tasks × "
          f"{cfg0.steps_per_task} steps, batch {cfg0.batch_size}; seeds {seeds} (K={len(seeds)} per "
          f"ensemble); {args.workers} worker process(es) × 1 torch thread; device cpu; "
          f"torch {torch.__version__}; {platform.processor() or platform.machine()}", flush=True)
    start = time.perf_counter()
    run_jobs(jobs, out=Path(args.out), data_dir=args.data_dir, workers=args.workers,
             progress=not args.no_progress)
    wall = time.perf_counter() - start
    print(f"\n{'method':<16}{'config':<44}{'total online acc %':>22}{'ens. steps/s':>14}"
          f"{'member-steps/s':>16}{'wall s':>8}")
    for job in jobs:
        c = job.config
        conf = f"lr={c.lr:g} " + " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in c.params.items())
        if job.error:
            print(f"{c.method:<16}{conf:<44}  FAILED: {job.error.strip().splitlines()[-1]}")
            continue
        mean, ci = mean_and_ci([r["total_online_accuracy"] for r in job.records])
        r = job.records[0]
        print(f"{c.method:<16}{conf:<44}{100 * mean:>14.2f} ± {100 * ci:5.2f}"
              f"{r['steps_per_second']:>14.0f}{r['steps_per_second'] * len(seeds):>16.0f}"
              f"{r['wall_time_s']:>8.0f}")
    print(f"\ntotal wall time {wall:.0f} s; results in {args.out}/results.sqlite")


if __name__ == "__main__":
    main()
