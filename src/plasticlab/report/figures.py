"""Publication figures of results: curves with 95 % bands, interval plots, sweeps, heatmaps.

The figure functions only draw: every statistic (means, 95 % intervals, IQM, probability of
improvement, binning) is computed by the caller and handed in as :class:`Band`,
:class:`Estimate` or :class:`SweepLine` values. Each function returns a matplotlib
:class:`~matplotlib.figure.Figure` drawn on the Agg canvas (no pyplot state, no display needed);
:func:`save_figure` writes it as PNG, SVG and PDF.

Every method has a fixed colour and style (:func:`method_style`), so all figures agree; L2 Init is
red, drawn thicker and on top of the others everywhere. Values given as fractions in [0, 1] are
shown as percentages when ``percent=True``. The number of seeds ``n`` is always shown: in the
legend (``label (n=5)``) or beside each row.
"""

from __future__ import annotations

import math
import sys
import textwrap
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .tables import mean_and_ci

__all__ = [
    "COLUMN_WIDTH", "METHOD_COLORS", "PAGE_WIDTH", "PNG_DPI", "Band", "Estimate", "MethodStyle",
    "SweepLine", "heatmap_figure", "interval_figure", "line_figure", "method_color", "method_style",
    "plot_online_accuracy", "poi_figure", "save_figure", "sweep_figure", "use_log_x", "x_scale",
]

# A fixed colour per method so every figure agrees; L2 Init stands out.
METHOD_COLORS = {
    "l2_init": "#d62728", "baseline": "#404040", "l2": "#1f77b4", "shrink_perturb": "#2ca02c",
    "cbp": "#9467bd", "redo": "#8c564b", "concat_relu": "#e377c2", "layer_norm": "#17becf",
    "l1_init": "#ff7f0e", "huber_init": "#bcbd22", "l2_init_resample": "#f7b6d2",
    "ewc": "#7f7f7f", "l2_init_ewc": "#aa3939",
    # the methods since the paper, drawn beside all of the above in the field-* studies
    "snr": "#393b79", "hare_tortoise": "#637939", "parseval": "#b5cf6b", "swr": "#8c6d31",
    "full_reset": "#7b4173", "head_reset": "#e7ba52", "fire": "#e6550d",
    # the other toolkits' methods (issue 47)
    "weight_clip": "#fd8d3c", "normalize_project": "#6baed6", "spectral": "#74c476",
    "wasserstein_init": "#9e9ac8", "c_chain": "#b07aa1", "regrama": "#a55194", "dash": "#8ca252",
    "deep_fourier": "#fdae6b", "plasticity_injection": "#3b6a8f",
}
HIGHLIGHT_METHOD = "l2_init"

# Colours for methods without a fixed one, picked by a stable hash of the name (never random).
EXTRA_COLORS = ("#3182bd", "#31a354", "#756bb1", "#636363", "#843c39", "#5254a3", "#e7969c",
                "#de9ed6", "#9c9ede", "#cedb9c", "#ad494a", "#6b6ecf")
_MARKERS = {
    "l2_init": "o", "baseline": "s", "l2": "^", "shrink_perturb": "v", "cbp": "D", "redo": "P",
    "concat_relu": "X", "layer_norm": "<", "l1_init": ">", "huber_init": "h", "l2_init_resample": "p",
    "ewc": "d", "l2_init_ewc": "*",
}
_EXTRA_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "h")

PAGE_WIDTH = 6.3  # inches: the text width of a one-column paper page (about 16 cm)
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper
PNG_DPI = 150  # sharp in a browser, small enough to embed
MARKER_MAX_POINTS = 25  # lines with at most this many points get markers

STYLE = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
    "ytick.labelsize": 8, "legend.fontsize": 8, "axes.spines.top": False, "axes.spines.right": False,
    "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6, "axes.axisbelow": True,
    "pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "path", "figure.dpi": PNG_DPI,
    "savefig.dpi": PNG_DPI,
}
_NOTE_STYLE = {"fontsize": 7.5, "color": "#555555"}


class MethodStyle(NamedTuple):
    """How a method is drawn: line colour, line width, z-order and marker."""

    color: str
    linewidth: float
    zorder: float
    marker: str


def _stable_index(name: str, size: int) -> int:
    return zlib.crc32(name.encode("utf-8")) % size


def method_color(method: str) -> str:
    """The method's fixed colour; an unknown method gets a deterministic extra colour (a hash of its name)."""
    if method in METHOD_COLORS:
        return METHOD_COLORS[method]
    return EXTRA_COLORS[_stable_index(method, len(EXTRA_COLORS))]


