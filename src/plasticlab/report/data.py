"""A results directory read back for reporting: runs grouped by configuration, as arrays.

A *configuration* is everything but the seed (problem, optimizer, method, step size, method
and problem parameters, network, stream lengths). Its finished runs become one
:class:`ConfigRuns`: one row per seed, per-task curves as ``[seeds, tasks]`` arrays (NaN where
a value was not recorded), so every statistic downstream is a reduction over axis 0.

Partial results are normal — a sweep may still be running, or a run may have failed — so
:func:`load_results` never drops anything silently: runs that are unfinished or failed, planned
runs that have not started (``plan.json``, written by ``plasticlab sweep``) and selected
configurations without evaluation runs all become :attr:`Results.warnings`.

Each configuration carries the measure its runs recorded
(:class:`~plasticlab.experiments.protocol.Measure`): online accuracy on a classification
problem, online squared error on a regression problem; every part of the report reads
``online``, ``total`` and "best" through it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..experiments.export import read_results
from ..experiments.orchestrate import SELECTION_FILE, planned_runs
from ..experiments.protocol import ONLINE_ACCURACY, Measure, config_key, recorded_measure
from ..experiments.recording import STEP_PREFIX

#: Per-task metrics drawn as "internals" figures, in this order, with their axis labels (the
#: export keeps the same names: :data:`plasticlab.experiments.export.REPORTED_MEASUREMENTS`).
INTERNALS = {
    "weight_magnitude": "average weight magnitude, mean |θ|",
    "srank": "feature srank (last hidden layer)",
    "effective_rank": "effective rank (last hidden layer)",
    "dead_fraction": "dead units",
    "dormant_fraction": "dormant units, τ = 0.1",
    "grad_norm": "gradient norm (task's last step)",
    "task_test_accuracy": "test accuracy at task end",
    # the optional measurements (--measure; plasticlab.measure.optional), where a study has them
    "effective_lr": "effective learning rate ‖g‖/‖θ‖",
    "feature_norm": "feature norm ‖φ(x)‖ (penultimate layer)",
    "feature_variance": "feature variance across units (penultimate layer)",
    "active_fraction": "active entries",
    "approximate_rank": "PCA approximate rank (last hidden layer)",
    "feature_rank": "feature rank (last hidden layer)",
    "matrix_rank": "matrix rank (last hidden layer)",
    "hessian_top_eigenvalue": "Hessian's top eigenvalue",
    "churn": "churn, mean |Δ logit| over the task",
    "prediction_churn": "predictions changed over the task",
    "zero_grad_ratio": "parameters with a zero gradient",
    "distance_to_init": "distance to init ‖θ − θ₀‖",
}
#: Internals that are fractions, drawn in percent.
PERCENT_METRICS = {"dead_fraction", "dormant_fraction", "task_test_accuracy", "active_fraction",
                   "prediction_churn", "zero_grad_ratio"}


@dataclass
class ConfigRuns:
    """The finished runs of one configuration, one row per seed.

    ``online[s, t]`` is seed s's average online accuracy on task t (a fraction) and ``total[s]``
    its total average online accuracy over the reported tasks — both, on a regression problem,
    its online squared error instead, as ``measure`` says; ``metrics[name][s, t]`` a
    task-end measurement (layered metrics such as srank are ``[seeds, tasks, layers]``);
    ``accuracy_matrix[s, j, m]`` = A[j][m] (NaN above the diagonal) when forgetting was
    measured, with ``bwt``/``one_step_bwt`` per seed.
    """

    config: dict
    label: str
    seeds: list[int]
    online: np.ndarray
    total: np.ndarray
    reported: list[int]
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    accuracy_matrix: np.ndarray | None = None
    bwt: np.ndarray | None = None
    one_step_bwt: np.ndarray | None = None
    #: every-N-steps measurements (``--measure-every``): the global steps and, per metric,
    #: ``[seeds, measurements]`` (or ``[…, layers]``)
    steps: np.ndarray | None = None
    step_metrics: dict[str, np.ndarray] = field(default_factory=dict)
    #: what ``online`` and ``total`` hold, and which way is better
    measure: Measure = ONLINE_ACCURACY

    @property
    def problem(self) -> str:
        return self.config["problem"]

    @property
    def optimizer(self) -> str:
        return self.config["optimizer"]

    @property
    def method(self) -> str:
        return self.config["method"]

    @property
    def n(self) -> int:
        return len(self.seeds)

    def only_seeds(self, seeds: Sequence[int]) -> ConfigRuns | None:
        """The same configuration restricted to ``seeds`` (None when none of them finished)."""
        rows = [i for i, s in enumerate(self.seeds) if s in set(seeds)]
        if not rows:
            return None

        def take(a):
            return None if a is None else a[rows]

        return ConfigRuns(self.config, self.label, [self.seeds[i] for i in rows], self.online[rows],
                          self.total[rows], self.reported,
                          {k: v[rows] for k, v in self.metrics.items()}, take(self.accuracy_matrix),
                          take(self.bwt), take(self.one_step_bwt), self.steps,
                          {k: v[rows] for k, v in self.step_metrics.items()}, self.measure)


@dataclass
class Results:
    """Everything a report shows about one results directory (or several:
    :func:`combine_results`)."""

    directory: Path
    configs: list[ConfigRuns]
    status_counts: Counter
    selection: dict | None = None
    warnings: list[str] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    """Every run read, whatever its status, as stored: what ``runs.csv`` lists."""

    @property
    def finished(self) -> list[dict]:
        """The finished runs, as stored."""
        return [r for r in self.runs if r["status"] == "finished"]

    def __post_init__(self) -> None:
        self._studies: dict[tuple[str, str], list[ConfigRuns]] = {}
        for c in self.configs:
            self._studies.setdefault((c.problem, c.optimizer), []).append(c)

    def studies(self) -> dict[tuple[str, str], list[ConfigRuns]]:
        """Configurations grouped by (problem, optimizer): the runs that can be compared."""
        return self._studies

    def measure(self, problem: str, optimizer: str) -> Measure:
        """The measure the study (problem × optimizer) is judged on: its runs' (one problem,
        so one measure)."""
        return self.studies()[(problem, optimizer)][0].measure

    def headline(self, problem: str, optimizer: str) -> tuple[list[ConfigRuns], str]:
        """One configuration per method, and how it was chosen.

        With the selection protocol (``selection.json``), the selected configuration on its
        evaluation seeds; otherwise the configuration with the best mean total — the highest
        online accuracy, the lowest online squared error — among those in the directory (say so
        in the figure: it is chosen on the same seeds it is shown on).
        """
        study = self.studies().get((problem, optimizer), [])
        measure = study[0].measure if study else ONLINE_ACCURACY
        by_method: dict[str, list[ConfigRuns]] = {}
        for c in study:
            by_method.setdefault(c.method, []).append(c)
        chosen, how = [], set()
        for method, configs in by_method.items():
            picked = self._selected(problem, optimizer, method, configs)
            if picked is not None:
                chosen.append(picked)
                how.add("selected by the protocol (grid seeds), shown on its evaluation seeds")
                continue
            by_form: dict[tuple, list[ConfigRuns]] = {}
            for c in configs:
                by_form.setdefault(method_form(c.config), []).append(c)
            for form in by_form.values():
                chosen.append(measure.best(form, lambda c: float(np.mean(c.total))))
                if len(form) > 1:
                    how.add(f"best configuration per method by {_which(measure)}mean total "
                            f"{measure.name} over the seeds shown")
            if len(by_form) > 1:
                how.add("a method's forms — its non-numeric settings, e.g. EWC's anchor — "
                        "shown apart")
        return chosen, "; ".join(sorted(how))

    def _selected(self, problem, optimizer, method, configs) -> ConfigRuns | None:
        if not self.selection:
            return None
        for entry in self.selection.get("selected", []):
            if (entry["problem"], entry["optimizer"], entry["method"]) != (problem, optimizer, method):
                continue
            key = config_key(entry["config"])
            for c in configs:
                if config_key(c.config) == key:
                    seeds = self.selection.get("evaluation_seeds")
                    return c.only_seeds(seeds) if seeds else c
        return None

    def streams(self, problem: str, optimizer: str) -> list[tuple[dict, Results]]:
        """The study (problem × optimizer) split by its stream: one part per combination of
        :data:`STREAM_SETTINGS` its configurations hold, in increasing order of them, each as
        ``(its stream settings, the Results of its configurations alone)``.

        Runs with another batch size or another task length learn other tasks, and runs on
        another data set (a user's ``npz``) other data, so no part of a report picks a best
        configuration across them (the ``batch-size`` study: one part per batch size, each with
        its own step-size sweep). Within a part, a configuration's label
        names only the settings that tell it apart there. A study with one stream is one part:
        ``({}, self)``.
        """
        configs = self.studies().get((problem, optimizer), [])
        by_stream: dict[tuple, list[ConfigRuns]] = {}
        for c in configs:
            by_stream.setdefault(tuple(stream_setting(c.config, k) for k in STREAM_SETTINGS),
                                 []).append(c)
        if len(by_stream) < 2:
            return [({}, self)]
        differ = [i for i, k in enumerate(STREAM_SETTINGS) if len({s[i] for s in by_stream}) > 1]
        parts = []
        for stream in sorted(by_stream, key=lambda s: tuple((s[i] is None, s[i] or 0) for i in differ)):
            # (a data set's path sorts among paths: a setting holds one kind of value)
            members = by_stream[stream]
            labels = _labels([c.config for c in members])
            members = [replace(c, label=labels[config_key(c.config)]) for c in members]
            parts.append(({STREAM_SETTINGS[i]: stream[i] for i in differ},
                          Results(self.directory, members, self.status_counts, self.selection,
                                  runs=self.runs)))
        return parts


STREAM_SETTINGS = ("batch_size", "steps_per_task", "tasks", "data")
"""The settings that make a problem's stream of tasks (:meth:`Results.streams`); ``data`` is the
user's images a run read in its data set's place (the ``npz`` problem parameter), None for the
problem's own."""


def stream_setting(config: dict, key: str):
    """The stream setting ``key`` (:data:`STREAM_SETTINGS`) of a run's ``config``."""
    if key == "data":
        return (config.get("problem_params") or {}).get("npz") or None
    return config.get(key)


def _which(measure: Measure) -> str:
    # accuracy's "best" needs no gloss (the reports' wording before regressions stays as it was)
    return "" if measure.higher_is_better else f"the {measure.best_word} "


def method_form(config: Mapping) -> tuple:
    """A configuration's *form* of its method: its non-numeric method settings (EWC's
    ``anchor``, CBP's ``adam_variant`` …). Forms are different algorithms, shown side by side;
    numeric settings (λ, r, …) are points of a grid, of which the best is shown."""
    params = config.get("params") or {}
    return tuple(sorted((k, v) for k, v in params.items()
                        if isinstance(v, str | bool)))


def method_order(method: str) -> int:
    """Position of a method in tables and legends: the registry's order (Baseline first)."""
    from ..methods import METHODS

    names = list(METHODS)
    return names.index(method) if method in names else len(names)


def load_results(directory: str | Path) -> Results:
    """Read ``directory``'s results store (and ``selection.json``/``plan.json`` if present), or
    in its place a compact export (:mod:`plasticlab.experiments.export`).

    Raises ValueError when the directory holds no store. Finished runs are grouped by
    configuration; everything else becomes a warning.
    """
    directory = Path(directory)
    rows, per_run, selection = read_results(directory)
    finished = [r for r in rows if r["status"] == "finished"]
    warnings: list[str] = []
    counts = Counter(r["status"] for r in rows)
    groups: dict[str, list[dict]] = {}
    for r in finished:
        groups.setdefault(config_key(r["config"]), []).append(r)
    labels = _labels([g[0]["config"] for g in groups.values()])
    configs = [_config_runs(g, per_run, labels[key]) for key, g in groups.items()]
    configs.sort(key=lambda c: (c.problem, c.optimizer, method_order(c.method), c.label))

    def run_text(r):
        return f"{labels.get(config_key(r['config'])) or _describe(r['config'])} seed {r['seed']}"

    if counts["running"]:
        unfinished = [run_text(r) for r in rows if r["status"] == "running"]
        warnings.append(f"{counts['running']} run(s) unfinished (still running, or killed: re-run "
                        f"the sweep to finish them): {_some(unfinished)}")
    if counts["interrupted"]:
        stopped = [run_text(r) for r in rows if r["status"] == "interrupted"]
        warnings.append(f"{counts['interrupted']} run(s) interrupted (stopped at a task end: the "
                        f"same command resumes them): {_some(stopped)}")
    if counts["failed"]:
        failed = [f"{run_text(r)} ({(r['error'] or '').strip().splitlines()[-1:] or ['?']})"
                  for r in rows if r["status"] == "failed"]
        warnings.append(f"{counts['failed']} run(s) failed: {_some(failed)}")
    known = {r["run_id"] for r in rows}
    if planned := planned_runs(directory):
        missing = [p for p in planned if p["run_id"] not in known]
        if missing:
            texts = [f"{_describe(p['config'])} seed {p['seed']}" for p in missing]
            warnings.append(f"{len(missing)} of {len(planned)} planned run(s) not started yet: "
                            f"{_some(texts)}")
    sel_path = directory / SELECTION_FILE
    if selection is None and sel_path.is_file():
        selection = json.loads(sel_path.read_text())
    results = Results(directory, configs, counts, selection, warnings, rows)
    eval_seeds = set((selection or {}).get("evaluation_seeds") or [])
    for (problem, optimizer), study in results.studies().items():
        # A protocol's winners also have evaluation seeds: compare the grid seeds only.
        n_grid = {c.label: sum(s not in eval_seeds for s in c.seeds) for c in study}
        ns = set(n_grid.values()) - {0}
        if len(ns) > 1:
            few = [f"{label} (n={n})" for label, n in n_grid.items() if 0 < n < max(ns)]
            warnings.append(f"{problem} {optimizer}: configurations have different numbers of "
                            f"finished seeds ({min(ns)}–{max(ns)}): {_some(few)}")
    if selection:
        for entry in selection.get("selected", []):
            study = results.studies().get((entry["problem"], entry["optimizer"]), [])
            configs_m = [c for c in study if c.method == entry["method"]]
            if results._selected(entry["problem"], entry["optimizer"], entry["method"], configs_m) is None:
                warnings.append(f"{entry['problem']} {entry['optimizer']} {entry['method']}: the "
                                "selected configuration has no finished evaluation runs yet "
                                "(showing the best grid configuration instead)")
    return results


def combine_results(parts: Sequence[Results]) -> Results:
    """Several directories' results (each read by :func:`load_results`) as one, for one report:
    a study per problem and optimizer, whichever directory each configuration's runs are in,
    and the across-problems view of them all. Labels are made anew over every configuration
    (a setting that tells two of them apart is named); each directory's warnings are kept,
    after its name.

    A configuration in two directories must hold the same runs there (a run two studies
    trained: kept once); other runs of one configuration in two places are an error — import
    one directory into the other (``plasticlab import``) to report them together. A
    directory's protocol selection speaks for its own studies only: another directory with
    runs of a study it selected in is an error, and so are two selections that evaluate on
    other seeds."""
    if len(parts) == 1:
        return parts[0]
    names = [str(p.directory) for p in parts]
    if len(set(names)) < len(names):
        raise ValueError(f"a directory is given twice: {', '.join(names)}")
    kept: dict[str, tuple[ConfigRuns, Results]] = {}
    for part in parts:
        for c in part.configs:
            key = config_key(c.config)
            if key not in kept:
                kept[key] = (c, part)
                continue
            other, where = kept[key]
            if other.seeds != c.seeds or not np.array_equal(other.online, c.online, equal_nan=True):
                raise ValueError(f"{c.label} ({c.problem}, {c.optimizer}) has runs in both {where.directory} "
                                 f"(seeds {_seeds_text(other.seeds)}) and {part.directory} (seeds "
                                 f"{_seeds_text(c.seeds)}) that are not the same runs: report them apart, "
                                 "or import one folder into the other (`plasticlab import`)")
    selections = [p for p in parts if p.selection]
    seeds = {json.dumps(p.selection.get("evaluation_seeds")) for p in selections}
    if len(seeds) > 1:
        raise ValueError("the protocol selections of " + ", ".join(str(p.directory) for p in selections)
                         + " evaluate on other seeds: report them apart")
    for part in selections:
        mine = {(e["problem"], e["optimizer"]) for e in part.selection.get("selected", [])}
        for c, where in kept.values():
            if where is not part and (c.problem, c.optimizer) in mine:
                raise ValueError(f"{where.directory} has runs of {c.problem} {c.optimizer} ({c.label}), "
                                 f"a study that {part.directory} selected in by the protocol: report "
                                 "them apart")
    labels = _labels([c.config for c, _ in kept.values()])
    configs = [replace(c, label=labels[key]) for key, (c, _) in kept.items()]
    configs.sort(key=lambda c: (c.problem, c.optimizer, method_order(c.method), c.label))
    selection = None
    if selections:
        selection = {"evaluation_seeds": selections[0].selection.get("evaluation_seeds"),
                     "selected": [e for p in selections for e in p.selection.get("selected", [])],
                     "sweep": " + ".join(str(p.selection.get("sweep") or p.directory.name)
                                         for p in selections)}
    runs: dict[str, dict] = {}
    for r in (r for part in parts for r in part.runs):
        # a run two folders hold, once: finished where one of them finished it
        kept = runs.get(r["run_id"])
        if kept is None or (r["status"] == "finished" and kept["status"] != "finished"):
            runs[r["run_id"]] = r
    counts = Counter(r["status"] for r in runs.values())
    warnings = [f"{p.directory}: {w}" for p in parts for w in p.warnings]
    return Results(parts[0].directory, configs, counts, selection, warnings, list(runs.values()))


def _seeds_text(seeds: Sequence[int]) -> str:
    return _some([str(s) for s in seeds], 6)


def _some(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _describe(config: dict) -> str:
    params = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(config.get("params", {}).items()))
    return f"{config['method']} {config['problem']} {config['optimizer']} lr={_fmt(config['lr'])}" + (
        f" {params}" if params else "")


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def flat_settings(config: dict) -> dict[str, object]:
    """A config's settings as one flat mapping (``params`` and ``problem_params`` inlined)."""
    out = {k: v for k, v in config.items() if k not in ("params", "problem_params", "seed")}
    out.update(config.get("params", {}))
    out.update({f"problem.{k}": v for k, v in config.get("problem_params", {}).items()})
    return out


def varying_settings(configs: Sequence[dict]) -> list[str]:
    """The settings (flat names) whose values differ among ``configs``."""
    flats = [flat_settings(c) for c in configs]
    keys = sorted({k for f in flats for k in f})
    return [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flats}) > 1]


