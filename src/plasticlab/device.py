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
