"""``plasticlab verify``: train recorded runs again and check that this code gives their numbers.

A committed result stays true only while the code still makes it. For each chosen ensemble of
a results directory or an export, :func:`verify_ensemble` trains the same members again — the
config, and each member's seed, method parameters, step size and method, as the run manifest's
``ensemble`` record gives them — for the first T tasks, with the recorded torch threads,
backward pass, step (eager or compiled) and measurements. It then compares, task by task, every
member's online accuracy aₜ with the recorded value, bit for bit, and every task-end
measurement the run recorded (weight magnitude, srank, effective rank, gradient norm, …) to the
export's :data:`~plasticlab.experiments.export.MEASUREMENT_DIGITS` significant digits: on the
CPU, with one thread, an ensemble trained again gives exactly the numbers it gave
(docs/member-independence.md says where that holds and where not).

Why the measurements too: a change to training's arithmetic can move the weights by a rounding
step while the test predictions, and so aₜ, stay the same for several tasks (``820d403``'s L2
Init gradient, docs/reproduction/provenance.md); the gradient norm and the ranks, read off the
weights themselves, part at the first or second task end.

With ``members=N`` only the first N recorded runs of an ensemble are trained again, as an
ensemble of their own, where member k of an ensemble is seed k alone to the bit
(:func:`plasticlab.member_independence.member_independence`); elsewhere (CUDA, more threads)
the whole ensemble still is, so the check stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..run_config import Members
from .export import EXACT_METRICS, MEASUREMENT_DIGITS, read_results, rounded
from .manifest import trained_by_text
from .protocol import ONLINE_ACCURACY, recorded_measure


@dataclass
class Mismatch:
    """A recorded run whose online accuracy, or a task-end measurement, on a task is not what
    this code gives: the first that parts."""

    run_id: str
    method: str
    seed: int
    task: int
    recorded: float
    now: float
    metric: str = "online_accuracy"  # the first that parts on ``task``


@dataclass
class Check:
    """One ensemble trained again: which runs it held, and which of them differ."""

    run_ids: list[str]
    label: str
    code: str | None
    device: str
    tasks: int
    trained: int  # members trained again: the whole ensemble, or the runs checked alone
    mismatches: list[Mismatch] = field(default_factory=list)
    measurements: list[str] = field(default_factory=list)  # the task-end measurements compared

    @property
    def compared(self) -> int:
        """How many recorded runs of the ensemble were compared: all of them."""
        return len(self.run_ids)

    @property
    def same(self) -> bool:
        """Every recorded member gave the same online accuracy on every task compared."""
        return not self.mismatches


def recorded_metrics(directory: str | Path) -> tuple[list[dict], dict[str, dict[str, list]]]:
    """The finished runs of a results directory (its store, or else its export:
    :func:`~plasticlab.experiments.export.read_results`) and every per-task metric each one
    recorded, by run id (metric name → values)."""
    rows, metrics, _ = read_results(directory)
    runs = [r for r in rows if r["status"] == "finished"]
    return runs, {r["run_id"]: metrics.get(r["run_id"], {}) for r in runs}


def online_metric(run: dict) -> str:
    """The per-task metric ``run`` (a finished run's row) records online: ``online_accuracy``,
    or ``online_squared_error`` for a run of a regression problem (whose summary has
    ``total_online_squared_error``)."""
    return (recorded_measure(run.get("summary")) or ONLINE_ACCURACY).metric


def _ensemble_record(run: dict) -> dict:
    """How ``run`` was trained: its manifest's ensemble (a lone run's record when it has none)."""
    recorded = run["manifest"].get("ensemble")
    if recorded:
        return recorded
    return {"run_ids": [run["run_id"]], "seeds": [run["seed"]], "params": [run["config"]["params"]],
            "lr": [run["config"]["lr"]], "methods": [run["config"]["method"]]}


def ensembles(runs: Sequence[dict]) -> list[list[dict]]:
    """``runs`` grouped by the ensemble that trained them, in the order first recorded."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault(tuple(_ensemble_record(run)["run_ids"]), []).append(run)
    return list(groups.values())


def _kind(members: Sequence[dict]) -> tuple[str, str]:
    """An ensemble's methods ('l2_init+l2') and optimizer."""
    record = _ensemble_record(members[0])
    methods = record.get("methods") or [m["config"]["method"] for m in members]
    return "+".join(dict.fromkeys(methods)), members[0]["config"]["optimizer"]


def describe(members: Sequence[dict]) -> str:
    """'l2_init+l2, adam, K=15': an ensemble's methods, optimizer and size."""
    return f"{', '.join(_kind(members))}, K={len(_ensemble_record(members[0])['run_ids'])}"


