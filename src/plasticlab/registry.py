"""The registries of methods and problems, and the ones other packages add (plugins).

A package adds a method or a problem of its own — to `plasticlab run`, sweeps, reports, the
worker processes and Ray nodes where it is installed — through an entry point, as pytest plugins
are found::

    # the plugin package's pyproject.toml
    [project.entry-points."plasticlab.methods"]
    my_method = "my_package.my_method:MyMethod"      # the name is the class's ``name``

    [project.entry-points."plasticlab.problems"]
    my_stream = "my_package.my_stream:MyStream"

A registry loads its entry points at its first use, not at import: a plugin module imports
plasticlab freely. A plugin that does not load, is not the registry's kind of class, is named
otherwise than its entry point or takes a built-in name is an error naming the entry point and
its distribution; none is skipped in silence.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from importlib import metadata


class Registry(MutableMapping):
    """Name → class: the package's own (``builtin``), then the classes of the entry points of
    ``group`` (each a subclass of ``base`` whose ``name`` is the entry point's), loaded at the
    first lookup. ``kind`` ("method", "problem") names them in errors. A class set by item
    (``METHODS["mine"] = Mine``) is this process's alone: worker processes see entry points,
    not it."""

    def __init__(self, kind: str, group: str, base: type, builtin: Mapping[str, type]):
        self.kind, self.group, self.base = kind, group, base
        self._classes = dict(builtin)
        self._origins: dict[str, dict] = {}
        self._loaded = False

    def _load(self) -> dict[str, type]:
        if not self._loaded:  # a plugin's error is raised again at each lookup, none added
            self._add_plugins()
            self._loaded = True
        return self._classes

    def _add_plugins(self) -> None:
        found = {}
        for point in sorted(metadata.entry_points(group=self.group), key=lambda p: p.name):
            dist = point.dist
            origin = {"entry_point": point.value, "distribution": dist.name if dist else None,
                      "version": dist.version if dist else None}
            where = (f"entry point {point.name} = {point.value!r} of "
                     f"{origin['distribution'] or 'no distribution'}")
            if point.name in self._classes:
                raise RuntimeError(f"{where} ({self.group}): {point.name!r} is plasticlab's own "
                                   f"{self.kind}; give the plugin's {self.kind} another name")
            if point.name in found:
                raise RuntimeError(f"{where} ({self.group}): {found[point.name][1]['distribution']} "
                                   f"names a {self.kind} {point.name!r} too; uninstall one of them")
            try:
                cls = point.load()
            except Exception as error:
                raise RuntimeError(f"{where} ({self.group}) does not load: {type(error).__name__}: "
                                   f"{error}") from error
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise RuntimeError(f"{where} ({self.group}) is not a {self.base.__module__}."
                                   f"{self.base.__name__} subclass")
            if getattr(cls, "name", None) != point.name:
                raise RuntimeError(f"{where} ({self.group}): its class is named "
                                   f"{getattr(cls, 'name', None)!r}; the entry point's name must be "
                                   "the class's name")
            found[point.name] = (cls, origin)
        for name, (cls, origin) in found.items():
            self._classes[name] = cls
            self._origins[name] = origin

    def origin(self, name: str) -> dict | None:
        """Where a plugin's class came from — its entry point, distribution and version — or
        None for plasticlab's own."""
        self._load()
        return self._origins.get(name)

    def __getitem__(self, name: str) -> type:
        return self._load()[name]

    def __setitem__(self, name: str, cls: type) -> None:
        self._load()[name] = cls
        self._origins.pop(name, None)  # set by hand: this process's, no plugin's

    def __delitem__(self, name: str) -> None:
        del self._load()[name]
        self._origins.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"Registry({self.kind}s: {', '.join(self)})"


__all__ = ["Registry"]
