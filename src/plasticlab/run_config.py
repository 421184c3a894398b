"""A fully resolved run configuration: what the engine trains (everything but the seed).

It sits below the engine, which trains it, and below :mod:`plasticlab.experiments.config`,
which builds it from user input (defaults filled in, every name and value checked).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import torch

from .params import Param


@dataclass
class RunConfig:
    """A fully resolved run configuration (everything but the seed)."""

    problem: str
    method: str
    optimizer: str
    lr: float
    tasks: int
    steps_per_task: int
    batch_size: int
    width: float = 1.0
    extra_layers: int = 0
    init: str = "torch_default"
    test_examples: str = "all"
    internals_on: str = "current"
    params: dict = field(default_factory=dict)
    problem_params: dict = field(default_factory=dict)
    optimizer_params: dict = field(default_factory=dict)  # the optimizer's own settings (UPGD's β, σ, λ)

    def to_dict(self) -> dict:
        """JSON-able form, as stored in the results store and manifests (without
        ``optimizer_params`` when the optimizer has no settings: Adam's and SGD's configs keep
        the form they were stored in)."""
        d = asdict(self)
        if not d["optimizer_params"]:
            del d["optimizer_params"]
        return d


def stack_hyperparameters(hyperparameters: Sequence[Param], per_member: Sequence[dict], device,
                          label: str) -> dict:
    """Members' method parameters (``per_member[k]``: member k's) as a method takes them: a
    ``per_member`` numeric one as a ``[K]`` tensor on ``device``; any other, which must be equal
    across the ensemble, as its value. A parameter a member's dict lacks takes its default
    (members of several methods, each using only its own). ``label`` names the method in
    errors."""
    out = {}
    for p in hyperparameters:
        values = [params.get(p.name, p.default) for params in per_member]
        if p.per_member:
            out[p.name] = torch.tensor(values, dtype=torch.float32, device=device)
        elif len(set(values)) == 1:
            out[p.name] = values[0]
        else:
            raise ValueError(f"method {label}: {p.name} must be the same for every member of an "
                             f"ensemble, got {values}")
    return out


@dataclass(frozen=True)
class Member:
    """One run of an ensemble, fully resolved: its ``seed``, its ``method``, that method's whole
    parameters ``params`` and its step size ``lr`` (everything else is the ensemble's shared
    :class:`RunConfig`)."""

    seed: int
    method: str
    params: dict
    lr: float


@dataclass(frozen=True)
class Members:
    """An ensemble's members: the shared run config plus one :class:`Member` each — member k is
    the run of ``config`` with ``members[k]``'s seed, method, parameters and step size.

    Built from a config and seeds (:meth:`from_config`), from stored runs (:meth:`from_runs`)
    or from a run's record of its ensemble (:meth:`from_record`). Several methods share an
    ensemble where only their gradients differ (the Baseline, L2 and the *-Init penalties,
    :mod:`plasticlab.methods.penalty_members`)."""

    config: RunConfig
    members: tuple[Member, ...]
    # the members' parameters as they were listed (None: the config's), for fingerprint() alone
    listed_params: tuple[dict, ...] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: RunConfig, seeds: Sequence[int],
                    params: Sequence[dict] | None = None, lr: Sequence[float] | None = None,
                    methods: Sequence[str] | None = None) -> Members:
        """The members ``seeds`` of ``config``: each with the config's method, parameters and
        step size, or its own — ``params[k]`` over ``config.params`` (a λ grid), ``lr[k]`` (a
        step-size grid), ``methods[k]`` (several methods; ``params[k]`` is then member k's
        whole parameters)."""
        seeds = [int(s) for s in seeds]
        for name, given in (("params", params), ("lr", lr), ("methods", methods)):
            if given is not None and len(given) != len(seeds):
                raise ValueError(f"member {name} has {len(given)} entries for {len(seeds)} "
                                 "members (seeds)")
        names = list(methods) if methods is not None else [config.method] * len(seeds)
        if len(set(names)) > 1:
            if params is None:
                raise ValueError("member methods with more than one method need member params: "
                                 "each member's whole method parameters")
            whole = [dict(p) for p in params]
        else:
            whole = [dict(config.params, **(params[k] if params is not None else {}))
                     for k in range(len(seeds))]
        rates = [float(r) for r in lr] if lr is not None else [float(config.lr)] * len(seeds)
        listed = None if params is None else tuple(dict(p) for p in params)
        return cls(config, tuple(Member(s, m, p, r) for s, m, p, r
                                 in zip(seeds, names, whole, rates, strict=True)), listed)

    @classmethod
    def from_runs(cls, configs: Sequence[RunConfig], seeds: Sequence[int]) -> Members:
        """The members that train the stored runs ``(configs[k], seeds[k])`` together: the
        first run's config is the shared one (the runs must share everything but their
        method, parameters and step size)."""
        return cls.from_config(configs[0], seeds, [dict(c.params) for c in configs],
                               [c.lr for c in configs], [c.method for c in configs])

    @classmethod
    def from_record(cls, config: RunConfig, record: dict, kept: Sequence[int] | None = None) -> Members:
        """The members a run's manifest records of its ensemble (``record``: its ``seeds``,
        ``params`` and, since ensembles mixed them, ``lr`` and ``methods``), or only those at
        the indices ``kept``. A record without ``lr`` or ``methods`` had the config's."""
        kept = list(range(len(record["seeds"]))) if kept is None else list(kept)
        lr, methods = record.get("lr"), record.get("methods")
        return cls.from_config(config, [record["seeds"][k] for k in kept],
                               [record["params"][k] for k in kept],
                               None if lr is None else [lr[k] for k in kept],
                               None if methods is None else [methods[k] for k in kept])

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    @property
    def seeds(self) -> list[int]:
        """Each member's seed."""
        return [m.seed for m in self.members]

    def method_names(self) -> list[str]:
        """Each member's method."""
        return [m.method for m in self.members]

    def rates(self) -> list[float]:
        """Each member's step size α."""
        return [m.lr for m in self.members]

    def method_params(self) -> list[dict]:
        """Each member's whole method parameters."""
        return [dict(m.params) for m in self.members]

    def configs(self) -> list[dict]:
        """Each member's full config (as :meth:`RunConfig.to_dict`), with its own method
        parameters, step size and method filled in: what its run is stored under."""
        base = self.config.to_dict()
        return [dict(base, params=dict(m.params), lr=m.lr, method=m.method) for m in self.members]

    def stacked(self, hyperparameters: Sequence[Param], device, label: str) -> dict:
        """The members' method parameters as the method takes them
        (:func:`stack_hyperparameters`); ``label`` names the method in errors."""
        return stack_hyperparameters(hyperparameters, [m.params for m in self.members], device, label)

    def fingerprint(self) -> str:
        """What a checkpoint of this ensemble is keyed by (:func:`plasticlab.checkpoint.fingerprint`).

        The key keeps the form every earlier version gave it, so that checkpoints keep their
        names and resume: the members' parameters as listed (or none, when they are the
        config's), and their step sizes and methods only where those differ."""
        from .checkpoint import fingerprint

        key = {"config": self.config.to_dict(), "seeds": self.seeds,
               "member_params": None if self.listed_params is None else list(self.listed_params)}
        rates, methods = self.rates(), self.method_names()
        if len(set(rates)) > 1:
            key["member_lr"] = rates
        if len(set(methods)) > 1:
            key["member_methods"] = methods
        return fingerprint(key)


class OfMembers:
    """What holds an ensemble's ``members`` (a sweep's ensemble, an executor's job), with their
    shared ``config`` and their ``seeds`` at hand."""

    members: Members

    @property
    def config(self) -> RunConfig:
        """The members' shared config."""
        return self.members.config

    @property
    def seeds(self) -> list[int]:
        """Each member's seed."""
        return self.members.seeds


__all__ = ["Member", "Members", "OfMembers", "RunConfig", "stack_hyperparameters"]