def choose(groups: Sequence[list[dict]], every: bool = False) -> list[list[dict]]:
    """The ensembles to train again: all with ``every``, else the first of each kind (its
    methods and optimizer), so that every method of a study is checked once."""
    if every:
        return list(groups)
    kinds: dict[tuple[str, str], list[dict]] = {}
    for members in groups:
        kinds.setdefault(_kind(members), members)
    return list(kinds.values())


def alone_is_exact(members: Sequence[dict], device: str = "cpu") -> bool:
    """Whether these recorded runs, trained again on ``device`` with their recorded threads,
    give their ensemble's numbers in an ensemble of their own: member k of an ensemble is seed
    k alone, to the bit, there (:func:`~plasticlab.member_independence.member_independence`)."""
    from ..member_independence import member_independence
    from .bench import arch_of

    threads = members[0]["manifest"].get("threads") or 1
    return all(member_independence(device, threads, run["config"]["optimizer"], run["config"]["method"],
                                   arch_of(run["config"]["problem"]),
                                   run["config"].get("width", 1.0))["bit_identical"] is True
               for run in members)


def measurement_options(manifest: dict, measure: bool = True) -> dict:
    """The :func:`~plasticlab.engine.train_ensemble` options that measure as a run with this
    ``manifest`` was measured (its ``measurements`` record); none with ``measure`` False, or
    for a run recorded before manifests said."""
    settings = manifest.get("measurements") or {}
    if not (measure and settings.get("task_end")):
        return {"measure": False}
    return {"measure": True, "measure_every": settings.get("every"),
            "forgetting": bool(settings.get("forgetting")), "measure_samples": settings.get("samples"),
            "measurements": tuple(settings.get("optional") or ())}


def task_measurements(recorded: dict[str, list], now: dict[str, list], online: str) -> list[str]:
    """The task-end measurements (not ``online``, not the every-N-steps ``steps.*``) that both
    a run's ``recorded`` metrics and ``now``'s hold, in name order."""
    from .recording import STEP_PREFIX

    return sorted(name for name in recorded.keys() & now.keys()
                  if name != online and not name.startswith(STEP_PREFIX))


def verify_ensemble(members: Sequence[dict], recorded: dict[str, dict[str, list]], tasks: int,
                    data_dir=None, device: str = "cpu", limit: int | None = None,
                    measure: bool = True) -> Check:
    """Train the ensemble that trained ``members`` (recorded runs, each with its manifest) again
    for its first ``tasks`` tasks and compare, task by task, each recorded member's online
    accuracy (a regression's online squared error: :func:`online_metric`) bit for bit and, with
    ``measure``, every task-end measurement it recorded (``recorded``: run id → metric name →
    values, :func:`recorded_metrics`) to :data:`MEASUREMENT_DIGITS` significant digits
    (:func:`same_measurement`) — but for a run measured on the next task's inputs
    (``internals_on="next"``), not on the last task trained here; with ``limit``, only the
    first ``limit`` of ``members``, on their own, where that is exact (:func:`alone_is_exact`)."""
    import json

    from ..engine import train_ensemble
    from .config import resolve_config
    from .recording import member_task_metrics
    from .runner import strict_json

    first = members[0]
    record = _ensemble_record(first)
    manifest = first["manifest"]
    kept = list(range(len(record["run_ids"])))  # the recorded members trained again
    if limit is not None and limit < len(members) and alone_is_exact(members[:limit], device):
        members = list(members[:limit])
        kept = sorted(record["run_ids"].index(run["run_id"]) for run in members)
    position = {record["run_ids"][k]: i for i, k in enumerate(kept)}  # run id → member trained
    tasks = min(tasks, first["config"]["tasks"])
    config = resolve_config({**first["config"], "tasks": tasks})
    result = train_ensemble(Members.from_record(config, record, kept), data_dir=data_dir, device=device,
                            threads=manifest.get("threads") or 1,
                            backprop=manifest.get("backprop") or "auto",
                            compile=manifest.get("step") == "compiled",
                            **measurement_options(manifest, measure))
    # the code of the sittings that trained the tasks compared (a run resumed across versions)
    check = Check([m["run_id"] for m in members], describe(members), trained_by_text(first, tasks),
                  manifest.get("device", "cpu"), tasks, trained=len(kept))
    compared: set[str] = set()
    for run in members:
        # as the store keeps them, and a JSON round trip gives them back (NaN as None); trained
        # without measurements (``measure`` False), only the online measure is compared
        trained = result.members[position[run["run_id"]]]
        now = json.loads(json.dumps(strict_json(member_task_metrics(trained))))
        was = recorded[run["run_id"]]
        _, parted, measured = first_difference(run, was, run, now)
        compared.update(measured)
        if parted is not None:
            task, name = parted
            given = now[name][task]  # a measurement as an export keeps it
            given = given if name in EXACT_METRICS else rounded(given, MEASUREMENT_DIGITS)
            check.mismatches.append(Mismatch(run["run_id"], run["config"]["method"], run["seed"],
                                             task, was[name][task], given, metric=name))
    check.measurements = sorted(compared)
    return check


