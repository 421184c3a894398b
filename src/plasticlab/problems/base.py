"""The continual stream shared by every problem (SPEC §3).

At each time step every member receives one batch of its own stream; task boundaries are never
announced to the learner (only the engine's bookkeeping, and EWC through it, sees them).

A problem says, per member and task, which examples make up the task (images as uint8 and
labels) and, where SPEC has one, the task's held-out test set. This base class does the rest:
the batch plan (each epoch a fresh shuffle of the task's examples, a last partial batch
dropped), and the per-step gather, vectorised over members on the training device. The task's
data is materialised once per task and replaced at the next one, so memory stays flat over
hundreds of tasks; permutations and label maps are index arrays. (:mod:`plasticlab.problems.task_examples`
gathers a task's examples faster than :meth:`Problem.start_task`'s plain form, where it applies.)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from ..params import Param, resolve
from ..rng import np_rng
from . import task_examples


@dataclass
class TaskData:
    """One member's examples of one task: stored inputs ``[N, D]`` or ``[N, C, H, W]``, labels
    ``[N]`` (int64 classes; float32 targets for a regression problem) and, for input
    permutations, the index array ``perm`` ``[D]`` that every batch is gathered through (so no
    permuted copy of the data is ever made).

    With ``index`` (a NumPy int64 array ``[N]``), the examples are the rows ``x[index]`` of a
    data set ``x`` that stays the same from task to task: the rows are then taken where the
    training runs (on a GPU, from one resident copy of ``x``, with no per-task host work or
    transfer)."""

    x: torch.Tensor
    y: torch.Tensor
    perm: torch.Tensor | None = None
    index: np.ndarray | None = None

    @property
    def size(self) -> int:
        """The number of examples N."""
        return int(self.x.shape[0] if self.index is None else self.index.shape[0])

    def examples(self) -> torch.Tensor:
        """The stored inputs of the task's examples, ``[N, …]`` (``x[index]`` with an index)."""
        return self.x if self.index is None else self.x[torch.from_numpy(self.index)]


@dataclass
class PreparedTask:
    """One task made ready for every member: examples ``x`` ``[K, N, …]`` and labels ``y``
    ``[K, N]`` on the training device, the batch plan ``[K, steps, B]`` and each step's rows
    into the flattened examples ``[steps, K·B]``."""

    task: int
    x: torch.Tensor
    y: torch.Tensor
    plan: torch.Tensor
    rows: torch.Tensor


LOSSES = {"cross_entropy": "online_accuracy", "squared_error": "online_squared_error"}
"""Each task loss ℓ a problem may train with, and the online measure taken with it: with
``cross_entropy`` (classification; labels are class indices) the fraction of first predictions
whose argmax is the label; with ``squared_error`` (regression; one output, float targets
y) the mean of the first predictions' (ŷ − y)²."""


