"""``plasticlab status``: a results directory's runs by state, the unfinished ensembles'
progress and pace (:mod:`plasticlab.experiments.progress`), and runs other code trained."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments.orchestrate import read_plan
from ..experiments.progress import code_summary, ensemble_progress, status_counts, waiting_runs
from ..experiments.store import ResultStore


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


def register(sub) -> None:
    """Add ``status`` to the ``plasticlab`` parser."""
    st = sub.add_parser("status", help="progress of a results directory")
    st.add_argument("dir", help="a results directory (the --out of run or sweep)")
    st.set_defaults(func=cmd_status)
