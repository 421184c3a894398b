"""The training loop over an ensemble of K runs (SPEC §3 online protocol, DESIGN "engine").

At each time step every member receives one batch of its own stream, **first predicts** on it
(that prediction's accuracy is the online accuracy aₜ; on a regression problem its squared
error is the online squared error), then takes one gradient step on it.
Members are independent: the loss is the sum of the members' mean losses, so each member's
gradient is its own. Accuracies accumulate on the device and come back once per task — no
host synchronisation inside a task.

Measurement points (SPEC §5, :mod:`plasticlab.measure`): at the end of every task — after its
last step, before the next task starts and before a method's ``on_task_end`` — the network is
measured (weight magnitude, feature srank and effective rank, dead and dormant units, the last
step's gradient norm, test accuracy, with ``forgetting`` every earlier task's test accuracy,
and the optional measurements asked for by name, :mod:`plasticlab.measure.optional`; churn's
reference logits are recorded at the task's start); with ``measure_every=N`` the network
internals and gradient norm are also measured
after every N-th optimizer step. Measurements stay on the device and are read back with the
task's accuracies, so the per-step loop gains only an integer comparison.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from . import checkpoint as ckpt
from . import metrics
from .measure import Measurer, test_example_count, to_host
from .measure.optional import parse_measurements
from .methods import MethodContext, get_method
from .methods.penalty_members import PenaltyMembers
from .nets import build_network
from .optim import MEMBER_LR_OPTIMIZERS, make_optimizer, optimizer_options
from .problems import get_problem, task_prefetch
from .rng import torch_generator
from .run_config import Member, Members, RunConfig
from .step import BACKPROPS, Step

T = TypeVar("T")


@dataclass
class MemberResult:
    """One member's (= one run's) online accuracies and measurements.

    ``member``: the run (its seed, method, parameters and step size);
    ``task_metrics[name][task]``: the task-end measurements (:mod:`plasticlab.measure`; empty
    when measurements are off); ``step_metrics``: the every-N-steps measurements, ``"step"``
    holding the global step of each; ``accuracy_matrix[j][m]`` = A[j, m], m ≤ j, with forgetting.
    On a regression problem (``loss = "squared_error"``) there is no accuracy:
    ``task_online_accuracy`` is empty and ``task_online_squared_error`` holds each task's mean
    (ŷ − y)² of the first predictions (None on a classification problem).
    """

    member: Member
    task_online_accuracy: list[float]
    reported_tasks: list[int]
    task_metrics: dict[str, list] = field(default_factory=dict)
    step_metrics: dict[str, list] = field(default_factory=dict)
    accuracy_matrix: list[list[float]] | None = None
    task_online_squared_error: list[float] | None = None

    @property
    def seed(self) -> int:
        """The run's seed."""
        return self.member.seed

    @property
    def method(self) -> str:
        """The run's method."""
        return self.member.method

    @property
    def params(self) -> dict:
        """The run's method parameters."""
        return self.member.params

    @property
    def lr(self) -> float:
        """The run's step size α."""
        return self.member.lr

    @property
    def total_online_accuracy(self) -> float:
        """Mean of aₜ over the run's reported tasks (all tasks have the same step count)."""
        values = [self.task_online_accuracy[t] for t in self.reported_tasks
                  if t < len(self.task_online_accuracy)]
        return sum(values) / len(values) if values else float("nan")

    @property
    def total_online_squared_error(self) -> float | None:
        """Mean of the online squared error over the run's reported tasks (None on a
        classification problem)."""
        if self.task_online_squared_error is None:
            return None
        values = [self.task_online_squared_error[t] for t in self.reported_tasks
                  if t < len(self.task_online_squared_error)]
        return sum(values) / len(values) if values else float("nan")

    @property
    def bwt(self) -> float | None:
        """Backward transfer from :attr:`accuracy_matrix` (None without forgetting)."""
        return None if self.accuracy_matrix is None else metrics.bwt(self.accuracy_matrix)

    @property
    def one_step_bwt(self) -> float | None:
        """One-step backward transfer from :attr:`accuracy_matrix` (None without forgetting)."""
        return None if self.accuracy_matrix is None else metrics.one_step_bwt(self.accuracy_matrix)


