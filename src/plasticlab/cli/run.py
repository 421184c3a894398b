"""``plasticlab run``, ``list`` and ``demo``: train one ensemble, list what can be trained,
and the README's comparison."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path

from .. import checkpoint as ckpt
from ..experiments.config import RUN_PARAMETERS, apply_setting, parse_seeds, resolve_config
from ..optim import OPTIMIZERS
from .common import (
    CLIError,
    add_checkpoint_every,
    add_lock_option,
    add_logging_options,
    check_device,
    check_threads,
    load_toml,
    writing_into,
)

# Keys a TOML run file may hold besides the config keys of SPEC §8.
RUN_FILE_KEYS = ("seeds", "data_dir", "out", "device", "threads", "forgetting", "measure_every",
                 "measure")


def build_run_request(args: argparse.Namespace) -> tuple[dict, dict]:
    """(raw config, execution options) from a TOML file overridden by command-line options."""
    raw = load_toml(args.config) if args.config else {}
    execution = {k: raw.pop(k) for k in RUN_FILE_KEYS if k in raw}
    for key in ("problem", "method", "optimizer", "lr", "tasks", "steps_per_task", "batch_size"):
        value = getattr(args, key)
        if value is not None:
            raw[key] = value
    for setting in args.set or []:
        if "=" not in setting:
            raise CLIError(f"--set expects KEY=VALUE, got {setting!r}")
        key, value = setting.split("=", 1)
        if key.strip() in RUN_FILE_KEYS:
            execution[key.strip()] = value
        else:
            apply_setting(raw, key, value)
    for key in RUN_FILE_KEYS:
        value = getattr(args, key, None)
        if value is not None and value is not False:  # an unset flag must not undo the file
            execution[key] = value
    return raw, execution


def cmd_run(args: argparse.Namespace) -> int:
    """``plasticlab run``: train one ensemble (one configuration, K seeds), print its per-task
    table and save its results; return the exit code. ``--out`` is held (its lock) from before
    its store is read to the end."""
    with ExitStack() as hold:
        return _run(args, hold)


def _run(args: argparse.Namespace, hold: ExitStack) -> int:
    """:func:`cmd_run`, holding ``--out`` in ``hold`` once the request is checked."""
    from ..experiments.runner import run_ensemble, strict_json
    from ..loggers import make_loggers
    from ..measure.optional import parse_measurements
    from ..problems import get_problem

    raw, ex = build_run_request(args)
    config = resolve_config(raw)
    seeds = ex.get("seeds", "0")
    seeds = parse_seeds(seeds)
    out = Path(ex.get("out") or "plasticlab-results")
    threads = check_threads(ex.get("threads"))
    device = check_device(ex.get("device", "cpu"))
    args.forgetting = args.forgetting or str(ex.get("forgetting", "")).lower() in ("true", "1")
    if args.measure_every is None and ex.get("measure_every") is not None:
        args.measure_every = int(ex["measure_every"])
    if args.no_measure and (args.forgetting or args.measure_every is not None):
        raise CLIError("--no-measure cannot be combined with --forgetting or --measure-every")
    if args.measure_every is not None and args.measure_every < 1:
        raise CLIError(f"--measure-every must be >= 1 step, got {args.measure_every}")
    if args.forgetting and not get_problem(config.problem).has_test_sets:
        raise CLIError(f"--forgetting needs held-out test sets; {config.problem} has none")
    try:
        measurements = parse_measurements(ex.get("measure"))
    except ValueError as e:
        raise CLIError(f"--measure: {e}") from None
    if args.no_measure and measurements:
        raise CLIError("--no-measure cannot be combined with --measure")
    hold.enter_context(writing_into(out, args.no_lock))
    seeds = _unfinished_seeds(config, seeds, out, rerun=args.rerun)
    if not seeds:
        if args.json:
            print(json.dumps({"runs": []}))
        return 0
    records = run_ensemble(config, seeds, out=out, data_dir=ex.get("data_dir"),
                           device=device, threads=threads,
                           progress=not args.no_progress, measure=not args.no_measure,
                           measure_every=args.measure_every, forgetting=args.forgetting,
                           measurements=measurements, backprop=args.backprop, compile=args.compile,
                           checkpoint_every=args.checkpoint_every,
                           loggers=make_loggers(args.tensorboard, args.wandb),
                           resume=not args.no_resume, on_resume=_say_resumed)
    if records and records[0].get("step_note"):
        print(f"plasticlab: note: {records[0]['step_note']}", file=sys.stderr)
    for r in records:
        if "diverged_at_task" in r:
            print(f"plasticlab: warning: seed {r['seed']} diverged (non-finite weights at the end of "
                  f"task {r['diverged_at_task']}): its accuracies are a broken network's; try a "
                  "smaller --lr", file=sys.stderr)
    if args.json:
        # Strict JSON: NaN and infinities (a diverged run's measurements) become null.
        json.dump(strict_json({"runs": records}), sys.stdout, indent=None, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    _print_results(config, seeds, records, out)
    return 0


def _say_resumed(path, header) -> None:
    """Tell on stderr that a run resumes from checkpoint ``path``, and by which code it was
    trained so far when that is not this code."""
    from ..experiments.manifest import resumed_code_note

    print(f"plasticlab: resuming from {path} at {ckpt.position(header)} (--no-resume starts over)",
          file=sys.stderr)
    if note := resumed_code_note(header):
        print(f"plasticlab: note: {note}", file=sys.stderr)


def _print_results(config, seeds: list[int], records: list[dict], out: Path) -> None:
    """The per-task table of a run, its internals' summary and its speed."""
    from ..report import task_table
    from ..report.tables import internals_summary

    # a regression problem's online measure is its squared error (there is no accuracy)
    key = "task_online_squared_error" if "task_online_squared_error" in records[0] else "task_online_accuracy"
    curves = {config.method: [r[key] for r in records]}
    print(f"{config.problem} · {config.method} {config.params or ''} · {config.optimizer} "
          f"lr={config.lr} · {config.tasks} tasks × {config.steps_per_task} steps, "
          f"batch {config.batch_size} · seeds {seeds}")
    print(task_table(curves, reported=records[0]["reported_tasks"],
                     measure=key.removeprefix("task_").replace("_", " ")))
    summary = internals_summary(records)
    if summary:
        print(summary)
    r = records[0]
    print(f"{r['wall_time_s']:.1f} s, {r['steps_per_second']:.0f} ensemble steps/s "
          f"(K={len(seeds)}, {r['threads']} thread(s)); results in {out}/")


