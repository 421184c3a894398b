"""``plasticlab claims``: the paper's claims (SPEC §11) judged by SPEC §12's criteria from the
studies under the folders given — computed from their exports or results stores, never written
by hand (:mod:`plasticlab.report.claims`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_claims(args: argparse.Namespace) -> int:
    """``plasticlab claims``: judge every claim on the studies under ``DIR…``; print the table,
    and write it as Markdown and JSON where asked."""
    from ..report.claims import claims_json, claims_markdown, claims_text, judge_folders

    verdicts, notes = judge_folders(args.dirs, every_study=args.every_study)
    print(claims_text(verdicts), end="")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(claims_markdown(verdicts, notes))
        print(f"markdown: {args.markdown}")
    if args.json:
        Path(args.json).write_text(json.dumps(claims_json(verdicts, notes), indent=1) + "\n")
        print(f"json: {args.json}")
    return 0


def register(sub) -> None:
    """Add ``claims`` to the ``plasticlab`` parser."""
    cl = sub.add_parser("claims", help="the paper's claims judged by SPEC §12 from the studies under "
                                       "DIR… (exports or results stores)")
    cl.add_argument("dirs", nargs="+", metavar="DIR",
                    help="a study folder (results.json.gz or results.sqlite), or a folder of them "
                         "at any depth, e.g. docs/reproduction")
    cl.add_argument("--every-study", dest="every_study", action="store_true",
                    help="a row per study a part can read (e.g. a study at two scales), not only "
                         "the preferred one (the protocol's selection, then the longest run)")
    cl.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    cl.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    cl.set_defaults(func=cmd_claims)
