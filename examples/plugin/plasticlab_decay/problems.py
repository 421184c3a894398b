"""A problem of one's own: Permuted MNIST as a quick stream, 50 tasks of 200 steps by default.

A problem subclasses :class:`plasticlab.problems.Problem` (or one of plasticlab's, as here) and
gives its ``name``, ``title``, ``description`` and defaults; one written from the base class
defines ``load``, ``member_task`` and ``normalize`` (docs/experiments.md).
"""

from __future__ import annotations

from plasticlab.problems import PermutedMNIST


class PermutedMNISTQuick(PermutedMNIST):
    """Permuted MNIST with 50 tasks of 200 steps unless told otherwise."""

    name = "permuted_mnist_quick"  # the entry point's name
    title = "Quick Permuted MNIST"
    description = "Permuted MNIST, 50 tasks × 200 steps by default (a plugin's problem)"
    defaults = {**PermutedMNIST.defaults, "tasks": 50, "steps_per_task": 200}
