"""Moving host tensors to the training device without making the host wait; a stream of its
own for each ensemble that shares a GPU with others in one process."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor`` (on the host) on ``device``, without blocking the host.

    A plain copy from pageable host memory to a GPU waits for the GPU's queue to drain (a
    synchronisation per copy, found by CUDA's sync-debug mode in Shrink & Perturb's and ReDo's
    fresh draws); a copy from pinned memory does not (PyTorch's caching host allocator keeps
    the pinned block alive until the copy has run). On the CPU this is ``tensor.to(device)``.
    """
    device = torch.device(device)
    if device.type == "cuda" and tensor.device.type == "cpu":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def own_stream(device: torch.device | str) -> Callable[[], AbstractContextManager]:
    """What to enter around each piece of one ensemble's work when several ensembles share
    ``device`` from one process: on CUDA, a new stream of its own (``torch.cuda.stream``), so
    that its kernels queue apart from the others' and a synchronisation of its own (a task
    end's read-back) waits for its work alone; elsewhere, nothing (``nullcontext``)."""
    device = torch.device(device)
    if device.type != "cuda":
        return nullcontext
    stream = torch.cuda.Stream(device)
    return lambda: torch.cuda.stream(stream)


class CudaMemory:
    """The memory figures of one CUDA device that :class:`MemoryAdmission` reads."""

    def __init__(self, device: torch.device):
        self.device = device

    def free(self) -> int:
        """Bytes this process can still allocate: what the device has free (all processes
        counted) and what torch's caching allocator holds without using it."""
        unused = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return torch.cuda.mem_get_info(self.device)[0] + unused

    def allocated(self) -> int:
        """Bytes this process's tensors hold on the device."""
        return torch.cuda.memory_allocated(self.device)

    def reset_peak(self) -> None:
        """Start a new peak of :meth:`peak`."""
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        """The most :meth:`allocated` has been since :meth:`reset_peak`."""
        return torch.cuda.max_memory_allocated(self.device)


class MemoryAdmission:
    """Whether one more ensemble fits on a device beside those already training there, for a
    driver that trains several at once in one process: while the device's free memory is at
    least ``margin`` times the most any ensemble admitted so far took to set up and take its
    first step (the peak it allocated then, :meth:`measure`); always before the first is
    measured. ``memory``: the device's figures (:class:`CudaMemory` on CUDA); None — the CPU,
    whose memory the operating system shares out — admits every ensemble."""

    def __init__(self, memory: CudaMemory | None, margin: float = 2.0):
        self.memory, self.margin = memory, float(margin)
        self.largest = 0  # bytes: the largest footprint measured

    @classmethod
    def on(cls, device: torch.device | str) -> MemoryAdmission:
        """The admission for ``device``: by memory on CUDA, every ensemble elsewhere."""
        device = torch.device(device)
        return cls(CudaMemory(device) if device.type == "cuda" else None)

    def fits(self) -> bool:
        """Whether another ensemble may start now."""
        return (self.memory is None or self.largest == 0
                or self.memory.free() >= self.margin * self.largest)

    def measure(self, first_step: Callable[[], None]) -> None:
        """Run ``first_step`` (an ensemble's set-up and first step) and remember the peak memory
        it allocated beyond what was allocated before."""
        if self.memory is None:
            first_step()
            return
        before = self.memory.allocated()
        self.memory.reset_peak()
        first_step()
        self.largest = max(self.largest, self.memory.peak() - before)