def _unfinished_seeds(config, seeds: list[int], out: Path, rerun: bool) -> list[int]:
    """The seeds whose runs of ``config`` have not finished in ``out`` (all with ``rerun``);
    says on stderr which are skipped. Reads the store only if it exists (creates nothing)."""
    from ..experiments.store import DB_NAME, ResultStore
    from ..run_config import Members

    if rerun or not (out / DB_NAME).is_file():
        return seeds
    with ResultStore(out) as store:
        done = [s for c, s in zip(Members.from_config(config, seeds).configs(), seeds, strict=True)
                if store.is_finished(ResultStore.run_id(c, s))]
    if done:
        left = [s for s in seeds if s not in done]
        print(f"plasticlab: seed(s) {','.join(map(str, done))} of this configuration already finished "
              f"in {out}: skipped" + (f", training {','.join(map(str, left))}" if left else "")
              + " (--rerun trains them again; earlier results are kept)", file=sys.stderr)
    return [s for s in seeds if s not in done]


def _plugin(registry, name: str) -> str:
    """`` [from DIST VERSION]`` for a class another package added, else nothing."""
    origin = registry.origin(name)
    return "" if origin is None else f" [from {origin['distribution']} {origin['version']}]"


def cmd_list(args: argparse.Namespace) -> int:
    """``plasticlab list``: print the registered methods, problems and optimizers with their
    hyper-parameters and defaults."""
    from ..methods import BOUNDARY_ORACLE_NOTE, METHODS, boundary_oracle
    from ..optim import optimizer_hyperparameters
    from ..problems import PROBLEMS

    print("problems:")
    for name, cls in PROBLEMS.items():
        d = cls.defaults
        print(f"  {name:<22} {cls.description}{_plugin(PROBLEMS, name)}")
        print(f"  {'':<22} {cls.arch}, {d['tasks']} tasks × {d['steps_per_task']} steps, "
              f"batch {d['batch_size']}" + (", test sets" if cls.has_test_sets else "")
              + (f", {cls.loss} loss" if cls.loss != "cross_entropy" else ""))
        for p in cls.parameters:
            print(f"  {'':<24}{p.name} = {p.default!r}: {p.doc}")
    print("\nmethods:")
    for name, cls in METHODS.items():
        print(f"  {name:<22} {cls.description}" + (" [boundary oracle †]" if boundary_oracle(cls) else "")
              + _plugin(METHODS, name))
        for p in cls.hyperparameters:
            choices = f" ({' | '.join(p.choices)})" if p.choices else ""
            print(f"  {'':<24}{p.name} = {p.default!r}{choices}: {p.doc}")
    print(f"  † boundary oracle: {BOUNDARY_ORACLE_NOTE}")
    print("\noptimizers (--optimizer) and their own settings (--set KEY=VALUE):")
    for name in OPTIMIZERS:
        print(f"  {name}")
        for p in optimizer_hyperparameters(name):
            print(f"  {'':<24}{p.name} = {p.default!r}: {p.doc}")
    from ..measure.optional import MEASUREMENTS

    print("\noptional task-end measurements (--measure NAME,… or all; a sweep's measure = [...]):")
    for name, (metrics, doc) in MEASUREMENTS.items():
        print(f"  {name:<22} {doc}")
        print(f"  {'':<22} records: {', '.join(metrics)}")
    print("\nrun parameters (--set KEY=VALUE or a TOML key):")
    for p in RUN_PARAMETERS:
        choices = f" ({' | '.join(p.choices)})" if p.choices else ""
        print(f"  {p.name:<22} {p.doc}{choices}; default {p.default!r}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``plasticlab demo``: the README's L2 Init vs Baseline comparison on Permuted MNIST (a
    printed table and a saved figure)."""
    from ..demo import run_demo

    run_demo(tasks=args.tasks, steps_per_task=args.steps_per_task, seeds=parse_seeds(args.seeds),
             data_dir=args.data_dir, out=Path(args.out), workers=args.workers,
             progress=not args.no_progress)
    return 0


def register(sub) -> None:
    """Add ``run``, ``list`` and ``demo`` to the ``plasticlab`` parser."""
    run = sub.add_parser("run", help="train one configuration on one or more seeds (one ensemble)")
    run.add_argument("config", nargs="?", help="TOML config file (options below override it)")
    run.add_argument("--problem", help="problem name (see `plasticlab list`)")
    run.add_argument("--method", help="method name (see `plasticlab list`)")
    run.add_argument("--optimizer", help=" | ".join(OPTIMIZERS) + " (their settings: plasticlab list)")
    run.add_argument("--lr", type=float, help="step size α")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="any method, problem or run parameter, e.g. --set strength=1e-2")
    run.add_argument("--seeds", help="seeds: a range 0-7 or a list 0,3,5 (default 0)")
    run.add_argument("--tasks", type=int, help="tasks (default: the problem's)")
    run.add_argument("--steps-per-task", dest="steps_per_task", type=int,
                     help="steps a task (default: the problem's)")
    run.add_argument("--batch-size", dest="batch_size", type=int,
                     help="examples a step (default: the problem's)")
    run.add_argument("--data-dir", dest="data_dir",
                     help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    run.add_argument("--out", help="results directory (default ./plasticlab-results)")
    run.add_argument("--device", help="cpu | cuda | cuda:N (default cpu)")
    run.add_argument("--threads", type=int, help="torch threads (default 1 on CPU: fastest here)")
    run.add_argument("--backprop", choices=("auto", "autograd", "manual"), default="auto",
                     help="how gradients are computed: the ReLU MLP's hand-written backward "
                          "(manual), autograd, or manual wherever the network allows (auto)")
    run.add_argument("--compile", action="store_true",
                     help="take each training step through torch.compile where it applies (an "
                          "MLP with Adam or SGD and any method; Shrink & Perturb, CBP, SNR and L2 "
                          "Init + Resample with draws=philox; the same numbers up to rounding; "
                          "docs/performance.md lists which forms and says when it is faster)")
    run.add_argument("--rerun", action="store_true",
                     help="train seeds whose run already finished in --out again (a new attempt: "
                          "the earlier results are kept; the newest finished attempt counts)")
    run.add_argument("--no-resume", dest="no_resume", action="store_true",
                     help="start from the first task even if an interrupted attempt left a "
                          "checkpoint (by default the run continues from it)")
    add_lock_option(run)
    run.add_argument("--json", action="store_true", help="print only JSON results on stdout (strict "
                                                         "JSON: NaN and infinities as null)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_logging_options(run)
    add_checkpoint_every(run)
    run.add_argument("--forgetting", action="store_true",
                     help="at each task end also test every earlier task: accuracy matrix, BWT, "
                          "one-step BWT (problems with test sets)")
    run.add_argument("--no-measure", action="store_true",
                     help="skip the task-end measurements (srank, weight magnitude, dead units, "
                          "test accuracy, ...)")
    run.add_argument("--measure-every", dest="measure_every", type=int, metavar="N",
                     help="also measure the network internals every N steps")
    run.add_argument("--measure", metavar="NAME,…",
                     help="optional task-end measurements to add, by name, or all (see "
                          "`plasticlab list`; the Hessian's is the costly one)")
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="problems and methods with their parameters")
    lst.set_defaults(func=cmd_list)

    demo = sub.add_parser("demo", help="L2 Init vs Baseline on Permuted MNIST: table and figure")
    demo.add_argument("--data-dir", dest="data_dir",
                      help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    demo.add_argument("--out", default="plasticlab-demo",
                      help="where the figure and the results go (default plasticlab-demo)")
    demo.add_argument("--tasks", type=int, default=20, help="Permuted MNIST tasks (default 20)")
    demo.add_argument("--steps-per-task", dest="steps_per_task", type=int, default=625,
                      help="steps a task (default 625, the paper's)")
    demo.add_argument("--seeds", default="0-3", help="seeds: a range or a list (default 0-3)")
    demo.add_argument("--workers", type=int, default=2, help="processes (one per core)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar (a log, a pipe)")
    demo.set_defaults(func=cmd_demo)
