"""Plain-text tables of online accuracy, for terminals, logs and issue notes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def mean_and_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of a normal-approximation 95 % interval (1.96·s/√n; 0 for n=1)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, 1.96 * math.sqrt(var / n)


def _fmt(mean: float, ci: float, n: int, percent: bool = True) -> str:
    if not percent:
        return f"{mean:8.4f}" + (f" ± {ci:7.4f}" if n > 1 else "")
    return f"{100 * mean:6.2f}" + (f" ± {100 * ci:5.2f}" if n > 1 else "")


def task_table(curves: Mapping[str, Sequence[Sequence[float]]], reported: Sequence[int] | None = None,
               max_rows: int = 40, measure: str = "online accuracy") -> str:
    """Per-task average online accuracy (%) of each method: mean ± 95 % CI over seeds.

    ``curves[label][seed_index][task]`` are fractions in [0, 1]. Long runs are shown in
    ``max_rows`` evenly spaced bins (each the mean of its tasks), so the table stays readable.
    The last row is the total average online accuracy over the ``reported`` tasks. Another
    ``measure`` (a regression's ``online squared error``) is shown as it is, not in %.
    """
    percent = measure == "online accuracy"
    labels = list(curves)
    tasks = len(next(iter(curves.values()))[0])
    reported = list(range(tasks)) if reported is None else list(reported)
    bins = _bins(reported, max_rows)
    width = max(16, *(len(label) + 2 for label in labels))
    head = f"{'task':>9} " + "".join(f"{label:>{width}}" for label in labels)
    lines = [head, "-" * len(head)]
    for lo, hi, members in bins:
        name = f"{lo}" if lo == hi else f"{lo}-{hi}"
        row = f"{name:>9} "
        for label in labels:
            per_seed = [sum(run[t] for t in members) / len(members) for run in curves[label]]
            row += f"{_fmt(*mean_and_ci(per_seed), len(per_seed), percent):>{width}}"
        lines.append(row)
    lines.append("-" * len(head))
    row = f"{'total':>9} "
    for label in labels:
        per_seed = [sum(run[t] for t in reported) / len(reported) for run in curves[label]]
        row += f"{_fmt(*mean_and_ci(per_seed), len(per_seed), percent):>{width}}"
    lines.append(row)
    seeds = {label: len(runs) for label, runs in curves.items()}
    lines.append(f"{measure}{' %' if percent else ''}, mean ± 95% CI over seeds ({_seeds_text(seeds)})")
    return "\n".join(lines)


def _seeds_text(seeds: Mapping[str, int]) -> str:
    counts = set(seeds.values())
    if len(counts) == 1:
        return f"n = {counts.pop()}"
    return ", ".join(f"{k}: n = {v}" for k, v in seeds.items())


def _bins(tasks: Sequence[int], max_rows: int) -> list[tuple[int, int, list[int]]]:
    if len(tasks) <= max_rows:
        return [(t, t, [t]) for t in tasks]
    size = math.ceil(len(tasks) / max_rows)
    chunks = [list(tasks[i:i + size]) for i in range(0, len(tasks), size)]
    return [(c[0], c[-1], c) for c in chunks]


def internals_summary(records: Sequence[Mapping]) -> str:
    """What the network looks like at the end of the last task, mean ± 95 % CI over runs.

    ``records`` are run records as ``plasticlab run --json`` prints them (one per seed). Shown
    when present: srank and effective rank per hidden layer, weight magnitude (mean |θ|), dead
    and dormant units (%), the last task's test accuracy (%) and, with forgetting, BWT and
    one-step BWT (percentage points). Returns "" when the runs carry no measurements.
    """
    if not records or "weight_magnitude" not in records[0]:
        return ""
    last = len(records[0]["weight_magnitude"]) - 1
    n = len(records)

    def stat(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
        mean, ci = mean_and_ci([scale * v if v is not None else math.nan for v in values])
        return f"{mean:.{digits}f}" + (f" ± {ci:.{digits}f}" if n > 1 else "")

    def per_layer(key: str) -> str:
        layers = len(records[0][key][last])
        return " | ".join(stat([r[key][last][i] for r in records]) for i in range(layers))

    rows = [("srank per hidden layer", per_layer("srank")),
            ("effective rank per hidden layer", per_layer("effective_rank")),
            ("weight magnitude, mean |θ|", stat([r["weight_magnitude"][last] for r in records],
                                                digits=4)),
            ("dead units %", stat([r["dead_fraction"][last] for r in records], 100)),
            ("dormant units % (τ = 0.1)", stat([r["dormant_fraction"][last] for r in records], 100))]
    if "task_test_accuracy" in records[0]:
        rows.append(("test accuracy % (last task)",
                     stat([r["task_test_accuracy"][last] for r in records], 100, 2)))
    if "bwt" in records[0]:
        rows.append(("BWT (pp)", stat([r["bwt"] for r in records], 100, 2)))
        rows.append(("one-step BWT (pp)", stat([r["one_step_bwt"] for r in records], 100, 2)))
    width = max(len(name) for name, _ in rows)
    head = f"end of task {last} (mean{' ± 95% CI' if n > 1 else ''} over seeds, n = {n}):"
    return "\n".join([head, *(f"  {name:<{width}}  {value}" for name, value in rows)])