def method_style(method: str) -> MethodStyle:
    """Colour, line width, z-order and marker of ``method``: L2 Init thicker and on top of the rest."""
    marker = _MARKERS.get(method) or _EXTRA_MARKERS[_stable_index(method, len(_EXTRA_MARKERS))]
    if method == HIGHLIGHT_METHOD:
        return MethodStyle(method_color(method), 2.4, 10.0, marker)
    return MethodStyle(method_color(method), 1.5, 3.0, marker)


def _method_of(label: str, method: str | None) -> str:
    return method if method else method_in_label(label)


def method_in_label(label: str) -> str:
    """The method a label names: the one whose title (``"L2 Init λ=0.01"`` → ``l2_init``; the
    longest, so ``"L2 Init + EWC"`` is not L2 Init) or key begins it, whole words; else the
    label's first word."""
    from ..methods import METHODS

    words = label.split()
    named = [(len(name.split()), key) for key, cls in METHODS.items() for name in (cls.title, key)
             if words[:len(name.split())] == name.split()]
    return max(named)[1] if named else (words[0] if words else label)


def _as_array(values, name: str) -> np.ndarray:
    if values is None:
        return None
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array


def _n_text(n) -> str:
    if isinstance(n, (int, np.integer)):
        return f"n={int(n)}"
    values = sorted({int(v) for v in n})
    if not values:
        return "n=?"
    return f"n={values[0]}" if len(values) == 1 else f"n={values[0]}–{values[-1]}"


@dataclass
class Band:
    """A curve with its 95 % interval: ``mean[i]`` (and ``lo[i]``..``hi[i]``) at ``x[i]`` over ``n`` seeds.

    ``lo``/``hi`` may be None (no interval, e.g. a single seed); NaN leaves a gap. ``method`` picks
    the colour (empty: the first word of ``label``).
    """

    label: str
    method: str
    x: Sequence[float]
    mean: Sequence[float]
    lo: Sequence[float] | None
    hi: Sequence[float] | None
    n: int

    def __post_init__(self):
        self.x = _as_array(self.x, "x")
        self.mean = _as_array(self.mean, "mean")
        self.lo = _as_array(self.lo, "lo")
        self.hi = _as_array(self.hi, "hi")
        for name in ("mean", "lo", "hi"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.x):
                raise ValueError(f"{self.label}: {name} has {len(values)} values but x has {len(self.x)}")


@dataclass
class Estimate:
    """One number with its 95 % interval ``[lo, hi]`` over ``n`` seeds (NaN ``lo``/``hi``: no interval)."""

    label: str
    method: str
    point: float
    lo: float
    hi: float
    n: int


@dataclass
class SweepLine(Band):
    """A metric against the values ``x`` of a swept parameter, with 95 % band; ``selected`` marks the
    chosen value (None: none). ``n`` may be one count or one per value."""

    selected: float | None = None


def use_log_x(values: Sequence[float]) -> bool:
    """True when the finite values are all positive and span at least two decades (max/min ≥ 100)."""
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    if array.size < 2 or np.any(array <= 0):
        return False
    return bool(array.max() / array.min() >= 100 - 1e-9)


def x_scale(values: Sequence[float], log_x: bool | None = None) -> str:
    """The x axis for a swept parameter's ``values``: ``"log"`` when they are positive and span
    two decades (:func:`use_log_x`); ``"symlog"`` when they are those and 0 (λ ∈ {0, 1e-5 … 1e-1}:
    0 stands half a decade left of the smallest positive value, linear below it, instead of
    every positive value crowding against 0 on a linear axis); else ``"linear"``. ``log_x``
    True asks for the logarithmic form (symlog where there is a 0), False for linear."""
    array = np.asarray(values, dtype=float)
    array = array[np.isfinite(array)]
    zero, positive = np.any(array == 0), array[array > 0]
    if log_x is False or np.any(array < 0):
        return "linear"
    logarithmic = use_log_x(positive) if log_x is None else positive.size > 0
    if not logarithmic:
        return "linear"
    return "symlog" if zero else "log"


# --- layout helpers -------------------------------------------------------------------------------

def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=PNG_DPI)
    FigureCanvasAgg(fig)
    return fig


def _style():
    import matplotlib

    return matplotlib.rc_context(STYLE)


