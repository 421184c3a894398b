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


__all__ = ["RunConfig", "member_method_params"]
