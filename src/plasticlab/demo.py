"""``plasticlab demo``: L2 Init vs Baseline on Permuted MNIST, a table and a figure.

A short, real run on real MNIST: both methods with Adam (α = 1e-3, the paper's best step size
for L2 Init on this problem), L2 Init with λ = 1e-2, the same seeds and so the same task
sequences. The two ensembles train in parallel, one process per core.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .experiments.config import resolve_config
from .experiments.executor import Job, run_jobs
from .methods import method_title
from .report import plot_online_accuracy, task_table
from .run_config import Members

DEMO_METHODS = (("baseline", {}), ("l2_init", {"strength": 1e-2}))
DEMO_LR = 1e-3


def run_demo(*, tasks: int = 20, steps_per_task: int = 625, seeds=(0, 1, 2, 3), data_dir=None,
             out: Path = Path("plasticlab-demo"), workers: int = 2, progress: bool = True) -> dict:
    """Run the demo, print the per-task table, save ``out/online_accuracy.png``; return curves."""
    seeds = list(seeds)
    jobs = []
    for method, params in DEMO_METHODS:
        config = resolve_config({"problem": "permuted_mnist", "method": method, "params": params,
                                 "optimizer": "adam", "lr": DEMO_LR, "tasks": tasks,
                                 "steps_per_task": steps_per_task})
        label = method_title(method) + (f" λ={params['strength']:g}" if "strength" in params else "")
        jobs.append(Job(Members.from_config(config, seeds), label=label))
    print(f"plasticlab demo: L2 Init vs Baseline on Permuted MNIST — {tasks} tasks × "
          f"{steps_per_task} steps, batch 16, Adam α={DEMO_LR}, seeds {seeds}, "
          f"{workers} worker process(es), 1 torch thread each", flush=True)
    start = time.perf_counter()
    run_jobs(jobs, out=out / "results", data_dir=data_dir, workers=workers, progress=progress)
    wall = time.perf_counter() - start
    failed = [job for job in jobs if job.error]
    if failed:
        raise RuntimeError(f"demo run {failed[0].label} failed:\n{failed[0].error}")
    curves = {job.label: [r["task_online_accuracy"] for r in job.records] for job in jobs}
    sys.stderr.flush()
    print()
    print(task_table(curves, reported=jobs[0].records[0]["reported_tasks"]))
    figure = plot_online_accuracy(curves, out / "online_accuracy.png",
                                  title=f"Permuted MNIST, Adam α={DEMO_LR}, {len(seeds)} seeds")
    print(f"\nfigure: {figure}\nresults: {out / 'results'} (SQLite store)")
    print(f"wall time {wall:.0f} s")
    return curves