def _wrap(note: str, width_in: float) -> str:
    chars = max(30, int(width_in * 17))  # about 17 characters per inch at 7.5 pt
    return "\n".join(textwrap.fill(part, chars) if part else "" for part in note.split("\n"))


def _finish(fig, handles=(), labels=(), note: str = "") -> None:
    """Lay out the axes, then put the legend (if any) and the note (if any) in a strip below them.

    The figure grows downwards by exactly the strip's height, so the axes keep their size and
    nothing overlaps, whichever way the figure is saved.
    """
    width, height = fig.get_size_inches()
    renderer = fig.canvas.get_renderer()
    legend = None
    if handles:
        ncol = min(len(handles), 4)
        while True:
            legend = fig.legend(list(handles), list(labels), loc="upper center", ncol=ncol, frameon=False,
                                bbox_to_anchor=(0.5, 0.0), bbox_transform=fig.transFigure,
                                handlelength=2.0, columnspacing=1.2, borderaxespad=0.2)
            if ncol == 1 or legend.get_window_extent(renderer).width <= 0.98 * width * fig.dpi:
                break
            legend.remove()
            ncol -= 1
    text = None
    if note:
        text = fig.text(0.5, 0.0, _wrap(note, width), ha="center", va="bottom", **_NOTE_STYLE)
    pad = 0.05
    legend_in = legend.get_window_extent(renderer).height / fig.dpi if legend else 0.0
    note_in = text.get_window_extent(renderer).height / fig.dpi if text else 0.0
    strip = (legend_in + pad if legend else 0.0) + (note_in + 2 * pad if text else 0.0)
    total = height + strip
    fig.set_size_inches(width, total)
    bottom = strip / total
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0), pad=0.4)
    if legend is not None:
        legend.set_bbox_to_anchor((0.5, bottom), transform=fig.transFigure)
    if text is not None:
        text.set_position((0.5, pad / total))


def _no_data(ax, what: str = "no data") -> None:
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="#888888")


def _percent_label(label: str, percent: bool) -> str:
    return f"{label} (%)" if percent and "%" not in label else label


def _integer_ticks(ax, x: np.ndarray) -> None:
    from matplotlib.ticker import MaxNLocator

    finite = x[np.isfinite(x)]
    if finite.size and np.all(finite == np.round(finite)):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


LINESTYLES = ("-", "--", ":", "-.")
"""Line styles that tell apart several lines of one method (e.g. λ curves at two step sizes)."""


def _draw_band(ax, band: Band, scale: float, *, always_markers: bool = False, linestyle: str = "-"):
    style = method_style(_method_of(band.label, band.method))
    x = band.x
    show_markers = always_markers or len(x) <= MARKER_MAX_POINTS
    (line,) = ax.plot(x, band.mean * scale, color=style.color, lw=style.linewidth, zorder=style.zorder,
                      ls=linestyle,
                      marker=style.marker if show_markers else None,
                      ms=4.5 if style.zorder > 5 else 3.5, label=f"{band.label} ({_n_text(band.n)})")
    if band.lo is not None and band.hi is not None and np.any(np.isfinite(band.lo) & np.isfinite(band.hi)):
        ax.fill_between(x, band.lo * scale, band.hi * scale, color=style.color, alpha=0.18, lw=0,
                        zorder=style.zorder - 0.5)
    return line, style


# --- figures ---------------------------------------------------------------------------------------

def _draw_bands(ax, bands: Sequence[Band], scale: float) -> list:
    """Draw ``bands`` on ``ax`` (integer ticks for tasks; "no data" where there are none) and
    return their lines, one a band."""
    handles = []
    seen: dict[str, int] = {}
    for band in bands:
        # a method shown in several forms (EWC's anchors, CBP's optimizers): same colour,
        # another line style for each further form
        method = _method_of(band.label, band.method)
        occurrence = seen[method] = seen.get(method, -1) + 1
        line, _ = _draw_band(ax, band, scale, linestyle=LINESTYLES[occurrence % len(LINESTYLES)])
        handles.append(line)
    if bands:
        _integer_ticks(ax, np.concatenate([b.x for b in bands]))
    else:
        _no_data(ax)
    return handles


