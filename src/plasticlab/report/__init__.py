"""Tables and figures of results."""

from .figures import METHOD_COLORS, plot_online_accuracy
from .tables import mean_and_ci, task_table

__all__ = ["METHOD_COLORS", "mean_and_ci", "plot_online_accuracy", "task_table"]
