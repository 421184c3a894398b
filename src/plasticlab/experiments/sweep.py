"""Sweeps: expand a grid of configurations over seeds, and group the runs into ensembles.

A sweep is a plain dict (a TOML file, or a preset)::

    name = "lambda-sensitivity"
    problems = ["permuted_mnist"]        # or problem = "…"
    methods = ["l2_init", "baseline"]    # or method = "…"
    optimizers = ["adam"]                # or optimizer = "…" (default adam)
    seeds = "0-2"
    tasks = 20                           # any run parameter; a list makes it a grid axis
    [grid]                               # grid axes over run parameters for every method
    lr = [1e-3, 1e-4]
    [grid.l2_init]                       # grid axes over one method's parameters
    strength = [1e-2, 1e-3]
    [params.l2_init]                     # fixed method parameters
    [problem_params]                     # fixed problem parameters
    [per_method_lr]                      # a step size per method (e.g. the paper's best)
    [protocol]                           # SPEC §6 selection: evaluation_seeds = "100-109"
    forgetting = true                    # measure the accuracy matrix (BWT) too
    measure = ["churn", "hessian"]       # optional task-end measurements (or "all")
    [[variants]]                         # linked settings, each expanded in turn

Every point of the grid × every seed is one run. Runs that share everything an ensemble must
share — problem, architecture, optimizer, stream lengths, and every method parameter that is
not per-member — become members of one ensemble (at most ``max_members``); seeds, per-member
parameters (λ, p, σ, r, τ …) and, under Adam and SGD, the step size vary inside it
(:data:`plasticlab.optim.MEMBER_LR_OPTIMIZERS`; not for a method that swaps the optimizer,
:meth:`Method.needs`: ``member_lr``), and so may the method among the Baseline, L2, L2 Init,
L1 Init and Huber Init
(:mod:`plasticlab.methods.penalty_members`). Member k of an ensemble is still run k alone,
to the bit on the CPU (docs/member-independence.md).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..methods import get_method
from ..methods.penalty_members import MEMBER_METHODS
from ..optim import MEMBER_LR_OPTIMIZERS
from ..run_config import Members, OfMembers
from .config import RUN_PARAMETERS, RunConfig, parse_seeds, resolve_config

SWEEP_KEYS = ("name", "description", "problem", "problems", "method", "methods", "optimizer",
              "optimizers", "seeds", "grid", "params", "problem_params", "scale", "per_method_lr",
              "protocol", "forgetting", "measure", "variants", "optimizer_params",
              *(p.name for p in RUN_PARAMETERS if p.name != "optimizer"))


@dataclass
class Run:
    """One run of a sweep: a resolved config and a seed."""

    config: RunConfig
    seed: int


@dataclass
class Ensemble(OfMembers):
    """Runs trained together: their :class:`~plasticlab.run_config.Members` (a shared config
    and each member's seed, method parameters, and — when they differ — step size and method)
    and which of them to record."""

    members: Members
    record: list[bool] | None = None  # per member: record its run (False: it finished before)

    @property
    def steps(self) -> int:
        """Ensemble steps (each advances every member by one batch)."""
        return self.config.tasks * self.config.steps_per_task


def _as_list(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _pick(sweep: dict, single: str, plural: str, default=None) -> list:
    if single in sweep and plural in sweep:
        raise ValueError(f"sweep gives both {single!r} and {plural!r}; use one")
    if plural in sweep:
        return _as_list(sweep[plural])
    if single in sweep:
        return _as_list(sweep[single])
    if default is None:
        raise ValueError(f"sweep needs {single!r} or {plural!r}")
    return [default]


def scaled(value: int, scale: float) -> int:
    """``value`` shortened by ``scale`` (0 < scale ≤ 1), at least 1."""
    return max(1, round(value * scale))


def expand(sweep: dict, scale: float | None = None) -> list[Run]:
    """Every (configuration, seed) of ``sweep``; unknown keys and names are errors.

    ``scale`` (or the sweep's own ``scale``) shortens every run: tasks and steps per task are
    multiplied by it (at least 2 tasks, 1 step), for quick looks at a study.
    """
    unknown = sorted(set(sweep) - set(SWEEP_KEYS))
    if unknown:
        raise ValueError(f"unknown sweep key(s) {', '.join(unknown)}; valid: {', '.join(SWEEP_KEYS)}")
    if "variants" in sweep:
        # Linked settings (e.g. batch size with its steps per task) expand one variant at a time.
        base = {k: v for k, v in sweep.items() if k != "variants"}
        return [run for variant in sweep["variants"] for run in expand({**base, **variant}, scale)]
    scale = float(scale if scale is not None else sweep.get("scale", 1.0))
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    problems = _pick(sweep, "problem", "problems")
    methods = _pick(sweep, "method", "methods")
    for m in methods:
        get_method(m)
    optimizers = _pick(sweep, "optimizer", "optimizers", "adam")
    seeds = sweep.get("seeds", "0")
    seeds = parse_seeds(seeds)
    grid = dict(sweep.get("grid") or {})
    method_grids = {m: grid.pop(m) for m in list(grid) if isinstance(grid[m], dict)}
    fixed_params = dict(sweep.get("params") or {})
    per_method_lr = dict(sweep.get("per_method_lr") or {})
    if per_method_lr and ("lr" in sweep or "lr" in grid):
        raise ValueError("sweep gives both lr and per_method_lr; use one")
    for m in list(method_grids) + list(fixed_params) + list(per_method_lr):
        get_method(m)  # a misspelt method name in a table is an error, not an ignored table
        if m not in methods:
            raise ValueError(f"sweep has parameters for method {m!r}, which is not in its methods")
    run_axes = {p.name: _as_list(sweep[p.name]) for p in RUN_PARAMETERS
                if p.name != "optimizer" and p.name in sweep}
    for key, values in grid.items():
        if key not in {p.name for p in RUN_PARAMETERS}:
            raise ValueError(f"unknown grid parameter {key!r}; run parameters: "
                             f"{', '.join(p.name for p in RUN_PARAMETERS)} (method parameters go "
                             "under [grid.METHOD])")
        run_axes[key] = _as_list(values)
    runs = []
    for problem, method, optimizer in itertools.product(problems, methods, optimizers):
        mgrid = {k: _as_list(v) for k, v in (method_grids.get(method) or {}).items()}
        for run_point in _product(run_axes):
            for method_point in _product(mgrid):
                if method in per_method_lr:
                    run_point = {**run_point, "lr": per_method_lr[method]}
                raw = {"problem": problem, "method": method, "optimizer": optimizer, **run_point,
                       "params": {**fixed_params.get(method, {}), **method_point},
                       "problem_params": dict(sweep.get("problem_params") or {}),
                       "optimizer_params": dict(sweep.get("optimizer_params") or {})}
                config = resolve_config(raw)
                if scale < 1:
                    config.tasks = max(2, scaled(config.tasks, scale))
                    config.steps_per_task = scaled(config.steps_per_task, scale)
                    for p in get_method(method).hyperparameters:
                        if p.in_steps and p.name in config.params:  # ReDo's period, in tasks × steps
                            config.params[p.name] = scaled(config.params[p.name], scale)
                runs.extend(Run(config, s) for s in seeds)
    return runs


def run_filters(filters: Sequence[str], runs: Sequence[Run],
                more_seeds: Sequence[int] = ()) -> dict[str, set]:
    """Read ``--only`` filters ``KEY=VALUE[,VALUE…]`` against a sweep's ``runs``: KEY is
    ``seed`` or a setting of the run's config that holds one value (``problem``, ``method``,
    ``optimizer``, ``lr``, ``width``, …); ``seed`` reads ranges (``0-2,9``) as ``--seeds`` does,
    and other values are read as the setting's type, so ``lr=1e-2`` is 0.01. Returns
    {KEY: the wanted values}. An unknown key, a value of the wrong type, or a value that no run
    has (seeds: nor ``more_seeds``, a protocol's evaluation seeds) is an error: a misspelt
    filter must not select nothing in silence."""
    if not runs:
        return {}
    sample = runs[0].config.to_dict()
    keys = ["seed", *(k for k, v in sample.items() if not isinstance(v, dict))]
    wanted: dict[str, set] = {}
    for text in filters:
        key, sep, values = (part.strip() for part in text.partition("="))
        if not sep or not key or not values:
            raise ValueError(f"--only expects KEY=VALUE[,VALUE…], got {text!r}")
        if key not in keys:
            raise ValueError(f"--only {text}: unknown key {key!r}; a run's keys: {', '.join(keys)}")
        if key == "seed":
            given = set(parse_seeds(values))
            present = {r.seed for r in runs} | set(more_seeds)
        else:
            kind = type(sample[key])
            try:
                given = {kind(v.strip()) for v in values.split(",")}
            except ValueError:
                raise ValueError(f"--only {text}: {key} takes {kind.__name__} values") from None
            present = {r.config.to_dict()[key] for r in runs}
        missing = sorted(map(str, given - present))
        if missing:
            raise ValueError(f"--only {text}: no run of the sweep has {key} = {', '.join(missing)}; "
                             f"its values: {', '.join(sorted(map(str, present)))}")
        wanted[key] = wanted.get(key, given) & given
    return wanted


def only_runs(runs: Sequence[Run], wanted: dict[str, set]) -> list[Run]:
    """The runs of ``runs`` whose every KEY of ``wanted`` (:func:`run_filters`) is one of its
    values."""
    def matches(run: Run) -> bool:
        config = run.config.to_dict()
        return all((run.seed if key == "seed" else config[key]) in values
                   for key, values in wanted.items())

    return [r for r in runs if matches(r)]


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard I/N`` read as (I, N): the I-th of N shares of a sweep's runs, 1 ≤ I ≤ N."""
    index, sep, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not sep or n < 1 or not 1 <= i <= n:
        raise ValueError(f"--shard expects I/N with 1 <= I <= N (the I-th of N shares: 1/4 … 4/4), "
                         f"got {text!r}")
    return i, n


def shard_runs(runs: Sequence[Run], shard: tuple[int, int] | None) -> list[Run]:
    """Share I of N of ``runs`` (``shard`` = (I, N); None: all of them): every N-th run in
    their order, from the I-th — so each share holds about 1/N of every configuration's seeds,
    and N commands given the same sweep and 1/N … N/N train every run once between them."""
    if shard is None:
        return list(runs)
    i, n = shard
    return [r for j, r in enumerate(runs) if j % n == i - 1]


def _product(axes: dict) -> list[dict]:
    keys = list(axes)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*axes.values())]


