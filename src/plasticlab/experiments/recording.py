"""Record an ensemble's runs in the results store: what the executors write before and after
training, and where an ensemble's checkpoint lives.

Below :mod:`~plasticlab.experiments.executor` (which calls these for every job) and so below
:mod:`~plasticlab.experiments.runner` (``plasticlab run``'s driver, which calls the executor):

- :func:`record_start` starts an attempt at each member's run, with its manifest;
- :func:`record_result` commits each member's metrics and summary, and returns the JSON records
  (:func:`run_record`) that ``plasticlab run --json`` prints;
- :func:`checkpoint_path` names an ensemble's checkpoint; :func:`progress_bar` shows its steps.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..data.checksums import data_provenance
from ..engine import EnsembleResult
from ..problems import get_problem
from ..run_config import Members
from .config import RunConfig
from .manifest import build_manifest, utc_now
from .store import CHECKPOINTS, ResultStore


def run_record(config: RunConfig, result_member, result: EnsembleResult, run_id: str) -> dict:
    """The JSON record of one run, as ``plasticlab run --json`` prints it.

    On a regression problem ``total_online_squared_error`` and ``task_online_squared_error``
    stand in place of the accuracies (there is none).
    Besides the online accuracies it holds every task-end measurement as a per-task list under
    its metric name (``weight_magnitude``, ``srank`` and ``effective_rank`` — each entry a list
    over hidden layers —, ``dead_fraction``, ``dormant_fraction``, ``grad_norm``,
    ``task_test_accuracy`` for problems with test sets, and the ``*_per_layer`` lists); with
    forgetting ``accuracy_matrix`` (A[j][m], m ≤ j), ``bwt`` and ``one_step_bwt``; with
    every-N-steps measurements ``step_measurements`` (``step`` and a list per metric).
    """
    record = {
        "run_id": run_id,
        "seed": result_member.seed,
        "problem": config.problem,
        "method": result_member.method,
        "params": result_member.params,
        "optimizer": config.optimizer,
        "lr": result_member.lr,
        **_online(result_member),
    }
    record.update(result_member.task_metrics)
    if result_member.accuracy_matrix is not None:
        record["accuracy_matrix"] = result_member.accuracy_matrix
        record["bwt"] = _number_or_none(result_member.bwt)
        record["one_step_bwt"] = _number_or_none(result_member.one_step_bwt)
    if result_member.step_metrics:
        record["step_measurements"] = result_member.step_metrics
    return record


def _online(member) -> dict:
    """A run's online measure, total and per task: its accuracy, or on a regression problem its
    squared error."""
    if member.task_online_squared_error is not None:
        return {"total_online_squared_error": member.total_online_squared_error,
                "task_online_squared_error": member.task_online_squared_error}
    return {"total_online_accuracy": member.total_online_accuracy,
            "task_online_accuracy": member.task_online_accuracy}


def _number_or_none(x: float | None) -> float | None:
    """NaN (BWT of a one-task run) as None, so the JSON stays standard."""
    return None if x is None or math.isnan(x) else x


STEP_PREFIX = "steps."
"""Every-N-steps measurements are stored as metrics ``steps.<name>``, indexed by measurement
(the global step of each under ``steps.step``), beside the per-task metrics."""


def member_task_metrics(member) -> dict[str, list]:
    """What the store keeps per run: metric name → list indexed by task (``online_accuracy``, or
    ``online_squared_error`` on a regression problem, every task-end measurement,
    ``accuracy_matrix`` rows) or by measurement (``steps.*``)."""
    online = ({"online_squared_error": member.task_online_squared_error}
              if member.task_online_squared_error is not None
              else {"online_accuracy": member.task_online_accuracy})
    out = {**online, **member.task_metrics}
    if member.accuracy_matrix is not None:
        out["accuracy_matrix"] = member.accuracy_matrix
    out.update({STEP_PREFIX + name: values for name, values in member.step_metrics.items()})
    return out


def record_start(store: ResultStore, members: Members, *, device: str = "cpu",
                 threads: int | None = None,
                 record: Sequence[bool] | None = None) -> list[str | None]:
    """Start a new attempt at each member's run ('running', with its manifest); return the run
    ids (None for a member that ``record`` says not to record: it trains, for its ensemble's
    sake, but its run finished before).

    Each manifest's ``ensemble`` says which ensemble the run trained in: ``members`` (K),
    ``index`` (its member index k), and every member's ``run_ids``, ``seeds`` and ``params``.
    """
    threads_now = threads if threads is not None else (
        1 if torch.device(device).type == "cpu" else torch.get_num_threads())
    configs, seeds = members.configs(), members.seeds
    all_ids = [ResultStore.run_id(c, s) for c, s in zip(configs, seeds, strict=True)]
    ensemble = {"members": len(seeds), "run_ids": all_ids, "seeds": [int(s) for s in seeds],
                "params": [c["params"] for c in configs], "lr": [c["lr"] for c in configs],
                "methods": [c["method"] for c in configs]}
    run_ids: list[str | None] = []
    for k, (c, s, rid) in enumerate(zip(configs, seeds, all_ids, strict=True)):
        if record is not None and not record[k]:
            run_ids.append(None)
            continue
        manifest = build_manifest(c, s, device=str(device), threads=threads_now)
        manifest["ensemble"] = dict(ensemble, index=k)
        store.start_run(rid, c, manifest, code=manifest.get("code"))
        run_ids.append(rid)
    return run_ids


def record_result(store: ResultStore, config: RunConfig, run_ids: Sequence[str],
                  result: EnsembleResult) -> list[dict]:
    """Commit each member's metrics and 'finished' status; return the run records."""
    records = []
    for member, rid in zip(result.members, run_ids, strict=True):
        if rid is None:
            continue
        total = {k: v for k, v in _online(member).items() if k.startswith("total_")}
        summary = {**total, "wall_time_s": result.wall_time, "steps_per_second": result.steps_per_second,
                   "ensemble_members": len(run_ids), "measure_time_s": result.measure_time}
        if member.accuracy_matrix is not None:
            summary |= {"bwt": member.bwt, "one_step_bwt": member.one_step_bwt}
        diverged = diverged_at(member)
        if diverged is not None:
            summary["diverged_at_task"] = diverged
        sittings = result.extra.get("sittings")
        if sittings and any("code" not in s for s in sittings):
            sittings = fill_unrecorded_code(sittings, store.attempts(rid))
        store.finish_run(rid, summary, member_task_metrics(member),
                         manifest_update={"sittings": sittings,
                                          "threads": result.threads,
                                          "data_source": result.data_source,
                                          **data_provenance(result.data_source),
                                          "measurements": result.extra.get("measurements"),
                                          "backprop": result.extra.get("backprop"),
                                          "step": result.extra.get("step"),
                                          **_step_note(result),
                                          "method_notes": result.extra.get("method") or {},
                                          "end_time": utc_now()})
        records.append(run_record(config, member, result, rid)
                       | {"wall_time_s": result.wall_time,
                          "steps_per_second": result.steps_per_second,
                          "measure_time_s": result.measure_time,
                          "threads": result.threads, "backprop": result.extra.get("backprop"),
                          "step": result.extra.get("step"), **_step_note(result),
                          "reported_tasks": member.reported_tasks}
                       | ({"diverged_at_task": diverged} if diverged is not None else {}))
    return records


