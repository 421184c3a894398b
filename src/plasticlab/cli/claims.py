"""``plasticlab claims``: the paper's claims (SPEC §11) judged by SPEC §12's criteria from the
studies under the folders given — computed from their exports or results stores, never written
by hand (:mod:`plasticlab.report.claims`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_claims(args: argparse.Namespace) -> int:
    """``plasticlab claims``: judge every claim on the studies under ``DIR…``, and every method of
    the field studies there by the same tests; print the tables, and write them as Markdown and
    JSON where asked."""
    from ..report.claims import claims_json, claims_text, judge_folders
    from ..report.field_verdicts import (
        claims_and_field_markdown,
        field_notes_dropped,
        field_text,
        find_field_studies,
        judge_field,
    )

    verdicts, notes = judge_folders(args.dirs, every_study=args.every_study)
    field = find_field_studies(args.dirs)
    judged = judge_field(field)
    print(claims_text(verdicts), end="")
    print(field_text(judged), end="")
    for note in field_notes_dropped(notes, field):
        print(f"note: {note}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(claims_and_field_markdown(verdicts, notes, field))
        print(f"markdown: {args.markdown}")
    if args.json:
        data = claims_json(verdicts, field_notes_dropped(notes, field))
        data["field"] = {key: [r.to_dict() for r in rows] for key, rows in judged.items()}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n")
        print(f"json: {args.json}")
    return 0


def register(sub) -> None:
    """Add ``claims`` to the ``plasticlab`` parser."""
    cl = sub.add_parser("claims", help="the paper's claims judged by SPEC §12 from the studies under "
                                       "DIR… (exports or results stores), and the field studies' "
                                       "methods by the same tests")
    cl.add_argument("dirs", nargs="+", metavar="DIR",
                    help="a study folder (results.json.gz or results.sqlite), or a folder of them "
                         "at any depth, e.g. docs/reproduction")
    cl.add_argument("--every-study", dest="every_study", action="store_true",
                    help="a row per study a part can read (e.g. a study at two scales), not only "
                         "the preferred one (the protocol's selection, then the longest run)")
    cl.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    cl.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    cl.set_defaults(func=cmd_claims)
