"""``plasticlab verify`` and ``compare``: whether this code gives a results directory's
recorded numbers, and whether two results directories agree — run by run, bit for bit, or
method by method within the spread of their seeds."""

from __future__ import annotations

import argparse
import math


def cmd_verify(args: argparse.Namespace) -> int:
    """``plasticlab verify``: train the recorded ensembles of results directories or exports
    (each DIR one, or a folder of them such as ``docs/reproduction``) again for their first
    tasks (:mod:`plasticlab.experiments.verify`) and say, run by run, whether this code gives
    the recorded online accuracies and task-end measurements; 1 when any differs."""
    import torch

    from ..experiments.executor import default_workers
    from ..experiments.export import MEASUREMENT_DIGITS
    from ..experiments.manifest import plugins_changed
    from ..experiments.verify import verify_ensembles

    if args.tasks < 1:
        raise ValueError(f"--tasks must be >= 1, got {args.tasks}")
    if args.members is not None and args.members < 1:
        raise ValueError(f"--members must be >= 1, got {args.members}")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    studies = _studies_to_verify(args.dirs, args.all)
    jobs = [(members, recorded) for _, _, recorded, chosen in studies for members in chosen]
    runs = [run for _, study_runs, _, _ in studies for run in study_runs]
    # one process per core on the CPU; one on a GPU, where processes would time-slice the device
    workers = min(args.workers or (default_workers() if args.device == "cpu" else 1), len(jobs))
    what = (str(studies[0][0]) if len(studies) == 1 else
            f"{len(studies)} studies" + (f" under {args.dirs[0]}" if len(args.dirs) == 1 else ""))
    print(f"verify {what}: {len(jobs)} ensemble(s) of {len(runs):,} finished runs trained again "
          f"for {args.tasks} task(s) each (device {args.device}, torch {torch.__version__}, "
          f"{workers} worker(s))")
    differ, measured = 0, set()
    checks = verify_ensembles(jobs, args.tasks, workers, data_dir=args.data_dir, device=args.device,
                              limit=args.members, measure=not args.online_only)
    for folder, study_runs, _, chosen in studies:
        if len(studies) > 1:
            print(f"{folder}: {len(chosen)} ensemble(s) of {len(study_runs):,} finished runs")
        for _ in chosen:
            check = next(checks)
            measured.update(check.measurements)
            differ += len(check.mismatches)
            _say(check, args.members)
    if plugins := plugins_changed(runs):  # code that plasticlab's commit does not name
        print(f"note: {plugins}")
    also = (f", and its task-end measurements ({', '.join(sorted(measured))}) to "
            f"{MEASUREMENT_DIGITS} significant digits") if measured else ""
    return _conclude(differ, f"{differ} run(s) differ: this code does not give their recorded numbers (a "
                             "run recorded by other code, another device or more threads may; "
                             "docs/member-independence.md)",
                     f"every run checked gives its recorded {_measured(runs)}, bit for bit{also}")


def _studies_to_verify(dirs, every: bool) -> list[tuple]:
    """Each results directory or export that ``dirs`` name (a folder holding one, or a folder
    of them at any depth): its folder, finished runs, their recorded metrics and the ensembles
    to train again (:func:`~plasticlab.experiments.verify.choose`)."""
    from pathlib import Path

    from ..experiments.export import holds_results, study_folders
    from ..experiments.verify import choose, ensembles, recorded_metrics

    folders: list[Path] = []
    for d in map(Path, dirs):
        # a folder that holds no results of its own stands for the studies under it
        found = [d] if not d.is_dir() or holds_results(d) else study_folders([d])
        if not found:
            raise ValueError(f"{d} holds no results store or export, nor a folder with one: give the "
                             "--out directory of a `plasticlab run` or `plasticlab sweep`, a study's "
                             "folder under docs/reproduction, or docs/reproduction itself")
        folders += [f for f in found if f not in folders]
    studies = []
    for folder in folders:
        runs, recorded = recorded_metrics(folder)
        if not runs:
            raise ValueError(f"{folder} holds no finished run to verify")
        studies.append((folder, runs, recorded, choose(ensembles(runs), every=every)))
    return studies