def _step_note(result) -> dict:
    """``{"step_note": …}`` when an asked-for compiled step ran eager (what kept it so), else
    nothing."""
    note = result.extra.get("step_note")
    return {"step_note": note} if note else {}


def fill_unrecorded_code(sittings: list[dict], attempts: list[dict]) -> list[dict]:
    """``sittings`` with the code of those that left none (a checkpoint written before sittings
    were recorded) taken from the run's earlier attempts in the store — those since its last
    finished one, this one excepted, less those of a code that recorded its own sitting —
    where they all name the same code (marked ``"code_from": "attempts"``); left unrecorded
    where they do not."""
    last_finished = max((i for i, a in enumerate(attempts[:-1]) if a["status"] == "finished"),
                        default=-1)
    recorded = {s["code"] for s in sittings if "code" in s}  # code that records its sittings
    codes = {a.get("code") for a in attempts[last_finished + 1:-1]} - recorded
    if len(codes) != 1 or None in codes:
        return sittings
    code = codes.pop()
    return [s if "code" in s else {**s, "code": code, "code_from": "attempts"} for s in sittings]


def diverged_at(member) -> int | None:
    """The first task at whose end the member's network held a non-finite weight (its
    ``weight_magnitude`` is NaN or infinite: the run diverged), or None."""
    for task, value in enumerate(member.task_metrics.get("weight_magnitude") or []):
        if isinstance(value, float) and not math.isfinite(value):
            return task
    return None


def progress_bar(config: RunConfig, members: int, *, enabled: bool = True, position: int = 0,
                 label: str | None = None):
    """The run's progress over its steps on stderr, and the on_task_end callback that shows
    each task's end: a tqdm bar where stderr shows one (:func:`~.progress_log.bars_shown`),
    else lines (:class:`~.progress_log.TaskLines`: a log, a pipe)."""
    from tqdm.auto import tqdm

    from .progress_log import TaskLines, bars_shown, task_value

    label = label or f"{config.method} {config.problem} K={members}"
    regression = get_problem(config.problem).loss == "squared_error"
    if enabled and not bars_shown():
        lines = TaskLines(label, config.tasks, config.steps_per_task, regression=regression)
        return lines, lines.task_end
    bar = tqdm(total=config.tasks * config.steps_per_task, unit="step", file=sys.stderr,
               disable=not enabled, position=position, leave=True, dynamic_ncols=True, desc=label)

    def on_task_end(task: int, accs: list[float]) -> None:
        bar.set_postfix_str(f"task {task + 1}/{config.tasks} {task_value(accs, regression)}")

    return bar, on_task_end


def checkpoint_path(out: str | Path, members: Members, kind: str = "run") -> Path:
    """Where the checkpoint of the ensemble ``members`` (config, seeds and each member's
    parameters, step size and method) lives in ``out``: ``checkpoints/<kind>-<fingerprint>.ckpt``
    (``run`` for ``plasticlab run``, ``ensemble`` for a sweep's ensembles)."""
    return Path(out) / CHECKPOINTS / f"{kind}-{members.fingerprint()}.ckpt"
