"""Prepare the next task while this one trains.

Plain form: :meth:`plasticlab.problems.base.Problem.start_task` prepares each task when it
starts — the members' permutations or label maps, the gather of their examples, the batch
plans — while the device waits. :class:`TaskPrefetch` runs
:meth:`~plasticlab.problems.base.Problem.prepare_task` for task t + 1 in a background thread as
soon as task t has started, into the examples buffer of task t − 1, which nothing reads any
more; task t + 1 then starts from what it prepared. The same tensors, to the bit: preparing
reads only the task's own seeds and the data set, never the current task.

Applies: CUDA training (its host work — numpy shuffles, index arrays, kernel launches — then
overlaps the device's work on task t), outside :func:`plasticlab.fast.plain_forms`. Not on the
CPU, where each worker has one thread for its training. Test: ``tests/test_fast_kernels.py``
(a run with the prefetch forced on equals one without, to the bit).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from ..fast import enabled


def applies(device: torch.device) -> bool:
    """Whether an ensemble training on ``device`` prepares its next task in the background."""
    return enabled() and torch.device(device).type == "cuda"


class TaskPrefetch:
    """Prepares ``problem``'s task t + 1 while task t trains: call :meth:`start_task` in place
    of ``problem.start_task``."""

    def __init__(self, problem):
        self.problem = problem
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="plasticlab-prefetch")
        self.next: tuple[int, Future] | None = None
        # The thread queues its kernels on the stream the training queues its own on (the
        # ensemble's stream, when several share a GPU from one process): task t + 1's reads
        # then follow its preparation in that stream's order, as on one stream.
        device = torch.device(getattr(problem, "device", "cpu"))
        self.stream = torch.cuda.current_stream(device) if device.type == "cuda" else None

    def _prepare(self, task: int, buffer):
        if self.stream is None:
            return self.problem.prepare_task(task, buffer)
        with torch.cuda.stream(self.stream):
            return self.problem.prepare_task(task, buffer)

    def start_task(self, task: int) -> None:
        """Start ``task`` (from its prepared tensors when they were made ahead), then begin
        preparing the task after it."""
        prepared = None
        if self.next is not None:
            upcoming, future = self.next
            self.next = None
            result = future.result()  # also re-raises a failure of the preparation
            prepared = result if upcoming == task else None
        self.problem.start_task(task, prepared)
        if task + 1 < self.problem.tasks:
            self.next = (task + 1, self.pool.submit(
                self._prepare, task + 1, self.problem.spare_examples()))

    def close(self) -> None:
        """Wait for a preparation under way and stop the thread."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.next = None


__all__ = ["TaskPrefetch", "applies"]