def _say(check, members: int | None) -> None:
    """One ensemble's line: ``same``, or ``DIFFERENT`` and each run that differs."""
    trained = f" ({check.trained} member(s) trained again)" if members else ""
    compared = f", {len(check.measurements)} measurement(s)" if check.measurements else ""
    if check.same:
        print(f"  same       {check.label}: {check.compared} run(s), {check.tasks} task(s){compared}, "
              f"recorded by {check.code} on {check.device}{trained}")
        return
    print(f"  DIFFERENT  {check.label}: {len(check.mismatches)} of {check.compared} run(s), "
          f"recorded by {check.code} on {check.device}{trained}")
    for m in check.mismatches:
        metric = m.metric.replace("_", " ")
        print(f"    run {m.run_id} ({m.method}, seed {m.seed}): task {m.task}, {metric}: "
              f"recorded {m.recorded!r}, now {m.now!r}")


def _measured(runs) -> str:
    """What ``runs`` recorded online, in words: online accuracy, a regression's online squared
    error, or both."""
    from ..experiments.verify import online_metric

    return " and ".join(sorted({online_metric(r).replace("_", " ") for r in runs}))


def cmd_compare(args: argparse.Namespace) -> int:
    """``plasticlab compare A B``: the runs both directories hold (same config but for the number of
    tasks, same seed; :mod:`plasticlab.experiments.compare`) and whether each has the same online
    accuracy on every task both ran, bit for bit; 1 when any differs. With ``--statistical``,
    each method is judged by its paired difference instead (:func:`_statistical_verdicts`)."""
    from ..experiments.compare import shared_runs

    pairs, only_a, only_b = shared_runs(args.a, args.b)
    if not pairs:
        raise ValueError(f"{args.a} and {args.b} hold no run in common (the same config but for the "
                         f"number of tasks, and the same seed; {only_a} and {only_b} finished runs): "
                         "compare two runs of one study, or studies that share a configuration")
    print(f"compare {args.a} (A) and {args.b} (B): {len(pairs)} run(s) in both, {only_a} only in A, "
          f"{only_b} only in B")
    groups: dict[str, list] = {}
    for pair in pairs:
        groups.setdefault(pair.label, []).append(pair)
    if args.statistical:
        return _statistical_verdicts(groups)
    for label, group in groups.items():
        parted = [p for p in group if not p.same]
        if not parted:
            print(f"  same       {label}: {len(group)} run(s), {_task_span(group)} task(s)")
            continue
        print(f"  DIFFERENT  {label}: {len(parted)} of {len(group)} run(s)")
        for p in parted:
            metric = p.parted.replace("_", " ")
            print(f"    seed {p.seed} (run {p.run_a} in A, {p.run_b} in B): task {p.task}, {metric}: "
                  f"{p.a!r} in A, {p.b!r} in B")
    differ = sum(not p.same for p in pairs)
    measured = sum(p.measured > 0 for p in pairs)
    also = (f"; and the {measured} measured alike their task-end measurements, to 7 significant digits"
            if measured else "")
    return _conclude(differ, f"{differ} run(s) differ (`plasticlab verify DIR` says which one this code "
                             "gives)",
                     "every run in both has the same online accuracy on every task both ran, bit for "
                     f"bit{also}")


def _conclude(differ: int, differ_line: str, same_line: str) -> int:
    """Print a checking command's last line, and return its exit code: 1 when something differs."""
    print(differ_line if differ else same_line)
    return 1 if differ else 0


def _task_span(group) -> str:
    tasks = sorted({p.tasks for p in group})
    return f"{tasks[0]}" if len(tasks) == 1 else f"{tasks[0]}–{tasks[-1]}"


