"""``plasticlab sweep``: expand, skip what is finished, group into ensembles, run; and the
paper's protocol (grid on 3 seeds → select → the winner on 10 new seeds).

Re-running a sweep runs only what did not finish (runs are identified by config and seed), so a
killed sweep resumes where it stopped — exactly: the grouping of runs into ensembles (which
runs, in which member order) is decided once, stored in ``plan.json`` with the ensemble's
checkpoint name, and reused on every resume whatever ``--workers``, ``--max-members`` or the
calibration say, so every checkpoint is picked up again — unless some of its members finished
meanwhile (another sweep's ensembles, under another ``--only``) and resuming it would train
them again for more than its checkpoint saves (:func:`worth_resuming`). A checkpoint that no
unfinished ensemble uses is reported and removed (:func:`tidy_checkpoints`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .config import RunConfig, parse_seeds, resolve_config
from .executor import Job, run_jobs
from .protocol import config_key, select_best
from .store import CHECKPOINTS, ResultStore
from .sweep import Ensemble, Run, expand, group

SELECTION_FILE = "selection.json"
PLAN_FILE = "plan.json"


@dataclass
class Plan:
    """What a sweep will run: its ensembles, and how many runs were already finished."""

    ensembles: list[Ensemble]
    total_runs: int
    finished_runs: int
    phase: str = "grid"
    notes: list[str] = field(default_factory=list)
    # the checkpoint names of plan.json's ensembles whose unfinished runs this plan groups anew
    superseded: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return sum(len(e.seeds) for e in self.ensembles)

    @property
    def steps(self) -> int:
        """Ensemble steps in all."""
        return sum(e.steps for e in self.ensembles)


def pending_runs(runs: Sequence[Run], out: str | Path) -> tuple[list[Run], int]:
    """The runs of ``runs`` not yet finished in ``out``'s store, and how many were finished."""
    path = Path(out)
    if not (path / "results.sqlite").exists():
        return list(runs), 0
    with ResultStore(path) as store:
        todo = [r for r in runs if not store.is_finished(ResultStore.run_id(r.config.to_dict(), r.seed))]
    return todo, len(runs) - len(todo)


def plan(runs: Sequence[Run], out, max_members, phase: str = "grid", workers: int = 1,
         rerun: bool = False, cost=None) -> Plan:
    """Group the unfinished runs of ``runs`` into ensembles: the ensembles stored in
    ``plan.json`` that still have an unfinished member are reused as they are (every member,
    in its order; the members that finished train again but are not recorded again) where
    :func:`worth_resuming` says so — of two that share a run, the one whose checkpoint holds
    more member-tasks; the other runs are grouped anew (see :func:`sweep.group`, which
    ``cost`` is given to), and the stored ensembles whose unfinished runs all go to this
    plan's ensembles are ``superseded``. ``rerun``: finished runs too."""
    todo, finished = (list(runs), 0) if rerun else pending_runs(runs, out)
    by_id = {ResultStore.run_id(r.config.to_dict(), r.seed): r for r in runs}
    unfinished = {ResultStore.run_id(r.config.to_dict(), r.seed) for r in todo}
    candidates, passed_over = [], []
    for stored in stored_ensembles(out):
        members = stored["run_ids"]
        ensemble = (group([by_id[m] for m in members], len(members))
                    if unfinished.intersection(members) and all(m in by_id for m in members) else [])
        if len(ensemble) == 1:
            candidates.append((stored, ensemble[0], saved_tasks(out, stored, ensemble[0].config)))
        else:  # no unfinished member, one outside these runs, or no longer one configuration
            passed_over.append(stored)
    ensembles, claimed = [], set()
    # the most saved work first: a run two stored ensembles share resumes where more is saved
    for stored, ensemble, done in sorted(candidates, key=lambda c: -len(c[1].seeds) * (c[2] or 0)):
        members = stored["run_ids"]
        left = unfinished.intersection(members)
        if claimed.intersection(members) or not worth_resuming(len(members), len(left), done,
                                                              ensemble.config.tasks):
            passed_over.append(stored)
            continue
        ensemble.record = [m in unfinished for m in members]
        ensembles.append(ensemble)
        claimed.update(members)
    rest = [r for r in todo if ResultStore.run_id(r.config.to_dict(), r.seed) not in claimed]
    return Plan(ensembles + group(rest, max_members, workers, cost), len(runs), finished, phase,
                superseded=_superseded(out, passed_over, unfinished))


