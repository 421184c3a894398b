"""Typed, named parameters of problems and methods (SPEC §8 names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """A named, typed parameter with a default and a one-line description.

    ``per_member`` numeric parameters may differ between the members of one ensemble (they
    become ``[K]`` tensors); the others must be equal across an ensemble. ``in_steps``
    parameters count optimizer steps (ReDo's period), so shortening tasks shortens them too.
    """

    name: str
    default: object
    kind: type
    doc: str
    choices: tuple | None = None
    per_member: bool = False
    in_steps: bool = False  # a number of steps: a sweep's --scale shortens it with the tasks

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
        if self.choices is not None and out not in self.choices:
            raise ValueError(f"{owner}: {self.name} must be one of "
                             f"{', '.join(map(str, self.choices))}, got {out!r}")
        return out


def resolve(params: tuple[Param, ...], given: dict, owner: str) -> dict:
    """``given`` parsed against ``params`` with defaults filled in; unknown names are errors
    that list the valid ones."""
    known = {p.name: p for p in params}
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ValueError(f"{owner}: unknown parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(known) or 'none'}")
    return {name: p.parse(given.get(name, p.default), owner) for name, p in known.items()}
