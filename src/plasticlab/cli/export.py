"""``plasticlab export``: a results directory's finished runs as one compact file that
``plasticlab report`` reads."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_export(args: argparse.Namespace) -> int:
    """``plasticlab export``: write a results directory's finished runs as a gzipped JSON
    export (:func:`plasticlab.experiments.export.export_results`), and name its files."""
    from ..experiments.export import EXPORT_NAME, export_files, export_results

    out = Path(args.to) if args.to else Path(args.dir) / "export"
    runs = export_results(args.dir, out, all_metrics=args.all_metrics)
    files = export_files(out if out.suffix == ".gz" else out / EXPORT_NAME)
    print(f"{runs} finished runs → {', '.join(map(str, files))}")
    return 0


def register(sub) -> None:
    """Add ``export`` to the ``plasticlab`` parser."""
    ex = sub.add_parser("export", help="the finished runs of a results directory as one compact "
                                       "file that `plasticlab report` reads")
    ex.add_argument("dir", help="a results directory: a store, or an export to write again in "
                                "this plasticlab's form")
    ex.add_argument("--to", help="a folder or a .json.gz file (default DIR/export/)")
    ex.add_argument("--all-metrics", dest="all_metrics", action="store_true",
                    help="every metric of the store, exactly (larger): what `plasticlab import` "
                         "needs to carry the runs whole to another results store")
    ex.set_defaults(func=cmd_export)