@dataclass
class EnsembleResult:
    """What one ensemble produced, with the setup that produced it."""

    members: list[MemberResult]
    wall_time: float
    steps: int
    device: str
    threads: int
    data_source: str = ""
    extra: dict = field(default_factory=dict)
    measure_time: float = 0.0  # seconds of wall_time spent measuring

    @property
    def steps_per_second(self) -> float:
        """Ensemble steps per second (each step advances every member by one batch)."""
        return self.steps / self.wall_time if self.wall_time > 0 else float("nan")


def _check_member_lr(members: Members) -> None:
    """One step size per member needs an optimizer that takes them
    (:data:`plasticlab.optim.MEMBER_LR_OPTIMIZERS`)."""
    if len(set(members.rates())) > 1 and members.config.optimizer not in MEMBER_LR_OPTIMIZERS:
        raise ValueError(f"optimizer {members.config.optimizer} takes one step size for all "
                         f"members; one per member needs {' or '.join(MEMBER_LR_OPTIMIZERS)}")


def configure_threads(device: torch.device, threads: int | None) -> int:
    """Use ``threads`` intra-op threads on CPU (default 1: for these small networks one thread
    per process is much faster than two, docs/performance.md), and return the count in force."""
    if device.type == "cpu":
        torch.set_num_threads(1 if threads is None else int(threads))
    elif threads is not None:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def ensemble_steps(
    members: Members,
    *,
    data_dir=None,
    device: str | torch.device = "cpu",
    threads: int | None = None,
    on_task_end: Callable[[int, list[float]], None] | None = None,
    on_steps: Callable[[int], None] | None = None,
    progress_every: int = 50,
    measure: bool = True,
    measure_every: int | None = None,
    forgetting: bool = False,
    measure_samples: int | None = None,
    checkpoint: str | Path | None = None,
    backprop: str = "auto",
    prefetch: bool | None = None,
    compile: bool = False,
    sitting: Mapping | None = None,
    checkpoint_every: float | None = None,
    stop: Callable[[], bool] | None = None,
    measurements: Sequence[str] = (),
) -> Generator[None, None, EnsembleResult]:
    """Train one ensemble: member k is the run of ``members.config`` with ``members[k]``'s seed,
    method, parameters and step size (:class:`~plasticlab.run_config.Members`: one step size per
    member needs Adam or SGD, :data:`plasticlab.optim.MEMBER_LR_OPTIMIZERS`; several methods in
    one ensemble are members of the Baseline, L2 and the *-Init penalties,
    :mod:`plasticlab.methods.penalty_members`).

    ``on_task_end(task, accuracies)`` gets each finished task's online accuracy per member (its
    online squared error on a regression problem);
    ``on_steps(n)`` is called every ``progress_every`` steps (progress bars).

    Measurements (:mod:`plasticlab.measure`): ``measure`` turns the task-end measurements on
    (default); ``measure_every=N`` adds network internals and gradient norm after every N-th
    step; ``forgetting`` evaluates every earlier task's test set at each task end (the
    accuracy matrix, BWT); ``measure_samples`` inputs per member (default: the measurer's) are
    used for the feature measurements; ``measurements`` names the optional task-end
    measurements to add (:data:`plasticlab.measure.optional.MEASUREMENTS`, ``"all"`` for
    every one; none by default). None of them changes training.

    ``checkpoint``: a file to save the whole training state to at every task end — and, with
    ``checkpoint_every`` seconds, between two steps of a task once that long has passed since
    the last save — and to resume from when it exists (:mod:`plasticlab.checkpoint`); a resumed
    run ends with exactly the results of an uninterrupted one, whether it resumes at a task end
    or between two steps. The file is written in a background thread from a copy of the state
    taken between steps. Progress callbacks are not replayed for steps done before the resume.

    ``stop``: asked between steps (at most every :data:`STOP_POLL_S` seconds); when it answers
    True, the state is saved to ``checkpoint`` (between two steps) and :class:`TrainingStopped`
    is raised: a stop takes effect within a step, whatever the task's length.

    ``sitting``: what trains the ensemble now (plasticlab's experiments give the code's
    identity, the device, torch's version and the start time). Each call that trains is a
    sitting, recorded with the first task it trains and carried through checkpoints: the
    result's ``extra["sittings"]`` lists every sitting that trained the ensemble, oldest first
    (one entry for an ensemble trained in one go). A checkpoint written before sittings were
    recorded gives a first entry ``{"from_task": 0}`` with nothing else known.

    ``backprop``: how gradients are computed — ``"autograd"``, ``"manual"``
    (:class:`plasticlab.step.mlp_backprop.ManualBackprop`, the ReLU MLP's gradients written out
    by hand: same numbers up to rounding, faster whole steps — docs/performance.md), or
    ``"auto"`` (manual wherever the network allows it).

    ``prefetch``: prepare each next task in a background thread while the current one trains
    (:mod:`plasticlab.problems.task_prefetch`; the same numbers); None: where it applies (CUDA).

    ``compile``: take each step through ``torch.compile`` where :mod:`plasticlab.step.compiled`
    computes it (the same numbers up to rounding), elsewhere and where a measurement needs the
    task gradient the eager step; the result's ``extra["step"]`` says which ran, and
    ``extra["step_note"]`` what kept an asked-for compiled step eager.

    A generator: it sets the ensemble up at its first ``next``, pauses after each step (between
    two steps, where a save or a stop may have happened) and, on CUDA, while a task end's
    measurements run, and returns the :class:`EnsembleResult`. :func:`train_ensemble` runs it to
    the end; the ``interleaved`` executor steps several in turn. The stages — set up, run a
    task, finish — are :class:`EnsembleTraining`'s.
    """
    _check_sitting(sitting)
    if checkpoint_every is not None and not checkpoint_every > 0:
        raise ValueError(f"checkpoint_every must be > 0 seconds, got {checkpoint_every}")
    training = EnsembleTraining(members, data_dir=data_dir, device=device,
                                threads=threads, measure=measure, measure_every=measure_every,
                                forgetting=forgetting, measure_samples=measure_samples,
                                backprop=backprop, prefetch=prefetch, compile=compile,
                                measurements=measurements)
    try:
        if checkpoint is not None and training.resume(checkpoint) and on_steps is not None:
            on_steps(training.next_task * training.problem.steps_per_task + training.steps_in_flight)
        training.begin_sitting(sitting)
        between = _between_steps(training, checkpoint, checkpoint_every, stop)
        for task in range(training.next_task, training.problem.tasks):
            task_acc = yield from training.task_steps(task, on_steps, progress_every, between)
            if checkpoint is not None and task < training.problem.tasks - 1:
                training.save(checkpoint)
            if on_task_end is not None:
                on_task_end(task, task_acc)
        return training.result()
    finally:
        training.close()


