"""``plasticlab bench``: this machine's training speed, and wall-time estimates for sweeps.

The calibration trains real (short) runs through the engine on real data — Permuted MNIST for
the MLP, Random Label CIFAR for the CNN — at several ensemble sizes K, and each method, and
each optimizer other than Adam, once at K = 8 on the MLP for its cost relative to the Baseline
with Adam (the paper's methods and SGD on the CNN too); and a step's time at a few batch sizes
(:data:`BATCH_SIZES`), since a step's cost is not proportional to its batch (the optimizer's
update costs the same at any batch). It is saved as JSON (default: the user cache directory)
and ``plasticlab sweep --dry-run`` turns a plan into an estimated wall time.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import platformdirs
import torch

from ..engine import train_ensemble
from ..methods import METHODS
from ..optim import OPTIMIZERS
from ..problems import get_problem
from ..run_config import Members
from .config import resolve_config

CALIBRATION_PROBLEMS = {"mlp": "permuted_mnist", "cnn": "random_label_cifar"}


def arch_of(problem: str) -> str:
    """The calibrated network a problem trains (``Problem.arch``: ``mlp`` or ``cnn``; the
    slowly-changing regression's one-hidden-layer ``shallow_mlp`` is timed as the MLP, whose
    calibration bounds its cost from above)."""
    arch = get_problem(problem).arch
    return "mlp" if arch == "shallow_mlp" else arch

FAST_PARAMS = {"ewc": {"fisher_samples": 20}, "l2_init_ewc": {"fisher_samples": 20},
               "cbp": {"replacement_rate": 1e-3, "maturity": 10}, "redo": {"period": 100}}
"""Settings that make a short timing run cost what a long run's step costs: CBP's units mature
after 10 steps, not 100, so that in nearly all of a timing run's steps every unit is eligible
for replacement, as in a full-length task's; ReDo recycles every 100 steps; EWC's Fisher from
20 samples."""


def default_path() -> Path:
    """Where the calibration is kept: ``<user cache>/plasticlab/bench.json``."""
    return Path(platformdirs.user_cache_dir("plasticlab")) / "bench.json"


def _short_config(problem: str, method: str, tasks: int, steps: int, optimizer: str = "adam",
                  batch_size: int | None = None):
    """A short run of ``method`` trained by ``optimizer`` on ``problem`` with a small per-task
    data set (at the problem's batch size unless ``batch_size`` is given)."""
    return resolve_config({
        "problem": problem, "method": method, "optimizer": optimizer, "tasks": tasks,
        "steps_per_task": steps, **({"batch_size": batch_size} if batch_size else {}),
        "params": FAST_PARAMS.get(method, {}),
        "problem_params": ({"examples_per_task": 2000} if problem == "permuted_mnist"
                           else {"examples": 1200})})


def samples_per_second(config, members: int, data_dir=None, **engine_options) -> float:
    """Member-samples/s of training ``config`` as one ensemble of seeds 0…``members``−1:
    training speed only, so the task-end measurements (a few % of a full-length task) are
    left out; ``engine_options`` go to :func:`~plasticlab.engine.train_ensemble`."""
    result = train_ensemble(Members.from_config(config, list(range(members))),
                            data_dir=data_dir, measure=False,
                            **engine_options)
    return result.steps_per_second * members * config.batch_size


def _samples_per_second(problem: str, method: str, members: int, steps: int, data_dir,
                        optimizer: str = "adam") -> float:
    return samples_per_second(_short_config(problem, method, 1, steps, optimizer), members, data_dir)


def relative_costs(steps: int, data_dir, methods=None,
                   optimizers=tuple(o for o in OPTIMIZERS if o != "adam"), log=print,
                   arch: str = "mlp", base: float | None = None) -> tuple[dict, dict]:
    """Each method's (with Adam) and each optimizer's (training the Baseline) time per step
    relative to the Baseline with Adam at K = 8 on ``arch``'s calibration problem
    (:data:`CALIBRATION_PROBLEMS`), whose member-samples/s is ``base`` — by default measured
    here, first, so that every cost is a ratio of two runs made the same way moments apart (a
    rate from earlier in the calibration drifts with the machine's load by 10–20 %)."""
    methods = tuple(METHODS) if methods is None else methods  # plugins load at the first call
    problem, where = CALIBRATION_PROBLEMS[arch], f"{arch.upper()}, K=8"
    if base is None:
        base = _samples_per_second(problem, "baseline", 8, steps, data_dir)
    method_cost, optimizer_cost = {}, {}
    for name in methods:
        method_cost[name] = base / _samples_per_second(problem, name, 8, steps, data_dir)
        log(f"  {name:<18} {method_cost[name]:5.2f}× the Baseline's time per step ({where})")
    for name in optimizers:
        optimizer_cost[name] = base / _samples_per_second(problem, "baseline", 8, steps,
                                                          data_dir, optimizer=name)
        log(f"  {name:<18} {optimizer_cost[name]:5.2f}× Adam's time per step (the Baseline, {where})")
    return method_cost, optimizer_cost


CNN_METHODS = ("baseline", "l2", "l2_init", "shrink_perturb", "cbp", "concat_relu", "layer_norm", "redo")
"""The methods timed on the CNN as well (the paper's, which its CNN problems' studies run): a
method's cost relative to the Baseline differs between the networks (the CNN's convolutions
weigh more against a per-parameter update than the MLP's matmuls do). Other methods on the CNN
are priced by their MLP cost."""
CNN_OPTIMIZERS = ("sgd",)
METHOD_STEPS = 120
"""The fewest steps a method is timed over on the CNN: past ReDo's period (100 steps in
:data:`FAST_PARAMS`), so its recycling is counted."""


BATCH_SIZES = (1, 128)
"""The batch sizes a step is timed at besides the calibration problem's own (16 for both
networks), at the largest calibrated K up to :data:`BATCH_MEMBERS`: the ends of the range the
paper's studies use (the ``batch-size`` study: 1, 32 and 128)."""
BATCH_MEMBERS = 8


def step_seconds(problem: str, batch_size: int, members: int, steps: int, data_dir) -> float:
    """Seconds one step of an ensemble of ``members`` Baselines takes on ``problem`` at
    ``batch_size`` (one torch thread, no task-end work)."""
    config = _short_config(problem, "baseline", 1, steps, batch_size=batch_size)
    return members * batch_size / samples_per_second(config, members, data_dir)


def batch_factor(calibration: dict, arch: str, batch_size: int) -> float:
    """A step's time at ``batch_size`` relative to its time at the batch the rates were measured
    at: the calibration's step times (``batch_step_seconds``) interpolated linearly in the batch
    size between the measured ones, extrapolated from the nearest two beyond them. 1 where the
    calibration has none (one made before it timed batch sizes: then a step's time is taken as
    proportional to its batch, which makes small batches look far cheaper than they are)."""
    table = (calibration.get("batch_step_seconds") or {}).get(arch)
    if not table:
        return 1.0
    points = sorted((int(b), float(t)) for b, t in table.items())
    base = calibration["batch_step_seconds_at"][arch]
    by_batch = dict(points)

    def at(b: float) -> float:
        if b in by_batch:
            return by_batch[b]
        i = 1
        while i < len(points) - 1 and points[i][0] < b:
            i += 1
        (b0, t0), (b1, t1) = points[i - 1], points[i]
        return t0 + (t1 - t0) * (b - b0) / (b1 - b0)

    # the rates price a step at ``base`` samples per member: the factor turns that price into
    # this batch's, against what proportional pricing (batch_size / base) would give
    return at(batch_size) / at(base) * base / batch_size


def _task_overhead(problem: str, members: int, data_dir, tasks: int = 3) -> float:
    """Seconds a task end costs at K = ``members`` (measurements, test accuracy, checkpoint) —
    what dominates scaled-down runs with short tasks."""
    import tempfile

    config = _short_config(problem, "baseline", tasks, 5)
    seeds = list(range(members))
    plain = train_ensemble(Members.from_config(config, seeds), data_dir=data_dir, measure=False)
    with tempfile.TemporaryDirectory() as tmp:
        full = train_ensemble(Members.from_config(config, seeds),
                              data_dir=data_dir, checkpoint=Path(tmp) / "c.ckpt")
    return max(0.0, (full.wall_time - plain.wall_time) / tasks)


def calibrate(data_dir=None, members=(1, 4, 8, 16), steps: int = 200, methods: bool = True,
              log=print, workers: int | None = None, overhead_members: int = 8) -> dict:
    """Measure member-samples/s per architecture and K (Baseline), and each method's and each
    optimizer's cost relative to the Baseline with Adam (MLP, K = 8; :func:`relative_costs`),
    and the paper's methods' and SGD's on the CNN too (:data:`CNN_METHODS`). One torch thread,
    as the engine uses.

    With ``workers`` > 1 (default: one per core, as sweeps run), each K is also measured with
    that many processes training at once — the whole machine's rate, which is what a sweep
    gets: the processes share one memory system, so the best K for several workers can differ
    from the best for one. A task end's cost (measurements, checkpoint) is measured at
    K = ``overhead_members`` and scaled to other K by the members measured.
    """
    from .executor import default_workers

    workers = default_workers() if workers is None else int(workers)
    start = time.perf_counter()
    out = {"torch": torch.__version__, "machine": platform.machine(),
           "processor": platform.processor(), "threads": 1, "steps": steps, "workers": workers,
           "samples_per_second": {}, "samples_per_second_all_workers": {}, "method_cost": {},
           "optimizer_cost": {}}
    pool = _pool(workers) if workers > 1 else None
    try:
        for arch, problem in CALIBRATION_PROBLEMS.items():
            out["samples_per_second"][arch] = {}
            out["samples_per_second_all_workers"][arch] = {}
            arch_steps = steps if arch == "mlp" else max(1, steps // 4)
            for k in members:
                rate = _samples_per_second(problem, "baseline", k, arch_steps, data_dir)
                out["samples_per_second"][arch][str(k)] = rate
                line = f"  {arch} K={k:<3d} {rate:10.0f} member-samples/s ({problem}, baseline, 1 thread)"
                if pool is not None:
                    together = sum(f.result() for f in [
                        pool.submit(_samples_per_second, problem, "baseline", k, arch_steps, data_dir)
                        for _ in range(workers)])
                    out["samples_per_second_all_workers"][arch][str(k)] = together
                    line += f"; {workers} workers at once: {together:10.0f}"
                log(line)
    finally:
        if pool is not None:
            pool.shutdown()
    out["batch_step_seconds"], out["batch_step_seconds_at"] = {}, {}
    k = max(m for m in members if m <= BATCH_MEMBERS) if min(members) <= BATCH_MEMBERS else min(members)
    for arch, problem in CALIBRATION_PROBLEMS.items():
        base = get_problem(problem).defaults["batch_size"]
        arch_steps = steps if arch == "mlp" else max(1, steps // 4)
        # at the problem's own batch, the step the rate at K gives (measured above)
        table = {str(base): k * base / out["samples_per_second"][arch][str(k)]}
        for b in BATCH_SIZES:
            # as many samples a member as the calibration's steps at its own batch, at least 10 steps
            table[str(b)] = step_seconds(problem, b, k, max(10, arch_steps * base // b), data_dir)
        table = dict(sorted(table.items(), key=lambda kv: int(kv[0])))
        out["batch_step_seconds"][arch], out["batch_step_seconds_at"][arch] = table, base
        log(f"  {arch} K={k:<3d} a step at batch " + ", ".join(
            f"{b}: {1e3 * t:.2f} ms" for b, t in table.items()))
    out["task_overhead_seconds"], out["task_overhead_members"] = {}, overhead_members
    for arch, problem in CALIBRATION_PROBLEMS.items():
        seconds = _task_overhead(problem, overhead_members, data_dir)
        out["task_overhead_seconds"][arch] = seconds
        log(f"  {arch} K={overhead_members:<3d} {seconds:8.3f} s per task end (measurements + checkpoint)")
    if methods:
        out["method_cost"], out["optimizer_cost"] = relative_costs(steps, data_dir, log=log)
        # a quarter of the MLP's steps, as for the CNN's rates, but enough for ReDo's first
        # recycle to come round (at step 100)
        cnn_methods, cnn_optimizers = relative_costs(max(METHOD_STEPS, steps // 4), data_dir,
                                                     CNN_METHODS, CNN_OPTIMIZERS, log=log, arch="cnn")
        out["method_cost_by_arch"] = {"cnn": cnn_methods}
        out["optimizer_cost_by_arch"] = {"cnn": cnn_optimizers}
    out["seconds"] = time.perf_counter() - start
    return out


def _pool(workers: int):
    """Worker processes like the sweep executor's (spawned), warmed up so that their start-up
    (importing torch, loading data) is not timed."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    for f in [pool.submit(time.sleep, 0.5) for _ in range(workers)]:
        f.result()
    return pool


def save(calibration: dict, path: Path | None = None) -> Path:
    """Write ``calibration`` as JSON."""
    path = Path(path or default_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration, indent=2))
    return path


def load(path: Path | None = None) -> dict | None:
    """The saved calibration, or None when there is none."""
    path = Path(path or default_path())
    return json.loads(path.read_text()) if path.is_file() else None


CPU_MEMBERS = 16  # without a calibration
# On CUDA, per architecture: the MLP's rate still grows past K = 256, but 256 keeps a Permuted
# MNIST task's examples at 2 GB of device memory; the CNN's grouped convolution is fastest at
# K = 64 (benchmarks/recorded/h200-2026-11-26, docs/performance.md).
CUDA_MEMBERS = {"mlp": 256, "cnn": 64}


def members_for(device: str, calibration: dict | None, workers: int = 1):
    """The ensemble size to use per configuration: ``config → K``.

    On CPU, the K with the highest member-samples/s in this machine's calibration for the
    configuration's architecture (``plasticlab bench``) — measured with all workers at once
    when the sweep runs several and the calibration has that —, else 16; on CUDA 256 for the
    MLP and 64 for the CNN (:data:`CUDA_MEMBERS`; the calibration is CPU-only).
    """
    if not str(device).startswith("cpu"):
        return lambda config: CUDA_MEMBERS[arch_of(config.problem)]
    calibration = calibration or {}
    table = calibration.get("samples_per_second") or {}
    if workers > 1 and calibration.get("samples_per_second_all_workers"):
        table = calibration["samples_per_second_all_workers"]
    best = {arch: int(max(rates, key=lambda k: rates[k])) for arch, rates in table.items() if rates}

    def choose(config) -> int:
        return best.get(arch_of(config.problem), CPU_MEMBERS)

    return choose


def ensemble_seconds(ensemble, calibration: dict, workers: int = 1, tasks_done: int = 0) -> float:
    """Estimated seconds to train ``ensemble`` (anything with ``config`` and ``seeds``: a
    sweep's ensemble, an executor's job) on one of ``workers`` processes of this machine, from
    task ``tasks_done`` (its checkpoint's, when it resumes) to its last.

    A task costs steps × K × batch member-samples at the calibrated rate of its architecture
    and nearest calibrated K (each worker's share of the all-workers rate when several train at
    once and the calibration has it), times its batch size's factor (:func:`batch_factor`: a
    step at batch 1 costs far more than a sixteenth of one at 16), times its method's and its
    optimizer's relative costs, plus the calibrated task-end cost (measurements, checkpoint)."""
    config, members = ensemble.config, len(ensemble.seeds)
    arch = arch_of(config.problem)
    if workers > 1 and calibration.get("samples_per_second_all_workers"):
        rates = {int(k): v / calibration.get("workers", workers)
                 for k, v in calibration["samples_per_second_all_workers"][arch].items()}
    else:
        rates = {int(k): v for k, v in calibration["samples_per_second"][arch].items()}
    k = min(rates, key=lambda c: abs(c - members))
    cost = (_relative_cost(calibration, "method_cost", arch, config.method)
            * _relative_cost(calibration, "optimizer_cost", arch, config.optimizer))
    samples = config.steps_per_task * members * config.batch_size
    # task ends scale roughly with the members measured (calibrated at K = 8 unless it says)
    task_end = (calibration.get("task_overhead_seconds", {}).get(arch, 0.0) * members
                / calibration.get("task_overhead_members", 8))
    task = samples / rates[k] * batch_factor(calibration, arch, config.batch_size) * cost + task_end
    return max(config.tasks - tasks_done, 0) * task


def _relative_cost(calibration: dict, table: str, arch: str, name: str) -> float:
    """A method's or an optimizer's cost relative to the Baseline with Adam (``table``:
    ``method_cost`` or ``optimizer_cost``), as timed on ``arch`` where the calibration timed it
    there (``<table>_by_arch``), else on the MLP, else 1."""
    by_arch = calibration.get(f"{table}_by_arch", {}).get(arch, {})
    return by_arch[name] if name in by_arch else calibration.get(table, {}).get(name, 1.0)


def estimate_seconds(ensembles, calibration: dict, workers: int = 1,
                     tasks_done: Callable[[object], int] | None = None) -> float:
    """Estimated wall time of ``ensembles`` on ``workers`` processes of this machine: each
    ensemble's :func:`ensemble_seconds` for its tasks left (``tasks_done(ensemble)``: the tasks
    its checkpoint holds, none without it), scheduled as the executor runs them when it has this
    calibration (:func:`job_seconds`) — longest first, each to the worker that frees first —,
    and the estimate is the last worker's finish: three equal ensembles on two workers take two
    ensembles' time, not one and a half.
    """
    times = [ensemble_seconds(e, calibration, workers, tasks_done(e) if tasks_done else 0)
             for e in ensembles]
    finish = [0.0] * max(1, int(workers))
    for t in sorted(times, reverse=True):
        finish[finish.index(min(finish))] += t
    return max(finish)


def job_seconds(device: str, calibration: dict | None, workers: int = 1,
                tasks_done: Callable[[object], int] | None = None):
    """What the executor orders a sweep's ensembles by, longest first: ``ensemble → seconds``
    of its tasks left (:func:`ensemble_seconds`; ``tasks_done`` as for
    :func:`estimate_seconds`) where this machine's calibration prices them (a CPU sweep on a
    calibrated machine), else None (the executor's own member-samples,
    :func:`~plasticlab.experiments.executor.job_cost`: the calibration is CPU-only, and
    without it the batch size's factor and the methods' costs are unknown)."""
    if calibration is None or not str(device).startswith("cpu"):
        return None
    return lambda e: ensemble_seconds(e, calibration, workers, tasks_done(e) if tasks_done else 0)
