"""A figure of one or more :class:`~plasticlab.monitor.MonitorHistory`: one panel per measurement
against the step, runs overlaid (``plot({"Adam": a.history, "Adam + L2 Init": b.history})``).

A panel shows the whole network's value where the monitor measures one (dead units, drift,
gradient norm …) and each layer's, one line style a layer, where it measures them per layer
only (srank, effective rank). Task boundaries, where given, are dotted vertical lines: loss of
plasticity shows as what happens at them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .history import OVERALL, MonitorHistory

DEFAULT_METRICS = ("dead_fraction", "srank", "weight_drift", "grad_norm")
"""The panels :func:`plot` draws unless told: what loses plasticity, and what L2 Init holds."""

TITLES = {
    "dead_fraction": ("Dead units", "dead units (%)", 100.0),
    "dormant_fraction": ("Dormant units", "dormant units (%)", 100.0),
    "srank": ("Feature rank (srank)", "srank", 1.0),
    "effective_rank": ("Effective rank", "effective rank", 1.0),
    "weight_magnitude": ("Weight magnitude", "mean |θ|", 1.0),
    "weight_drift": ("Drift from θ₀", "‖θ − θ₀‖ / ‖θ₀‖", 1.0),
    "grad_norm": ("Gradient norm", "‖∇L‖", 1.0),
}
"""Each known measurement's panel title, axis label and scale (fractions shown in %); any other
is drawn under its own name."""

LAYER_STYLES = ("-", "--", ":", "-.")
BOUNDARY = "_task boundary"
"""The label of a task boundary's line (a leading underscore keeps it out of the legend)."""


def plot(histories: MonitorHistory | Mapping[str, MonitorHistory | object],
         path: str | Path | None = None, metrics: Sequence[str] = DEFAULT_METRICS, *,
         task_steps: int | None = None, title: str | None = None):
    """A matplotlib ``Figure``: one panel per measurement of ``metrics`` against the step, every
    run of ``histories`` (a history, or a dict name → history or :class:`~plasticlab.Monitor`)
    in a colour of its own; written to ``path`` (its suffix the format: ``.png``, ``.svg``,
    ``.pdf``) when given. ``task_steps``: the steps a task lasts, drawn as dotted lines at each
    boundary.

    Raises:
        ValueError: a metric no run measured (the message lists those measured), or no runs.
    """
    import matplotlib
    from matplotlib.figure import Figure  # not pyplot's: no backend chosen, no figure left open

    runs = _runs(histories)
    measured = sorted({key.partition("/")[0] for history in runs.values() for row in history
                       for key in row if key != "step"})
    unknown = [m for m in metrics if m not in measured]
    if unknown:
        raise ValueError(f"plot: no run measured {', '.join(unknown)}; measured: "
                         f"{', '.join(measured) or 'nothing'}")
    fig = Figure(figsize=(3.6 * len(metrics), 3.2), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes, metrics, strict=True):
        panel, label, scale = TITLES.get(metric, (metric, metric, 1.0))
        for i, (name, history) in enumerate(runs.items()):
            layers = [OVERALL] if history.series(metric)[0] else history.layers(metric)
            for layer, style in zip(layers, LAYER_STYLES * len(layers), strict=False):
                steps, values = history.series(metric, layer)
                named = [part for part in (name, None if layer == OVERALL else f"layer {layer}") if part]
                ax.plot(steps, [scale * v for v in values], color=colors[i % len(colors)], ls=style,
                        lw=1.2, label=", ".join(named) or None)
        if task_steps:
            last = max(row["step"] for history in runs.values() for row in history)
            for boundary in range(task_steps, last + 1, task_steps):
                ax.axvline(boundary, color="0.6", lw=0.6, ls=":", zorder=0, label=BOUNDARY)
        ax.set(title=panel, xlabel="step", ylabel=label)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=7, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=150)
    return fig


def _runs(histories) -> dict[str, MonitorHistory]:
    """``histories`` as name → history (a Monitor gives its own; one history has no name)."""
    if isinstance(histories, MonitorHistory):
        return {"": histories}
    runs = {name: getattr(h, "history", h) for name, h in histories.items()}
    if not runs or not all(isinstance(h, MonitorHistory) for h in runs.values()):
        raise ValueError("plot: give a MonitorHistory, or a dict of name → Monitor or MonitorHistory "
                         f"(got {type(histories).__name__} of {len(runs)})")
    return runs


__all__ = ["DEFAULT_METRICS", "TITLES", "plot"]
