"""``plasticlab status``: a results directory's runs by state, the unfinished ensembles'
progress and pace (:mod:`plasticlab.experiments.progress`), and runs other code trained."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..experiments import bench
from ..experiments.orchestrate import ensemble_label, planned_ensembles, read_plan
from ..experiments.progress import (
    code_summary,
    ensemble_progress,
    saved_ensembles,
    status_counts,
    unsaved_ensembles,
    waiting_estimate,
    waiting_runs,
)
from ..experiments.store import STATUSES, ResultStore


def cmd_status(args: argparse.Namespace) -> int:
    """``plasticlab status``: print a results directory's runs by state, the unfinished
    ensembles' progress and pace, and runs trained by other code than this plasticlab."""
    out = Path(args.dir)
    if not (out / "results.sqlite").is_file():
        raise ValueError(f"{out} holds no results store (results.sqlite)")
    from ..experiments.manifest import code_identity, from_other_code, plugins_changed

    with ResultStore(out) as store:
        runs = store.runs()
    other_code = from_other_code([r for r in runs if r["status"] == "finished"])
    stored_plan = read_plan(out)
    waiting = waiting_runs(runs, stored_plan)
    counts = status_counts(runs + waiting)
    if args.json:
        print(json.dumps(status_json(out, runs, counts, stored_plan, len(other_code)), indent=1))
        return 0
    print(f"{out}: {len(runs) + len(waiting)} runs")
    print(f"  {'problem':<22}{'method':<18}{'finished':>9}{'running':>9}{'failed':>8}{'interrupted':>12}"
          f"{'to run':>8}")
    for (problem, method), c in sorted(counts.items()):
        print(f"  {problem:<22}{method:<18}{c['finished']:>9}{c['running']:>9}{c['failed']:>8}"
              f"{c['interrupted']:>12}{c['to run']:>8}")
    print("  ('running': training, or left so by a killed sweep; 'interrupted': stopped by a signal;\n"
          "   'to run': in the plan, no worker has taken it yet; the sweep's command resumes and starts "
          "them)")
    progress = ensemble_progress(out, {r["run_id"]: r for r in runs}, stored_plan)
    if progress:
        print("  ensembles under way (their last checkpoint):")
        for line in progress:
            print("    " + line)
    if other_code:
        print(f"  note: {len(other_code)} finished run(s) were trained by other code than this "
              f"plasticlab ({code_identity()}): {code_summary(other_code)}; `plasticlab verify "
              f"{out}` checks whether this code gives their numbers, `sweep --rerun` (`--only "
              "KEY=VALUE` for some of them) or `run --rerun` trains them again (earlier results "
              "are kept)")
    plugins = plugins_changed([r for r in runs if r["status"] == "finished"])
    if plugins:
        print(f"  note: {plugins}")
    return 0


def status_json(out: Path, runs: list[dict], counts: dict, stored_plan: dict, other_code: int) -> dict:
    """What ``status`` prints, as one JSON object: ``runs`` (in all), ``status`` (runs by
    status, 'to run' the plan's runs no worker has taken), ``complete`` (every run finished),
    ``by_method`` (the same per problem and method), ``ensembles`` (each with a checkpoint:
    :func:`~plasticlab.experiments.progress.saved_ensembles`), ``started`` (those a worker took
    that have no checkpoint yet) and ``waiting`` (the plan's not started: how many, their runs,
    each named, and ``estimated_seconds`` by this machine's calibration, or null), and
    ``other_code_runs`` (finished runs other code trained)."""
    by_id = {r["run_id"]: r for r in runs}
    started, waiting = unsaved_ensembles(out, by_id, stored_plan)
    totals = {status: sum(c[status] for c in counts.values()) for status in (*STATUSES, "to run")}
    waiting_planned = planned_ensembles(stored_plan, waiting)
    total = sum(totals.values())
    return {
        "dir": str(out), "runs": total, "status": totals, "complete": totals["finished"] == total,
        "by_method": [{"problem": problem, "method": method, **c}
                      for (problem, method), c in sorted(counts.items())],
        "ensembles": saved_ensembles(out, by_id, stored_plan),
        "started": [ensemble_label(e) if e is not None else entry["checkpoint"]
                    for entry, e in zip(started, planned_ensembles(stored_plan, started), strict=True)],
        "waiting": {"ensembles": len(waiting), "runs": sum(len(e["run_ids"]) for e in waiting),
                    "each": [ensemble_label(e) for e in waiting_planned if e is not None],
                    "estimated_seconds": (waiting_estimate(waiting_planned, bench.load())
                                          if waiting else None)},
        "other_code_runs": other_code,
    }


def register(sub) -> None:
    """Add ``status`` to the ``plasticlab`` parser."""
    st = sub.add_parser("status", help="progress of a results directory")
    st.add_argument("dir", help="a results directory (the --out of run or sweep)")
    st.add_argument("--json", action="store_true",
                    help="print the same as one JSON object on stdout (for scripts and schedulers)")
    st.set_defaults(func=cmd_status)
