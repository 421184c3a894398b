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

from . import figures as F
from .build import _band, _Context
from .data import INTERNALS, PERCENT_METRICS, Results, binning_note
from .results_table import _headline, _only, _title

FIGURE_MEASURES = ("online", *INTERNALS)
"""The names :func:`study_figure` draws: the study's measure, then the task-end measurements."""

FIGURE_FORMATS = ("pdf", "png", "svg")
"""The files :func:`save_study_figure` writes, by the suffix of its path."""


def study_figure(results: Results, measure: str, *, methods: Sequence[str] = (), max_bins: int = 50,
                 reps: int = 2000, seed: int = 0, width: float = F.PAGE_WIDTH, height: float = 3.4):
    """The matplotlib figure of ``measure`` (one of :data:`FIGURE_MEASURES`) against the task for
    each method of ``results``' study (one problem, one stream), or for ``methods`` (their keys)
    alone: mean over seeds and 95 % bootstrap band, at most ``max_bins`` points a curve;
    ``width`` × ``height`` inches (the default: a one-column page's width)."""
    if measure not in FIGURE_MEASURES:
        raise ValueError(f"figure {measure!r} is not one of: {', '.join(FIGURE_MEASURES)}")
    only = _only(methods, [results])
    rows = [(label, c) for label, c in _headline(results) if only is None or c.method in only]
    ctx = _Context(Path("."), (), max_bins, reps, seed)
    if measure == "online":
        m = rows[0][1].measure
        curves = [(label, c, c.online, c.reported) for label, c in rows]
        ylabel, percent = f"average {m.name}", m.percent
    else:
        missing = [label for label, c in rows if measure not in c.metrics]
        if missing:
            raise ValueError(f"figure {measure!r}: {', '.join(missing)} did not measure it (the runs "
                             f"measured {', '.join(sorted(rows[0][1].metrics)) or 'nothing at task ends'})")
        curves = [(label, c, c.metrics[measure], None) for label, c in rows]
        ylabel, percent = INTERNALS[measure], measure in PERCENT_METRICS
    bands = [dataclasses.replace(_band(c, values, np.arange(values.shape[1]), ctx, points), label=label)
             for label, c, values, points in curves]
    points = curves[0][2].shape[1]
    return F.line_figure(bands, xlabel="task", ylabel=ylabel, title=_title(results), percent=percent,
                         note=binning_note(points, max_bins), width=width, height=height)


def save_study_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` to ``path``, its format the path's suffix (:data:`FIGURE_FORMATS`), and
    close it; returns the path."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        F._close(fig)
        raise ValueError(f"--out {path}: name a .pdf, .png or .svg file for the figure")
    return F.save_figure(fig, path.parent, path.stem, (fmt,))[fmt]
