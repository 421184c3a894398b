"""The ``plasticlab`` command: its parser and entry point.

Each command lives in a module of its own (``run`` for run, list and demo; ``sweep`` for sweep
and presets; ``status``, ``report``, ``bench``, ``reproduce``, ``export``; ``verify`` for verify
and compare), which registers its sub-command here and calls the ``plasticlab.experiments`` and
``plasticlab.report`` API; :mod:`.common` holds what they share. No module of the package
imports this one (``__main__`` aside), so the commands form no import circle.
"""

from __future__ import annotations

import argparse
import platform

from . import bench, claims, export, import_, report, reproduce, run, status, sweep, verify


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``plasticlab`` command."""
    parser = argparse.ArgumentParser(
        prog="plasticlab",
        description="Maintaining plasticity in continual learning: L2 Init, baselines, problems.")
    parser.add_argument("--version", action=_Version,
                        help="print plasticlab's version, the code identity runs record, torch's and "
                             "Python's versions, and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    # the order of `plasticlab --help`'s commands
    for module in (run, sweep, status, report, claims, bench, reproduce, export, import_, verify):
        module.register(sub)
    return parser


def version_line() -> str:
    """``plasticlab <version> (<code>), torch <version>, Python <version>``: what a bug report
    or a comparison of results needs. ``<code>`` is the identity a run's manifest records
    (:func:`plasticlab.experiments.manifest.code_identity`: the commit in a git checkout, ``+dirty``
    with uncommitted changes to the package), given where it says more than the version."""
    import torch

    from ..experiments.manifest import code_identity, package_version

    version, code = package_version(), code_identity()
    said = f"plasticlab {version}" + ("" if code == f"plasticlab {version}" else f" ({code})")
    return f"{said}, torch {torch.__version__}, Python {platform.python_version()}"


class _Version(argparse.Action):
    """``--version``: :func:`version_line`, looked up only when asked for (a git call)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())  # on stdout, as argparse's own version action prints
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``plasticlab`` command; returns the exit code."""
    from ..experiments.lifecycle import handle_sigterm
    from .common import run_guarded

    args = build_parser().parse_args(argv)
    handle_sigterm()  # SIGTERM takes SIGINT's path: runs recorded as interrupted, exit 143
    return run_guarded(args.func, args)
