"""How long a protocol study takes: its wall time when it finished, else its pace so far
extrapolated to the whole study (grid and evaluation), as JSON.

    python benchmarks/grid_pace.py OUT/STUDY --started EPOCH_S [--json grid.json]

The study's work is counted in member-steps (a run's tasks × steps per task): the grid's runs
(the preset's configurations × its seeds) and the evaluation's (one selected configuration per
method × the evaluation seeds, the same stream lengths). What is done is every finished run's
member-steps plus, for each ensemble with a checkpoint, its members' tasks and steps reached
(``next_task``, ``steps_in_task`` in the header). ``extrapolated_s`` = total ÷ (done ÷ elapsed):
the pace so far, kept — start-up and compilation included, so it is an upper estimate early on.
``plasticlab status`` prints the same progress per ensemble for people; this is for scripts
(``benchmarks/gpu.sh``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from plasticlab.checkpoint import CheckpointError, read_header
from plasticlab.experiments.orchestrate import protocol_seeds, read_plan
from plasticlab.experiments.pace import read_pace, read_settled
from plasticlab.experiments.presets import get_preset
from plasticlab.experiments.store import ResultStore
from plasticlab.experiments.sweep import expand


def study_member_steps(sweep: dict, tasks: int | None = None) -> tuple[int, int]:
    """(grid, evaluation) member-steps of the protocol ``sweep`` (a preset's or a sweep file's
    dict; ``tasks``: a shortened study)."""
    if tasks is not None:
        sweep = {**sweep, "tasks": tasks}
    runs = expand(sweep)
    grid = sum(r.config.tasks * r.config.steps_per_task for r in runs)
    seeds = protocol_seeds(sweep) or []
    methods = {r.config.method: r.config.tasks * r.config.steps_per_task for r in runs}
    return grid, sum(steps * len(seeds) for steps in methods.values())


def done_member_steps(out: Path) -> tuple[int, int]:
    """(member-steps done, runs finished) in the results folder ``out``: finished runs whole,
    the unfinished members of every checkpointed ensemble as far as its checkpoint reached."""
    with ResultStore(out) as store:
        runs = {r["run_id"]: r for r in store.runs()}
    finished = {rid for rid, r in runs.items() if r["status"] == "finished"}
    done = sum(r["config"]["tasks"] * r["config"]["steps_per_task"]
               for rid, r in runs.items() if rid in finished)
    for entry in read_plan(out).get("ensembles", []):
        path = out / "checkpoints" / entry["checkpoint"]
        try:
            header = read_header(path)
        except (CheckpointError, OSError):
            continue
        members = [rid for rid in entry["run_ids"] if rid not in finished and rid in runs]
        if not members:
            continue
        steps = runs[members[0]]["config"]["steps_per_task"]
        done += len(members) * (header["next_task"] * steps + (header.get("steps_in_task") or 0))
    return done, len(finished)


def pace(out: Path, sweep: dict, started: float, tasks: int | None = None,
         finished_at: float | None = None) -> dict:
    """The study's record for ``grid.json``: ``wall_s`` when it finished (``finished_at``),
    else ``extrapolated_s`` from its pace so far."""
    grid, evaluation = study_member_steps(sweep, tasks)
    done, runs_finished = done_member_steps(out)
    now = finished_at or time.time()
    record = {"study": sweep.get("name"), "tasks": tasks, "member_steps": grid + evaluation,
              "member_steps_done": done, "runs_finished": runs_finished,
              "elapsed_s": round(now - started, 1)}
    if finished_at is not None:
        record["wall_s"] = record["elapsed_s"]
    elif done:
        record["extrapolated_s"] = round((grid + evaluation) / (done / (now - started)), 1)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the study's results folder (OUT/STUDY)")
    parser.add_argument("--study", help="the preset (default: the folder's name)")
    parser.add_argument("--started", type=float, required=True, help="its start, epoch seconds")
    parser.add_argument("--finished", type=float, help="its end, epoch seconds, if it finished")
    parser.add_argument("--tasks", type=int, help="the tasks it was run with, if shortened")
    parser.add_argument("--device", default="")
    parser.add_argument("--executor", default="local", help="what trained it (sweep --executor)")
    parser.add_argument("--json", help="also write the record here")
    parser.add_argument("--log", help="the study's output: its interleaved executor's aggregate "
                                      "pace lines go into the record as `pace`, where its rate "
                                      "admission settled as `admission`")
    args = parser.parse_args()
    out = Path(args.out)
    record = pace(out, get_preset(args.study or out.name), args.started, args.tasks, args.finished)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    record.update(device=args.device, executor=args.executor, commit=commit)
    if args.log:
        lines = Path(args.log).read_text(errors="replace").splitlines()
        record["pace"], record["admission"] = read_pace(lines), read_settled(lines)
    text = json.dumps(record, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
