"""Diagnose loss of plasticity in a plain PyTorch model with ``plasticlab.Monitor``.

A small MLP learns a stream of Permuted MNIST tasks with ``torch.optim.Adam``, once as it is and
once with L2 Init; a monitor watches both. The only lines the monitor asks for::

    monitor = plasticlab.Monitor(model, probe=inputs, every=100)   # before the first update
    ...
    optimizer.step()
    monitor.step()                                                 # once per training step

It saves a figure of the dead units, the feature rank (srank) and the drift from θ₀ against the
step for both runs (``plasticlab.monitor.plot``), and prints the first two at every task end.
``--overhead`` instead times the same training with and without the monitor and prints the
monitor's cost.

Run:  python examples/monitor_any_model.py --data-dir ../shared/data
      python examples/monitor_any_model.py --data-dir ../shared/data --overhead
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from plasticlab import L2Init, Monitor
from plasticlab.monitor import PlasticityWarning, TrainabilityProbe, plot
from plasticlab.problems import task_stream


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 10))


def train(use_l2_init: bool, args, monitored: bool = True, clock: list | None = None) -> Monitor | None:
    """One plain-PyTorch run (seed 0); returns its monitor (None when not monitored). With
    ``clock``, the CPU time spent in the monitor's calls is added to ``clock[0]`` (and that of
    calls that ran the trainability probe to ``clock[1]``, counted in ``clock[2]``)."""
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    reg = L2Init(model, strength=args.strength) if use_l2_init else None
    monitor = None
    for task in task_stream("permuted_mnist", seed=0, tasks=args.tasks, steps_per_task=args.steps,
                            data_dir=args.data_dir):
        probe = task.sample_inputs(args.probe)  # [n, 784], not a training batch
        if monitored and monitor is None:
            trainability = TrainabilityProbe(every=args.trainability) if args.trainability else None
            monitor = Monitor(model, probe=probe, every=args.every, trainability=trainability)
            monitor.measure()  # step 0: the network as initialised
        elif monitored:
            monitor.set_probe(probe)  # measure on the task being learned
        for x, y in task:
            loss = nn.functional.cross_entropy(model(x), y)
            if reg is not None:
                loss = loss + reg()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if monitor is not None:
                c = time.process_time()
                row = monitor.step()
                if clock is not None:
                    clock[0] += time.process_time() - c
                    if row is not None and "trainability" in row:
                        clock[1] += time.process_time() - c
                        clock[2] += 1
    if monitor is not None:
        monitor.close()
    return monitor


def task_end_table(runs: dict[str, Monitor], tasks: int, steps: int) -> None:
    """Per task, each run's last measurement in it: dead units (%) and srank per layer."""
    layers = runs["baseline"].history.layers("srank")
    print("task  " + "  ".join(f"{f'{name} dead%':>16}" + "".join(f"{f'srank[{la}]':>10}" for la in layers)
                               for name in runs))
    for task in range(tasks):
        cells = []
        for mon in runs.values():
            row = [r for r in mon.history if r["step"] <= (task + 1) * steps][-1]
            cells.append(f"{100 * row['dead_fraction']:16.1f}"
                         + "".join(f"{row[f'srank/{la}']:10d}" for la in layers))
        print(f"{task:4d}  " + "  ".join(cells))


def overhead(args) -> None:
    """Time the baseline run without and with the monitor, alternating; print the overhead."""
    cpu = {False: [], True: []}
    wall = {False: [], True: []}
    inside = []  # CPU time inside monitor.step() / the run's CPU time
    probes = []  # CPU time of the steps that ran the trainability probe, each
    warnings.simplefilter("ignore", PlasticityWarning)
    for _ in range(args.repeats):
        for monitored in (False, True):
            clock = [0.0, 0.0, 0]
            c, w = time.process_time(), time.perf_counter()
            train(False, args, monitored=monitored, clock=clock)
            cpu[monitored].append(time.process_time() - c)
            wall[monitored].append(time.perf_counter() - w)
            if monitored:
                inside.append(clock[0] / (cpu[True][-1] - clock[0]))
                if clock[2]:
                    probes.append(clock[1] / clock[2])
    steps = args.tasks * args.steps
    probe = f", trainability probe every {args.trainability}" if args.trainability else ""
    print(f"threads {torch.get_num_threads()}, {args.tasks} tasks x {args.steps} steps, every={args.every}, "
          f"probe {args.probe}{probe}, {args.repeats} repeats (median)")
    for name, t in (("cpu", cpu), ("wall", wall)):
        off, on = statistics.median(t[False]), statistics.median(t[True])
        per = (on - off) / (steps // args.every + 1) * 1e3  # + step 0
        print(f"{name:5s} without {off:7.2f} s  with {on:7.2f} s  overhead {100 * (on - off) / off:5.1f} %  "
              f"({per:.2f} ms per measurement)")
    print(f"inside monitor.step(): {100 * statistics.median(inside):.1f} % of the rest of the run's CPU time "
          f"(median; range {100 * min(inside):.1f}-{100 * max(inside):.1f} %)")
    if probes:
        print(f"trainability probe: {1e3 * statistics.median(probes):.0f} ms CPU each (median), with that "
              f"step's measurement ({TrainabilityProbe(every=1).steps} steps on {args.probe} inputs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=625)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--probe", type=int, default=128, help="probe inputs (of the current task)")
    parser.add_argument("--strength", type=float, default=1e-2, help="L2 Init's λ")
    parser.add_argument("--trainability", type=int, default=0,
                        help="also run the trainability probe every this many steps (0: off)")
    parser.add_argument("--figure", type=Path, default=Path("docs/figures/monitor-permuted-mnist.png"))
    parser.add_argument("--csv", type=Path, help="also write both runs' tidy tables here (a prefix)")
    parser.add_argument("--overhead", action="store_true", help="time the monitor instead")
    parser.add_argument("--repeats", type=int, default=3, help="--overhead: timed pairs of runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.overhead:
        overhead(args)
        return
    runs = {}
    for name in ("baseline", "l2_init"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runs[name] = train(name == "l2_init", args)
        for w in caught:
            print(f"[{name}] {w.category.__name__}: {w.message}")
    task_end_table(runs, args.tasks, args.steps)
    plot({"Adam": runs["baseline"], "Adam + L2 Init": runs["l2_init"]}, args.figure,
         ("dead_fraction", "srank", "weight_drift"), task_steps=args.steps,
         title=f"plasticlab.Monitor on Permuted MNIST (MLP, Adam; {args.steps} steps per task, "
               f"a dotted line at each task's end; probe of {args.probe} inputs)")
    print(f"figure: {args.figure}")
    if args.csv:
        for name, mon in runs.items():
            print(f"table: {mon.history.to_csv(f'{args.csv}-{name}.csv')}")


if __name__ == "__main__":
    main()