def _labels(configs: Sequence[dict]) -> dict[str, str]:
    """A short label per configuration: the method as papers name it
    (:func:`~plasticlab.methods.method_title`), plus the settings that tell it apart from the
    other configurations of the same method on the same problem and optimizer."""
    from ..methods import method_title

    by_group: dict[tuple, list[dict]] = {}
    for c in configs:
        by_group.setdefault((c["problem"], c["optimizer"], c["method"]), []).append(c)
    labels = {}
    for (_, _, method), group in by_group.items():
        keys = [k for k in varying_settings(group) if k not in ("problem", "optimizer", "method")]
        for c in group:
            flat = flat_settings(c)
            labels[config_key(c)] = " ".join([method_title(method),
                                              *(f"{k}={_fmt(flat.get(k))}" for k in keys)])
    return labels


def _config_runs(runs: list[dict], per_run: dict[str, dict], label: str) -> ConfigRuns:
    from ..problems import get_problem

    runs = sorted(runs, key=lambda r: r["seed"])
    config = runs[0]["config"]
    metrics = [per_run[r["run_id"]] for r in runs]
    measure = _measure(runs, metrics)
    tasks = max(len(m.get(measure.metric, [])) for m in metrics)
    try:
        problem = get_problem(config["problem"])
        reported = [t for t in range(tasks) if problem.reported(t)]
    except ValueError:  # a problem this version does not know: count every task
        reported = list(range(tasks))
    online = _stack([m.get(measure.metric, []) for m in metrics], tasks)
    total = np.array([_num((r["summary"] or {}).get(measure.total)) for r in runs], dtype=float)
    measured = {}
    for name in INTERNALS:
        values = [m.get(name) for m in metrics]
        if all(v is not None for v in values):
            measured[name] = _stack(values, tasks)
    matrix = bwt = one_step = None
    if all("accuracy_matrix" in m for m in metrics):
        matrix = np.full((len(runs), tasks, tasks), np.nan)
        for s, m in enumerate(metrics):
            for j, row in enumerate(m["accuracy_matrix"]):
                if row is not None:
                    matrix[s, j, :len(row)] = [np.nan if v is None else v for v in row]
        bwt = np.array([_num((r["summary"] or {}).get("bwt")) for r in runs])
        one_step = np.array([_num((r["summary"] or {}).get("one_step_bwt")) for r in runs])
    steps, step_metrics = None, {}
    step_lists = [m.get(STEP_PREFIX + "step") for m in metrics]
    if all(step_lists) and len({len(s) for s in step_lists}) == 1:
        steps = np.asarray(step_lists[0], dtype=float)
        for name in INTERNALS:
            values = [m.get(STEP_PREFIX + name) for m in metrics]
            if all(v is not None for v in values):
                step_metrics[name] = _stack(values, len(steps))
    return ConfigRuns(config, label, [r["seed"] for r in runs], online, total, reported, measured,
                      matrix, bwt, one_step, steps, step_metrics, measure)