def train_ensemble(members: Members, **options) -> EnsembleResult:
    """Train one ensemble to the end and return every member's results: :func:`ensemble_steps`
    (whose docstring explains the arguments) run through."""
    return run_to_end(ensemble_steps(members, **options))


train_ensemble.__signature__ = inspect.signature(ensemble_steps).replace(
    return_annotation=EnsembleResult)


def run_to_end(steps: Generator[None, None, T]) -> T:
    """Step ``steps`` (a generator such as :func:`ensemble_steps` or
    :meth:`EnsembleTraining.task_steps`) until it ends, and return what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as end:
            return end.value


STOP_POLL_S = 0.2
"""How often, at most, training asks ``stop`` between steps (seconds)."""


class TrainingStopped(Exception):  # noqa: N818 - a stop asked for, not an error
    """Training stopped between two steps because ``stop`` asked it to (the state saved)."""

    def __init__(self, task: int, step: int, saved: bool):
        where = f"step {step} of task {task}" if step else f"the start of task {task}"
        super().__init__(f"stopped at {where}" + ("" if saved else " (no checkpoint to save to)"))
        self.task, self.step, self.saved = task, step, saved

    def __reduce__(self):
        return (TrainingStopped, (self.task, self.step, self.saved))


def _between_steps(training: EnsembleTraining, checkpoint, every: float | None,
                   stop: Callable[[], bool] | None) -> Callable[[], None] | None:
    """What runs between two steps: a save once ``every`` seconds have passed since the last
    one, and a stop (saved first) when ``stop`` answers True; None when neither is asked for."""
    timed = checkpoint is not None and every is not None
    if not timed and stop is None:
        return None
    clock = {"saved": time.monotonic(), "polled": 0.0}

    def between() -> None:
        now = time.monotonic()
        if stop is not None and now - clock["polled"] >= STOP_POLL_S:
            clock["polled"] = now
            if stop():
                if checkpoint is not None:
                    training.save(checkpoint)
                flight = training.in_flight
                raise TrainingStopped(training.next_task, flight.step if flight else 0,
                                      checkpoint is not None)
        if timed and now - clock["saved"] >= every:
            training.save(checkpoint)
            clock["saved"] = time.monotonic()

    return between


def _check_sitting(sitting: Mapping | None) -> None:
    """A sitting's values go into checkpoints, whose safe load takes plain values only: refuse
    anything else now rather than at the resume (a ``str`` subclass such as
    ``torch.__version__`` included)."""
    for key, value in (sitting or {}).items():
        if type(key) is not str or type(value) not in (str, int, float, bool, type(None)):
            raise TypeError(f"sitting[{key!r}] = {value!r} ({type(value).__name__}): a sitting's keys "
                            "must be str and its values plain str, int, float, bool or None "
                            "(convert it, e.g. str(torch.__version__))")


@dataclass
class TaskInFlight:
    """A task between two of its steps: what it has counted so far, so that training resumes
    there bit-identical (the network, optimizer and method hold the rest)."""

    task: int
    step: int  # the steps of the task done
    correct: torch.Tensor  # [K] correct predictions so far
    pending: list  # [(global step, {name: [K, …] tensor})]: step measurements, not read back yet
    grad_norm: torch.Tensor | None  # the last measured task gradient's norm
    elapsed: float = 0.0  # seconds trained on it before this sitting
    started: float = field(default_factory=time.perf_counter)  # this sitting's start on it
    reference: torch.Tensor | None = None  # what the task's start recorded for its end (churn)

    def to_state(self) -> dict:
        """What a checkpoint keeps of it (tensors and plain values)."""
        return {"task": self.task, "step": self.step, "correct": self.correct.cpu(),
                "pending": [[at, {k: v.cpu() for k, v in m.items()}] for at, m in self.pending],
                "grad_norm": None if self.grad_norm is None else self.grad_norm.cpu(),
                "elapsed": self.elapsed + time.perf_counter() - self.started,
                **({} if self.reference is None else {"reference": self.reference.cpu()})}

    @classmethod
    def from_state(cls, state: dict, device: torch.device) -> TaskInFlight:
        """:meth:`to_state`'s output, its tensors on ``device``."""
        reference = state.get("reference")
        return cls(state["task"], state["step"], state["correct"].to(device),
                   [(at, {k: v.to(device) for k, v in m.items()}) for at, m in state["pending"]],
                   None if state["grad_norm"] is None else state["grad_norm"].to(device),
                   state["elapsed"], reference=None if reference is None else reference.to(device))


