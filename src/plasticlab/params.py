"""Typed, named parameters of problems and methods (SPEC §8 names)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """A named, typed parameter with a default and a one-line description.

    ``per_member`` numeric parameters may differ between the members of one ensemble (they
    become ``[K]`` tensors); the others must be equal across an ensemble. ``in_steps``
    parameters count optimizer steps (ReDo's period), so shortening tasks shortens them too.

    Numeric parameters have a domain: always finite (NaN and ±inf are never a setting), at
    least ``low`` and at most ``high`` where given — ``low_open``/``high_open`` exclude the
    bound itself (a step size > 0, a probability in [0, 1], a decay in [0, 1)).

    ``implicit_default``: a parameter added after runs were recorded is left out of a run's
    configuration while at its default (:func:`resolve`), so that those runs keep their
    configuration, and so their ids, their results and their checkpoints; whoever reads the
    configuration takes the default where it is absent (:func:`~plasticlab.run_config.stack_hyperparameters`).
    """

    name: str
    default: object
    kind: type
    doc: str
    choices: tuple | None = None
    per_member: bool = False
    in_steps: bool = False  # a number of steps: a sweep's --scale shortens it with the tasks
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    implicit_default: bool = False

    @property
    def domain(self) -> str:
        """The valid values in words, e.g. ``a finite number > 0``."""
        what = "an integer" if self.kind is int else "a finite number"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            bounds.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        return what + (" " + " and ".join(bounds) if bounds else "")

    def in_domain(self, value: float) -> bool:
        """Whether the number ``value`` is in :attr:`domain`."""
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None
                    and (value >= self.high if self.high_open else value > self.high))

    def parse(self, value: object, owner: str) -> object:
        """``value`` converted to this parameter's type, or a ValueError naming owner and key."""
        try:
            if self.kind is bool:
                text = str(value).lower()
                if text not in ("true", "false", "1", "0"):
                    raise ValueError
                out = text in ("true", "1")
            elif self.kind is int:
                number = float(value)
                if not number.is_integer():
                    raise ValueError
                out = int(number)
            elif self.kind is float:
                out = float(value)
            else:
                out = str(value)
        except (TypeError, ValueError):
            raise ValueError(f"{owner}: {self.name} must be {self.kind.__name__}, "
                             f"got {value!r}") from None
        if self.kind in (int, float) and not self.in_domain(out):
            raise ValueError(f"{owner}: {self.name} must be {self.domain}, got {value!r}")
        if self.choices is not None and out not in self.choices:
            raise ValueError(f"{owner}: {self.name} must be one of "
                             f"{', '.join(map(str, self.choices))}, got {out!r}")
        return out


def resolve(params: tuple[Param, ...], given: dict, owner: str) -> dict:
    """``given`` parsed against ``params`` with defaults filled in — except an
    ``implicit_default`` parameter at its default, which is left out; unknown names are errors
    that list the valid ones."""
    known = {p.name: p for p in params}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"{owner}: unknown parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(known) or 'none'}")
    parsed = {name: p.parse(given.get(name, p.default), owner) for name, p in known.items()}
    return {name: value for name, value in parsed.items()
            if not (known[name].implicit_default and value == known[name].default)}
