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


def saved_ensembles(out: Path, runs: dict[str, dict], stored_plan: dict) -> list[dict]:
    """Each ensemble with a checkpoint in ``out/checkpoints`` (started, not finished), as a dict:
    ``checkpoint`` (its file name), ``phase``, ``methods``, ``members`` (K), ``tasks``,
    ``tasks_done`` and ``steps_in_task`` at its last checkpoint, ``saved`` (when, UTC, ISO 8601),
    ``seconds_per_task`` and ``seconds_left`` at its pace so far (:func:`pace`; None without
    one), ``pace_of`` ("this sitting" or "every sitting"), ``note`` (other code trained its tasks
    so far) and ``error`` (an unreadable checkpoint: every other field None). ``runs``: the
    store's runs by id; ``stored_plan``: ``out/plan.json`` (:func:`read_plan`)."""
    from .manifest import resumed_code_note

    entries = {e["checkpoint"]: e for e in stored_plan.get("ensembles", [])}
    found = []
    for path in sorted((out / CHECKPOINTS).glob("*.ckpt")):
        state = dict.fromkeys(("phase", "methods", "members", "tasks", "tasks_done", "steps_in_task",
                               "saved", "seconds_per_task", "seconds_left", "pace_of", "note", "error"))
        state["checkpoint"] = path.name
        found.append(state)
        try:
            header = read_header(path)
        except CheckpointError as e:
            state["error"] = str(e)
            continue
        entry = entries.get(path.name, {})
        members = [runs[r] for r in entry.get("run_ids", []) if r in runs]
        done = header.get("next_task")
        saved = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(path.stat().st_mtime))
        state.update(phase=entry.get("phase"), tasks_done=done, saved=saved,
                     steps_in_task=header.get("steps_in_task") or 0, note=resumed_code_note(header) or None)
        if members:
            config = members[0]["config"]
            state.update(methods=list(dict.fromkeys(r["config"]["method"] for r in members)),
                         members=len(members), tasks=config["tasks"])
            per_task = config["steps_per_task"]
            if isinstance(done, int) and (known := pace(header, steps_done(header, per_task) / per_task,
                                                        config["tasks"])):
                state.update(zip(("seconds_per_task", "seconds_left", "pace_of"), known, strict=True))
    return found


def unsaved_ensembles(out: Path, runs: dict[str, dict],
                      stored_plan: dict) -> tuple[list[dict], list[dict]]:
    """The ``plan.json`` ensembles with no checkpoint and a run not finished: those a worker has
    taken (a run of theirs 'running': the first checkpoint comes at the first task's end), and
    those not started."""
    unsaved = [e for e in stored_plan.get("ensembles", [])
               if not (out / CHECKPOINTS / e["checkpoint"]).is_file()
               and any(runs.get(r, {}).get("status") != "finished" for r in e["run_ids"])]
    started = [e for e in unsaved if any(runs.get(r, {}).get("status") == "running" for r in e["run_ids"])]
    # A run a later plan grouped anew (written before plasticlab dropped superseded ensembles
    # from plan.json) is not waiting twice: the newest entry holding it stands.
    regrouped, later = set(), set()
    for e in reversed(stored_plan.get("ensembles", [])):
        if later.intersection(e["run_ids"]):
            regrouped.add(e["checkpoint"])
        later.update(e["run_ids"])
    return started, [e for e in unsaved if e not in started and e["checkpoint"] not in regrouped]


def ensemble_progress(out: Path, runs: dict[str, dict], stored_plan: dict | None = None) -> list[str]:
    """One line per ensemble with a checkpoint in ``out/checkpoints`` (started, not finished):
    its phase, method(s), members and the tasks done at its last checkpoint, when that was
    written, and the training time left at its pace so far (the checkpoint's training wall
    time per task done) — how far an interrupted or running sweep has come; then the ensembles
    whose runs a worker has taken but that have no checkpoint yet, and those of the plan not
    started. ``stored_plan``: ``out/plan.json`` as the caller read it (read here if not given)."""
    stored_plan = read_plan(out) if stored_plan is None else stored_plan
    lines = []
    for e in saved_ensembles(out, runs, stored_plan):
        if e["error"] is not None:
            lines.append(f"{e['checkpoint']}: unreadable ({e['error']})")
            continue
        line = (f"{e['checkpoint'].removesuffix('.ckpt')} ({e['phase'] or '?'}, "
                f"{'+'.join(e['methods'] or ['?'])}, K={e['members'] or '?'}): "
                f"{e['tasks_done']} of {e['tasks'] or '?'} tasks done"
                + (f" and {e['steps_in_task']:,} steps of the next" if e["steps_in_task"] else "")
                + f", saved {e['saved'][11:16]} UTC")
        if e["seconds_per_task"] is not None:
            line += (f"; {e['seconds_per_task']:.1f} s a task"
                     + (" this sitting" if e["pace_of"] == "this sitting" else "")
                     + f", {hms(e['seconds_left'])} of training left at that pace")
        if e["note"]:
            line += f"; note: {e['note']}"
        lines.append(line)
    started, waiting = unsaved_ensembles(out, runs, stored_plan)
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


def pace(header: dict, progress: float, tasks: int) -> tuple[float, float, str] | None:
    """The training seconds a task, the seconds left at that pace, and whose pace: that of the
    sitting that wrote the checkpoint (``"this sitting"``) once it has trained a task's worth
    (the machine's load can differ between sittings), else over ``"every sitting"`` so far;
    ``progress``: the tasks done, with the fraction of a task in flight. None without a pace."""
    wall, start = header.get("wall"), header.get("sitting_start")
    if start and progress - start["task"] >= 1:
        seconds, which = (wall - start["wall"]) / (progress - start["task"]), "this sitting"
    elif wall and progress > 0:
        seconds, which = wall / progress, "every sitting"
    else:
        return None
    return seconds, (tasks - progress) * seconds, which


def waiting_estimate(ensembles: list, calibration: dict | None) -> float | None:
    """The seconds the ensembles of the plan not started (of :func:`planned_ensembles`) would
    train for on this machine: the sweep's own estimate (``calibration``, ``plasticlab
    bench``'s, :func:`bench.load`; one worker per core); None without a calibration, or for an
    ensemble the plan cannot rebuild."""
    if calibration is None or any(e is None for e in ensembles):
        return None
    return bench.estimate_seconds(ensembles, calibration, default_workers())


def _waiting_time(ensembles: list) -> str:
    """:func:`waiting_estimate` as the status line says it."""
    calibration = bench.load()
    if calibration is None:
        return "; `plasticlab bench` calibrates this machine for an estimate of their time"
    seconds = waiting_estimate(ensembles, calibration)
    if seconds is None:
        return ""
    return (f": about {hms(seconds)} of training on {default_workers()} worker(s), by this machine's "
            "calibration")


def code_summary(runs: list[dict]) -> str:
    """'3 by git:abc…, 1 by git:abc… then git:def…, 1 by unrecorded code': how many runs each
    other code made (a run resumed across code versions: its sittings' codes in order)."""
    from .manifest import trained_by_text

    counts = Counter(map(trained_by_text, runs))
    return ", ".join(f"{n} by {code}" for code, n in sorted(counts.items()))
