"""Run an ensemble and record every member in the results store (one row per run)."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch

from ..engine import EnsembleResult, train_ensemble
from .config import RunConfig
from .manifest import build_manifest, utc_now
from .store import ResultStore


def run_record(config: RunConfig, result_member, result: EnsembleResult, run_id: str) -> dict:
    """The JSON record of one run, as ``plasticlab run --json`` prints it."""
    return {
        "run_id": run_id,
        "seed": result_member.seed,
        "problem": config.problem,
        "method": config.method,
        "params": result_member.params,
        "optimizer": config.optimizer,
        "lr": config.lr,
        "total_online_accuracy": result_member.total_online_accuracy,
        "task_online_accuracy": result_member.task_online_accuracy,
    }


def run_ensemble(
    config: RunConfig,
    seeds: Sequence[int],
    *,
    out: str | Path,
    data_dir=None,
    device: str = "cpu",
    threads: int | None = None,
    progress: bool = True,
    position: int = 0,
    member_params: Sequence[dict] | None = None,
) -> list[dict]:
    """Train ``seeds`` as one ensemble and store each run; return their records.

    Runs are marked 'running' before training, and each run's metrics and 'finished' status
    are committed together at the end; on an exception every run is marked 'failed' with its
    traceback and the exception propagates.
    """
    from tqdm.auto import tqdm

    store = ResultStore(out)
    base = config.to_dict()
    configs = [dict(base, params=dict(base["params"], **(member_params[k] if member_params else {})))
               for k in range(len(seeds))]
    run_ids = [ResultStore.run_id(c, s) for c, s in zip(configs, seeds, strict=True)]
    threads_now = 1 if threads is None and torch.device(device).type == "cpu" else (
        threads or torch.get_num_threads())
    for c, s, rid in zip(configs, seeds, run_ids, strict=True):
        store.start_run(rid, c, build_manifest(c, s, device=str(device), threads=threads_now))
    bar = tqdm(total=config.tasks * config.steps_per_task, unit="step", file=sys.stderr,
               disable=not progress, position=position, leave=True, dynamic_ncols=True,
               desc=f"{config.method} {config.problem} K={len(seeds)}")

    def on_task_end(task: int, accs: list[float]) -> None:
        mean = sum(accs) / len(accs)
        bar.set_postfix_str(f"task {task + 1}/{config.tasks} acc {100 * mean:.1f}%")

    try:
        result = train_ensemble(config, seeds, member_params, data_dir=data_dir, device=device,
                                threads=threads, on_task_end=on_task_end, on_steps=bar.update)
    except BaseException:
        error = traceback.format_exc()
        for rid in run_ids:
            store.fail_run(rid, error)
        store.close()
        raise
    finally:
        bar.close()
    records = []
    for member, rid in zip(result.members, run_ids, strict=True):
        summary = {"total_online_accuracy": member.total_online_accuracy,
                   "wall_time_s": result.wall_time, "steps_per_second": result.steps_per_second,
                   "ensemble_members": len(seeds)}
        store.finish_run(rid, summary, {"online_accuracy": member.task_online_accuracy},
                         manifest_update={"threads": result.threads, "data_source": result.data_source,
                                          "end_time": utc_now()})
        records.append(run_record(config, member, result, rid)
                       | {"wall_time_s": result.wall_time, "steps_per_second": result.steps_per_second,
                          "threads": result.threads, "reported_tasks": member.reported_tasks})
    store.close()
    return records
