"""``plasticlab compare``: the runs two results directories both hold, compared task by task.

A run in one directory is the same run as one in the other when its config (all of it but the
number of tasks) and its seed are the same — trained in another sitting, another ensemble or on
another machine: your ``plasticlab reproduce STUDY`` and the committed
``docs/reproduction/STUDY``, or two studies that share a configuration. Both should then give
the same online accuracy aₜ (a regression's runs: online squared error) on every task t both
ran, bit for bit, and — where both were measured alike — every task-end measurement both
recorded to an export's 7 digits, as ``verify`` compares them (a run of T tasks and one of
T′ > T tasks share their first T: a task's data and the steps before it do not depend on the
tasks that follow). Nothing is trained; :mod:`plasticlab.experiments.verify` trains again.

Runs from another device, another number of threads or another torch part at the bit (see
docs/member-independence.md) but should agree in distribution. Each pair therefore also keeps
both runs' total online accuracy over the tasks both ran, for ``compare --statistical``: per
method, the paired difference over seeds and its bootstrap interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .protocol import config_key
from .verify import first_difference, online_metric, recorded_metrics


@dataclass
class Pair:
    """One run held by both directories, and the first task where they part: on the online
    measure (accuracies, or a regression's squared errors: ``metric``) or on a task-end
    measurement (``parted``)."""

    label: str  # method, optimizer
    seed: int
    run_a: str
    run_b: str
    tasks: int  # how many tasks were compared: those both ran
    total_a: float  # the mean online measure over those tasks in A (NaN if one diverged)
    total_b: float
    task: int | None = None  # the first task whose online measure differs; None: none does
    a: float | None = None
    b: float | None = None
    metric: str = "online_accuracy"  # what was compared: a regression's, online_squared_error
    parted: str | None = None  # the metric ``a`` and ``b`` are of: ``metric`` or a measurement
    measured: int = 0  # how many task-end measurements were compared (0: not measured alike)

    @property
    def same(self) -> bool:
        """The same online measure on every task compared."""
        return self.task is None


def run_key(run: dict) -> str:
    """What makes two runs the same run: the config without its number of tasks, and the seed."""
    return f"{config_key({k: v for k, v in run['config'].items() if k != 'tasks'})} seed {run['seed']}"


def mean_online_measure(values: Sequence[float | None], tasks: int) -> float:
    """The mean of a run's online measure — accuracy aₜ, or a regression's squared error —
    over its first ``tasks`` tasks (NaN when one of them diverged: NaN in a store, None in an
    export)."""
    kept = [math.nan if v is None else v for v in values[:tasks]]
    return math.fsum(kept) / tasks if tasks else math.nan


def shared_runs(dir_a: str | Path, dir_b: str | Path) -> tuple[list[Pair], int, int]:
    """Every finished run of ``dir_a`` that ``dir_b`` also holds (a store or an export each),
    compared with each of its namesakes there; and how many runs only A, and only B, hold."""
    runs_a, metrics_a = recorded_metrics(dir_a)
    runs_b, metrics_b = recorded_metrics(dir_b)
    held_b: dict[str, list[dict]] = {}
    for run in runs_b:
        held_b.setdefault(run_key(run), []).append(run)
    pairs = []
    for run in runs_a:
        for other in held_b.get(run_key(run), []):
            tasks, parted, measured = first_difference(run, metrics_a[run["run_id"]], other,
                                                       metrics_b[other["run_id"]])
            metric = online_metric(run)
            a, b = metrics_a[run["run_id"]].get(metric, []), metrics_b[other["run_id"]].get(metric, [])
            label = f"{run['config']['method']}, {run['config']['optimizer']}"
            if metric != "online_accuracy":  # never averaged with accuracies
                label += f", {metric.replace('_', ' ')}"
            pair = Pair(label, run["seed"], run["run_id"], other["run_id"], tasks,
                        mean_online_measure(a, tasks), mean_online_measure(b, tasks),
                        metric=metric, measured=len(measured))
            if parted is not None:
                task, pair.parted = parted
                pair.task = task
                pair.a = metrics_a[run["run_id"]][pair.parted][task]
                pair.b = metrics_b[other["run_id"]][pair.parted][task]
            pairs.append(pair)
    keys_a = {run_key(run) for run in runs_a}
    only_a = sum(run_key(run) not in held_b for run in runs_a)
    only_b = sum(run_key(run) not in keys_a for run in runs_b)
    return pairs, only_a, only_b
