"""``plasticlab sweep`` and ``presets``: a sweep's plan, its grid and the protocol's evaluation
trained (the workflow of :mod:`plasticlab.experiments.workflow`), printed as they go."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from ..experiments import bench
from ..experiments.executor import EXECUTORS
from ..experiments.orchestrate import SUPERSEDED, resumed_by_other_code, set_aside, tasks_done
from ..experiments.presets import PRESETS, get_preset
from ..experiments.progress_log import hms
from ..experiments.store import ResultStore
from ..experiments.sweep import expand
from ..experiments.workflow import (
    SweepPlan,
    SweepRequest,
    check_counts,
    finished_count,
    grid_whole,
    load_sweep,
    plan_evaluation,
    plan_sweep,
    select,
    start_grid,
    sweep_name,
    train,
)
from .common import (
    add_checkpoint_every,
    add_lock_option,
    add_logging_options,
    check_device,
    writing_into,
)


def _describe(p, workers: int, calibration: dict | None, out) -> str:
    """A plan in one line: its runs, ensembles and steps, the ensembles that resume from a
    checkpoint in ``out`` and how far they are, and the estimated time of what is left."""
    text = (f"{p.phase}: {p.total_runs} runs ({p.finished_runs} finished, {p.runs} to run) in "
            f"{len(p.ensembles)} ensembles, {p.steps:,} ensemble steps")
    # each checkpoint's header read once, for both the count and the estimate
    done = {id(e): tasks_done(out, e) for e in p.ensembles}
    resumed = [(done[id(e)], e.config.tasks) for e in p.ensembles if done[id(e)]]
    if resumed:
        text += (f"; {len(resumed)} ensemble(s) resume from a checkpoint, "
                 f"{sum(n for n, _ in resumed):,} of their {sum(t for _, t in resumed):,} tasks done")
    if calibration is not None:
        seconds = bench.estimate_seconds(p.ensembles, calibration, workers, lambda e: done[id(e)])
        text += (f"; estimated {hms(seconds)} on {workers} worker(s)"
                 + (" for the tasks left" if resumed else ""))
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
    return run_sweep(SweepRequest(
        file=args.file, preset=args.preset, tasks=args.tasks, out=args.out, scale=args.scale,
        only=args.only, shard=args.shard, workers=args.workers, max_members=args.max_members,
        device=args.device,
        data_dir=args.data_dir, executor=args.executor, ray_address=args.ray_address,
        rerun=args.rerun, dry_run=args.dry_run, compile=args.compile, progress=not args.no_progress,
        checkpoint_every=args.checkpoint_every,
        tensorboard=args.tensorboard, wandb=args.wandb, lock=not args.no_lock))


def run_sweep(request: SweepRequest) -> int:
    """Run the sweep ``request`` asks for, printing as it goes: its plan (only that, with the
    ensembles' packing, for a dry run), then its grid, then the protocol's selection and
    evaluation; 1 when an ensemble failed, else 0. Its ``--out`` is held (its lock) from before
    the plan reads it to the end, except by a dry run, which writes nothing."""
    with ExitStack() as hold:
        return _sweep(request, hold)


def _sweep(request: SweepRequest, hold: ExitStack) -> int:
    """:func:`run_sweep`, holding ``--out`` in ``hold`` once the request is checked."""
    sweep = load_sweep(request.file, request.preset, request.tasks)
    name = sweep_name(sweep, request.file, request.preset)
    out = Path(request.out or Path("results") / name)
    check_counts(request.workers, request.max_members)
    check_device(request.device)
    if not request.dry_run:
        hold.enter_context(writing_into(out, not request.lock))
    sp = plan_sweep(sweep, name, out, request)
    _print_plan(sp)
    if request.dry_run:
        for line in packing(sp.grid_plan.ensembles):
            print("    " + line)
        for message in resumed_by_other_code(out, sp.grid_plan):
            print("  " + message)
        for checkpoint in set_aside(out, sp.grid_plan):
            print(f"  would remove checkpoint {checkpoint}: {SUPERSEDED}")
        if sp.calibration is None:
            print("  (no calibration on this machine yet: run `plasticlab bench` for time estimates)")
        return 0
    from ..loggers import make_loggers

    loggers = make_loggers(request.tensorboard, request.wandb)
    for message in start_grid(sp):
        print("  " + message)
    failed = [j for j in train(sp, sp.grid_plan, loggers) if j.error]
    if sp.eval_seeds is not None and sp.shard is not None and not grid_whole(sp):
        print(f"\nshard {request.shard} of the grid trained; the protocol selects on the whole grid: "
              "import every shard's folder into one (`plasticlab import SHARD_DIR … --out ALL`) and "
              "run this sweep there — with --shard I/N again, in copies of it, to share out the "
              "evaluation")
    elif sp.eval_seeds is not None:
        failed += _evaluate(sp, loggers)
    done = finished_count(out)
    print(f"\n{done} runs finished in {out}; {len(failed)} ensemble(s) failed")
    for job in failed:
        print(f"  FAILED {job.label}: {job.error.strip().splitlines()[-1]}", file=sys.stderr)
    return 1 if failed else 0


def _print_plan(sp: SweepPlan) -> None:
    """What a sweep will train: its runs, ensembles and steps, the protocol, a time estimate."""
    r = sp.request
    print(f"sweep {sp.name}" + (f" (scale {r.scale:g})" if r.scale else "") + f" → {sp.out}")
    if sp.wanted or sp.shard:
        kept = " ".join(([f"--only {' '.join(r.only)}"] if sp.wanted else [])
                        + ([f"--shard {r.shard}"] if sp.shard else []))
        print(f"  {kept}: {len(sp.grid_runs)} of the grid's {len(sp.runs)} runs"
              + (", and the evaluation's runs that match" if sp.eval_seeds is not None else ""))
    print("  " + _describe(sp.grid_plan, sp.workers, sp.calibration, sp.out))
    if sp.eval_seeds is not None:
        print(f"  then the protocol: the best configuration per method on seeds {sp.eval_seeds}")
    if sp.options.get("forgetting") and sp.calibration is not None:
        print("  (the estimate leaves out forgetting: every task end also tests all earlier tasks, "
              "which grows with the number of tasks)")


def _evaluate(sp: SweepPlan, loggers) -> list:
    """The protocol's second phase, printed: select on the grid, train the selection on the
    evaluation seeds and print its result; the failed jobs."""
    selection, path = select(sp)
    print(f"\nselected ({_ranked_on(selection)} over the grid seeds; {path}):")
    for (problem, optimizer, method), entry in sorted(selection.items()):
        cfg, measure = entry["config"], entry["measure"]
        print(f"  {problem} {optimizer} {method:<16} lr={cfg['lr']:g} {cfg['params']} "
              f"score {measure.format(entry['score'])}{measure.unit} (of {entry['candidates']} configs)")
    eval_plan = plan_evaluation(sp, selection)
    print("  " + _describe(eval_plan, sp.workers, sp.calibration, sp.out))
    for message in resumed_by_other_code(sp.out, eval_plan):
        print("  " + message)
    failed = [j for j in train(sp, eval_plan, loggers) if j.error]
    print(evaluation_table(sp.out, selection, sp.eval_seeds))
    return failed


def _ranked_on(selection: dict) -> str:
    """What the selection ranked on: "best total online accuracy", a regression's "lowest
    total online squared error", or both."""
    texts = {("best" if e["measure"].higher_is_better else e["measure"].best_word)
             + f" total {e['measure'].name}" for e in selection.values()}
    return ", ".join(sorted(texts)) or "best total online accuracy"


def _mean_ci_text(measure, mean: float, ci: float) -> str:
    """``mean ± ci`` of a measure: an accuracy in percent, an error as it is."""
    if measure.percent:
        return f"{100 * mean:6.2f} ± {100 * ci:5.2f}"
    return f"{measure.format(mean, max(abs(mean), ci))} ± {measure.format(ci, max(abs(mean), ci))}"


def evaluation_table(out, selection: dict, seeds) -> str:
    """The protocol's result: each selected configuration's total average online accuracy
    (a regression's online squared error, as it is) over the evaluation seeds, mean ± 95 % CI
    (SPEC §6), the best first."""
    from ..experiments.protocol import config_key
    from ..report import mean_and_ci

    with ResultStore(out) as store:
        rows = store.runs(status="finished")
    names = sorted({e["measure"].name for e in selection.values()}) or ["online accuracy"]
    lines = [f"\nevaluation on seeds {seeds[0]}..{seeds[-1]} (total average {' / '.join(names)}, "
             "mean ± 95% CI):"]
    for (problem, optimizer, method), entry in sorted(
            selection.items(), key=lambda kv: -kv[1]["measure"].rank(kv[1]["score"])):
        key, measure = config_key(entry["config"]), entry["measure"]
        accs = [r["summary"][measure.total] for r in rows
                if r["seed"] in seeds and config_key(r["config"]) == key]
        if accs:
            mean, ci = mean_and_ci(accs)
            lines.append(f"  {problem} {optimizer} {method:<16} {_mean_ci_text(measure, mean, ci)} "
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


def register(sub) -> None:
    """Add ``sweep`` and ``presets`` to the ``plasticlab`` parser."""
    sw = sub.add_parser("sweep", help="run a sweep file or a preset (grid, protocol, resumable)")
    sw.add_argument("file", nargs="?", help="sweep TOML file")
    sw.add_argument("--preset", help="a preset name (see `plasticlab presets`)")
    sw.add_argument("--scale", type=float, help="shorten every run: tasks and steps × SCALE (0-1]")
    sw.add_argument("--tasks", type=int,
                    help="every run's number of tasks (steps per task unchanged; before --scale)")
    sw.add_argument("--out", help="results directory (default results/<sweep name>)")
    sw.add_argument("--data-dir", dest="data_dir",
                    help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    sw.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    sw.add_argument("--workers", type=int,
                    help="worker processes (default: one per core); with --executor interleaved, "
                         "the ensembles this process trains at once (default: all)")
    sw.add_argument("--max-members", dest="max_members", type=int,
                    help="largest ensemble (default: the fastest K of `plasticlab bench` per "
                         "architecture, else 16 on CPU; on CUDA 256 for the MLP, 64 for the CNN)")
    sw.add_argument("--executor", default="local", choices=EXECUTORS,
                    help="local: a worker process per core; interleaved: this process trains "
                         "the ensembles at once, a step of each in turn (on CUDA each on a stream "
                         "of its own); inline: one after another here; ray: a Ray cluster")
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
    sw.add_argument("--shard", metavar="I/N",
                    help="train the I-th of N shares of the runs (after --only): N commands, one "
                         "per machine or array task, each into its own --out, train every run once "
                         "between them; `plasticlab import` brings them together "
                         "(docs/experiments.md#shards)")
    sw.add_argument("--compile", action="store_true",
                    help="take each training step through torch.compile where it applies (see "
                         "plasticlab run)")
    add_logging_options(sw)
    add_lock_option(sw)
    add_checkpoint_every(sw)
    sw.add_argument("--no-progress", action="store_true", help="no progress bar (a log, a pipe)")
    sw.set_defaults(func=cmd_sweep)

    pr = sub.add_parser("presets", help="the studies of the paper, runnable with sweep --preset")
    pr.set_defaults(func=cmd_presets)
