"""A fully resolved run configuration: what the engine trains (everything but the seed).

It sits below the engine, which trains it, and below :mod:`plasticlab.experiments.config`,
which builds it from user input (defaults filled in, every name and value checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


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


def member_method_params(config: RunConfig, members: int,
                         member_params: Sequence[dict] | None = None,
                         member_methods: Sequence[str] | None = None) -> list[dict]:
    """Each member's method parameters in an ensemble of ``config``: ``member_params[k]`` over
    ``config.params``; or — when ``member_methods`` names more than one method — each
    ``member_params[k]`` whole (a member's parameters are then its own method's)."""
    if member_methods is not None and len(set(member_methods)) > 1:
        if member_params is None or len(member_params) != members:
            raise ValueError("member_methods with more than one method needs member_params: "
                             "each member's whole method parameters")
        return [dict(params) for params in member_params]
    return [dict(config.params, **(member_params[k] if member_params else {}))
            for k in range(members)]


@dataclass
class Members:
    """An ensemble's members: member k is the run of ``config`` with seed ``seeds[k]``, method
    parameters ``params[k]``, step size ``lr[k]`` and method ``methods[k]``.

    ``params`` holds each member's parameters over ``config.params`` — a member's whole
    parameters when ``methods`` names more than one method (Baseline, L2 and the *-Init
    penalties in one ensemble, :mod:`plasticlab.methods.penalty_members`); ``lr`` and
    ``methods`` are None when every member has ``config.lr`` and ``config.method``."""

    config: RunConfig
    seeds: list[int]
    params: list[dict] | None = None
    lr: list[float] | None = None
    methods: list[str] | None = None

    def __post_init__(self):
        self.seeds = [int(s) for s in self.seeds]
        K = len(self.seeds)
        for name, given in (("params", self.params), ("lr", self.lr), ("methods", self.methods)):
            if given is not None and len(given) != K:
                raise ValueError(f"member {name} has {len(given)} entries for {K} members (seeds)")
        self.params = None if self.params is None else [dict(p) for p in self.params]
        self.lr = None if self.lr is None else [float(r) for r in self.lr]
        self.methods = None if self.methods is None else list(self.methods)

    def __len__(self) -> int:
        return len(self.seeds)

    def method_names(self) -> list[str]:
        """Each member's method."""
        return self.methods or [self.config.method] * len(self)

    def rates(self) -> list[float]:
        """Each member's step size α."""
        return self.lr or [self.config.lr] * len(self)

    def method_params(self) -> list[dict]:
        """Each member's whole method parameters (:func:`member_method_params`)."""
        return member_method_params(self.config, len(self), self.params, self.methods)

    def configs(self) -> list[dict]:
        """Each member's full config (as :meth:`RunConfig.to_dict`), with its own method
        parameters, step size and method filled in: what its run is stored under."""
        base = self.config.to_dict()
        return [dict(base, params=params, lr=lr, method=method) for params, lr, method
                in zip(self.method_params(), self.rates(), self.method_names(), strict=True)]

    def fingerprint(self) -> str:
        """What a checkpoint of this ensemble is keyed by (:func:`plasticlab.checkpoint.fingerprint`)."""
        from .checkpoint import fingerprint

        return fingerprint(self.config.to_dict(), self.seeds, self.params, self.lr, self.methods)


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


__all__ = ["Members", "OfMembers", "RunConfig", "member_method_params"]
