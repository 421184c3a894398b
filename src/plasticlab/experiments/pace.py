"""The aggregate pace of ensembles trained together in one process (``--executor interleaved``).

On a GPU the interleaved executor starts ensembles while the device has memory for them
(:class:`plasticlab.device.MemoryAdmission`); whether one more ensemble in flight still makes
the device do more work per second is a figure, not an assumption. :class:`AggregatePace`
writes it: every ``every`` seconds, the member-samples per second of every step taken since its
last line, over all the ensembles in flight, with how many were in flight — so that a run on a
device shows the pace at one, two, … ensembles, and the admission can rest on it.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable

PACE_EVERY_S = 10.0
"""On CUDA, how often the interleaved executor writes its aggregate pace."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class AggregatePace:
    """Counts the member-samples of each round of steps (:meth:`round`) and writes, once
    ``every`` seconds have passed since its last line, ``interleaved: N ensemble(s) in flight,
    R member-samples/s over S s`` (N a range where it changed within the span). ``every``: None
    writes nothing. ``write``, ``clock``: where the line goes (standard error) and the time
    (:func:`time.perf_counter`)."""

    def __init__(self, every: float | None, write: Callable[[str], None] = _stderr,
                 clock: Callable[[], float] = time.perf_counter):
        if every is not None and not every > 0:
            raise ValueError(f"the pace's span must be > 0 seconds, got {every}")
        self.every, self.write, self.clock = every, write, clock
        self._start()

    def _start(self) -> None:
        self.since = self.clock()
        self.samples = 0
        self.fewest: int | None = None
        self.most = 0

    def round(self, samples: int, in_flight: int) -> None:
        """A round of steps done: ``samples`` member-samples (Σ members × batch of the ensembles
        that stepped), ``in_flight`` ensembles training."""
        if self.every is None:
            return
        self.samples += samples
        self.fewest = in_flight if self.fewest is None else min(self.fewest, in_flight)
        self.most = max(self.most, in_flight)
        span = self.clock() - self.since
        if span >= self.every:
            count = f"{self.most}" if self.fewest == self.most else f"{self.fewest}–{self.most}"
            self.write(f"interleaved: {count} ensemble(s) in flight, "
                       f"{self.samples / span:,.0f} member-samples/s over {span:.1f} s")
            self._start()


LINE = re.compile(r"^interleaved: (\d+)(?:–(\d+))? ensemble\(s\) in flight, ([\d,]+) member-samples/s "
                  r"over ([\d.]+) s$")


def read_pace(lines: Iterable[str]) -> list[dict]:
    """The pace lines among ``lines`` (a run's output), as :class:`AggregatePace` wrote them:
    ``{"in_flight": [fewest, most], "member_samples_per_s": R, "span_s": S}`` each, in order."""
    found = []
    for line in lines:
        if m := LINE.match(line.strip()):
            fewest = int(m[1])
            found.append({"in_flight": [fewest, int(m[2]) if m[2] else fewest],
                          "member_samples_per_s": int(m[3].replace(",", "")), "span_s": float(m[4])})
    return found


__all__ = ["PACE_EVERY_S", "AggregatePace", "read_pace"]
