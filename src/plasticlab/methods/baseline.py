"""Baseline: plain Adam or SGD on the task loss, nothing else."""

from .base import Method


class Baseline(Method):
    """The Baseline: the optimizer (Adam or SGD) on L_task alone."""

    name = "baseline"
    title = "Baseline"
    description = "plain Adam / SGD"
