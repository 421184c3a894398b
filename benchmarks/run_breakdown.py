"""Where a whole run's time goes besides the training step: one ``EnsembleTraining`` of L2 Init
on Permuted MNIST (task-end measurements on, as ``plasticlab run`` trains), its wall time split
into the steps (``Step.__call__``), the task ends' measurements (the engine's own clock), the
batches (``Problem.batch``) and the rest (task starts, bookkeeping).

    python benchmarks/run_breakdown.py --data-dir ../shared/data --members 8 --tasks 8

Prints the setup (device, threads, K, batch, tasks × steps), each share, and the member-samples/s
of the run against its steps alone: the ratio issue 44's CPU goal names.
"""

from __future__ import annotations

import argparse
import time

import torch

from plasticlab import step as step_module
from plasticlab.engine import EnsembleTraining
from plasticlab.experiments.config import resolve_config
from plasticlab.run_config import Members


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "tasks": args.tasks})
    spent = {"step": 0.0, "batch": 0.0}

    def timed(name, call):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            out = call(*a, **k)
            spent[name] += time.perf_counter() - t0
            return out
        return wrapper

    plain_step = step_module.Step.__call__
    step_module.Step.__call__ = timed("step", plain_step)
    try:
        training = EnsembleTraining(Members.from_config(config, list(range(args.members))),
                                    data_dir=args.data_dir, threads=1)
        problem = training.problem
        problem.batch = timed("batch", problem.batch)
        print(f"device cpu, threads {torch.get_num_threads()}, K {args.members}, batch "
              f"{problem.batch_size}, {args.tasks} tasks × {problem.steps_per_task} steps, "
              f"measurements on")
        t0 = time.perf_counter()
        for task in range(args.tasks):
            training.run_task(task)
        run = time.perf_counter() - t0
    finally:
        step_module.Step.__call__ = plain_step
    measure = training.measure_time
    rest = run - spent["step"] - measure - spent["batch"]
    for name, seconds in (("steps", spent["step"]), ("task-end measurements", measure),
                          ("batches", spent["batch"]), ("the rest", rest)):
        print(f"  {name:<22} {seconds:7.2f} s  {seconds / run:5.1%}")
    samples = args.members * args.tasks * problem.steps_per_task * problem.batch_size
    print(f"run {samples / run:,.0f} member-samples/s, its steps alone {samples / spent['step']:,.0f}: "
          f"{spent['step'] / run:.1%}")


if __name__ == "__main__":
    main()