def _superseded(out, passed_over: Sequence[dict], unfinished: set[str]) -> list[str]:
    """The checkpoint names of the ``passed_over`` ``plan.json`` ensembles that a plan training
    the runs ``unfinished`` replaces: those that share a run with it and have no checkpoint, or
    whose every unfinished run it trains (their checkpoint of no more use)."""
    sharing = [s for s in passed_over if unfinished.intersection(s["run_ids"])]
    outside = {m for s in sharing for m in s["run_ids"]} - unfinished
    finished = set()
    if outside and (Path(out) / "results.sqlite").exists():  # opening creates it: not for a --dry-run
        with ResultStore(out) as store:
            finished = {m for m in outside if store.is_finished(m)}
    return [s["checkpoint"] for s in sharing
            if not (Path(out) / CHECKPOINTS / s["checkpoint"]).is_file()
            or all(m in unfinished or m in finished for m in s["run_ids"])]


SUPERSEDED = "its unfinished runs train in other ensembles of this sweep"
"""Why a sweep removes the checkpoint of an ensemble its plan superseded (:attr:`Plan.superseded`)."""


def set_aside(out, p: Plan) -> list[str]:
    """The checkpoints in ``out`` of the ensembles ``p`` superseded, each as
    ``"PATH (at task T)"``: what the sweep removes as it starts (a dry run says so)."""
    paths = (Path(out) / CHECKPOINTS / name for name in p.superseded)
    return [_where(path) for path in paths if path.is_file()]


def saved_tasks(out, stored: dict, config: RunConfig) -> float | None:
    """The tasks d a ``plan.json`` ensemble's checkpoint has done (with the fraction of the
    task in flight); None without a checkpoint, 0 with one that cannot be read (the sweep then
    names it, :func:`tidy_checkpoints`)."""
    from ..checkpoint import saved_steps

    steps = saved_steps(Path(out) / CHECKPOINTS / stored["checkpoint"], config.steps_per_task)
    return None if steps is None else steps / config.steps_per_task


def worth_resuming(members: int, unfinished: int, done: float | None, tasks: int) -> bool:
    """Whether to train a stored ensemble of K = ``members`` runs, U = ``unfinished`` of them
    not finished, as it was grouped, rather than its unfinished runs in an ensemble of their
    own: yes while none has finished; otherwise only from a checkpoint (``done``: its d of T =
    ``tasks`` tasks done, :func:`saved_tasks`) that saves more than the finished members'
    training costs, K·(1 − d/T) ≤ U member-tasks. Member k's numbers are seed k's whatever its
    ensemble, so either way the runs end the same."""
    if unfinished == members:
        return True
    return done is not None and members * (1 - done / tasks) <= unfinished


def stored_ensembles(out) -> list[dict]:
    """The ensembles recorded in ``out/plan.json``: ``phase``, ``run_ids`` (member order) and
    ``checkpoint`` (its file name under ``checkpoints/``)."""
    return read_plan(out).get("ensembles", [])


def planned_runs(out) -> list[dict]:
    """The runs recorded in ``out/plan.json``, each ``run_id``, ``phase``, ``seed`` and
    ``config``: every run a sweep in ``out`` set out to make, started or not."""
    return read_plan(out).get("runs", [])


def read_plan(out) -> dict:
    """``out/plan.json`` as written by :func:`write_plan` (its ``runs`` and ``ensembles``);
    empty where there is none. A reader that needs both reads it once, so that a sweep
    rewriting it between two reads cannot give the reader two different plans."""
    path = Path(out) / PLAN_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def planned_ensembles(stored_plan: dict, entries: Sequence[dict]) -> list[Ensemble | None]:
    """The ensembles that ``stored_plan``'s entries (a ``plan.json`` of :func:`read_plan`)
    train, rebuilt from the configs and seeds the plan records for their runs; None for an
    entry whose runs the plan lacks or that no longer share a configuration."""
    recorded = {r["run_id"]: r for r in stored_plan.get("runs", [])}
    ensembles: list[Ensemble | None] = []
    for entry in entries:
        ids = entry["run_ids"]
        runs = [Run(resolve_config(recorded[r]["config"]), recorded[r]["seed"]) for r in ids
                if r in recorded]
        grouped = group(runs, len(runs)) if runs and len(runs) == len(ids) else []
        ensembles.append(grouped[0] if len(grouped) == 1 else None)
    return ensembles


def ensemble_entry(e: Ensemble, phase: str) -> dict:
    """How ``plan.json`` records an ensemble."""
    from .recording import checkpoint_path

    ids = [ResultStore.run_id(c, s) for c, s in zip(e.members.configs(), e.seeds, strict=True)]
    return {"phase": phase, "run_ids": ids,
            "checkpoint": checkpoint_path("", e.members, "ensemble").name}


