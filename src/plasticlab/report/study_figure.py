"""One figure of a study, for a paper: a measure against the task, for the methods you name.

``plasticlab report DIR --figure srank --methods l2_init,baseline --out srank.pdf`` draws what
the report draws for every method at once (its online-accuracy and internals figures), for
these methods alone: per method the mean over seeds with its 95 % bootstrap band, a point per
task (many tasks averaged in bins per seed first, as the report does), the method's colour the
report's. The rows and labels are :mod:`.results_table`'s: each optimizer's headline, the rows
of all but the most common optimizer naming theirs.

The measures (``FIGURE_MEASURES``): ``online`` — the study's measure, online accuracy (a
regression: its online squared error) — and every task-end measurement of
:data:`~plasticlab.report.data.INTERNALS` the runs recorded (``weight_magnitude``, ``srank``,
``dead_fraction`` …; a layered one by its last hidden layer, as the report draws it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..problems import problem_title
from . import figures as F
from .build import ReportContext, curve_band
from .data import INTERNALS, PERCENT_METRICS, Results, binning_note
from .results_table import headline_rows, only_methods, table_title

FIGURE_MEASURES = ("online", *INTERNALS)
"""The names :func:`study_figure` draws: the study's measure, then the task-end measurements."""

FIGURE_FORMATS = ("pdf", "png", "svg")
"""The files :func:`save_study_figure` writes, by the suffix of its path."""


def study_figure(results: Results, measure: str, *, methods: Sequence[str] = (), max_bins: int = 50,
                 reps: int = 2000, seed: int = 0, width: float = F.PAGE_WIDTH, height: float | None = None):
    """The matplotlib figure of ``measure`` (one of :data:`FIGURE_MEASURES`) against the task for
    each method of ``results``' study (one stream a problem), or for ``methods`` (their keys)
    alone: mean over seeds and 95 % bootstrap band, at most ``max_bins`` points a curve;
    ``width`` inches wide (the default: a one-column page's width). Several problems (several
    folders read as one, or a folder of several) give a panel each, in the order of their
    names, with one legend: the paper's figures' layout."""
    if measure not in FIGURE_MEASURES:
        raise ValueError(f"figure {measure!r} is not one of: {', '.join(FIGURE_MEASURES)}")
    only = only_methods(methods, [results])
    problems = sorted({p for p, _ in results.studies()})
    ctx = ReportContext(Path("."), (), max_bins, reps, seed)
    panels, notes, measures = [], [], {}
    for problem in problems:
        rows = [(label, c) for label, c in headline_rows(results, problem)
                if only is None or c.method in only]
        if not rows:
            continue  # a problem none of the methods asked for ran
        curves = [(label, c, *_values(c, measure, label)) for label, c in rows]
        bands = [dataclasses.replace(curve_band(c, values, np.arange(values.shape[1]), ctx, tasks),
                                     label=label) for label, c, values, tasks in curves]
        panels.append((problem_title(problem), bands))
        measures[problem] = rows[0][1].measure
        binned = binning_note(curves[0][2].shape[1], max_bins)
        if binned:  # said of the panels it applies to where there are several
            notes.append(binned if len(problems) == 1 else f"{problem_title(problem)}: {binned}")
    if measure == "online" and len({m.name for m in measures.values()}) > 1:
        raise ValueError("figure 'online': these problems measure different things ("
                         + ", ".join(f"{p}: {m.name}" for p, m in measures.items())
                         + "); draw each kind in a figure of its own")
    study_measure = next(iter(measures.values()))
    ylabel, percent = ((f"average {study_measure.name}", study_measure.percent) if measure == "online"
                       else (INTERNALS[measure], measure in PERCENT_METRICS))
    note = "; ".join(notes)
    if len(panels) == 1:
        return F.line_figure(panels[0][1], xlabel="task", ylabel=ylabel, title=table_title(results),
                             percent=percent, note=note, width=width, height=height or 3.4)
    return F.panels_figure(panels, xlabel="task", ylabel=ylabel, percent=percent, note=note,
                           width=width, height=height or 2.6)


def figure_caption(fig) -> str:
    """What a figure of :func:`study_figure` shows, for a paper's caption: its panels' titles,
    its measure, how a curve and its band are made, and its note (the binning)."""
    axes = fig.axes
    titles = [ax.get_title() for ax in axes]
    ylabel = next(ax.get_ylabel() for ax in axes if ax.get_ylabel())
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    return (f"{'; '.join(titles)}: {ylabel} per task; line: the mean over seeds, band: its 95 % "
            f"bootstrap interval.{' ' + note[:1].upper() + note[1:] + '.' if note else ''}")


def _values(c, measure: str, label: str):
    """``c``'s values of ``measure`` ``[seeds, tasks(, layers)]`` and the tasks they are of
    (None: every task)."""
    if measure == "online":
        return c.online, c.reported
    if measure not in c.metrics:
        raise ValueError(f"figure {measure!r}: {label} did not measure it (its runs measured "
                         f"{', '.join(sorted(c.metrics)) or 'nothing at task ends'})")
    return c.metrics[measure], None


def figure_format(path: str | Path) -> str:
    """The format of the figure file ``path`` by its suffix (:data:`FIGURE_FORMATS`): checked
    before a figure is drawn, so that a misnamed file costs no drawing."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"--out {path}: name a .pdf, .png or .svg file for the figure")
    return fmt


def save_study_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path``, its format the path's suffix (:func:`figure_format`), and
    close it; returns the path."""
    path = Path(path)
    try:
        fmt = figure_format(path)
    except ValueError:
        F._close(fig)
        raise
    return F.save_figure(fig, path.parent, path.stem, (fmt,))[fmt]