def _measure(runs: Sequence[dict], metrics: Sequence[Mapping]) -> Measure:
    """The measure one configuration's runs recorded (all the same: one problem); online
    accuracy where none says (a run that finished with neither: its total stays NaN)."""
    recorded = (recorded_measure(r["summary"], m) for r, m in zip(runs, metrics, strict=True))
    return next((m for m in recorded if m is not None), ONLINE_ACCURACY)


def _num(x) -> float:
    return math.nan if x is None else float(x)


def _stack(per_seed: Sequence[Sequence], tasks: int) -> np.ndarray:
    """Per-seed per-task values → [seeds, tasks] (or [seeds, tasks, layers]); NaN if missing."""
    converted = [_as_array(seq) for seq in per_seed]
    if all(values is not None for values in converted):
        # every seed's lists (if any) are of one length each: the layers are read off the arrays,
        # not by a look at each of the millions of values a study holds
        layers = max((values.shape[1] for values in converted if values.ndim > 1), default=0)
    else:
        layers = max((len(v) for seq in per_seed for v in seq if isinstance(v, list)), default=0)
    shape = (len(per_seed), tasks, layers) if layers else (len(per_seed), tasks)
    out = np.full(shape, np.nan)
    for s, (seq, values) in enumerate(zip(per_seed, converted, strict=True)):
        if not _fill_rectangular(out[s], values):
            _fill(out[s], seq, layers)
    return out


