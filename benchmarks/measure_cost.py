"""What each optional task-end measurement costs: one task end of an ensemble measured with
and without it, in one process, and the difference per task end.

    python benchmarks/measure_cost.py --data-dir ../shared/data

Default: Permuted MNIST, K = 8 members (seeds 0…K−1), the MLP after one task of L2 Init
(λ = 1e-2, Adam α = 1e-3, 625 steps of batch 16, so the features and gradients are a trained
network's), one torch thread, the measurement batch of 500 inputs per member. "Without" is the
task end every run measures (weight magnitude, srank, effective rank, dead and dormant units
on the measurement batch, the test accuracy on the task's 10,000 test images); "with" adds one
optional measurement (churn: its task-start forward pass too). The two alternate, ``--repeats``
times each, so that drifts of the machine hit both; the extra cost per task end is the median
of the paired differences, and, because a shared machine's noise can be larger than a cheap
measurement, the measurement's own computation is also timed alone (the fastest of
``--repeats``: everything it adds to the task end's shared forward pass and SVDs).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from plasticlab import metrics
from plasticlab.engine import EnsembleTraining
from plasticlab.experiments.config import resolve_config
from plasticlab.measure import DEFAULT_SAMPLES, Measurer, to_host
from plasticlab.measure.optional import parse_measurements
from plasticlab.run_config import Members


def _sync(measurer: Measurer) -> None:
    if measurer.net.blocks[0].affine.weight.is_cuda:
        torch.cuda.synchronize()


def task_end(measurer: Measurer, task: int) -> float:
    """Seconds of one task end (with its task-start record), read back to the host."""
    _sync(measurer)
    start = time.perf_counter()
    reference = measurer.task_start()
    to_host(measurer.task_end(task, None, reference))
    return time.perf_counter() - start


@torch.no_grad()
def shared_pass(measurer: Measurer) -> tuple[list, list, list]:
    """The task end's forward pass with features and its one SVD per layer, which the optional
    feature measurements reuse."""
    _, features = measurer.net(measurer.inputs(), return_features=True)
    svs = [metrics.singular_values(metrics.feature_matrix(f)) for f in features]
    finite = [torch.isfinite(f).flatten(1).all(1) for f in features]
    return features, svs, finite


def alone(measurer: Measurer, task: int, shared: tuple[list, list, list]) -> float:
    """Seconds of the optional measurement's own computation (task-start record included),
    read back to the host: what it adds to the shared pass."""
    optional, (x, y) = measurer.optional, measurer.examples()
    _sync(measurer)
    start = time.perf_counter()
    reference = measurer.task_start()
    to_host({**optional.from_features(*shared), **optional.from_network(x, y, task, reference)})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", type=int, default=8, help="ensemble size K")
    parser.add_argument("--steps", type=int, default=625, help="training steps before measuring")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="measurement batch per member")
    parser.add_argument("--repeats", type=int, default=5, help="task ends with and without, each")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--measure", default="all", help="which optional measurements (default all)")
    args = parser.parse_args()

    cfg = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "params": {"strength": 1e-2},
                          "optimizer": "adam", "lr": 1e-3, "tasks": 1, "steps_per_task": args.steps})
    training = EnsembleTraining(Members.from_config(cfg, list(range(args.members))), data_dir=args.data_dir,
                                device=args.device, threads=args.threads, measure=False)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor()
                                                                            or platform.machine())
    print(f"permuted_mnist MLP, l2_init λ=1e-2, adam α=1e-3, after {args.steps} steps of batch "
          f"{cfg.batch_size}; K={args.members}; measurement batch {args.samples} per member; "
          f"device {args.device} ({name}); torch {torch.__version__}, {training.threads} thread(s); "
          f"{args.repeats} task ends each", flush=True)
    try:
        training.problem.start_task(0)
        start = time.perf_counter()
        for step in range(args.steps):  # train without measuring, so both sides see this network
            x, y = training.problem.batch(step)
            training.step(x, y, torch.zeros(args.members, device=device), step)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"  training: {time.perf_counter() - start:.2f} s for the {args.steps} steps (one task at "
              f"the default), the scale of a task end's cost", flush=True)
        names = parse_measurements(args.measure)
        plain = Measurer(training.net, training.problem, samples=args.samples)
        task_end(plain, 0)  # one-off costs (LAPACK, autograd, the test set) hit neither side
        rows = []
        for option in names:
            measured = Measurer(training.net, training.problem, samples=args.samples,
                                measurements=(option,))
            task_end(measured, 0)
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.repeats):
                times[False].append(task_end(plain, 0))
                times[True].append(task_end(measured, 0))
            shared = shared_pass(measured)
            own = min(alone(measured, 0, shared) for _ in range(args.repeats))
            base = statistics.median(times[False])
            extra = statistics.median([w - wo for w, wo in zip(times[True], times[False], strict=True)])
            rows.append((option, base, statistics.median(times[True]), extra, own))
            print(f"  {option:<18} task end: {base:.3f} s without, {rows[-1][2]:.3f} s with (medians); "
                  f"paired difference {extra:+.3f} s; its own computation {own:.4f} s "
                  f"({100 * own / min(times[False]):.1f} % of the fastest task end without)", flush=True)
    finally:
        training.close()
    print("\n| measurement | task end without (s) | with (s) | paired difference (s) | "
          "its own computation (s) |")
    print("|---|---:|---:|---:|---:|")
    for option, base, cost, extra, own in rows:
        print(f"| `{option}` | {base:.3f} | {cost:.3f} | {extra:+.3f} | {own:.4f} |")


if __name__ == "__main__":
    main()