def _group_key(config: RunConfig) -> str:
    method = get_method(config.method)
    shared = {p.name: config.params.get(p.name, p.default)  # an implicit default is absent
              for p in method.hyperparameters if not p.per_member}
    d = config.to_dict()
    d["params"] = shared
    if shares_step_sizes(config):
        d.pop("lr")
    if config.method in MEMBER_METHODS:  # one method per member (methods.penalty_members)
        d["method"] = "|".join(MEMBER_METHODS)
    return json.dumps(d, sort_keys=True)


def shares_step_sizes(config: RunConfig) -> bool:
    """Whether runs of ``config`` that differ only in step size can train as one ensemble."""
    return (config.optimizer in MEMBER_LR_OPTIMIZERS
            and get_method(config.method).needs(config.params).member_lr)


def group(runs: list[Run], max_members: int | Callable[[RunConfig], int] = 16,
          workers: int = 1, cost: Callable[[Ensemble], float] | None = None) -> list[Ensemble]:
    """Group runs into ensembles of at most ``max_members`` (see the module docstring).

    ``max_members`` may depend on the configuration (the best K differs between the MLP and
    the CNN). A group larger than that is split into equal parts, not into full ones and a
    remainder. Then, while the ensembles do not fill every worker in every round — their number
    is not a multiple of ``workers`` — the costliest is halved, until it is (or nothing is left
    to halve): a lone 10-seed evaluation runs as two ensembles of 5 on two cores instead of one
    of 10 on one, and 36 runs of at most 12 as 12, 12, 6 and 6 — two rounds of 18 members on two
    cores instead of 12, 12 and then 12 alone. ``cost`` prices an ensemble (this machine's
    calibrated seconds, :func:`~plasticlab.experiments.bench.job_seconds`: a method's cost and
    a batch size's); without it, members × steps.
    """
    limit = max_members if callable(max_members) else (lambda _config: max_members)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(_group_key(run.config), []).append(run)
    chunks: list[list[Run]] = []
    for members in groups.values():
        k = int(limit(members[0].config))
        if k < 1:
            raise ValueError(f"max_members must be >= 1, got {k}")
        chunks.extend(consecutive_pieces(members, -(-len(members) // k)))
    weigh = cost or _member_steps
    while len(chunks) % max(int(workers), 1):
        costliest = max(chunks, key=lambda c: weigh(_ensemble(c)), default=[])
        if len(costliest) < 2:
            break
        chunks.remove(costliest)
        chunks.extend(consecutive_pieces(costliest, 2))
    return [_ensemble(c) for c in chunks]


def _ensemble(runs: list[Run]) -> Ensemble:
    return Ensemble(Members.from_runs([r.config for r in runs], [r.seed for r in runs]))


def _member_steps(ensemble: Ensemble) -> int:
    """An ensemble's work: members × steps (its members share the stream lengths)."""
    return len(ensemble.seeds) * ensemble.steps


def consecutive_pieces(items: list, parts: int) -> list[list]:
    """``items`` in ``parts`` consecutive pieces whose sizes differ by at most one."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out
