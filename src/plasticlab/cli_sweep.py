"""The experiment commands of ``plasticlab``: ``sweep``, ``presets``, ``status``, ``report``,
``bench``."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from .checkpoint import CheckpointError, read_header
from .experiments import bench
from .experiments.executor import EXECUTORS, default_workers
from .experiments.orchestrate import (
    ensemble_label,
    evaluation_runs,
    grid_selection,
    pending_runs,
    plan,
    planned_ensembles,
    protocol_seeds,
    read_plan,
    resumed_by_other_code,
    run_plan,
    tidy_checkpoints,
    write_plan,
    write_selection,
)
from .experiments.presets import PRESETS, get_preset
from .experiments.store import STATUSES, ResultStore
from .experiments.sweep import expand, only_runs, run_filters

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _load_sweep(args) -> dict:
    if bool(args.file) == bool(args.preset):
        raise ValueError("give a sweep file or --preset NAME (one of them)")
    if args.preset:
        return with_tasks(get_preset(args.preset), args.tasks)
    return with_tasks(_read_sweep_file(args), args.tasks)


def with_tasks(sweep: dict, tasks: int | None) -> dict:
    """``sweep`` with every run's number of tasks set to ``tasks`` (None: unchanged), its
    variants' too; steps per task stay as they are."""
    if tasks is None:
        return sweep
    if tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {tasks}")
    out = dict(sweep, tasks=tasks)
    if "variants" in out:
        out["variants"] = [dict(v, tasks=tasks) if "tasks" in v else v for v in out["variants"]]
    return out


