"""The plasticity gap: each task's online accuracy against a from-scratch reference.

A network that has kept its plasticity learns a new task as well as a freshly initialised
network does. The reference is the study's ``full_reset`` runs — the same network, optimizer
and stream, reset at every task boundary to θ₀ (or, with ``reinit=fresh``, to a new draw of
the init distribution) with a new optimizer state, so that every task is learnt from scratch —
on the same seeds, hence the same tasks. For a method's run of seed s::

    gap[s, t] = a_fresh(s, t) − a_method(s, t)

in accuracy points: positive where the method learns task t worse than a fresh network (lost
plasticity), negative where it learns it better (what it carries over helps), 0 for a method
as plastic as a reset. It is Chaudhry et al.'s (2018) intransigence with a from-scratch
learner as the reference model, taken task by task on the online accuracy (the demand of
ContinualAI/avalanche#1510). Definitions: docs/measurements.md.

On a regression problem the runs record an online squared error, where lower is better, so
the gap is turned round to keep its sign's meaning::

    gap[s, t] = e_method(s, t) − e_fresh(s, t)

positive where the method's error on task t is higher than a fresh network's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .data import ConfigRuns

REFERENCE_METHOD = "full_reset"
"""The method whose runs learn every task from scratch."""


def plasticity_gap(online: np.ndarray, seeds: Sequence[int], reference: np.ndarray,
                   reference_seeds: Sequence[int]) -> tuple[list[int], np.ndarray]:
    """``a_fresh(s, t) − a(s, t)`` for every seed s that both have, in the order of ``seeds``:
    ``online[i, t]`` is seed ``seeds[i]``'s online accuracy on task t, ``reference`` the
    from-scratch runs' alike. Returns the shared seeds and the gaps ``[shared seeds, tasks]``
    (NaN where either lacks a task)."""
    if online.ndim != 2 or reference.ndim != 2:
        raise ValueError(f"online accuracies must be [seeds, tasks], got {online.shape} and "
                         f"{reference.shape}")
    if len(seeds) != online.shape[0] or len(reference_seeds) != reference.shape[0]:
        raise ValueError("one seed per row of online accuracies")
    row_of = {s: i for i, s in enumerate(reference_seeds)}
    shared = [s for s in seeds if s in row_of]
    tasks = max(online.shape[1], reference.shape[1])
    gap = np.full((len(shared), tasks), np.nan)
    for j, s in enumerate(shared):
        a, r = online[list(seeds).index(s)], reference[row_of[s]]
        n = min(len(a), len(r))
        gap[j, :n] = r[:n] - a[:n]
    return shared, gap


@dataclass
class MethodGap:
    """One configuration's gap to the reference: ``runs`` restricted to the seeds it shares
    with the reference, and ``gap[s, t]`` on them."""

    runs: ConfigRuns
    gap: np.ndarray


def study_gaps(headline: Sequence[ConfigRuns]) -> list[MethodGap] | None:
    """Every configuration's gap to the study's from-scratch reference (the ``full_reset``
    configuration among ``headline``), on their shared seeds; None when the study has no
    ``full_reset`` runs. A configuration without a shared seed is left out; the reference
    itself too (its gap is 0). Positive means worse than from scratch whatever the measure:
    ``a_fresh − a`` for an accuracy, ``e − e_fresh`` for an error (:meth:`Measure.oriented`)."""
    reference = next((c for c in headline if c.method == REFERENCE_METHOD), None)
    if reference is None:
        return None
    out = []
    for c in headline:
        if c is reference:
            continue
        shared, gap = plasticity_gap(c.measure.oriented(c.online), c.seeds,
                                     c.measure.oriented(reference.online), reference.seeds)
        runs = c.only_seeds(shared) if shared else None
        if runs is not None:
            out.append(MethodGap(runs, gap))
    return out


__all__ = ["REFERENCE_METHOD", "MethodGap", "plasticity_gap", "study_gaps"]
