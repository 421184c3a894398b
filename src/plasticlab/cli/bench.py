"""``plasticlab bench``: this machine's step times, for the sweep's time estimates and ensemble
sizes."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..experiments import bench


def cmd_bench(args: argparse.Namespace) -> int:
    """``plasticlab bench``: measure this machine's step times for the sweep's time estimates
    and ensemble sizes, and save the calibration."""
    print(f"calibrating on this machine (1 torch thread per process; {args.steps} steps each):")
    calibration = bench.calibrate(args.data_dir, steps=args.steps, methods=not args.no_methods,
                                  workers=args.workers)
    path = bench.save(calibration, Path(args.save) if args.save else None)
    print(f"saved to {path} ({calibration['seconds']:.0f} s)")
    return 0


def register(sub) -> None:
    """Add ``bench`` to the ``plasticlab`` parser."""
    be = sub.add_parser("bench", help="measure this machine's speed (for sweep --dry-run)")
    be.add_argument("--data-dir", dest="data_dir",
                    help="data directory (default $PLASTICLAB_DATA, else the user cache dir)")
    be.add_argument("--steps", type=int, default=200,
                    help="steps a timed run (default 200)")
    be.add_argument("--no-methods", action="store_true", help="skip the per-method and per-optimizer costs")
    be.add_argument("--save", help="where to write the calibration (default: user cache)")
    be.add_argument("--workers", type=int,
                    help="also measure this many processes at once (default: one per core)")
    be.set_defaults(func=cmd_bench)
