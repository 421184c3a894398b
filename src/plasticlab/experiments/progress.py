"""How far a results directory has come: its runs counted by state, the progress and pace of
its unfinished ensembles, and which other code trained some of its runs — what
``plasticlab status`` and ``plasticlab report`` print."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from ..checkpoint import CheckpointError, read_header, steps_done
from . import bench
from .executor import default_workers
from .orchestrate import ensemble_label, planned_ensembles, read_plan
from .progress_log import hms
from .store import CHECKPOINTS, STATUSES


def waiting_runs(runs: list[dict], stored_plan: dict) -> list[dict]:
    """The runs of ``stored_plan`` (``out/plan.json``) with no attempt among ``runs`` yet, with
    the status 'to run'."""
    known = {r["run_id"] for r in runs}
    # A sweep starts a run's attempt as a worker takes it.
    return [dict(p, status="to run") for p in stored_plan.get("runs", []) if p["run_id"] not in known]


def status_counts(runs: list[dict]) -> dict[tuple[str, str], dict[str, int]]:
    """``(problem, method) → {status: runs}`` over every store status and 'to run'."""
    counts = {}
    for r in runs:
        key = (r["config"]["problem"], r["config"]["method"])
        counts.setdefault(key, dict.fromkeys((*STATUSES, "to run"), 0))[r["status"]] += 1
    return counts


def ensemble_progress(out: Path, runs: dict[str, dict], stored_plan: dict | None = None) -> list[str]:
    """One line per ensemble with a checkpoint in ``out/checkpoints`` (started, not finished):
    its phase, method(s), members and the tasks done at its last checkpoint, when that was
    written, and the training time left at its pace so far (the checkpoint's training wall
    time per task done) — how far an interrupted or running sweep has come; then the ensembles
    whose runs a worker has taken but that have no checkpoint yet, and those of the plan not
    started. ``stored_plan``: ``out/plan.json`` as the caller read it (read here if not given)."""
    from .manifest import resumed_code_note

    stored_plan = read_plan(out) if stored_plan is None else stored_plan
    entries = {e["checkpoint"]: e for e in stored_plan.get("ensembles", [])}
    lines = []
    for path in sorted((out / CHECKPOINTS).glob("*.ckpt")):
        try:
            header = read_header(path)
            done = header.get("next_task")
        except CheckpointError as e:
            lines.append(f"{path.name}: unreadable ({e})")
            continue
        entry = entries.get(path.name, {})
        members = [runs[r] for r in entry.get("run_ids", []) if r in runs]
        methods = "+".join(dict.fromkeys(r["config"]["method"] for r in members)) or "?"
        tasks = members[0]["config"]["tasks"] if members else "?"
        saved = time.strftime("%H:%M UTC", time.gmtime(path.stat().st_mtime))
        in_task = header.get("steps_in_task") or 0
        line = (f"{path.stem} ({entry.get('phase', '?')}, {methods}, K={len(members) or '?'}): "
                f"{done} of {tasks} tasks done" + (f" and {in_task:,} steps of the next" if in_task else "")
                + f", saved {saved}")
        if members and isinstance(done, int):
            per_task = members[0]["config"]["steps_per_task"]
            line += _pace(header, steps_done(header, per_task) / per_task, tasks)
        if note := resumed_code_note(header):
            line += f"; note: {note}"
        lines.append(line)
    unsaved = [e for e in entries.values() if not (out / CHECKPOINTS / e["checkpoint"]).is_file()
               and any(runs.get(r, {}).get("status") != "finished" for r in e["run_ids"])]
    # A worker marks an ensemble's runs 'running' when it takes them; the first checkpoint
    # comes only at the first task's end, so such an ensemble has started without one.
    started = [e for e in unsaved if any(runs.get(r, {}).get("status") == "running" for r in e["run_ids"])]
    # A run a later plan grouped anew (written before plasticlab dropped superseded ensembles
    # from plan.json) is not waiting twice: the newest entry holding it stands.
    regrouped, later = set(), set()
    for e in reversed(stored_plan.get("ensembles", [])):
        if later.intersection(e["run_ids"]):
            regrouped.add(e["checkpoint"])
        later.update(e["run_ids"])
    waiting = [e for e in unsaved if e not in started and e["checkpoint"] not in regrouped]
    for e, ensemble in zip(started, planned_ensembles(stored_plan, started), strict=True):
        label = ensemble_label(ensemble) if ensemble is not None else e["checkpoint"]
        lines.append(f"{label}: started, no task end saved yet (its first task is training, or a "
                     "killed sweep left it so)")
    if lines and waiting:
        ensembles = planned_ensembles(stored_plan, waiting)
        lines.append(f"and {len(waiting)} ensemble(s) of the plan not started "
                     f"({sum(len(e['run_ids']) for e in waiting)} runs){_waiting_time(ensembles)}")
        lines += [f"  {ensemble_label(e)}" for e in ensembles if e is not None]
    return lines


def _pace(header: dict, progress: float, tasks: int) -> str:
    """'; 12.3 s a task this sitting, 1h02m03s of training left at that pace': the pace of the
    sitting that wrote the checkpoint once it has trained a task's worth (the machine's load
    can differ between sittings), else over every sitting so far; ``progress``: the tasks
    done, with the fraction of a task in flight. Nothing without a pace to give."""
    wall, start = header.get("wall"), header.get("sitting_start")
    if start and progress - start["task"] >= 1:
        pace, which = (wall - start["wall"]) / (progress - start["task"]), " this sitting"
    elif wall and progress > 0:
        pace, which = wall / progress, ""
    else:
        return ""
    return (f"; {pace:.1f} s a task{which}, {hms((tasks - progress) * pace)} of training left "
            "at that pace")


def _waiting_time(ensembles: list) -> str:
    """What the ensembles of the plan not started (of :func:`planned_ensembles`) would train for
    on this machine: the sweep's own estimate (``plasticlab bench``'s calibration, one worker
    per core)."""
    calibration = bench.load()
    if calibration is None:
        return "; `plasticlab bench` calibrates this machine for an estimate of their time"
    if any(e is None for e in ensembles):
        return ""
    workers = default_workers()
    return (f": about {hms(bench.estimate_seconds(ensembles, calibration, workers))} of training "
            f"on {workers} worker(s), by this machine's calibration")


def code_summary(runs: list[dict]) -> str:
    """'3 by git:abc…, 1 by git:abc… then git:def…, 1 by unrecorded code': how many runs each
    other code made (a run resumed across code versions: its sittings' codes in order)."""
    from .manifest import trained_by_text

    counts = Counter(map(trained_by_text, runs))
    return ", ".join(f"{n} by {code}" for code, n in sorted(counts.items()))
