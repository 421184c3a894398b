"""A task's examples for every member, ``[K, N, …]`` on the training device, gathered faster than
their plain form.

Plain form: :meth:`plasticlab.problems.base.Problem.start_task` — each member's
``TaskData.examples()``, its columns taken through its input permutation ``perm`` where it has
one, stacked and moved to the device: a fresh tensor every task. :class:`TaskExamples`
computes the same tensor, to the bit, in one of two forms:

- **on the host** (CPU training): into a buffer reused from task to task (a fresh one is new
  memory to fault in every task: tens of MB for the paper's Permuted MNIST at K = 8), the rows
  taken with numpy's row take from one resident numpy view of the data set and the permutation
  applied with ``torch.gather`` on an expanded index (both faster than ``index_select`` here:
  docs/performance.md);
- **on the device** (any other device): the rows taken from one resident device copy of a data
  set that stays the same from task to task (``TaskData.index``), then each member's
  permutation, into the previous task's tensor. Host work per task is the index arrays alone:
  at K = 256, staging Permuted MNIST's tasks on the host would gather and copy 2 GB per task.

The parts are :class:`plasticlab.problems.base.TaskData` (``x``, ``index``, ``perm``, ``size``).

Applies: every task of every problem (the host form for CPU training, the device form
otherwise), outside :func:`plasticlab.fast.plain_forms`.
Test: ``tests/test_fast_kernels.py``, ``tests/test_problems.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..fast import enabled


def applies() -> bool:
    """Whether a problem gathers its tasks' examples through :class:`TaskExamples`."""
    return enabled()


class TaskExamples:
    """Gathers a task's examples for a problem training on ``device``; keeps the host buffer and
    the resident copies of the data sets from task to task."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.resident: dict[tuple[int, str], tuple] = {}  # (id, "host" | "device") → (x, copy)

    def gather(self, parts: Sequence, previous: torch.Tensor | None) -> torch.Tensor:
        """The task's examples ``[K, N, …]`` of the members' ``parts``: :meth:`on_host` for CPU
        training, else :meth:`on_device`; either writes into ``previous`` (a buffer no longer
        read: the last task's, or the one before it while the last trains) where it fits."""
        return (self.on_host(parts, previous) if self.device.type == "cpu"
                else self.on_device(parts, previous))

    def on_host(self, parts: Sequence, previous: torch.Tensor | None = None) -> torch.Tensor:
        """The task's examples ``[K, N, …]`` on the CPU, into ``previous`` where its shape and
        dtype fit (a buffer reused from task to task)."""
        x0 = parts[0].x
        shape, dtype = (len(parts), parts[0].size, *x0.shape[1:]), x0.dtype
        out = previous
        if out is None or out.shape != shape or out.dtype != dtype or out.device.type != "cpu":
            out = torch.empty(shape, dtype=dtype)
        for k, p in enumerate(parts):
            # numpy's row take: faster than torch's index_select on uint8 rows (docs/performance.md)
            rows = p.x if p.index is None else torch.from_numpy(
                np.take(self.resident_copy(p.x, "host"), p.index, axis=0))
            if p.perm is None:
                out[k].copy_(rows)
            else:  # gather with an expanded index: faster than index_select on dim 1 here
                torch.gather(rows, 1, p.perm[None].expand_as(rows), out=out[k])
        return out

    def on_device(self, parts: Sequence, previous: torch.Tensor | None) -> torch.Tensor:
        """The task's examples ``[K, N, …]`` taken on the device, into ``previous`` where its
        shape and dtype fit."""
        x0 = parts[0].x
        shape = (len(parts), parts[0].size, *x0.shape[1:])
        out = previous
        if out is None or out.shape != shape or out.dtype != x0.dtype:
            out = torch.empty(shape, dtype=x0.dtype, device=self.device)
        index = (torch.from_numpy(np.stack([p.index for p in parts])).to(self.device)
                 if parts[0].index is not None else None)
        perm = torch.stack([p.perm for p in parts]).to(self.device) if parts[0].perm is not None else None
        for k, p in enumerate(parts):
            rows = (p.x.to(self.device) if p.index is None
                    else self.resident_copy(p.x, "device").index_select(0, index[k]))
            if perm is None:
                out[k].copy_(rows)
            else:
                torch.gather(rows, 1, perm[k][None].expand_as(rows), out=out[k])
        return out

    def resident_copy(self, x: torch.Tensor, where: str):
        """The host data set ``x`` as a NumPy array (``where="host"``) or on the device
        (``"device"``), made once per problem."""
        entry = self.resident.get((id(x), where))
        if entry is None or entry[0] is not x:  # (x itself is kept, so its id stays its own)
            entry = self.resident[(id(x), where)] = (x, x.numpy() if where == "host" else x.to(self.device))
        return entry[1]


__all__ = ["TaskExamples", "applies"]