def tidy_checkpoints(out, p: Plan) -> list[str]:
    """Check the checkpoints of ``p``'s ensembles (their headers: an unusable one is a
    :class:`~plasticlab.checkpoint.CheckpointError` naming it, before anything trains) and
    remove every sweep checkpoint in ``out/checkpoints`` that no unfinished ensemble of the
    sweep uses; returns one message per file removed."""
    from .. import checkpoint as ckpt

    folder = Path(out) / CHECKPOINTS
    if not folder.is_dir():
        return []
    used = {ensemble_entry(e, p.phase)["checkpoint"] for e in p.ensembles}
    for name in used:
        if (folder / name).is_file():
            ckpt.read_header(folder / name)
    with ResultStore(out) as store:
        keep = used | {e["checkpoint"] for e in stored_ensembles(out)
                       if not all(store.is_finished(r) for r in e["run_ids"])}
    messages = []
    for path in sorted(folder.glob("*.ckpt")):
        if path.name in keep or path.name.startswith("run-"):  # run-: `plasticlab run`'s own
            continue
        where = _where(path)
        path.unlink()
        why = SUPERSEDED if path.name in p.superseded else "no unfinished ensemble of this sweep uses it"
        messages.append(f"removed checkpoint {where}: {why}")
    return messages


def _where(path: Path) -> str:
    """``"PATH (at task T)"``, or ``"PATH (unusable: …)"``: a checkpoint as the sweep names
    one it removes."""
    from .. import checkpoint as ckpt

    try:
        return f"{path} (at {ckpt.position(ckpt.read_header(path))})"
    except (ckpt.CheckpointError, OSError) as exc:
        return f"{path} (unusable: {exc})"


def resumed_by_other_code(out, p: Plan) -> list[str]:
    """One note per checkpoint of ``p``'s ensembles whose tasks so far other code trained
    (:func:`~plasticlab.experiments.manifest.resumed_code_note`): the sweep resumes it, and its
    runs will list each sitting's code."""
    from .. import checkpoint as ckpt
    from .manifest import resumed_code_note
    from .recording import checkpoint_path

    notes = []
    for e in p.ensembles:
        path = checkpoint_path(out, e.members, "ensemble")
        if path.is_file() and (note := resumed_code_note(ckpt.read_header(path))):
            notes.append(f"note: {path.name} ({ensemble_label(e)}): {note}")
    return notes


def tasks_done(out, ensemble) -> int:
    """The tasks ``ensemble`` (anything with ``members``: a plan's ensemble, a job) has done
    by its checkpoint in ``out``: what a resumed sweep does not train again. 0 without a
    checkpoint, or with one that cannot be read (the sweep then says so, and trains it from the
    start)."""
    from ..checkpoint import saved_steps
    from .recording import checkpoint_path

    per_task = ensemble.members.config.steps_per_task
    return (saved_steps(checkpoint_path(out, ensemble.members, "ensemble"), per_task) or 0) // per_task


def run_plan(p: Plan, *, out, data_dir=None, device="cpu", workers=None, executor="local",
             ray_address=None, progress=True, options: dict | None = None, loggers=(),
             on_done=None, cost=None) -> list[Job]:
    """Train every ensemble of ``p``; returns the jobs (failures recorded, not raised).
    ``on_done(job)`` is called as each ensemble ends, once its runs are recorded; ``cost``
    orders them, the costliest first (:func:`~plasticlab.experiments.executor.run_jobs`)."""
    jobs = [Job(e.members, label=ensemble_label(e), options=dict(options or {}), record=e.record)
            for e in p.ensembles]
    return run_jobs(jobs, out=out, data_dir=data_dir, device=device, workers=workers,
                    executor=executor, ray_address=ray_address, progress=progress, loggers=loggers,
                    on_done=on_done, cost=cost)


def ensemble_label(e: Ensemble) -> str:
    """How progress lines and notes name an ensemble: its method(s), problem, step size(s), K."""
    rates = sorted(set(e.members.rates()))
    methods = "+".join(dict.fromkeys(e.members.method_names()))
    return f"{methods} {e.config.problem} lr={','.join(f'{r:g}' for r in rates)} K={len(e.seeds)}"


def evaluation_runs(selection: dict, seeds: Sequence[int]) -> list[Run]:
    """The protocol's second phase: each selected configuration on ``seeds``."""
    runs = []
    for entry in selection.values():
        config = RunConfig(**entry["config"])
        runs.extend(Run(config, s) for s in seeds)
    return runs