def _statistical_verdicts(groups: dict[str, list]) -> int:
    """Per method: dₛ = total online accuracy in A − in B (a regression's total online squared
    error, as it is, not in points) over the tasks both ran, for each seed
    s both hold; the mean of dₛ with a percentile-bootstrap interval over seeds, at 95 % for all
    methods together (each at 1 − 0.05/methods, Bonferroni). A method whose interval excludes 0
    differs; 1 when one does. Pairs with a diverged task are left out, and said so; a method
    with fewer than two seeds left gets no verdict."""
    from ..experiments.protocol import recorded_measure
    from ..report.stats import bootstrap_ci

    confidence = 1 - 0.05 / len(groups)
    differ = 0
    for label, group in groups.items():
        kept = [p for p in group if math.isfinite(p.total_a) and math.isfinite(p.total_b)]
        left = f"; {len(group) - len(kept)} with a diverged task left out" if len(kept) < len(group) else ""
        if len(kept) < 2:
            print(f"  —          {label}: {len(kept)} run(s) without a diverged task{left}: too few "
                  "seeds for an interval")
            continue
        # accuracies in points; a regression's online squared error as it is
        measure = recorded_measure(None, [kept[0].metric])
        scale = measure.scale
        unit, fmt = (" points", ".2f") if measure.percent else ("", ".4g")
        d = bootstrap_ci([scale * (p.total_a - p.total_b) for p in kept], confidence=confidence)
        mean_a = scale * math.fsum(p.total_a for p in kept) / len(kept)
        mean_b = scale * math.fsum(p.total_b for p in kept) / len(kept)
        consistent = d.lo <= 0 <= d.hi
        differ += not consistent
        means = (f"A {mean_a:.2f} %, B {mean_b:.2f} %" if measure.percent
                 else f"A {mean_a:{fmt}}, B {mean_b:{fmt}}")
        print(f"  {'consistent' if consistent else 'DIFFERENT ':10s} {label}: {len(kept)} run(s), "
              f"{_task_span(kept)} task(s): A − B = {d.point:+{fmt}}{unit} [{d.lo:+{fmt}}, {d.hi:+{fmt}}] "
              f"({means}); {sum(p.same for p in kept)} the same bit for bit{left}")
    print(f"intervals: percentile bootstrap over seeds, {100 * confidence:.4g} % each, 95 % for the "
          f"{len(groups)} method(s) together")
    return _conclude(differ, f"{differ} method(s) differ: their interval excludes 0",
                     "every method's interval holds 0: A and B agree within the spread of their seeds")


def register(sub) -> None:
    """Add ``verify`` and ``compare`` to the ``plasticlab`` parser."""
    ve = sub.add_parser("verify", help="train recorded runs again for their first tasks and check "
                                       "that this code gives their online accuracies, bit for bit, "
                                       "and their task-end measurements")
    ve.add_argument("dirs", nargs="+", metavar="DIR",
                    help="a results directory or a study's folder under docs/reproduction, or a "
                         "folder of them (docs/reproduction: every study on the pages)")
    ve.add_argument("--tasks", type=int, default=2, help="tasks to train and compare (default 2)")
    ve.add_argument("--online-only", dest="online_only", action="store_true",
                    help="compare the online accuracy only, trained without the task-end "
                         "measurements (quicker; a change that moves the weights by a rounding step "
                         "can leave it the same for several tasks)")
    ve.add_argument("--all", action="store_true",
                    help="every ensemble (default: the first of each method and optimizer)")
    ve.add_argument("--members", type=int,
                    help="check only the first N runs of each ensemble, trained again on their own, "
                         "where member k of an ensemble is seed k alone to the bit (CPU, one thread, "
                         "Adam, SGD or UPGD); elsewhere the whole ensemble is trained (default: all runs)")
    ve.add_argument("--data-dir", dest="data_dir",
                    help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    ve.add_argument("--device", default="cpu", help="where to train (default cpu: the recorded "
                                                   "numbers are exact there)")
    ve.add_argument("--workers", type=int,
                    help="ensembles trained at once, each in its own process with its recorded "
                         "threads (default: one per core on the CPU, 1 on a GPU); the lines still "
                         "come in the same order")
    ve.set_defaults(func=cmd_verify)

    co = sub.add_parser("compare", help="the runs two results directories both hold (same config "
                                        "and seed): the same online accuracy on every task both ran, "
                                        "and the same task-end measurements?")
    co.add_argument("a", metavar="A", help="a results directory or a study's folder under docs/reproduction")
    co.add_argument("b", metavar="B", help="another")
    co.add_argument("--statistical", action="store_true",
                    help="judge each method by the paired difference of its runs' total online "
                         "accuracy (A − B per seed) and its bootstrap interval, not bit for bit: for "
                         "runs from another device, thread count or torch; exit 1 when an interval "
                         "excludes 0")
    co.set_defaults(func=cmd_compare)