def _fill(row: np.ndarray, seq: Sequence, layers: int) -> None:
    """One seed's values into ``row`` ([tasks] or [tasks, layers]), value by value: a missing
    task (None) or layer (a shorter list, or None in it) stays NaN."""
    for t, v in enumerate(seq):
        if v is None:
            continue
        if layers:
            row[t, :len(v)] = [np.nan if x is None else x for x in v]
        else:
            row[t] = v


def _as_array(seq: Sequence) -> np.ndarray | None:
    """One seed's values in one NumPy conversion (a None number is NaN), or None where they do
    not make one array: a missing task among lists, or lists of other lengths."""
    try:
        return np.array(seq, dtype=float)
    except (TypeError, ValueError):
        return None


def _fill_rectangular(row: np.ndarray, values: np.ndarray | None) -> bool:
    """:func:`_fill` from :func:`_as_array`'s ``values``, where it applies: every task's value
    there and of ``row``'s shape (a number, or a list of every layer). Returns whether it
    applied (``tests/test_report_build.py`` holds it to :func:`_fill`)."""
    if values is None or values.shape[1:] != row.shape[1:] or len(values) > len(row):
        return False
    row[:len(values)] = values
    return True


def bin_tasks(values: np.ndarray, tasks: Sequence[int], max_bins: int = 50
              ) -> tuple[np.ndarray, np.ndarray, str]:
    """Average ``values[:, tasks]`` over consecutive bins of tasks, per seed.

    Returns the bin centres (task numbers), the per-seed bin means ``[seeds, bins]`` and a note
    describing the binning ("" when every task is its own point). Binning per seed before any
    statistic keeps the interval an interval across seeds of the binned quantity.
    """
    tasks = list(tasks)
    if len(tasks) <= max_bins:
        return np.asarray(tasks, dtype=float), values[:, tasks], ""
    size = math.ceil(len(tasks) / max_bins)
    chunks = [tasks[i:i + size] for i in range(0, len(tasks), size)]
    centres = np.array([float(np.mean(c)) for c in chunks])
    binned = np.stack([np.nanmean(values[:, c], axis=1) for c in chunks], axis=1)
    return centres, binned, binning_note(len(tasks), max_bins)


def binning_note(points: int, max_bins: int = 50) -> str:
    """What :func:`bin_tasks` says of ``points`` tasks put in at most ``max_bins`` bins: ""
    when every task is its own point, else how many consecutive tasks each point averages."""
    if points <= max_bins:
        return ""
    return f"each point the mean of {math.ceil(points / max_bins)} consecutive tasks"


__all__ = ["INTERNALS", "PERCENT_METRICS", "ConfigRuns", "Results",
           "bin_tasks", "binning_note", "combine_results", "flat_settings", "load_results", "method_order",
           "varying_settings"]