class EnsembleTraining:
    """One ensemble's training in three stages: set up (:meth:`__init__`: stream, network,
    optimizer, method, measurer; :meth:`resume` from a checkpoint), run a task
    (:meth:`run_task`, then :meth:`save`), finish (:meth:`result`).
    :func:`train_ensemble` is the loop over them; its docstring explains the arguments."""

    def __init__(self, members: Members, *, data_dir=None,
                 device: str | torch.device = "cpu", threads: int | None = None,
                 measure: bool = True, measure_every: int | None = None, forgetting: bool = False,
                 measure_samples: int | None = None, backprop: str = "auto",
                 prefetch: bool | None = None, compile: bool = False,
                 measurements: Sequence[str] = ()):
        if backprop not in BACKPROPS:
            raise ValueError(f"backprop must be 'auto', 'autograd' or 'manual', got {backprop!r}")
        if measure_every is not None and int(measure_every) < 1:
            raise ValueError(f"measure_every must be >= 1 step, got {measure_every}")
        if (measure_every or forgetting) and not measure:
            raise ValueError("measure_every and forgetting need measurements on (measure=True)")
        self.measurements = parse_measurements(measurements)
        if self.measurements and not measure:
            raise ValueError("optional measurements need the task-end measurements on (measure=True)")
        self.config = config = members.config
        self.members = members
        _check_member_lr(members)
        self.device = device = torch.device(device)
        self.threads = configure_threads(device, threads)
        self.seeds = seeds = members.seeds
        K = len(members)
        names = members.method_names()
        # one method per member: PenaltyMembers, each member's part its own method's
        method_cls = get_method(names[0]) if len(set(names)) == 1 else PenaltyMembers
        hp = members.stacked(method_cls.hyperparameters, device,
                             names[0] if len(set(names)) == 1 else "mixed")

        self.problem = problem = get_problem(config.problem)(
            seeds, tasks=config.tasks, steps_per_task=config.steps_per_task,
            batch_size=config.batch_size, data_dir=data_dir, device=device, **config.problem_params)
        use_prefetch = task_prefetch.applies(device) if prefetch is None else bool(prefetch)
        self.prefetch = task_prefetch.TaskPrefetch(problem) if use_prefetch else None
        plain = {"arch": problem.arch, "input_shape": problem.input_shape,
                 "num_outputs": problem.num_outputs, "width": config.width,
                 "extra_layers": config.extra_layers}
        self.net = net = build_network(
            members=K, init=config.init, generators=[torch_generator(s, "init") for s in seeds],
            **plain, **method_cls.architecture(hp, plain),
        ).to(device)
        _mask_outputs(net, problem, 0)  # a growing head: set before the step picks its backward
        rates = members.rates()  # one α for all, or one per member (Adam, SGD)
        optimizer = make_optimizer(config.optimizer, list(net.parameters()),
                                   rates[0] if len(set(rates)) == 1 else rates, member_dim=True,
                                   **optimizer_options(config.optimizer, seeds, device,
                                                       config.optimizer_params))
        self.method = method_cls(net, optimizer, hp, MethodContext(seeds, device, tuple(names)))
        self.optimizer = self.method.optimizer  # a method may replace it (CBP's adam_variant=reference)
        self.measure, self.forgetting = bool(measure), bool(forgetting)
        self.every = int(measure_every or 0)
        self.measurer = (_measurer(net, problem, config, measure_samples, forgetting, self.measurements)
                         if measure else None)
        self.step = Step(net, self.method, self.optimizer, backprop=backprop, compile=compile,
                         device=device, loss=problem.loss)
        # what the run has produced so far (a checkpoint's contents besides the training state);
        # accuracies: each task's online measure per member (squared errors on a regression)
        self.accuracies: list[list[float]] = []
        self.task_measures: list[list[dict]] = []  # [task][member] → {name: value}
        self.step_measures: list[list[dict]] = []  # [measurement][member]
        self.measure_time = 0.0
        self.global_step, self.next_task, self.wall = 0, 0, 0.0
        self.sittings: list[dict] = []  # what trained which tasks: train_ensemble's ``sitting``
        # where this sitting began, in tasks (a fraction for a task in flight) and training wall
        # time, so that `plasticlab status` can give this sitting's pace apart from earlier ones
        self.sitting_start: dict | None = None
        self.in_flight: TaskInFlight | None = None  # the task being trained, between two steps
        self.writer = ckpt.CheckpointWriter()
        self.fingerprint = members.fingerprint()

    @property
    def steps_in_flight(self) -> int:
        """Steps of :attr:`next_task` done (a resume between two steps); 0 at a task end."""
        return self.in_flight.step if self.in_flight is not None else 0

    # --- checkpoints -----------------------------------------------------------------------------
    def resume(self, checkpoint: str | Path) -> bool:
        """Continue from ``checkpoint`` if it exists (and is this run's); return whether it did."""
        state = ckpt.load(checkpoint, self.fingerprint, self.device)
        if state is None:
            return False
        ckpt.restore_training(state["training"], self.net, self.optimizer, self.method)
        self.step.resumed()
        self.accuracies, self.task_measures = state["accuracies"], state["task_measures"]
        self.step_measures, self.measure_time = state["step_measures"], state["measure_time"]
        self.global_step, self.next_task, self.wall = (state["global_step"], state["next_task"],
                                                       state["wall"])
        # a checkpoint from before sittings were recorded: its tasks were trained, by what is
        # not known
        self.sittings = state.get("sittings") or [{"from_task": 0}]
        flight = state.get("in_flight")
        self.in_flight = None if flight is None else TaskInFlight.from_state(flight, self.device)
        return True

    def begin_sitting(self, sitting: Mapping | None) -> None:
        """Record ``sitting`` (what trains the ensemble now) with where it starts: the task, and
        the step of it when a task is in flight."""
        self.sittings.append({"from_task": self.next_task, **(
            {"from_step": self.steps_in_flight} if self.steps_in_flight else {}), **(sitting or {})})
        self.sitting_start = {"task": self.next_task + self.steps_in_flight / self.problem.steps_per_task,
                              "wall": self.wall}

    def save(self, checkpoint: str | Path) -> None:
        """Save the whole training state, to resume at :attr:`next_task` — at the step of it
        where it stands when a task is in flight. The state is copied now; the file is written
        in the background (:class:`~plasticlab.checkpoint.CheckpointWriter`)."""
        flight = self.in_flight
        self.writer.save(checkpoint, self.fingerprint, {
            "training": ckpt.training_state(self.net, self.optimizer, self.method),
            "next_task": self.next_task, "global_step": self.global_step,
            "accuracies": self.accuracies, "task_measures": self.task_measures,
            "step_measures": self.step_measures, "measure_time": self.measure_time,
            "wall": self.wall, "sittings": self.sittings, "sitting_start": self.sitting_start,
            "in_flight": None if flight is None else flight.to_state()})

    # --- one task --------------------------------------------------------------------------------
    def run_task(self, task: int, on_steps: Callable[[int], None] | None = None,
                 progress_every: int = 50, between: Callable[[], None] | None = None) -> list[float]:
        """Train every member on ``task`` (SPEC §3: predict, then one step, per batch) — from
        the step it stands at when it is in flight (a resume) — measure at its end, tell a
        boundary oracle; return the task's online accuracy per member. ``between()`` runs after
        every step (a timed save, a stop)."""
        return run_to_end(self.task_steps(task, on_steps, progress_every, between))

    def task_steps(self, task: int, on_steps: Callable[[int], None] | None = None,
                   progress_every: int = 50, between: Callable[[], None] | None = None,
                   ) -> Generator[None, None, list[float]]:
        """:meth:`run_task` one step at a time: a generator that pauses after each step (after
        ``between()``) and returns the task's online accuracy per member."""
        started = time.perf_counter()
        problem, measurer = self.problem, self.measurer
        every, steps = self.every, problem.steps_per_task
        (self.prefetch.start_task if self.prefetch is not None else problem.start_task)(task)
        _mask_outputs(self.net, problem, task)
        flight = self.in_flight
        if flight is None or flight.task != task:
            flight = TaskInFlight(task, 0, torch.zeros(len(self.seeds), device=self.device), [], None)
            if measurer is not None:
                t0 = time.perf_counter()
                flight.reference = measurer.task_start()
                self.measure_time += time.perf_counter() - t0
        flight.started = started
        self.in_flight = flight
        for step in range(flight.step, steps):
            x, y = problem.batch(step)
            step_due = every and (self.global_step + 1) % every == 0
            wants_grad_norm = measurer is not None and (step_due or step == steps - 1)
            norm = self.step(x, y, flight.correct, self.global_step, task_gradient=wants_grad_norm)
            flight.grad_norm = norm if wants_grad_norm else flight.grad_norm
            self.global_step += 1
            flight.step = step + 1
            if step_due and measurer is not None:
                t0 = time.perf_counter()
                flight.pending.append((self.global_step,
                                       dict(measurer.internals(), grad_norm=flight.grad_norm)))
                self.measure_time += time.perf_counter() - t0
            if on_steps is not None and (step + 1) % progress_every == 0:
                on_steps(progress_every)
            if between is not None and step + 1 < steps:
                between()
            yield
        if on_steps is not None and steps % progress_every:
            on_steps(steps % progress_every)
        measured = self._measure_task_end(flight)
        yield from _device_done(self.device)
        return self._finish_task(flight, measured)

    def _measure_task_end(self, flight: TaskInFlight) -> dict[str, torch.Tensor] | None:
        """The task-end measurements, queued on the device and not read back (None when
        measurements are off)."""
        if self.measurer is None:
            return None
        t0 = time.perf_counter()
        measured = {**self.measurer.task_end(flight.task, flight.grad_norm, flight.reference),
                    **self.method.extra_measurements(self.measurer, flight.task)}
        self.measure_time += time.perf_counter() - t0
        return measured

    def _finish_task(self, flight: TaskInFlight, measured: dict[str, torch.Tensor] | None) -> list[float]:
        """The task's end: its online accuracies — or, on a regression problem, its online
        squared errors — and its ``measured`` values read back (the one host sync of the
        task), a boundary oracle told; the task is no longer in flight."""
        problem, task = self.problem, flight.task
        task_acc = (flight.correct / (problem.steps_per_task * problem.batch_size)).tolist()
        self.accuracies.append(task_acc)
        if measured is not None:
            t0 = time.perf_counter()
            self.task_measures.append(to_host(measured))
            self.step_measures.extend(_read_back(flight.pending))
            self.measure_time += time.perf_counter() - t0
        self.method.on_task_end(problem)
        self.next_task, self.in_flight = task + 1, None
        self.wall += flight.elapsed + time.perf_counter() - flight.started
        return task_acc

    # --- finish ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for a checkpoint being written; stop the background preparation of tasks, if
        any (idempotent)."""
        try:
            self.writer.wait()
        finally:
            if self.prefetch is not None:
                self.prefetch.close()

    def result(self) -> EnsembleResult:
        """Every member's results, with the setup that produced them."""
        problem, config, measurer = self.problem, self.config, self.measurer
        reported = [t for t in range(problem.tasks) if problem.reported(t)]
        online = [[acc[k] for acc in self.accuracies] for k in range(len(self.members))]
        regression = problem.loss == "squared_error"
        members = [MemberResult(member, task_online_accuracy=[] if regression else online[k],
                                reported_tasks=reported,
                                task_online_squared_error=online[k] if regression else None,
                                **_member_measures(k, self.task_measures, self.step_measures))
                   for k, member in enumerate(self.members)]
        return EnsembleResult(
            members=members, wall_time=self.wall, steps=problem.tasks * problem.steps_per_task,
            device=str(self.device), threads=self.threads,
            data_source=getattr(problem, "source", ""), measure_time=self.measure_time,
            extra={"backprop": self.step.backprop, "step": self.step.form,
                   **({"step_note": f"compile asked for; eager: {self.step.eager_because}"}
                      if self.step.eager_because else {}),
                   "measurements": {"task_end": self.measure, "every": self.every or None,
                                    "forgetting": self.forgetting,
                                    "samples": measurer.samples if measurer else None,
                                    "test_examples": config.test_examples,
                                    "internals_on": config.internals_on,
                                    **({"optional": list(self.measurements)}
                                       if self.measurements else {})},
                   "method": self.method.notes(),
                   "sittings": [dict(s) for s in self.sittings]})