def line_figure(bands: Sequence[Band], *, xlabel: str, ylabel: str, title: str = "", percent: bool = True,
                note: str = "", width: float = PAGE_WIDTH, height: float = 3.4):
    """Curves (e.g. accuracy vs task) with semi-transparent 95 % bands, one per :class:`Band`.

    The legend below the axes lists ``label (n=…)`` in the given order; lines with at most
    25 points get markers; L2 Init is drawn on top. ``percent``: the values are fractions shown as
    percentages (the y label gets "(%)"). ``note`` (e.g. the binning) is a small caption under it.
    """
    with _style():
        fig = _new_figure(width, height)
        ax = fig.add_subplot()
        handles = _draw_bands(ax, bands, 100.0 if percent else 1.0)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(_percent_label(ylabel, percent))
        if title:
            ax.set_title(title)
        _finish(fig, handles, [h.get_label() for h in handles], note)
    return fig


PANELS_PER_ROW = 3
"""The most panels :func:`panels_figure` puts side by side before it starts another row."""


def panels_figure(panels: Sequence[tuple[str, Sequence[Band]]], *, xlabel: str, ylabel: str,
                  percent: bool = True, note: str = "", width: float = PAGE_WIDTH,
                  height: float = 2.6):
    """One panel of :class:`Band` curves per ``(title, bands)`` — a problem each, as the paper's
    figures set them — up to :data:`PANELS_PER_ROW` a row, each row ``height`` inches; one
    legend below them all, a method once (its first panel's ``label (n=…)``), its colour the same
    in every panel."""
    with _style():
        rows = -(-len(panels) // PANELS_PER_ROW)
        columns = min(len(panels), PANELS_PER_ROW)
        fig = _new_figure(width, height * rows)
        handles: dict[str, object] = {}
        for i, (title, bands) in enumerate(panels):
            ax = fig.add_subplot(rows, columns, i + 1)
            for band, line in zip(bands, _draw_bands(ax, bands, 100.0 if percent else 1.0), strict=True):
                handles.setdefault(band.label, line)
            ax.set_title(title)
            ax.set_xlabel(xlabel)
            if i % columns == 0:
                ax.set_ylabel(_percent_label(ylabel, percent))
        _finish(fig, list(handles.values()), [h.get_label() for h in handles.values()], note)
    return fig


def _value_text(value: float, fmt: str) -> str:
    return "–" if not math.isfinite(value) else format(value, fmt)


def interval_figure(estimates: Sequence[Estimate], *, xlabel: str, title: str = "", note: str = "",
                    percent: bool = True, reference: float | None = None,
                    xlim: tuple[float, float] | None = None, value_format: str | None = None,
                    width: float = PAGE_WIDTH):
    """Horizontal dot plot: one row per :class:`Estimate` (top to bottom, as given), a dot at the
    point and a whisker over its 95 % interval.

    Row labels are on the left; the value, interval and ``n`` are printed on the right.
    ``percent``: values are fractions shown as percentages. ``reference`` draws a dashed vertical
    line (e.g. 0.5 for probabilities); ``xlim`` fixes the axis range.
    """
    scale = 100.0 if percent else 1.0
    fmt = value_format or (".1f" if percent else ".2f")
    rows = max(len(estimates), 1)
    with _style():
        fig = _new_figure(width, 0.85 + 0.27 * rows)
        ax = fig.add_subplot()
        ys = np.arange(len(estimates))
        right = []
        for y, est in zip(ys, estimates, strict=True):
            style = method_style(_method_of(est.label, est.method))
            point, lo, hi = (scale * float(v) for v in (est.point, est.lo, est.hi))
            if math.isfinite(lo) and math.isfinite(hi):
                ax.hlines(y, lo, hi, color=style.color, lw=style.linewidth + 0.8, zorder=style.zorder)
                interval = f" [{_value_text(lo, fmt)}, {_value_text(hi, fmt)}]"
            else:
                interval = ""
            ax.plot([point], [y], marker="o", ms=6 if style.zorder > 5 else 5, color=style.color,
                    markeredgecolor="white", markeredgewidth=0.6, zorder=style.zorder + 1, lw=0)
            right.append(f"{_value_text(point, fmt)}{interval}  {_n_text(est.n)}")
        if reference is not None:
            ax.axvline(reference * scale, color="#555555", ls="--", lw=1.0,
                       zorder=1)
        if not estimates:
            _no_data(ax)
        ax.set_yticks(ys, [e.label for e in estimates])
        ax.set_ylim(max(len(estimates), 1) - 0.5, -0.5)
        ax.grid(axis="y", visible=False)
        ax.tick_params(axis="y", length=0)
        if xlim is not None:
            ax.set_xlim(xlim[0] * scale, xlim[1] * scale)
        ax.set_xlabel(_percent_label(xlabel, percent))
        if title:
            ax.set_title(title)
        twin = ax.twinx()
        twin.set_ylim(ax.get_ylim())
        twin.set_yticks(ys, right)
        twin.tick_params(axis="y", length=0, labelsize=7.5)
        twin.grid(False)
        for side in ("top", "right", "left"):
            twin.spines[side].set_visible(False)
        ax.spines["left"].set_visible(False)
        _finish(fig, note=note)
    return fig


def poi_figure(estimates: Sequence[Estimate], *, title: str = "", note: str = "",
               xlabel: str = "probability of improvement", width: float = PAGE_WIDTH):
    """Probability of improvement P(X > Y) of pairs (labels like ``"l2_init > baseline"``) on [0, 1]:
    one row per :class:`Estimate` with its 95 % interval and a dashed line at 0.5 (no difference)."""
    return interval_figure(estimates, xlabel=xlabel, title=title, note=note, percent=False,
                           reference=0.5, xlim=(0.0, 1.0), value_format=".2f", width=width)


def _format_param(value: float) -> str:
    text = format(value, "g")  # 0.001, 1e-05 -> 1e-5
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def sweep_figure(lines: Sequence[SweepLine], *, param: str, ylabel: str, title: str = "",
                 log_x: bool | None = None, percent: bool = True, note: str = "",
                 width: float = PAGE_WIDTH, height: float = 3.2):
    """A metric against the values of a swept parameter ``param``: one line with markers and 95 % band
    per :class:`SweepLine`.

    The x axis is logarithmic when ``log_x`` is true, or — when it is None — when the values are
    positive and span at least two decades (:func:`use_log_x`); with a 0 among them, symmetric-
    logarithmic (:func:`x_scale`). A line's ``selected`` value is ringed (a dotted vertical line
    when that value is not one of its points).
    """
    with _style():
        fig = _new_figure(width, height)
        ax = fig.add_subplot()
        scale = 100.0 if percent else 1.0
        all_x = np.concatenate([line.x for line in lines]) if lines else np.array([])
        axis = x_scale(all_x, log_x)
        if axis == "symlog":
            ax.set_xscale("symlog", linthresh=float(np.min(all_x[all_x > 0])), linscale=0.5)
        elif axis == "log":
            ax.set_xscale("log")
        handles = []
        any_selected = False
        per_method: dict[str, int] = {}
        for line in lines:
            method = _method_of(line.label, line.method)
            occurrence = per_method[method] = per_method.get(method, -1) + 1
            handle, style = _draw_band(ax, line, scale, always_markers=True,
                                       linestyle=LINESTYLES[occurrence % len(LINESTYLES)])
            handles.append(handle)
            if line.selected is None:
                continue
            any_selected = True
            hits = np.flatnonzero(np.isclose(line.x, line.selected, rtol=1e-9, atol=0.0))
            if hits.size and np.isfinite(line.mean[hits[0]]):
                ax.plot([line.x[hits[0]]], [line.mean[hits[0]] * scale], marker="o", ms=12, mfc="none",
                        mec=style.color, mew=1.8, lw=0, zorder=style.zorder + 1)
            else:
                ax.axvline(line.selected, color=style.color, ls=":", lw=1.2, zorder=style.zorder)
        values = np.unique(all_x[np.isfinite(all_x)])
        if 0 < values.size <= 10:
            from matplotlib.ticker import NullFormatter, NullLocator

            ax.set_xticks(values, [_format_param(v) for v in values])
            if axis != "linear":
                ax.xaxis.set_minor_locator(NullLocator())
                ax.xaxis.set_minor_formatter(NullFormatter())
        if not lines:
            _no_data(ax)
        ax.set_xlabel(param)
        ax.set_ylabel(_percent_label(ylabel, percent))
        if title:
            ax.set_title(title)
        labels = [h.get_label() for h in handles]
        if any_selected:
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], marker="o", ms=10, mfc="none", mec="#333333", mew=1.5, lw=0))
            labels.append("selected value")
        _finish(fig, handles, labels, note)
    return fig


