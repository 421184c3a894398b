"""The ``plasticlab`` command: its parser and entry point.

Each command lives in a module of its own (``run`` for run, list and demo; ``sweep`` for sweep
and presets; ``status``, ``report``, ``bench``, ``reproduce``, ``export``; ``verify`` for verify
and compare), which registers its sub-command here and calls the ``plasticlab.experiments`` and
``plasticlab.report`` API; :mod:`.common` holds what they share. No module of the package
imports this one (``__main__`` aside), so the commands form no import circle.
"""

from __future__ import annotations

import argparse

from . import bench, claims, export, import_, report, reproduce, run, status, sweep, verify


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``plasticlab`` command."""
    parser = argparse.ArgumentParser(
        prog="plasticlab",
        description="Maintaining plasticity in continual learning: L2 Init, baselines, problems.")
    sub = parser.add_subparsers(dest="command", required=True)
    # the order of `plasticlab --help`'s commands
    for module in (run, sweep, status, report, claims, bench, reproduce, export, import_, verify):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``plasticlab`` command; returns the exit code."""
    from ..experiments.lifecycle import handle_sigterm
    from .common import run_guarded

    args = build_parser().parse_args(argv)
    handle_sigterm()  # SIGTERM takes SIGINT's path: runs recorded as interrupted, exit 143
    return run_guarded(args.func, args)
