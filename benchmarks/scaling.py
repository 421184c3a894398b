"""Whole-machine throughput: the sweep executor on 1 worker vs W workers, same jobs.

    python benchmarks/scaling.py --data-dir ../shared/data [--workers 2] [--members 8]

Trains the same ``2·W`` ensembles (Permuted MNIST MLP, L2 Init, Adam, batch 16, K members
each, task-end measurements off) through :func:`plasticlab.experiments.executor.run_jobs` —
the code path of ``plasticlab sweep`` — first with one worker process, then with W, and prints
member-samples/s of each and their ratio. Wall times include spawning the workers, importing
torch and loading the data in each, as a sweep pays them. One torch thread per worker.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.executor import Job, run_jobs
from plasticlab.run_config import Members


def jobs(count: int, members: int, tasks: int, steps: int, method: str) -> list[Job]:
    params = {"strength": 1e-2} if method == "l2_init" else {}
    config = resolve_config({"problem": "permuted_mnist", "method": method, "params": params,
                             "tasks": tasks, "steps_per_task": steps})
    return [Job(Members.from_config(config, list(range(i * members, (i + 1) * members))),
                options={"measure": False}, label=f"job {i}") for i in range(count)]


def timed(workers: int, args) -> float:
    todo = jobs(2 * args.workers, args.members, args.tasks, args.steps, args.method)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        done = run_jobs(todo, out=out, data_dir=args.data_dir, workers=workers, progress=False)
        seconds = time.perf_counter() - start
    failed = [j for j in done if j.error]
    if failed:
        raise SystemExit(f"a job failed:\n{failed[0].error}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--steps", type=int, default=625)
    parser.add_argument("--method", default="l2_init")
    args = parser.parse_args()
    count = 2 * args.workers
    samples = count * args.members * args.tasks * args.steps * 16
    print(f"torch {torch.__version__}, cpu, 1 thread per worker; {count} ensembles × K={args.members} "
          f"({args.method}, Permuted MNIST, {args.tasks} tasks × {args.steps} steps, batch 16)")
    one = timed(1, args)
    print(f"  1 worker : {one:6.1f} s  {samples / one:10,.0f} member-samples/s")
    many = timed(args.workers, args)
    print(f"  {args.workers} workers: {many:6.1f} s  {samples / many:10,.0f} member-samples/s  "
          f"({one / many:.2f}× one worker)")


if __name__ == "__main__":
    main()
