"""Every member's fresh init draw made on several host threads, the members split between them.

Plain form: :func:`plasticlab.nets.init.draw_members`, which fills member after member on the
calling thread. Here member k's rows are still drawn from ``generators[k]`` alone, weight then
bias, so the draw is the plain one to the bit; torch's in-place fills release the GIL, so the
threads draw at once. Shrink & Perturb draws every parameter of every member at every step, on
the host so that a CUDA run draws the CPU run's numbers, and on a GPU that draw, not the
device, sets its pace.

Applies: a draw for a CUDA device, of at least two members, outside
:func:`plasticlab.fast.plain_forms`. Not on the CPU, where each worker has one core for its
training. Test: ``tests/test_fast_kernels.py`` (forced on, the draw equals the plain one to the
bit, for every init scheme).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import torch

from . import enabled

#: Host threads a draw is split between (at most; never more than the process's cores).
MAX_THREADS = 4

_pool: ThreadPoolExecutor | None = None


def threads() -> int:
    """How many threads a draw is split between: :data:`MAX_THREADS`, or fewer cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, cores))


def applies(device: torch.device | str, members: int) -> bool:
    """Whether a draw of ``members`` members for ``device`` is split between host threads."""
    return enabled() and torch.device(device).type == "cuda" and members >= 2 and threads() >= 2


def for_each_member(fill: Callable[[int], None], members: int) -> None:
    """Call ``fill(k)`` for every member k, the members in consecutive pieces, one piece per
    thread, each piece in member order; return once every call has returned (or raise the
    first error)."""
    global _pool
    n = min(threads(), members)
    if _pool is None:  # one pool for the process, as large as any split it makes
        _pool = ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="plasticlab-draw")
    bounds = [members * i // n for i in range(n + 1)]

    def fill_piece(start: int, end: int) -> None:
        for k in range(start, end):
            fill(k)

    for future in [_pool.submit(fill_piece, a, b) for a, b in pairwise(bounds)]:
        future.result()