class Problem:
    """A continual classification (or, with ``loss = "squared_error"``, regression) stream for K
    members (one seed each).

    Subclasses set the class attributes and implement :meth:`member_task`. Common run
    parameters (``tasks``, ``steps_per_task``, ``batch_size``) default to the paper's values
    in ``defaults``; problem-specific ones are declared in ``parameters``.
    """

    name: ClassVar[str]
    title: ClassVar[str]  # as papers, reports and tables name it ("Permuted MNIST")
    description: ClassVar[str]
    arch: ClassVar[str]  # "mlp" | "cnn"
    # the dataset it reads (a key of plasticlab.data.FETCHERS), fetched once by a sweep's
    # driver before its workers start; None: it draws its own data
    dataset: ClassVar[str | None] = None
    input_shape: ClassVar[tuple[int, ...]]
    num_outputs: ClassVar[int]
    defaults: ClassVar[dict[str, int]]  # tasks, steps_per_task, batch_size
    parameters: ClassVar[tuple[Param, ...]] = ()
    has_test_sets: ClassVar[bool] = False
    loss: ClassVar[str] = "cross_entropy"  # the task loss ℓ, a key of LOSSES

    @classmethod
    def reads(cls, params: dict) -> str | os.PathLike | None:
        """What a stream with the problem parameters ``params`` reads, for fetching it before
        any worker starts (:func:`plasticlab.data.fetch_datasets`): :attr:`dataset`, or a file
        of the user's that a parameter names."""
        return cls.dataset

    @classmethod
    def online_measure(cls) -> str:
        """The name of the online measure taken with the problem's loss (:data:`LOSSES`)."""
        return LOSSES[cls.loss]

    def __init__(self, seeds: Sequence[int], *, tasks: int | None = None,
                 steps_per_task: int | None = None, batch_size: int | None = None,
                 data_dir=None, device: str | torch.device = "cpu", **problem_params):
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError(f"{self.name}: need at least one seed")
        self.members = len(self.seeds)
        self.tasks = int(tasks if tasks is not None else self.defaults["tasks"])
        self.steps_per_task = int(steps_per_task if steps_per_task is not None
                                  else self.defaults["steps_per_task"])
        self.batch_size = int(batch_size if batch_size is not None else self.defaults["batch_size"])
        for key in ("tasks", "steps_per_task", "batch_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"{self.name}: {key} must be >= 1, got {getattr(self, key)}")
        self.params = self.resolve_parameters(problem_params)
        self.data_dir = data_dir
        self.device = torch.device(device)
        self.task = -1
        self._x = self._y = self._plan = self._rows = self._spare = None
        self._examples = task_examples.TaskExamples(self.device)  # its buffers live as long as we do
        self._members = torch.arange(self.members, device=self.device)[:, None]
        self.load()

    # --- what a subclass provides -------------------------------------------------------------
    def load(self) -> None:
        """Read the dataset (once per stream) onto ``self.device``."""

    def member_task(self, member: int, seed: int, task: int) -> TaskData:
        """The training examples of ``task`` for the member with ``seed``."""
        raise NotImplementedError

    def member_test(self, member: int, seed: int, task: int) -> TaskData | None:
        """The held-out test examples of ``task`` (None for problems without test sets)."""
        return None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Stored examples → network inputs (float32)."""
        return x.float()

    def output_mask(self, task: int) -> torch.Tensor | None:
        """The outputs each member may predict during ``task``, ``[K, num_outputs]`` bool — a
        growing head, whose outputs not yet in it take no part in the loss, the prediction or
        the test accuracy — or None: every output, all the time (a fixed head)."""
        return None

    @classmethod
    def reported(cls, task: int) -> bool:
        """Whether ``task`` counts in the reported accuracy (5+1 CIFAR: hard tasks only).

        A class method: reports read it from the stored problem name alone."""
        return True

    # --- parameters ---------------------------------------------------------------------------
    @classmethod
    def resolve_parameters(cls, given: dict) -> dict:
        """Problem parameters with defaults filled in; unknown names are errors."""
        return resolve(cls.parameters, given, f"problem {cls.name}")

    # --- the stream ---------------------------------------------------------------------------
    def start_task(self, task: int, prepared: PreparedTask | None = None) -> None:
        """Make ``task`` the current task for every member: its examples, labels, batch plan
        (:meth:`prepare_task`, or ``prepared``, made ahead by it)."""
        if prepared is None:
            prepared = self.prepare_task(task, self._x)
        elif prepared.task != task:
            raise ValueError(f"{self.name}: task {prepared.task} was prepared, task {task} started")
        if prepared.x is not self._x:
            self._spare = self._x
        self._x, self._y, self._plan, self._rows = prepared.x, prepared.y, prepared.plan, prepared.rows
        self.task = task

    def spare_examples(self) -> torch.Tensor | None:
        """The examples tensor of a task before the current one, no longer read: where
        :meth:`prepare_task` may write the next task's while this one trains."""
        return self._spare

    def prepare_task(self, task: int, out: torch.Tensor | None = None) -> PreparedTask:
        """Materialise ``task`` for every member — examples (written into ``out`` where it fits),
        labels, batch plan — without touching the current task: it may run in another thread
        while the current task trains (:mod:`plasticlab.problems.task_prefetch`)."""
        if not 0 <= task < self.tasks:
            raise ValueError(f"{self.name}: task {task} out of range 0..{self.tasks - 1}")
        parts = [self.member_task(k, seed, task) for k, seed in enumerate(self.seeds)]
        sizes = {p.size for p in parts}
        if len(sizes) != 1:
            raise AssertionError(f"{self.name}: members disagree on task size {sizes}")
        n = sizes.pop()
        if n < self.batch_size:
            raise ValueError(f"{self.name}: task {task} has {n} examples, fewer than batch_size "
                             f"{self.batch_size}")
        # The input permutation is applied once per task, not per batch: every example is seen
        # about once an epoch either way, and one bulk gather is much cheaper than 625 small ones.
        if task_examples.applies():  # the same tensor, gathered faster
            x = self._examples.gather(parts, out)
        else:
            x = torch.stack([p.examples() if p.perm is None else p.examples()[:, p.perm]
                             for p in parts]).to(self.device)
        y = torch.stack([p.y for p in parts]).to(self.device)
        plans = [self._batch_plan(seed, task, n) for seed in self.seeds]
        plan = torch.from_numpy(np.stack(plans)).to(self.device)
        # Rows of the flattened [K·n, …] examples for each step, contiguous per step, so a batch
        # is one index_select (advanced indexing over two dims is several times slower).
        offsets = torch.arange(self.members, device=self.device)[:, None, None] * n
        rows = (plan + offsets).transpose(0, 1).reshape(self.steps_per_task, -1).contiguous()
        return PreparedTask(task, x, y, plan, rows)

    def _batch_plan(self, seed: int, task: int, n: int) -> np.ndarray:
        """[steps, B] positions into the task's examples: epochs of fresh shuffles."""
        rng = np_rng(seed, self.name, "batches", task)
        per_epoch = n // self.batch_size
        epochs = -(-self.steps_per_task // per_epoch)
        order = [rng.permutation(n)[: per_epoch * self.batch_size] for _ in range(epochs)]
        plan = np.concatenate(order).reshape(-1, self.batch_size)[: self.steps_per_task]
        return plan.astype(np.int64)

    def _stack_perms(self, parts: list[TaskData], rows: int) -> torch.Tensor | None:
        """The members' input permutations expanded to ``[K, rows, D]`` for ``torch.gather``."""
        if parts[0].perm is None:
            return None
        perm = torch.stack([p.perm for p in parts]).to(self.device)
        return perm[:, None, :].expand(len(parts), rows, perm.shape[1])

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Step ``step`` of the current task: inputs ``[K, B, …]`` (float) and labels ``[K, B]``."""
        if self._plan is None:
            raise RuntimeError(f"{self.name}: call start_task(task) before batch(step)")
        rows = self._rows[step]
        K, B = self.members, self.batch_size
        x = self._x.view(-1, *self._x.shape[2:]).index_select(0, rows).view(K, B, *self._x.shape[2:])
        return self.normalize(x), self._y.view(-1).index_select(0, rows).view(K, B)

    @property
    def current_task_size(self) -> int:
        """How many training examples each member's current task holds."""
        if self._x is None:
            raise RuntimeError(f"{self.name}: call start_task(task) before current_task_size")
        return int(self._x.shape[1])

    def sample_inputs(self, n: int, key: str) -> torch.Tensor:
        """``n`` training inputs of the current task per member, ``[K, n, …]`` network inputs,
        drawn without replacement from ``(seed, task, key)`` — for measurements and for EWC's
        Fisher, never for training."""
        return self.sample_examples(n, key)[0]

    def sample_examples(self, n: int, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample_inputs` with the task's labels of the same examples, ``[K, n]``."""
        if self._x is None:
            raise RuntimeError(f"{self.name}: call start_task(task) before sample_inputs")
        size = self._x.shape[1]
        pos = np.stack([np_rng(seed, self.name, "sample", key, self.task).permutation(size)[:n]
                        for seed in self.seeds])
        pos = torch.from_numpy(pos).to(self.device)
        return self.normalize(self._x[self._members, pos]), self._y[self._members, pos]

    def test_order(self, seed: int, n: int) -> np.ndarray:
        """The member's fixed shuffle of a test set of ``n`` examples: "the first N test
        examples" of a task are the first N of this order (SPEC §9's seed-shuffled test set).
        It depends on the seed alone, so on Permuted MNIST every task keeps the same images."""
        return np_rng(seed, self.name, "test_order").permutation(n)

    def member_test_subset(self, member: int, seed: int, task: int, n: int | None) -> TaskData | None:
        """The first ``n`` examples (all of them if fewer, or with ``n=None``) of the member's
        seed-shuffled held-out test set of ``task``; None for problems without test sets."""
        data = self.member_test(member, seed, task)
        if data is None or n is None or n >= data.size:
            return data
        rows = torch.from_numpy(self.test_order(seed, data.size)[:n])
        return TaskData(data.examples()[rows], data.y[rows], data.perm)

    def test_examples(self, task: int, n: int | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Network inputs ``[K, n, …]`` and labels ``[K, n]`` of the first ``n`` examples of each
        member's seed-shuffled test set of ``task`` (:meth:`member_test_subset`), or None for
        problems without test sets — the held-out images EWC's Fisher and the next-task
        feature measurements read (SPEC §9)."""
        if not 0 <= task < self.tasks:
            raise ValueError(f"{self.name}: no task {task} (tasks 0..{self.tasks - 1}; "
                             "call start_task first for the current one)")
        parts = [self.member_test_subset(k, seed, task, n) for k, seed in enumerate(self.seeds)]
        if parts[0] is None:
            return None
        x = torch.stack([p.x for p in parts]).to(self.device)
        perm = self._stack_perms(parts, x.shape[1])
        if perm is not None:
            x = torch.gather(x, 2, perm)
        return self.normalize(x), torch.stack([p.y for p in parts]).to(self.device)

    def test_set(self, task: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The held-out test set of ``task`` (default: the current one) as network inputs
        ``[K, N, …]`` and labels ``[K, N]``, or None when the problem has none.

        Built on demand from the task's index arrays, so any earlier task's test set can be
        rebuilt (forgetting) without keeping copies around.
        """
        return self.test_examples(self.task if task is None else task, None)

    def describe(self) -> dict:
        """The resolved stream parameters (recorded in every run's config)."""
        return {"tasks": self.tasks, "steps_per_task": self.steps_per_task,
                "batch_size": self.batch_size, **self.params}


def affine_normalizer(mean: Sequence[float], std: Sequence[float], channels_dim: int = 3):
    """(x/255 − mean)/std per channel, as (scale, shift) tensors for ``x·scale + shift``."""
    mean_t, std_t = torch.tensor(mean), torch.tensor(std)
    scale = (1.0 / (255.0 * std_t)).view(-1, 1, 1)
    shift = (-mean_t / std_t).view(-1, 1, 1)
    return scale, shift
