"""Does halving an ensemble so that every round fills every worker (``sweep.group``) pay?

One sweep's runs (Baseline on Permuted MNIST, ``--runs`` seeds) are grouped under
``--max-members`` twice: as one worker would take them (e.g. 36 runs → 12, 12, 12) and as
``--workers`` take them now (→ 12, 12, 6, 6: with two workers the 12-member third ensemble no
longer trains alone). Each plan runs through the sweep's own executor on ``--workers``
processes (one torch thread each) into a fresh results directory, alternately, best of
``--rounds``. Prints the setup and both wall times.

    python benchmarks/full_rounds.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from plasticlab.experiments.orchestrate import Plan, run_plan
from plasticlab.experiments.sweep import expand, group


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--runs", type=int, default=36)
    parser.add_argument("--max-members", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--steps-per-task", type=int, default=625)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": f"0-{args.runs - 1}",
                   "tasks": args.tasks, "steps_per_task": args.steps_per_task})
    plans = {"one worker's grouping": group(runs, args.max_members, workers=1),
             "full rounds": group(runs, args.max_members, workers=args.workers)}

    def wall(ensembles) -> float:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            jobs = run_plan(Plan(ensembles, len(runs), 0, "grid"), out=out, data_dir=args.data_dir,
                            workers=args.workers, progress=False, options={"measure": False})
            elapsed = time.perf_counter() - start
        failed = [j.error for j in jobs if j.error]
        if failed:
            raise RuntimeError(f"a job failed: {failed[0]}")
        return elapsed

    best = {name: float("inf") for name in plans}
    for _ in range(args.rounds):
        for name, ensembles in plans.items():
            best[name] = min(best[name], wall(ensembles))
    print(f"device cpu, {args.workers} worker processes of one torch thread each (the engine's "
          f"default), {os.cpu_count()} cores, {args.runs} runs, max K {args.max_members}, "
          f"batch 16, {args.tasks} tasks × {args.steps_per_task} steps, no measurements, "
          f"best of {args.rounds}")
    for name, ensembles in plans.items():
        sizes = ", ".join(str(len(e.seeds)) for e in ensembles)
        print(f"{name:>22}: K = {sizes:<16} {best[name]:7.1f} s")
    base, new = best["one worker's grouping"], best["full rounds"]
    print(f"full rounds take {new / base:.2f}× the time")


if __name__ == "__main__":
    main()
