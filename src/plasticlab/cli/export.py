"""``plasticlab export``: a results directory's finished runs as one compact file that
``plasticlab report`` reads; ``plasticlab tables``: its runs and per-task metrics as CSV or
Parquet tables."""

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


def cmd_tables(args: argparse.Namespace) -> int:
    """``plasticlab tables``: write a results directory's ``runs`` and ``tasks`` tables
    (:func:`plasticlab.experiments.tables.write_tables`) and name them with their rows."""
    from ..experiments.tables import write_tables

    out = Path(args.to) if args.to else Path(args.dir) / "tables"
    for kind, (path, rows) in write_tables(args.dir, out, args.format).items():
        print(f"{kind}: {rows:,} rows → {path}")
    return 0


def register(sub) -> None:
    """Add ``export`` and ``tables`` to the ``plasticlab`` parser."""
    ex = sub.add_parser("export", help="the finished runs of a results directory as one compact "
                                       "file that `plasticlab report` reads")
    ex.add_argument("dir", help="a results directory: a store, or an export to write again in "
                                "this plasticlab's form")
    ex.add_argument("--to", help="a folder or a .json.gz file (default DIR/export/)")
    ex.add_argument("--all-metrics", dest="all_metrics", action="store_true",
                    help="every metric of the store, exactly (larger): what `plasticlab import` "
                         "needs to carry the runs whole to another results store")
    ex.set_defaults(func=cmd_export)

    tables = sub.add_parser("tables", help="the runs (one row each) and per-task metrics (one number "
                                           "a row) of a results directory as CSV or Parquet tables")
    tables.add_argument("dir", help="a results directory: a store (results.sqlite) or a study's "
                                    "export (results.json.gz); or a folder of them, each study's "
                                    "rows named in a first column, study")
    tables.add_argument("--to", help="the folder to write runs.<format> and tasks.<format> into "
                                     "(default DIR/tables/)")
    tables.add_argument("--format", choices=("csv", "parquet"), default="csv",
                        help="csv (default) or parquet (needs pyarrow: pip install 'plasticlab[tables]')")
    tables.set_defaults(func=cmd_tables)
