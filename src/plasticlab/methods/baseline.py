"""Baseline: plain Adam or SGD on the task loss, nothing else."""

from .base import Method


class Baseline(Method):
    name = "baseline"
    description = "plain Adam / SGD"
