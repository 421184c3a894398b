"""``plasticlab demo``: L2 Init vs Baseline on Permuted MNIST, a table and a figure.

A short, real run on real MNIST: both methods with Adam (α = 1e-3, the paper's best step size
for L2 Init on this problem), L2 Init with λ = 1e-2, the same seeds and so the same task
sequences. The two ensembles train in parallel, one process per core.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .engine import train_ensemble
from .experiments.config import resolve_config
from .experiments.runner import progress_bar, record_result, record_start
from .experiments.store import ResultStore
from .report import plot_online_accuracy, task_table

DEMO_METHODS = (("baseline", {}), ("l2_init", {"strength": 1e-2}))
DEMO_LR = 1e-3


def _train(config, seeds, data_dir, position, progress):
    bar, on_task_end = progress_bar(config, len(seeds), enabled=progress, position=position)
    try:
        return train_ensemble(config, seeds, data_dir=data_dir, on_task_end=on_task_end,
                              on_steps=bar.update)
    finally:
        bar.close()


def run_demo(*, tasks: int = 20, steps_per_task: int = 625, seeds=(0, 1, 2, 3), data_dir=None,
             out: Path = Path("plasticlab-demo"), workers: int = 2, progress: bool = True) -> dict:
    """Run the demo, print the per-task table, save ``out/online_accuracy.png``; return curves."""
    seeds = list(seeds)
    configs = [resolve_config({"problem": "permuted_mnist", "method": m, "params": p,
                               "optimizer": "adam", "lr": DEMO_LR, "tasks": tasks,
                               "steps_per_task": steps_per_task})
               for m, p in DEMO_METHODS]
    print(f"plasticlab demo: L2 Init vs Baseline on Permuted MNIST — {tasks} tasks × "
          f"{steps_per_task} steps, batch 16, Adam α={DEMO_LR}, seeds {seeds}, "
          f"{workers} worker process(es), 1 torch thread each", flush=True)
    start = time.perf_counter()
    curves, reported = {}, None
    with ResultStore(out / "results") as store:
        run_ids = [record_start(store, c, seeds) for c in configs]
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=ctx) as pool:
            futures = [pool.submit(_train, c, seeds, data_dir, i, progress)
                       for i, c in enumerate(configs)]
            for config, ids, fut in zip(configs, run_ids, futures, strict=True):
                try:
                    result = fut.result()
                except BaseException:
                    for rid in ids:
                        store.fail_run(rid, traceback.format_exc())
                    raise
                records = record_result(store, config, ids, result)
                label = config.method + (f" λ={config.params['strength']:g}"
                                         if "strength" in config.params else "")
                curves[label] = [r["task_online_accuracy"] for r in records]
                reported = records[0]["reported_tasks"]
    wall = time.perf_counter() - start
    sys.stderr.flush()
    print()
    print(task_table(curves, reported=reported))
    figure = plot_online_accuracy(curves, out / "online_accuracy.png",
                                  title=f"Permuted MNIST, Adam α={DEMO_LR}, {len(seeds)} seeds")
    print(f"\nfigure: {figure}\nresults: {out / 'results'} (SQLite; `plasticlab run --help` for more)")
    print(f"wall time {wall:.0f} s")
    return curves
