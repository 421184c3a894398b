"""``plasticlab verify``: train recorded runs again and check that this code gives their numbers.

A committed result stays true only while the code still makes it. For each chosen ensemble of
a results directory or an export, :func:`verify_ensemble` trains the same members again — the
config, and each member's seed, method parameters, step size and method, as the run manifest's
``ensemble`` record gives them — for the first T tasks, with the recorded torch threads,
backward pass and step (eager or compiled), without the task-end measurements (which never
change training). It then compares every member's online accuracy aₜ on those tasks with the
recorded value, bit for bit: on the CPU, with one thread, an ensemble trained again gives
exactly the numbers it gave (docs/member-independence.md says where that holds and where not).

With ``members=N`` only the first N recorded runs of an ensemble are trained again, as an
ensemble of their own, where member k of an ensemble is seed k alone to the bit
(:func:`plasticlab.member_independence.member_independence`); elsewhere (CUDA, more threads)
the whole ensemble still is, so the check stays exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..run_config import Members
from .export import read_results
from .manifest import trained_by_text
from .protocol import ONLINE_ACCURACY, ONLINE_SQUARED_ERROR, recorded_measure


@dataclass
class Mismatch:
    """A recorded run whose online accuracy on a task is not what this code gives."""

    run_id: str
    method: str
    seed: int
    task: int
    recorded: float
    now: float


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

    @property
    def compared(self) -> int:
        """How many recorded runs of the ensemble were compared: all of them."""
        return len(self.run_ids)

    @property
    def same(self) -> bool:
        """Every recorded member gave the same online accuracy on every task compared."""
        return not self.mismatches


def recorded_runs(directory: str | Path) -> tuple[list[dict], dict[str, list[float]]]:
    """The finished runs of a results directory (its store, or else its export:
    :func:`~plasticlab.experiments.export.read_results`) and each one's recorded online accuracy
    per task, by run id — a regression's online squared error (:func:`online_metric`)."""
    rows, metrics, _ = read_results(directory)
    runs = [r for r in rows if r["status"] == "finished"]
    return runs, {r["run_id"]: metrics.get(r["run_id"], {}).get(online_metric(r), []) for r in runs}


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


def verify_ensemble(members: Sequence[dict], accuracy: dict[str, list[float]], tasks: int,
                    data_dir=None, device: str = "cpu", limit: int | None = None) -> Check:
    """Train the ensemble that trained ``members`` (recorded runs, each with its manifest) again
    for its first ``tasks`` tasks and compare each recorded member's online accuracy there (a
    regression's online squared error: :func:`online_metric`); with
    ``limit``, only the first ``limit`` of ``members``, on their own, where that is exact
    (:func:`alone_is_exact`)."""
    from ..engine import train_ensemble
    from .config import resolve_config

    first = members[0]
    regression = online_metric(first) == ONLINE_SQUARED_ERROR.metric
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
                            compile=manifest.get("step") == "compiled", measure=False)
    # the code of the sittings that trained the tasks compared (a run resumed across versions)
    check = Check([m["run_id"] for m in members], describe(members), trained_by_text(first, tasks),
                  manifest.get("device", "cpu"), tasks, trained=len(kept))
    for run in members:
        trained = result.members[position[run["run_id"]]]
        now = trained.task_online_squared_error if regression else trained.task_online_accuracy
        for task, recorded in enumerate(accuracy[run["run_id"]][:tasks]):
            if not same_accuracy(recorded, now[task]):
                check.mismatches.append(Mismatch(run["run_id"], run["config"]["method"], run["seed"],
                                                 task, recorded, now[task]))
                break
    return check


def _diverged(value) -> bool:
    """A diverged task's accuracy: NaN, or None where JSON stored the NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def same_accuracy(a, b) -> bool:
    """Two online accuracies bit for bit, a diverged task's NaN (stored as None in JSON) matching
    a NaN, whichever side holds which."""
    if _diverged(a) or _diverged(b):
        return _diverged(a) and _diverged(b)
    return a == b
