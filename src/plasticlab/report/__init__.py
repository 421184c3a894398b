"""Results people can read: figures, tables, an HTML page and a Markdown summary.

``build_report(directory, out)`` (``plasticlab report DIR``) is the entry point;
:mod:`.stats` holds the statistics (bootstrap, IQM, probability of improvement),
:mod:`.figures` the drawing, :mod:`.page` the HTML/Markdown writers and :mod:`.browser`
the headless-Chromium check of a page.
"""

from .build import build_report
from .data import load_results
from .figures import METHOD_COLORS, plot_online_accuracy
from .stats import (
    Interval,
    bootstrap_ci,
    iqm,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_bootstrap_ci,
)
from .tables import mean_and_ci, task_table

__all__ = ["METHOD_COLORS", "Interval", "bootstrap_ci", "build_report", "iqm", "load_results",
           "mean_and_ci", "plot_online_accuracy", "probability_of_improvement",
           "probability_of_improvement_ci", "stratified_bootstrap_ci", "task_table"]