def _device_done(device: torch.device) -> Generator[None, None, None]:
    """Pause until the work queued so far on ``device``'s current stream has run: on CUDA, a
    pause at a time until an event recorded now has passed (so that a driver interleaving
    ensemble steps keeps the others training while one ensemble's task-end measurements
    run, and reads them back without waiting); elsewhere, none (the work has run)."""
    if device.type != "cuda":
        return
    done = torch.cuda.Event()
    done.record()
    while not done.query():
        yield


def _mask_outputs(net, problem, task: int) -> None:
    """Give ``net`` the outputs each member may predict during ``task`` where the problem has a
    growing head (:meth:`~plasticlab.problems.Problem.output_mask`); a fixed head: nothing."""
    mask = problem.output_mask(task)
    if mask is not None:
        net.mask_outputs(mask)


def _measurer(net, problem, config: RunConfig, samples: int | None, forgetting: bool,
              measurements: tuple[str, ...] = ()) -> Measurer:
    """The run's :class:`Measurer`, under its measurement conventions (``test_examples``,
    ``internals_on``), with the optional ``measurements``."""
    return Measurer(net, problem, samples=samples, forgetting=forgetting,
                    test_examples=test_example_count(config.test_examples),
                    internals_on=config.internals_on, measurements=measurements)


def _read_back(pending: list[tuple[int, dict]]) -> list[list[dict]]:
    """A task's step measurements ``[(step, {name: [K, …] tensor})]`` → per measurement, per
    member ``{name: value, "step": step}``, with one host synchronisation for all of them."""
    if not pending:
        return []
    names = list(pending[0][1])
    stacked = to_host({n: torch.stack([m[n] for _, m in pending], dim=1) for n in names})
    return [[{**{n: member[n][i] for n in names}, "step": at} for member in stacked]
            for i, (at, _) in enumerate(pending)]


def _member_measures(k: int, task_measures: list[list[dict]], step_measures: list[list[dict]]) -> dict:
    """Member k's measurements as MemberResult fields: name → list over tasks (or steps)."""
    per_task = [t[k] for t in task_measures]
    rows = [m.pop("accuracy_row") for m in per_task if "accuracy_row" in m]
    names = list(per_task[0]) if per_task else []
    steps = [s[k] for s in step_measures]
    return {"task_metrics": {n: [m[n] for m in per_task] for n in names},
            "step_metrics": {n: [m[n] for m in steps] for n in (list(steps[0]) if steps else [])},
            "accuracy_matrix": rows or None}