def _read_sweep_file(args) -> dict:
    path = Path(args.file)
    if not path.is_file():
        raise ValueError(f"sweep file {path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"sweep file {path} is not valid TOML: {e}") from None


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def _describe(p, workers: int, calibration: dict | None) -> str:
    text = (f"{p.phase}: {p.total_runs} runs ({p.finished_runs} finished, {p.runs} to run) in "
            f"{len(p.ensembles)} ensembles, {p.steps:,} ensemble steps")
    if calibration is not None:
        text += f"; estimated {_hms(bench.estimate_seconds(p.ensembles, calibration, workers))} " \
                f"on {workers} worker(s)"
    return text


def packing(ensembles) -> list[str]:
    """How a plan packs its runs: one line per problem × method(s) × optimizer (``a+b``: methods
    sharing ensembles), with the members of each of its ensembles (``K = 10 ×3, 4`` = three
    ensembles of 10 and one of 4)."""
    groups: dict[tuple, list[int]] = {}
    for e in ensembles:
        c = e.config
        methods = "+".join(dict.fromkeys(e.members.method_names()))
        groups.setdefault((c.problem, methods, c.optimizer), []).append(len(e.seeds))
    lines = []
    for (problem, method, optimizer), sizes in sorted(groups.items()):
        counts: dict[int, int] = {}
        for k in sizes:
            counts[k] = counts.get(k, 0) + 1
        text = ", ".join(f"{k} ×{n}" if n > 1 else str(k) for k, n in sorted(counts.items(), reverse=True))
        lines.append(f"{problem} {method} {optimizer}: {len(sizes)} ensemble(s), K = {text}")
    return lines


def cmd_sweep(args: argparse.Namespace) -> int:
    """``plasticlab sweep``: expand a sweep (a preset or a TOML file), train its grid in
    ensembles (resuming), then the protocol's evaluation; return the exit code."""
    sweep = _load_sweep(args)
    name = sweep.get("name", Path(args.file).stem if args.file else args.preset)
    out = Path(args.out or Path("results") / name)
    from .cli import check_device

    for flag, value in (("--workers", args.workers), ("--max-members", args.max_members)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    check_device(args.device)
    runs = expand(sweep, args.scale)  # every grid value is checked against its domain here
    eval_seeds = protocol_seeds(sweep)
    wanted = run_filters(args.only or [], runs, eval_seeds or ())
    grid_runs = only_runs(runs, wanted)
    if wanted and eval_seeds is not None:
        # The protocol selects on the whole grid: training part of it must not select on part.
        chosen = {id(r) for r in grid_runs}
        rest, _ = pending_runs([r for r in runs if id(r) not in chosen], out)
        if rest:
            raise ValueError(f"--only trains part of a protocol sweep, whose selection needs its whole "
                             f"grid: {len(rest)} grid run(s) outside the filter have not finished in "
                             f"{out}; run the sweep without --only first")
    workers = args.workers or default_workers()
    calibration = bench.load()
    max_members = args.max_members or bench.members_for(args.device, calibration, workers)
    # Halving ensembles until every round fills every worker feeds each CPU core; on a GPU,
    # one device for all workers, it would only shrink K below the device's best.
    split_for = workers if str(args.device).startswith("cpu") else 1
    grid_plan = plan(grid_runs, out, max_members, workers=split_for, rerun=args.rerun)
    options = {"forgetting": True} if sweep.get("forgetting") else {}
    if args.compile:
        options["compile"] = True
    print(f"sweep {name}" + (f" (scale {args.scale:g})" if args.scale else "") + f" → {out}")
    if wanted:
        print(f"  --only {' '.join(args.only)}: {len(grid_runs)} of the grid's {len(runs)} runs"
              + (", and the evaluation's runs that match" if eval_seeds is not None else ""))
    print("  " + _describe(grid_plan, workers, calibration))
    if eval_seeds is not None:
        print(f"  then the protocol: the best configuration per method on seeds {eval_seeds}")
    if options.get("forgetting") and calibration is not None:
        print("  (the estimate leaves out forgetting: every task end also tests all earlier tasks, "
              "which grows with the number of tasks)")
    if args.dry_run:
        for line in packing(grid_plan.ensembles):
            print("    " + line)
        for message in resumed_by_other_code(out, grid_plan):
            print("  " + message)
        if calibration is None:
            print("  (no calibration on this machine yet: run `plasticlab bench` for time estimates)")
        return 0
    from .experiments.loggers import make_loggers

    common = {"out": out, "data_dir": args.data_dir, "device": args.device, "workers": workers,
              "executor": args.executor, "ray_address": args.ray_address,
              "progress": not args.no_progress, "options": options,
              "loggers": make_loggers(args.tensorboard, args.wandb)}
    write_plan(out, runs, name, "grid", grid_plan.ensembles)
    for message in tidy_checkpoints(out, grid_plan) + resumed_by_other_code(out, grid_plan):
        print("  " + message)
    jobs = run_plan(grid_plan, **common)
    failed = [j for j in jobs if j.error]
    if eval_seeds is not None:
        selection = grid_selection(runs, out)
        path = write_selection(out, selection, name, eval_seeds)
        print(f"\nselected (best total online accuracy over the grid seeds; {path}):")
        for (problem, optimizer, method), entry in sorted(selection.items()):
            cfg = entry["config"]
            print(f"  {problem} {optimizer} {method:<16} lr={cfg['lr']:g} {cfg['params']} "
                  f"score {100 * entry['score']:.2f}% (of {entry['candidates']} configs)")
        eval_runs = evaluation_runs(selection, eval_seeds)
        eval_plan = plan(only_runs(eval_runs, wanted), out, max_members, phase="evaluation",
                         workers=split_for, rerun=args.rerun)
        write_plan(out, eval_runs, name, "evaluation", eval_plan.ensembles)
        print("  " + _describe(eval_plan, workers, calibration))
        for message in resumed_by_other_code(out, eval_plan):
            print("  " + message)
        failed += [j for j in run_plan(eval_plan, **common) if j.error]
        print(evaluation_table(out, selection, eval_seeds))
    with ResultStore(out) as store:
        done = len(store.runs(status="finished"))
    print(f"\n{done} runs finished in {out}; {len(failed)} ensemble(s) failed")
    for job in failed:
        print(f"  FAILED {job.label}: {job.error.strip().splitlines()[-1]}", file=sys.stderr)
    return 1 if failed else 0


def evaluation_table(out, selection: dict, seeds) -> str:
    """The protocol's result: each selected configuration's total average online accuracy
    over the evaluation seeds, mean ± 95 % CI (SPEC §6)."""
    from .experiments.protocol import config_key
    from .report import mean_and_ci

    with ResultStore(out) as store:
        rows = store.runs(status="finished")
    lines = [f"\nevaluation on seeds {seeds[0]}..{seeds[-1]} (total average online accuracy, "
             "mean ± 95% CI):"]
    for (problem, optimizer, method), entry in sorted(selection.items(),
                                                      key=lambda kv: -kv[1]["score"]):
        key = config_key(entry["config"])
        accs = [r["summary"]["total_online_accuracy"] for r in rows
                if r["seed"] in seeds and config_key(r["config"]) == key]
        if accs:
            mean, ci = mean_and_ci(accs)
            lines.append(f"  {problem} {optimizer} {method:<16} {100 * mean:6.2f} ± {100 * ci:5.2f} "
                         f"(n = {len(accs)})")
        else:
            lines.append(f"  {problem} {optimizer} {method:<16} no finished evaluation runs")
    return "\n".join(lines)


def cmd_presets(args: argparse.Namespace) -> int:
    """``plasticlab presets``: print every preset with its number of runs and description."""
    for name in PRESETS:
        sweep = get_preset(name)
        runs = expand(sweep)
        print(f"{name:<36} {len(runs):5d} runs  {sweep.get('description', '')}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """``plasticlab status``: print a results directory's runs by state, the unfinished
    ensembles' progress and pace, and runs trained by other code than this plasticlab."""
    out = Path(args.dir)
    if not (out / "results.sqlite").is_file():
        raise ValueError(f"{out} holds no results store (results.sqlite)")
    from .experiments.manifest import code_identity, from_other_code

    with ResultStore(out) as store:
        runs = store.runs()
    other_code = from_other_code([r for r in runs if r["status"] == "finished"])
    known = {r["run_id"] for r in runs}
    stored_plan = read_plan(out)
    # Runs of the plan with no attempt yet: a sweep starts a run's attempt as a worker takes it.
    waiting = [dict(p, status="to run") for p in stored_plan.get("runs", []) if p["run_id"] not in known]
    counts = {}
    for r in runs + waiting:
        key = (r["config"]["problem"], r["config"]["method"])
        counts.setdefault(key, dict.fromkeys((*STATUSES, "to run"), 0))[r["status"]] += 1
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
              f"plasticlab ({code_identity()}): {_code_summary(other_code)}; `plasticlab verify "
              f"{out}` checks whether this code gives their numbers, `sweep --rerun` (`--only "
              "KEY=VALUE` for some of them) or `run --rerun` trains them again (earlier results "
              "are kept)")
    return 0


def ensemble_progress(out: Path, runs: dict[str, dict], stored_plan: dict | None = None) -> list[str]:
    """One line per ensemble with a checkpoint in ``out/checkpoints`` (started, not finished):
    its phase, method(s), members and the tasks done at its last checkpoint, when that was
    written, and the training time left at its pace so far (the checkpoint's training wall
    time per task done) — how far an interrupted or running sweep has come; then the ensembles
    whose runs a worker has taken but that have no checkpoint yet, and those of the plan not
    started. ``stored_plan``: ``out/plan.json`` as the caller read it (read here if not given)."""
    from .experiments.manifest import resumed_code_note

    stored_plan = read_plan(out) if stored_plan is None else stored_plan
    entries = {e["checkpoint"]: e for e in stored_plan.get("ensembles", [])}
    lines = []
    for path in sorted((out / "checkpoints").glob("*.ckpt")):
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
        line = (f"{path.stem} ({entry.get('phase', '?')}, {methods}, K={len(members) or '?'}): "
                f"{done} of {tasks} tasks done, saved {saved}")
        wall = header.get("wall")
        if wall and done and isinstance(tasks, int):
            line += (f"; {wall / done:.1f} s a task, {_hms((tasks - done) * wall / done)} of "
                     "training left at that pace")
        if note := resumed_code_note(header):
            line += f"; note: {note}"
        lines.append(line)
    unsaved = [e for e in entries.values() if not (out / "checkpoints" / e["checkpoint"]).is_file()
               and any(runs.get(r, {}).get("status") != "finished" for r in e["run_ids"])]
    # A worker marks an ensemble's runs 'running' when it takes them; the first checkpoint
    # comes only at the first task's end, so such an ensemble has started without one.
    started = [e for e in unsaved if any(runs.get(r, {}).get("status") == "running" for r in e["run_ids"])]
    waiting = [e for e in unsaved if e not in started]
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
    return (f": about {_hms(bench.estimate_seconds(ensembles, calibration, workers))} of training "
            f"on {workers} worker(s), by this machine's calibration")


def _code_summary(runs: list[dict]) -> str:
    """'3 by git:abc…, 1 by git:abc… then git:def…, 1 by unrecorded code': how many runs each
    other code made (a run resumed across code versions: its sittings' codes in order)."""
    from .experiments.manifest import trained_by_text

    counts = Counter(map(trained_by_text, runs))
    return ", ".join(f"{n} by {code}" for code, n in sorted(counts.items()))


def cmd_report(args: argparse.Namespace) -> int:
    """``plasticlab report``: build the report (tables, figures, statistics) of a results
    directory or an export."""
    from .report.build import build_report
    from .report.data import load_results

    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    unknown = sorted(set(formats) - {"png", "svg", "pdf"})
    if unknown or "png" not in formats:
        raise ValueError(f"--formats {args.formats!r}: give png plus any of svg, pdf "
                         "(the HTML page embeds the PNGs)")
    results = load_results(args.dir)
    from .experiments.manifest import code_identity, from_other_code

    other_code = from_other_code(results.finished)
    if other_code:
        results.warnings.append(f"{len(other_code)} finished run(s) were trained by other code than "
                                f"this plasticlab ({code_identity()}): {_code_summary(other_code)} "
                                f"(`plasticlab verify {args.dir}` checks whether this code gives "
                                "their numbers)")
    page = build_report(args.dir, args.out, formats=formats, max_bins=args.max_bins, reps=args.reps,
                        results=results)
    for warning in results.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"report: {page}")
    print(f"        {page.parent / 'report.md'} (Markdown tables), {page.parent / 'figures'}/ "
          f"({', '.join(formats)})")
    if args.check:
        return _check_in_browser(page)
    return 0


def _check_in_browser(page: Path) -> int:
    """Load ``page`` in headless Chromium (:mod:`plasticlab.report.browser`) and print what it
    saw: 0 when it loaded cleanly, 1 on any problem."""
    from .report.browser import INSTALL_HINT, BrowserError, check_page, find_chromium

    if find_chromium() is None:
        raise ValueError(f"--check needs Chromium: {INSTALL_HINT}")
    try:
        check = check_page(page)
    except BrowserError as e:
        raise ValueError(f"--check: {e}") from None
    print(check)
    return 0 if check.ok else 1


def cmd_bench(args: argparse.Namespace) -> int:
    """``plasticlab bench``: measure this machine's step times for the sweep's time estimates
    and ensemble sizes, and save the calibration."""
    print(f"calibrating on this machine (1 torch thread per process; {args.steps} steps each):")
    calibration = bench.calibrate(args.data_dir, steps=args.steps, methods=not args.no_methods,
                                  workers=args.workers)
    path = bench.save(calibration, Path(args.save) if args.save else None)
    print(f"saved to {path} ({calibration['seconds']:.0f} s)")
    return 0


def add_logging_options(parser) -> None:
    """``--tensorboard DIR`` and ``--wandb PROJECT``: optional mirrors of the results store."""
    parser.add_argument("--tensorboard", metavar="DIR",
                        help="also log every run to TensorBoard in DIR (needs tensorboard)")
    parser.add_argument("--wandb", metavar="PROJECT",
                        help="also log every run to Weights & Biases PROJECT (needs wandb)")


def register(sub) -> None:
    """Add the experiment commands to the ``plasticlab`` parser."""
    sw = sub.add_parser("sweep", help="run a sweep file or a preset (grid, protocol, resumable)")
    sw.add_argument("file", nargs="?", help="sweep TOML file")
    sw.add_argument("--preset", help="a preset name (see `plasticlab presets`)")
    sw.add_argument("--scale", type=float, help="shorten every run: tasks and steps × SCALE (0-1]")
    sw.add_argument("--tasks", type=int,
                    help="every run's number of tasks (steps per task unchanged; before --scale)")
    sw.add_argument("--out", help="results directory (default results/<sweep name>)")
    sw.add_argument("--data-dir", dest="data_dir")
    sw.add_argument("--device", default="cpu")
    sw.add_argument("--workers", type=int, help="worker processes (default: one per core)")
    sw.add_argument("--max-members", dest="max_members", type=int,
                    help="largest ensemble (default: the fastest K of `plasticlab bench` per "
                         "architecture, else 16 on CPU; on CUDA 256 for the MLP, 64 for the CNN)")
    sw.add_argument("--executor", default="local", choices=EXECUTORS)
    sw.add_argument("--ray-address", dest="ray_address", help="Ray cluster (default $RAY_ADDRESS)")
    sw.add_argument("--dry-run", action="store_true",
                    help="check the sweep, print the plan and a time estimate; writes nothing")
    sw.add_argument("--rerun", action="store_true",
                    help="train runs that already finished again (new attempts: the earlier "
                         "results are kept; the newest finished attempt counts)")
    sw.add_argument("--only", action="append", metavar="KEY=VALUE[,VALUE…]",
                    help="train only the runs whose KEY (seed, method, optimizer, lr, … ) is one of "
                         "the VALUEs; repeatable (all must match). With --rerun: train again the "
                         "runs a fix changed, e.g. --only optimizer=upgd,upgd_nonprotecting")
    sw.add_argument("--compile", action="store_true",
                    help="take each training step through torch.compile where it applies (the MLP "
                         "with a penalty method and Adam or SGD; see plasticlab run)")
    add_logging_options(sw)
    sw.add_argument("--no-progress", action="store_true")
    sw.set_defaults(func=cmd_sweep)

    pr = sub.add_parser("presets", help="the studies of the paper, runnable with sweep --preset")
    pr.set_defaults(func=cmd_presets)

    st = sub.add_parser("status", help="progress of a results directory")
    st.add_argument("dir")
    st.set_defaults(func=cmd_status)

    rp = sub.add_parser("report", help="figures, tables, an HTML page and Markdown from a results "
                                       "directory (works on partial results)")
    rp.add_argument("dir", help="a results directory (--out of run or sweep)")
    rp.add_argument("--out", help="where to write the report (default DIR/report)")
    rp.add_argument("--formats", default="png,svg,pdf", help="figure files to write (default png,svg,pdf)")
    rp.add_argument("--max-bins", dest="max_bins", type=int, default=50,
                    help="curves with more tasks are averaged in this many bins (default 50)")
    rp.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    rp.add_argument("--check", action="store_true",
                    help="then load the page in headless Chromium: console errors, uncaught "
                         "exceptions, failed or external requests, images that did not load "
                         "(exit 1 on any)")
    rp.set_defaults(func=cmd_report)

    be = sub.add_parser("bench", help="measure this machine's speed (for sweep --dry-run)")
    be.add_argument("--data-dir", dest="data_dir")
    be.add_argument("--steps", type=int, default=200)
    be.add_argument("--no-methods", action="store_true", help="skip the per-method and per-optimizer costs")
    be.add_argument("--save", help="where to write the calibration (default: user cache)")
    be.add_argument("--workers", type=int,
                    help="also measure this many processes at once (default: one per core)")
    be.set_defaults(func=cmd_bench)
