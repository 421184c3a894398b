"""``plasticlab import``: the finished runs of exports carried into a results store
(:mod:`plasticlab.experiments.importer`), so that a sweep or reproduce pointed at it trains
only the rest."""

from __future__ import annotations

import argparse

from .common import add_lock_option, writing_into


def cmd_import(args: argparse.Namespace) -> int:
    """``plasticlab import``: add the finished runs of the exports ``args.exports`` to the
    results store in ``args.out``, and say per export how many were added and how many it held
    already; a conflict is one line and exit 2 (nothing imported)."""
    from ..experiments.importer import import_runs

    with writing_into(args.out, args.no_lock):  # the import enters the same lock again
        report = import_runs(args.exports, args.out, lock=not args.no_lock)
    for line in import_lines(report, args.out):
        print(line)
    return 0


def import_lines(report, out) -> list[str]:
    """What an import did (:class:`~plasticlab.experiments.importer.ImportReport`), as the
    command prints it: per export, the runs added to ``out`` and those it held already."""
    lines = []
    for path, added in report.added.items():
        held = report.held[path]
        lines.append(f"{path}: {len(added)} finished run(s) imported into {out}"
                     + (f", {len(held)} already there with the same numbers" if held else ""))
        if added and path in report.compact:
            lines.append("  (a compact export: these runs keep the metrics a report reads — online "
                         "accuracies and the accuracy matrix exactly, measurements to 7 digits — and "
                         "lack the rest; `plasticlab export DIR --all-metrics` carries every metric)")
    lines.extend(f"  note: {note}" for note in report.notes)
    return lines


def register(sub) -> None:
    """Add ``import`` to the ``plasticlab`` parser."""
    im = sub.add_parser("import", help="add the finished runs of exports to a results store, so "
                                       "that a sweep or reproduce there trains only the rest")
    im.add_argument("exports", nargs="+", metavar="EXPORT",
                    help="an export: its results.json.gz (or any of its parts), its folder (a "
                         "study's under docs/reproduction), or a results folder with its store")
    im.add_argument("--out", required=True,
                    help="the results folder to add them to (created if need be): a sweep's --out, "
                         "or reproduce's --out/STUDY")
    add_lock_option(im)
    im.set_defaults(func=cmd_import)
