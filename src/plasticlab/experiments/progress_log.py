"""Progress where no terminal shows a bar: a log file, a pipe, a batch job's output.

A tqdm bar is redrawn in place with carriage returns: in a file that is one unreadable line,
grown at every redraw (ten a second, for the hours a study trains). Where stderr is not a
terminal (nor a notebook's output, where tqdm draws a widget), the runs' progress is written
as lines instead:

- :class:`TaskLines`, an ensemble's: a line at a task end, at most one every
  :data:`LINE_EVERY_S` seconds and always at its last task — its task, its members' mean online
  accuracy on it, the time it has trained in this process and, at its pace in this process,
  about how long it has left;
- :class:`SweepLines`, a sweep's: a line as each ensemble ends — runs and member-steps done of
  the sweep's, and about how long is left at the pace so far.

Each line is one write on stderr, so lines from several worker processes do not interleave.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

LINE_EVERY_S = 60.0
"""The least time between two of an ensemble's progress lines (its last task's is always written)."""


def hms(seconds: float) -> str:
    """``seconds`` as ``1h02m03s``."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def bars_shown(stream=None) -> bool:
    """Whether ``stream`` (stderr unless given) shows a progress bar redrawn in place: a
    terminal, or a Jupyter kernel's output (where tqdm draws a widget)."""
    stream = sys.stderr if stream is None else stream
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return type(stream).__module__.startswith("ipykernel")


def task_value(values: list[float], regression: bool) -> str:
    """The members' mean measure of a task as progress shows it: ``acc 85.0%``, or on a
    regression ``sq. error 0.01235``."""
    mean = sum(values) / len(values)
    return f"sq. error {mean:.4g}" if regression else f"acc {100 * mean:.1f}%"


def _write(stream, line: str) -> None:
    stream = sys.stderr if stream is None else stream
    stream.write(line + "\n")
    stream.flush()


class TaskLines:
    """An ensemble's progress as lines, used as its tqdm bar is: :meth:`update` after its steps,
    :meth:`task_end` at each task end, :meth:`close` at its end. ``label`` names the ensemble,
    ``tasks`` and ``steps_per_task`` are its run's; ``regression``: its task measure is the
    online squared error, not the accuracy."""

    def __init__(self, label: str, tasks: int, steps_per_task: int, *, regression: bool = False,
                 every_s: float = LINE_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 stream=None):
        self.label, self.tasks, self.steps_per_task = label, tasks, steps_per_task
        self.regression, self.every_s, self.clock, self.stream = regression, every_s, clock, stream
        self.steps = 0  # trained in this process (a resumed ensemble starts where it stopped)
        self.start = self.last = clock()

    def update(self, n: int = 1) -> None:
        """``n`` more steps trained."""
        self.steps += n

    def task_end(self, task: int, values: list[float]) -> None:
        """Task ``task`` (from 0) ended with these members' online accuracies (or squared
        errors): a line, if :attr:`every_s` have passed since the last one or it is the last task."""
        now = self.clock()
        if task + 1 < self.tasks and now - self.last < self.every_s:
            return
        self.last = now
        trained = now - self.start
        line = (f"{self.label}: task {task + 1}/{self.tasks} {task_value(values, self.regression)}, "
                f"{hms(trained)} in")
        left = (self.tasks - task - 1) * self.steps_per_task
        if left and self.steps:
            line += f", about {hms(left * trained / self.steps)} left"
        _write(self.stream, line)

    def close(self) -> None:
        """Nothing to clear: the lines stay as written."""


class SweepLines:
    """A sweep's progress as lines: :meth:`ensemble_done` as each of its ensembles ends.
    ``member_steps`` and ``runs``: the sweep's totals (a resumed ensemble's member-steps: those
    left after its checkpoint)."""

    def __init__(self, member_steps: int, runs: int, *, clock: Callable[[], float] = time.monotonic,
                 stream=None):
        self.total_steps, self.total_runs = member_steps, runs
        self.steps = self.runs = self.failed = 0
        self.clock, self.stream = clock, stream
        self.start = clock()

    def ensemble_done(self, member_steps: int, runs: int, failed: bool = False) -> None:
        """An ensemble of ``runs`` runs and ``member_steps`` member-steps ended, finished or
        ``failed`` (one stopped by a signal has not: it resumes): a line."""
        self.steps += member_steps
        self.runs += runs
        self.failed += runs if failed else 0
        elapsed = self.clock() - self.start
        line = (f"sweep: {self.runs}/{self.total_runs} runs"
                + (f" ({self.failed} failed)" if self.failed else "")
                + f", {self.steps:,} of {self.total_steps:,} member-steps "
                f"({100 * self.steps / max(self.total_steps, 1):.0f} %), {hms(elapsed)} in")
        if 0 < self.steps < self.total_steps:
            line += f", about {hms((self.total_steps - self.steps) * elapsed / self.steps)} left"
        _write(self.stream, line)

    def close(self) -> None:
        """Nothing to clear: the lines stay as written."""


__all__ = ["LINE_EVERY_S", "SweepLines", "TaskLines", "bars_shown", "hms", "task_value"]
