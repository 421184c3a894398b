"""Figures: average online task accuracy across tasks, one line per method with a 95 % band."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .tables import mean_and_ci

# A fixed colour per method so every figure agrees; L2 Init stands out.
METHOD_COLORS = {
    "l2_init": "#d62728", "baseline": "#404040", "l2": "#1f77b4", "shrink_perturb": "#2ca02c",
    "cbp": "#9467bd", "redo": "#8c564b", "concat_relu": "#e377c2", "layer_norm": "#17becf",
    "l1_init": "#ff7f0e", "huber_init": "#bcbd22", "l2_init_resample": "#f7b6d2",
    "ewc": "#7f7f7f", "l2_init_ewc": "#aa3939",
}


def plot_online_accuracy(curves: Mapping[str, Sequence[Sequence[float]]], path: str | Path, *,
                         title: str = "", reported: Sequence[int] | None = None) -> Path:
    """Save average online task accuracy vs task (mean and 95 % CI band over seeds) to ``path``.

    ``curves[label][seed_index][task]`` are fractions in [0, 1]; the label's method name (the
    part before any space) picks its colour.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=150)
    for label, runs in curves.items():
        tasks = list(range(len(runs[0]))) if reported is None else list(reported)
        stats = [mean_and_ci([run[t] for run in runs]) for t in tasks]
        mean = [100 * m for m, _ in stats]
        lo = [100 * (m - c) for m, c in stats]
        hi = [100 * (m + c) for m, c in stats]
        color = METHOD_COLORS.get(label.split()[0])
        ax.plot(tasks, mean, label=f"{label} (n={len(runs)})", color=color,
                lw=2.2 if label.startswith("l2_init") else 1.6, marker="o" if len(tasks) <= 30 else None,
                ms=3)
        if len(runs) > 1:
            ax.fill_between(tasks, lo, hi, color=color, alpha=0.2, lw=0)
    ax.set_xlabel("task")
    ax.set_ylabel("average online task accuracy (%)")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
