"""The sweep workflow, step by step: a sweep (a TOML file or a preset) loaded and planned, its
grid trained, the protocol's selection made and its evaluation planned and trained.

``plasticlab sweep`` and ``plasticlab reproduce`` call these steps and print around them; each
step is also usable on its own (see :mod:`plasticlab.experiments.orchestrate` for the
planning and resuming underneath).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from ..measure.optional import parse_measurements
from . import bench
from .executor import Job, default_workers
from .orchestrate import (
    Plan,
    evaluation_runs,
    grid_selection,
    pending_runs,
    plan,
    protocol_seeds,
    resumed_by_other_code,
    run_plan,
    tasks_done,
    tidy_checkpoints,
    write_plan,
    write_selection,
)
from .presets import get_preset
from .store import ResultStore
from .sweep import Run, expand, only_runs, parse_shard, run_filters, shard_runs

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


@dataclass
class SweepRequest:
    """What a sweep is asked to do (``plasticlab sweep``'s options): the sweep file or preset
    to load and every run's number of tasks (None: as it says), where its results go (None:
    ``results/<sweep name>``), how it is shortened (``scale``) and filtered (``only``: the
    ``KEY=VALUE[,VALUE…]`` filters; ``shard``: ``I/N``, the I-th of N shares of what they
    keep, for N commands on N machines), and how and where it trains."""

    file: str | None = None
    preset: str | None = None
    tasks: int | None = None
    out: str | Path | None = None
    scale: float | None = None
    only: list[str] | None = None
    shard: str | None = None  # "I/N": the I-th of N shares of the runs (parse_shard)
    workers: int | None = None
    max_members: int | None = None
    device: str = "cpu"
    data_dir: str | None = None
    executor: str = "local"
    ray_address: str | None = None
    rerun: bool = False
    dry_run: bool = False
    compile: bool = False
    progress: bool = True
    checkpoint_every: float | None = None  # seconds; None: the executor's default
    tensorboard: str | None = None
    wandb: str | None = None
    lock: bool = True  # False: write into ``out`` without its lock (``--no-lock``)
    on_ensemble_done: Callable[[Job], None] | None = None  # as each ensemble's runs are recorded


def load_sweep(file: str | None, preset: str | None, tasks: int | None = None) -> dict:
    """The sweep of a TOML ``file`` or a ``preset`` (exactly one of them), with every run's
    number of tasks set to ``tasks`` (:func:`with_tasks`)."""
    if bool(file) == bool(preset):
        raise ValueError("give a sweep file or --preset NAME (one of them)")
    if preset:
        return with_tasks(get_preset(preset), tasks)
    return with_tasks(read_sweep_file(file), tasks)


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


def read_sweep_file(file: str | Path) -> dict:
    """The sweep a TOML file holds; a ValueError naming the file when it is missing or not TOML."""
    path = Path(file)
    if not path.is_file():
        raise ValueError(f"sweep file {path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"sweep file {path} is not valid TOML: {e}") from None


def sweep_name(sweep: dict, file: str | None, preset: str | None) -> str:
    """A sweep's name: its own ``name``, else its file's stem, else its preset's name."""
    return sweep.get("name", Path(file).stem if file else preset)


