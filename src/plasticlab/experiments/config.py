"""Run configurations: the canonical names of SPEC §8, resolved and validated.

A config is a flat mapping of run parameters (``problem``, ``method``, ``optimizer``, ``lr``,
``tasks`` …), method parameters (under ``params``) and problem parameters (under
``problem_params``). :func:`resolve_config` fills in every default — the paper's values —
and rejects unknown names with the list of valid ones, so a misspelt key never silently
falls back to a default.
"""

from __future__ import annotations

import re

from ..measure import INTERNALS_ON, test_example_count
from ..methods import get_method
from ..nets import INIT_SCHEMES
from ..optim import OPTIMIZERS, optimizer_hyperparameters
from ..params import Param, resolve
from ..problems import get_problem
from ..run_config import RunConfig

RUN_PARAMETERS = (
    Param("optimizer", "adam", str, "the optimizer", choices=tuple(OPTIMIZERS)),
    Param("lr", 1e-3, float, "step size α", low=0, low_open=True),
    Param("tasks", None, int, "number of tasks (default: the paper's)", low=1),
    Param("steps_per_task", None, int, "gradient steps per task (default: the paper's)", low=1),
    Param("batch_size", None, int, "batch size (default: the paper's)", low=1),
    Param("width", 1.0, float, "multiplier of every hidden layer's width", low=0, low_open=True),
    Param("extra_layers", 0, int, "extra hidden layers (MLP: any; CNN: 2 = the deeper CNN)", low=0),
    Param("init", "torch_default", str, "initialisation scheme", choices=INIT_SCHEMES),
    Param("test_examples", "all", str, "test accuracy on: all | N (the first N of each seed's shuffled "
          "test set) | reference (the authors' 992 of 1000)"),
    Param("internals_on", "current", str, "feature measurements on: current (the ended task's "
          "training inputs) | next (the next task's test inputs, the authors')", choices=INTERNALS_ON),
)
CONFIG_KEYS = ("problem", "method", "params", "problem_params", "optimizer_params",
               *(p.name for p in RUN_PARAMETERS))


def resolve_config(raw: dict) -> RunConfig:
    """Validate ``raw`` and fill in defaults; raise ValueError naming any unknown key."""
    unknown = sorted(set(raw) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(unknown)}; valid: {', '.join(CONFIG_KEYS)}")
    for key in ("problem", "method"):
        if key not in raw:
            raise ValueError(f"config needs {key!r}")
    problem = get_problem(raw["problem"])
    method = get_method(raw["method"])
    run = {p.name: p.parse(raw[p.name], "run") if raw.get(p.name) is not None else p.default
           for p in RUN_PARAMETERS}
    for key in ("tasks", "steps_per_task", "batch_size"):
        if run[key] is None:
            run[key] = problem.defaults[key]
    test_example_count(run["test_examples"])  # 'all', 'reference' or N >= 1
    if run["internals_on"] == "next" and not problem.has_test_sets:
        raise ValueError(f"internals_on='next' measures on the next task's held-out test inputs; "
                         f"{problem.name} has no test sets: use internals_on=current")
    params = resolve(method.hyperparameters, dict(raw.get("params") or {}), f"method {method.name}")
    problem_params = problem.resolve_parameters(dict(raw.get("problem_params") or {}))
    optimizer_params = resolve(optimizer_hyperparameters(run["optimizer"]),
                               dict(raw.get("optimizer_params") or {}), f"optimizer {run['optimizer']}")
    return RunConfig(problem=problem.name, method=method.name, params=params,
                     problem_params=problem_params, optimizer_params=optimizer_params, **run)


def apply_setting(raw: dict, key: str, value: str) -> None:
    """Put ``--set key=value`` into ``raw``: a method parameter goes under ``params``, a
    problem parameter under ``problem_params``, an optimizer setting (UPGD's) under
    ``optimizer_params``, a run parameter at the top level. A key that is none of these is an
    error listing every valid key for this problem, method and optimizer."""
    key = key.strip().replace("-", "_")
    method = get_method(raw["method"]) if "method" in raw else None
    problem = get_problem(raw["problem"]) if "problem" in raw else None
    method_keys = {p.name for p in method.hyperparameters} if method else set()
    problem_keys = {p.name for p in problem.parameters} if problem else set()
    optimizer = raw.get("optimizer") or "adam"
    optimizer_keys = ({p.name for p in optimizer_hyperparameters(optimizer)}
                      if optimizer in OPTIMIZERS else set())
    run_keys = {p.name for p in RUN_PARAMETERS} | {"problem", "method"}
    if key in method_keys:
        raw.setdefault("params", {})[key] = value
    elif key in problem_keys:
        raw.setdefault("problem_params", {})[key] = value
    elif key in optimizer_keys:
        raw.setdefault("optimizer_params", {})[key] = value
    elif key in run_keys:
        raw[key] = value
    else:
        valid = sorted(method_keys) + sorted(problem_keys) + sorted(optimizer_keys) + sorted(run_keys)
        where = f" for method {raw.get('method')!r} on problem {raw.get('problem')!r}"
        raise ValueError(f"unknown parameter {key!r}{where}; valid: {', '.join(valid)}")


def parse_seeds(text: str | int | list) -> list[int]:
    """``"0-7"`` → [0..7]; ``"0,3,5"`` → [0, 3, 5]; ranges and lists mix (``"0-2,9"``); a TOML
    list (``[0, 3, "5-7"]``) or a single number reads the same way."""
    if isinstance(text, list | tuple):
        text = ",".join(map(str, text))
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo:
                raise ValueError(f"seed range {part!r} is empty (end before start)")
            seeds.extend(range(lo, hi + 1))
        elif part.isdigit():
            seeds.append(int(part))
        else:
            raise ValueError(f"bad seeds {text!r}: use a range like 0-7 or a list like 0,3,5")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds {text!r} repeat a seed")
    return seeds
