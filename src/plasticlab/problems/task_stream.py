"""A problem's stream for one model of your own: its tasks in turn, each a sequence of batches
(:func:`plasticlab.problems.task_stream`).

::

    from plasticlab.problems import task_stream

    for task in task_stream("permuted_mnist", seed=3, data_dir="../shared/data"):
        correct = 0
        for x, y in task:                      # steps_per_task batches: x [B, 784], y [B]
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()   # predict first …
            loss = F.cross_entropy(logits, y)                 # … then learn
            optimizer.zero_grad(); loss.backward(); optimizer.step()
        online = correct / task.examples                      # the task's online accuracy

The batches are the ones member k of a plasticlab ensemble of seeds trains on when it is seed
``seed`` (member k is seed k alone, bit for bit: docs/member-independence.md), so a model of your
own is compared with plasticlab's runs of the same seeds — the committed studies' included — on
the very same examples in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .base import Problem


@dataclass
class StreamTask:
    """Task ``index`` of a problem's stream for one seed: iterate it for its ``len(task)``
    batches (inputs ``[B, …]``, labels ``[B]``, as the problem's network reads them), once, before
    the stream's next task."""

    problem: Problem
    index: int

    def __len__(self) -> int:
        return self.problem.steps_per_task

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for step in range(self.problem.steps_per_task):
            self._check_current("batches")
            x, y = self.problem.batch(step)
            yield x[0], y[0]

    def sample_inputs(self, n: int, key: str = "probe") -> torch.Tensor:
        """``n`` of the task's training inputs ``[n, …]``, drawn without replacement from
        (seed, task, ``key``) — a probe batch for measurements (:class:`plasticlab.Monitor`),
        as the engine's measurements draw theirs, never one to train on."""
        self._check_current("sample_inputs")
        return self.problem.sample_inputs(n, key)[0]

    def _check_current(self, what: str) -> None:
        if self.problem.task != self.index:
            raise RuntimeError(f"{self.problem.name}: task {self.index}'s {what} were asked for after "
                               f"the stream moved on to task {self.problem.task}; use each task "
                               "before taking the next")

    @property
    def examples(self) -> int:
        """How many examples the task's batches hold: the denominator of its online accuracy."""
        return self.problem.steps_per_task * self.problem.batch_size

    @property
    def reported(self) -> bool:
        """Whether the task counts in the total average online accuracy (every task, but 5+1
        CIFAR's hard ones only: SPEC §3)."""
        return self.problem.reported(self.index)

    def test_set(self, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The task's held-out examples (inputs ``[N, …]``, labels ``[N]``), or None for a
        problem without test sets; with ``n``, the first ``n`` of them in the seed's fixed
        shuffle (the ones EWC's Fisher and the next-task measurements read: SPEC §9)."""
        held_out = self.problem.test_examples(self.index, n)
        return None if held_out is None else (held_out[0][0], held_out[1][0])


def stream_tasks(cls: type[Problem], seed: int = 0, *, first_task: int = 0, data_dir=None,
                 device: str | torch.device = "cpu", **settings) -> Iterator[StreamTask]:
    """:func:`plasticlab.problems.task_stream` of the problem class ``cls``: its data read and
    ``first_task`` checked now, its tasks made as they are taken."""
    stream = cls([seed], data_dir=data_dir, device=device, **settings)
    if not 0 <= first_task < stream.tasks:
        raise ValueError(f"{stream.name}: first_task {first_task} is not one of its tasks "
                         f"0..{stream.tasks - 1}")

    def tasks() -> Iterator[StreamTask]:
        for task in range(first_task, stream.tasks):
            stream.start_task(task)
            yield StreamTask(stream, task)

    return tasks()