def check_counts(workers: int | None, max_members: int | None) -> None:
    """A ValueError when ``--workers`` or ``--max-members`` is given and below 1."""
    for flag, value in (("--workers", workers), ("--max-members", max_members)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")


@dataclass
class SweepPlan:
    """A sweep made ready to train: its whole grid (``runs``) and the part ``--only`` and
    ``--shard`` keep (``grid_runs``, filtered by ``wanted``, then ``shard``), the protocol's
    evaluation seeds (None: a plain grid), the workers, this machine's calibration (None: not
    calibrated), the largest ensemble, and the plan of the grid's ensembles."""

    request: SweepRequest
    name: str
    out: Path
    runs: list[Run]
    grid_runs: list[Run]
    wanted: dict
    shard: tuple[int, int] | None
    eval_seeds: list[int] | None
    workers: int
    calibration: dict | None
    max_members: int
    split_for: int
    grid_plan: Plan
    options: dict


def plan_sweep(sweep: dict, name: str, out: Path, request: SweepRequest) -> SweepPlan:
    """Expand ``sweep`` (every grid value checked against its domain), filter it by
    ``request.only`` and ``request.shard`` and plan its grid's ensembles; writes nothing. A
    ValueError when ``--only`` would train part of a protocol sweep's grid that has not
    finished (a shard of it may: :func:`grid_whole` then says whether the protocol goes on)."""
    shard = parse_shard(request.shard) if request.shard is not None else None
    runs = expand(sweep, request.scale)
    eval_seeds = protocol_seeds(sweep)
    wanted = run_filters(request.only or [], runs, eval_seeds or ())
    kept = only_runs(runs, wanted)
    grid_runs = shard_runs(kept, shard)
    if wanted and eval_seeds is not None:
        # The protocol selects on the whole grid: training part of it must not select on part.
        chosen = {id(r) for r in kept}
        rest, _ = pending_runs([r for r in runs if id(r) not in chosen], out)
        if rest:
            raise ValueError(f"--only trains part of a protocol sweep, whose selection needs its whole "
                             f"grid: {len(rest)} grid run(s) outside the filter have not finished in "
                             f"{out}; run the sweep without --only first")
    # interleaved: one process trains them all (its --workers: how many at once)
    workers = 1 if request.executor == "interleaved" else request.workers or default_workers()
    calibration = bench.load()
    max_members = request.max_members or bench.members_for(request.device, calibration, workers)
    # Halving ensembles until every round fills every worker feeds each CPU core; on a GPU,
    # one device for all workers, it would only shrink K below the device's best.
    split_for = workers if str(request.device).startswith("cpu") else 1
    grid_plan = plan(grid_runs, out, max_members, workers=split_for, rerun=request.rerun,
                     cost=bench.job_seconds(request.device, calibration, workers))
    options = {"forgetting": True} if sweep.get("forgetting") else {}
    if measurements := parse_measurements(sweep.get("measure")):
        options["measurements"] = measurements
    if request.compile:
        options["compile"] = True
    if request.checkpoint_every is not None:
        options["checkpoint_every"] = request.checkpoint_every
    return SweepPlan(request, name, out, runs, grid_runs, wanted, shard, eval_seeds, workers,
                     calibration, max_members, split_for, grid_plan, options)


def start_grid(sp: SweepPlan) -> list[str]:
    """Record the grid's runs and ensembles in ``out/plan.json``, remove the checkpoints no
    unfinished ensemble uses, and return what to tell: the checkpoints removed, and the
    ensembles to resume whose checkpoint other code trained."""
    # a share's folder plans its share: the other shares' runs are not its to train
    write_plan(sp.out, sp.grid_runs if sp.shard else sp.runs, sp.name, "grid", sp.grid_plan.ensembles,
               sp.grid_plan.superseded)
    return tidy_checkpoints(sp.out, sp.grid_plan) + resumed_by_other_code(sp.out, sp.grid_plan)


def train(sp: SweepPlan, p: Plan, loggers: Sequence = ()) -> list[Job]:
    """Train every ensemble of ``p`` (the grid's or the evaluation's plan) as ``sp``'s request
    asks; the jobs, failures recorded in them, not raised."""
    r = sp.request
    # interleaved: --workers ensembles at once in this process, by default every one
    workers = r.workers if r.executor == "interleaved" else sp.workers
    return run_plan(p, out=sp.out, data_dir=r.data_dir, device=r.device, workers=workers,
                    executor=r.executor, ray_address=r.ray_address, progress=r.progress,
                    options=sp.options, loggers=loggers, on_done=r.on_ensemble_done,
                    cost=bench.job_seconds(r.device, sp.calibration, workers,
                                           partial(tasks_done, sp.out)))


def grid_whole(sp: SweepPlan) -> bool:
    """Whether every run of the protocol's grid has finished in ``out``: a shard's command
    trains its share of the grid, and selects (then evaluates its share of the selection) only
    once the shards' runs are brought together (``plasticlab import``)."""
    return not pending_runs(sp.runs, sp.out)[0]


def select(sp: SweepPlan) -> tuple[dict, Path]:
    """The protocol's selection (the best configuration per problem, optimizer and method
    among the grid's finished runs), and the ``selection.json`` it is written to."""
    selection = grid_selection(sp.runs, sp.out)
    return selection, write_selection(sp.out, selection, sp.name, sp.eval_seeds)


def plan_evaluation(sp: SweepPlan, selection: dict) -> Plan:
    """The plan of the protocol's evaluation (each selected configuration on the evaluation
    seeds, as ``--only`` and ``--shard`` filter them), recorded in ``out/plan.json``."""
    eval_runs = evaluation_runs(selection, sp.eval_seeds)
    share = shard_runs(only_runs(eval_runs, sp.wanted), sp.shard)
    eval_plan = plan(share, sp.out, sp.max_members, phase="evaluation", workers=sp.split_for,
                     rerun=sp.request.rerun,
                     cost=bench.job_seconds(sp.request.device, sp.calibration, sp.workers))
    write_plan(sp.out, share if sp.shard else eval_runs, sp.name, "evaluation", eval_plan.ensembles,
               eval_plan.superseded)
    return eval_plan


def finished_count(out: str | Path) -> int:
    """How many finished runs the results store in ``out`` holds."""
    with ResultStore(out) as store:
        return len(store.runs(status="finished"))