def verify_ensembles(jobs: Sequence[tuple[Sequence[dict], dict[str, dict[str, list]]]], tasks: int,
                     workers: int = 1, **options) -> Iterator[Check]:
    """:func:`verify_ensemble` for each of ``jobs`` (an ensemble's recorded runs and their
    recorded metrics, :func:`recorded_metrics`; with ``options``), the checks yielded in the
    order of ``jobs``; with ``workers`` > 1, trained in that many spawned processes at once. A
    process trains as this one would — the recorded threads, step and measurements, a fresh
    torch — so each check is the one it would be inline: what the recorded numbers are compared
    with does not depend on where they were trained."""
    from ..data import fetch_datasets
    from ..problems import get_problem

    # what the ensembles read, fetched once here: a missing dataset is one error, not one per check
    fetch_datasets((get_problem(members[0]["config"]["problem"]).reads(
        members[0]["config"].get("problem_params") or {}) for members, _ in jobs), options.get("data_dir"))
    if workers <= 1 or len(jobs) <= 1:
        for members, recorded in jobs:
            yield verify_ensemble(members, recorded, tasks, **options)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # spawned, not forked: a forked child inherits this process's torch threads and state
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        # submitted in the jobs' order, not the costliest first as a sweep's executor orders
        # its jobs: the lines come in this order, and a cheap check's line would wait for every
        # costlier one (lines from the start, against at most one long check at the tail); each
        # process is sent its own runs' records, not the whole study's
        futures = [pool.submit(verify_ensemble, members, {r["run_id"]: recorded[r["run_id"]]
                                                          for r in members}, tasks, **options)
                   for members, recorded in jobs]
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def first_difference(run_a: dict, metrics_a: dict[str, list], run_b: dict, metrics_b: dict[str, list]
                     ) -> tuple[int, tuple[int, str] | None, list[str]]:
    """How many tasks two records of a run (rows with their manifests, and their per-task
    metrics: two studies', or the recorded one and this code's) both hold, the first task and
    metric where they part (None: none does), and the measurements compared: the online measure
    bit for bit (:func:`online_metric`) and, where both manifests record the same measurement
    settings, every task-end measurement both hold to an export's digits
    (:func:`same_measurement`). Measured on the next task's inputs (``internals_on="next"``),
    the shorter run's last task was measured on its own inputs: its measurements are left out
    when the two ran other numbers of tasks."""
    online = online_metric(run_a)
    ran_a, ran_b = len(metrics_a.get(online, [])), len(metrics_b.get(online, []))
    tasks = min(ran_a, ran_b)
    settings = run_a["manifest"].get("measurements")
    alike = settings is not None and settings == run_b["manifest"].get("measurements")
    names = [online] + (task_measurements(metrics_a, metrics_b, online) if alike else [])
    own_last = run_a["config"].get("internals_on") == "next" and ran_a != ran_b
    measured_tasks = tasks - 1 if own_last else tasks
    for task in range(tasks):
        for name in names if task < measured_tasks else names[:1]:
            a, b = metrics_a[name], metrics_b[name]
            if task < min(len(a), len(b)) and not same_measurement(name, a[task], b[task]):
                return tasks, (task, name), names[1:]
    return tasks, None, names[1:]


def _diverged(value) -> bool:
    """A diverged task's accuracy: NaN, or None where JSON stored the NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def same_measurement(name: str, recorded, now) -> bool:
    """A per-task metric ``name`` as recorded and as given now: the exact ones
    (:data:`~plasticlab.experiments.export.EXACT_METRICS`) bit for bit, the others to
    :data:`MEASUREMENT_DIGITS` significant digits, as an export keeps them; lists (an srank per
    layer, an accuracy-matrix row) element by element; a diverged value matching a diverged one
    (:func:`same_accuracy`)."""
    if isinstance(recorded, list) or isinstance(now, list):
        return (isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now)
                and all(same_measurement(name, a, b) for a, b in zip(recorded, now, strict=True)))
    if name in EXACT_METRICS or _diverged(recorded) or _diverged(now):
        return same_accuracy(recorded, now)
    return rounded(float(recorded), MEASUREMENT_DIGITS) == rounded(float(now), MEASUREMENT_DIGITS)


def same_accuracy(a, b) -> bool:
    """Two online accuracies bit for bit, a diverged task's NaN (stored as None in JSON) matching
    a NaN, whichever side holds which."""
    if _diverged(a) or _diverged(b):
        return _diverged(a) and _diverged(b)
    return a == b
