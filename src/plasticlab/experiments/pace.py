"""The aggregate pace of ensembles trained together in one process (``--executor interleaved``).

On a GPU the interleaved executor starts ensembles while the device has memory for them
(:class:`plasticlab.device.MemoryAdmission`); whether one more ensemble in flight still makes
the device do more work per second is a figure, not an assumption. :class:`AggregatePace`
writes it: every ``every`` seconds, the member-samples per second of every step taken since its
last line, over all the ensembles in flight, with how many were in flight — so that a run on a
device shows the pace at one, two, … ensembles. :class:`RateAdmission` rests the admission on
the same figure, measured as the sweep trains: one more ensemble while the last one raised the
pace.
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


RATE_SPAN_S = 3.0
"""On CUDA, the seconds of steps :class:`RateAdmission` measures at each count in flight: a few
thousand steps of the paper's MLP on a GPU (a task end among them), and a climb to ten ensembles
in half a minute."""

RATE_GAIN = 0.05
"""The least relative rise of the aggregate pace that another ensemble in flight must bring for
:class:`RateAdmission` to try one more."""


class RateAdmission:
    """How many ensembles the interleaved executor keeps in flight, found from the aggregate pace
    measured as it trains: one at first; each time ``span`` seconds of steps at the current
    count (``limit`` ensembles in flight, none starting or ending) give a pace ``gain`` above the
    best at fewer, one more may start; the first count that does not stops the climb — kept
    where its pace is at least the best at fewer, else one fewer. Ensembles that end are
    replaced up to that count. ``span``: None admits every ensemble (the CPU: there is no
    device to fill). ``write``, ``clock``: where the settling line goes, and the time."""

    def __init__(self, span: float | None, gain: float = RATE_GAIN,
                 write: Callable[[str], None] = _stderr, clock: Callable[[], float] = time.perf_counter):
        if span is not None and not span > 0:
            raise ValueError(f"the rate admission's span must be > 0 seconds, got {span}")
        self.span, self.gain, self.write, self.clock = span, gain, write, clock
        self.limit = 1  # ensembles allowed in flight
        self.climbing = span is not None
        self.best = 0.0  # member-samples/s at the best count measured so far
        self._restart(0)

    def _restart(self, in_flight: int) -> None:
        self.since, self.samples, self.count = self.clock(), 0, in_flight

    def allows(self, in_flight: int) -> bool:
        """Whether one more ensemble may start beside ``in_flight`` ones."""
        return self.span is None or in_flight < self.limit

    def started(self, in_flight: int) -> None:
        """An ensemble has started (its set-up and first step done): ``in_flight`` now train."""
        self._restart(in_flight)

    def round(self, samples: int, in_flight: int) -> None:
        """A round of steps: ``samples`` member-samples over the ``in_flight`` ensembles."""
        if not self.climbing:
            return
        if in_flight != self.count:  # an ensemble ended: measure the new count from here
            self._restart(in_flight)
            return
        self.samples += samples
        elapsed = self.clock() - self.since
        if in_flight < self.limit or elapsed < self.span:
            return
        pace = self.samples / elapsed
        if pace >= (1 + self.gain) * self.best:
            self.best, self.limit = pace, self.limit + 1  # it paid: try one more
        else:
            self.climbing = False
            kept = self.limit if pace >= self.best else max(1, self.limit - 1)
            self.write(f"interleaved: {self.limit} ensemble(s) in flight gave {pace:,.0f} "
                       f"member-samples/s, {self.limit - 1} gave {self.best:,.0f}: keeping {kept} "
                       f"in flight")
            self.limit = kept
        self._restart(in_flight)


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


SETTLED = re.compile(r"^interleaved: (\d+) ensemble\(s\) in flight gave ([\d,]+) member-samples/s, "
                     r"(\d+) gave ([\d,]+): keeping (\d+) in flight$")


def read_settled(lines: Iterable[str]) -> dict | None:
    """Where :class:`RateAdmission` settled among ``lines`` (a run's output): ``{"tried": N,
    "member_samples_per_s": R, "fewer": N − 1, "fewer_member_samples_per_s": R′, "kept": M}``,
    or None where it wrote no such line (it was still climbing, or off CUDA)."""
    for line in lines:
        if m := SETTLED.match(line.strip()):
            return {"tried": int(m[1]), "member_samples_per_s": int(m[2].replace(",", "")),
                    "fewer": int(m[3]), "fewer_member_samples_per_s": int(m[4].replace(",", "")),
                    "kept": int(m[5])}
    return None


__all__ = ["PACE_EVERY_S", "RATE_GAIN", "RATE_SPAN_S", "AggregatePace", "RateAdmission", "read_pace",
           "read_settled"]
