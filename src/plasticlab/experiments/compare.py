"""``plasticlab compare``: the runs two results directories both hold, compared task by task.

A run in one directory is the same run as one in the other when its config (all of it but the
number of tasks) and its seed are the same — trained in another sitting, another ensemble or on
another machine: your ``plasticlab reproduce STUDY`` and the committed
``docs/reproduction/STUDY``, or two studies that share a configuration. Both should then give
the same online accuracy aₜ (a regression's runs: online squared error) on every task t both
ran, bit for bit (a run of T tasks and one of
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
from .verify import online_metric, recorded_runs, same_accuracy


@dataclass
class Pair:
    """One run held by both directories, and the first task where its online measures part
    (accuracies, or a regression's squared errors: ``metric``)."""

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

    @property
    def same(self) -> bool:
        """The same online measure on every task compared."""
        return self.task is None


def run_key(run: dict) -> str:
    """What makes two runs the same run: the config without its number of tasks, and the seed."""
    return f"{config_key({k: v for k, v in run['config'].items() if k != 'tasks'})} seed {run['seed']}"


def compare_runs(a: Sequence[float], b: Sequence[float]) -> tuple[int, int | None]:
    """How many tasks two runs both ran, and the first of them where aₜ differs (None: none); a
    diverged task's NaN (None in an export) is the same as a NaN."""
    tasks = min(len(a), len(b))
    return tasks, next((t for t in range(tasks) if not same_accuracy(a[t], b[t])), None)


def mean_online_measure(values: Sequence[float | None], tasks: int) -> float:
    """The mean of a run's online measure — accuracy aₜ, or a regression's squared error —
    over its first ``tasks`` tasks (NaN when one of them diverged: NaN in a store, None in an
    export)."""
    kept = [math.nan if v is None else v for v in values[:tasks]]
    return math.fsum(kept) / tasks if tasks else math.nan


def shared_runs(dir_a: str | Path, dir_b: str | Path) -> tuple[list[Pair], int, int]:
    """Every finished run of ``dir_a`` that ``dir_b`` also holds (a store or an export each),
    compared with each of its namesakes there; and how many runs only A, and only B, hold."""
    runs_a, accuracy_a = recorded_runs(dir_a)
    runs_b, accuracy_b = recorded_runs(dir_b)
    held_b: dict[str, list[dict]] = {}
    for run in runs_b:
        held_b.setdefault(run_key(run), []).append(run)
    pairs = []
    for run in runs_a:
        for other in held_b.get(run_key(run), []):
            a, b = accuracy_a[run["run_id"]], accuracy_b[other["run_id"]]
            tasks, task = compare_runs(a, b)
            metric = online_metric(run)
            label = f"{run['config']['method']}, {run['config']['optimizer']}"
            if metric != "online_accuracy":  # never averaged with accuracies
                label += f", {metric.replace('_', ' ')}"
            pair = Pair(label, run["seed"], run["run_id"], other["run_id"], tasks,
                        mean_online_measure(a, tasks), mean_online_measure(b, tasks),
                        metric=metric)
            if task is not None:
                pair.task, pair.a, pair.b = task, a[task], b[task]
            pairs.append(pair)
    keys_a = {run_key(run) for run in runs_a}
    only_a = sum(run_key(run) not in held_b for run in runs_a)
    only_b = sum(run_key(run) not in keys_a for run in runs_b)
    return pairs, only_a, only_b