def _square(matrix) -> np.ndarray:
    """A float array from a matrix whose rows may be ragged (row j holding tasks 0..j); NaN pads."""
    rows = [np.asarray(row, dtype=float).ravel() for row in matrix]
    if not rows:
        return np.full((0, 0), np.nan)
    cols = max(len(r) for r in rows)
    out = np.full((len(rows), cols), np.nan)
    for j, row in enumerate(rows):
        out[j, : len(row)] = row
    return out


def heatmap_figure(matrix, *, title: str = "", xlabel: str = "task m", ylabel: str = "after task j",
                   percent: bool = True, vmin: float | None = None, vmax: float | None = None,
                   note: str = "", width: float = 4.6):
    """The accuracy matrix ``A[j][m]`` (accuracy on task m after training on task j) as a heatmap.

    Rows may be ragged (lower triangular); NaN cells (e.g. above the diagonal) are left blank.
    ``percent``: values are fractions and the colour bar is in %; ``vmin``/``vmax`` (in the shown
    unit) fix the colour range, otherwise it is the data's.
    """
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    data = _square(matrix) * (100.0 if percent else 1.0)
    masked = np.ma.masked_invalid(data)
    if masked.count() == 0:
        vmin = 0.0 if vmin is None else vmin
        vmax = (100.0 if percent else 1.0) if vmax is None else vmax
    with _style():
        fig = _new_figure(width, width * 0.82)
        ax = fig.add_subplot()
        ax.grid(False)
        cmap = colormaps["viridis"].with_extremes(bad="white")
        rows, cols = data.shape if data.size else (1, 1)
        image = ax.imshow(masked if data.size else np.ma.masked_all((1, 1)), cmap=cmap, vmin=vmin,
                          vmax=vmax, origin="upper", interpolation="nearest", aspect="auto",
                          extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(MaxNLocator(nbins=8, integer=True))
        colorbar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
        colorbar.set_label("accuracy (%)" if percent else "value")
        colorbar.ax.tick_params(labelsize=8)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if title:
            ax.set_title(title)
        if not data.size:
            _no_data(ax)
        _finish(fig, note=note)
    return fig


# --- saving ----------------------------------------------------------------------------------------

_SAVE_METADATA = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def save_figure(fig, out_dir: str | Path, stem: str, formats: Sequence[str] = ("png", "svg", "pdf"), *,
                dpi: int = PNG_DPI) -> dict[str, Path]:
    """Write ``fig`` to ``out_dir/stem.<format>`` for every format (PNG at ``dpi``), then close it.

    Returns ``{format: path}``. Files carry no timestamps, so the same figure gives the same bytes.
    """
    import matplotlib

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    formats = [f.lower().lstrip(".") for f in formats]
    unknown = [f for f in formats if f not in fig.canvas.get_supported_filetypes()]
    if unknown:
        raise ValueError(f"unsupported figure formats: {unknown}")
    written: dict[str, Path] = {}
    with matplotlib.rc_context({"svg.hashsalt": stem, "pdf.fonttype": 42, "ps.fonttype": 42}):
        for fmt in formats:
            path = out / f"{stem}.{fmt}"
            fig.savefig(path, format=fmt, dpi=dpi, bbox_inches="tight", pad_inches=0.04,
                        metadata=_SAVE_METADATA.get(fmt), facecolor="white")
            written[fmt] = path
    _close(fig)
    return written


def _close(fig) -> None:
    if "matplotlib.pyplot" in sys.modules:  # figures made with pyplot are registered there
        sys.modules["matplotlib.pyplot"].close(fig)


# --- the original quick plot -----------------------------------------------------------------------

def plot_online_accuracy(curves: Mapping[str, Sequence[Sequence[float]]], path: str | Path, *,
                         title: str = "", reported: Sequence[int] | None = None) -> Path:
    """Save average online task accuracy vs task (mean and 95 % CI band over seeds) to ``path``.

    ``curves[label][seed_index][task]`` are fractions in [0, 1]; the method the label begins
    with, by its title or key (:func:`method_in_label`), picks its colour. The format follows
    the suffix of ``path``.
    """
    bands = []
    for label, runs in curves.items():
        tasks = list(range(len(runs[0]))) if reported is None else list(reported)
        stats = [mean_and_ci([run[t] for run in runs]) for t in tasks]
        mean = np.array([m for m, _ in stats])
        half = np.array([c for _, c in stats])
        multi = len(runs) > 1
        bands.append(Band(label, method_in_label(label), tasks, mean, mean - half if multi else None,
                          mean + half if multi else None, len(runs)))
    fig = line_figure(bands, xlabel="task", ylabel="average online task accuracy", title=title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".").lower() or "png"
    fig.savefig(path, format=fmt, dpi=PNG_DPI, bbox_inches="tight", pad_inches=0.04,
                metadata=_SAVE_METADATA.get(fmt), facecolor="white")
    _close(fig)
    return path