def write_plan(out, runs: Sequence[Run], sweep_name: str, phase: str,
               ensembles: Sequence[Ensemble] = (), superseded: Sequence[str] = ()) -> Path:
    """Record every run a sweep intends to make, and the ``ensembles`` it groups them into,
    in ``out/plan.json`` (added to what is there, less the ensembles named in ``superseded``:
    :attr:`Plan.superseded`; written atomically).

    ``plasticlab report`` compares it with the store to say which planned runs have not
    finished — a sweep that is still running, or one that was stopped; :func:`plan` reuses
    the ensembles on every resume.
    """
    path = Path(out) / PLAN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    planned = json.loads(path.read_text()) if path.is_file() else {"sweep": sweep_name, "runs": []}
    # an ensemble a plan superseded is not to train: kept, `status` would count its runs twice
    stored = planned["ensembles"] = [e for e in planned.get("ensembles", [])
                                     if e["checkpoint"] not in superseded]
    known = {e["checkpoint"] for e in stored}
    for e in ensembles:
        entry = ensemble_entry(e, phase)
        if entry["checkpoint"] not in known:
            known.add(entry["checkpoint"])
            stored.append(entry)
    seen = {p["run_id"] for p in planned["runs"]}
    for r in runs:
        config = r.config.to_dict()
        rid = ResultStore.run_id(config, r.seed)
        if rid not in seen:
            seen.add(rid)
            planned["runs"].append({"run_id": rid, "phase": phase, "seed": r.seed, "config": config})
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(planned, indent=1))
    os.replace(tmp, path)
    return path


def write_selection(out, selection: dict, sweep_name: str,
                    evaluation_seeds: Sequence[int] | None = None) -> Path:
    """Record the protocol's choices in ``out/selection.json`` (human-readable, diffable),
    with the seeds the selected configurations are evaluated on."""
    rows = [{"problem": p, "optimizer": o, "method": m, "score": e["score"], "seeds": e["seeds"],
             "candidates": e["candidates"], "lr": e["config"]["lr"], "params": e["config"]["params"],
             "config": e["config"]} for (p, o, m), e in sorted(selection.items())]
    path = Path(out) / SELECTION_FILE
    doc = {"sweep": sweep_name, "selected": rows}
    if evaluation_seeds is not None:
        doc["evaluation_seeds"] = list(evaluation_seeds)
    path.write_text(json.dumps(doc, indent=2))
    return path


def grid_selection(runs: Sequence[Run], out) -> dict:
    """Select the best configuration among the finished runs of ``runs``."""
    keys = {ResultStore.run_id(r.config.to_dict(), r.seed) for r in runs}
    with ResultStore(out) as store:
        rows = [row for row in store.runs(status="finished") if row["run_id"] in keys]
    return select_best(rows)


def sweep_runs(sweep: dict, out, scale: float | None = None) -> list[Run]:
    """Every run that ``plasticlab sweep`` of ``sweep`` (shortened by ``scale``) trains into
    ``out``: its grid and, for a protocol sweep, the evaluation of the configurations that
    ``out/selection.json`` selected from this grid (none before the grid's selection). A results
    directory may also hold the runs of other sweeps (another ``--scale`` or ``--tasks``):
    these are what tells them apart."""
    runs = expand(sweep, scale)
    seeds = protocol_seeds(sweep)
    path = Path(out) / SELECTION_FILE
    if seeds is None or not path.is_file():
        return runs
    grid = {config_key(r.config.to_dict()) for r in runs}
    rows = json.loads(path.read_text()).get("selected", [])
    return runs + evaluation_runs({i: row for i, row in enumerate(rows)
                                   if config_key(row["config"]) in grid}, seeds)


def protocol_seeds(sweep: dict) -> list[int] | None:
    """The evaluation seeds of a protocol sweep, or None when the sweep is a plain grid."""
    protocol = sweep.get("protocol")
    if not protocol:
        return None
    unknown = set(protocol) - {"evaluation_seeds"}
    if unknown:
        raise ValueError(f"unknown protocol key(s) {sorted(unknown)}; valid: evaluation_seeds")
    seeds = protocol.get("evaluation_seeds", "100-109")
    return parse_seeds(seeds)


__all__ = ["PLAN_FILE", "SELECTION_FILE", "SUPERSEDED", "Plan", "evaluation_runs", "grid_selection",
           "pending_runs", "plan", "planned_runs", "protocol_seeds", "read_plan", "resumed_by_other_code",
           "run_plan", "saved_tasks", "set_aside", "stored_ensembles", "sweep_runs", "tidy_checkpoints",
           "worth_resuming", "write_plan", "write_selection"]
