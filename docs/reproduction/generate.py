"""Write what code computes into the reproduction pages: no verdict there is written by hand.

Run from anywhere after a study's export changes (``tests/test_reproduction_page.py`` fails
until it is run)::

    python docs/reproduction/generate.py           # rewrite claims.md and the generated blocks
    python docs/reproduction/generate.py --check   # exit 1, naming the files, if any would change

It writes

* ``docs/reproduction/claims.md``: exactly what ``plasticlab claims docs/reproduction
  --every-study --markdown docs/reproduction/claims.md`` writes, run from the repository root;
* every block of a page between ``<!-- generated: KEY -->`` and ``<!-- end generated -->``:
  ``matrix`` — the claims × problems matrix of ``claims.md`` (the README); ``claims STUDY ·
  SCALE`` — the claims' parts judged on that study at that scale (each study's page);
  ``forgetting vs the paper`` — the paper's one table of numbers beside the ``forgetting``
  export's, with ``plasticlab report``'s bootstrap intervals (the README); ``field STUDY ·
  SCALE`` — a field study's methods by SPEC §12's tests (``field.md``); ``selection STUDY`` —
  the protocol's selection a ``main-*`` study's export records, beside the configuration the
  paper reports for each method (that study's page); ``results FOLDER · COLUMNS`` — the table
  of the export in ``docs/reproduction/FOLDER`` with those columns, exactly what ``plasticlab
  report docs/reproduction/FOLDER --table "COLUMNS"`` prints (any page, and the manual's
  :data:`MANUAL_PAGES`; docs/cli.md#one-table---table names the columns), and ``results A | B
  · COLUMN`` several exports side by side, either ending ``· only METHOD, …`` for some methods'
  rows, one export's ``· by SETTING, …`` or ``· configurations`` as ``--by`` and
  ``--configurations`` (:func:`results_block`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent
REPO = PAGE.parents[1]
CLAIMS_MD = PAGE / "claims.md"
BLOCK = re.compile(r"(<!-- generated: (.+?) -->\n)(.*?)(<!-- end generated -->)", re.S)
MANUAL_PAGES = (REPO / "docs" / "methods.md",)
"""Pages of the manual that quote a study's table: their ``results`` blocks are written too."""

# SPEC §11: the paper's forgetting table (Permuted MNIST, 20 tasks): method, its settings as the
# study's configs hold them, and BWT / one-step BWT / total online accuracy in %
PAPER_FORGETTING = (
    ("L2 Init λ 1e-3", "l2_init", {"strength": 1e-3}, (-63.4, -11.3, 81.1)),
    ("EWC β 10", "ewc", {"ewc_strength": 10.0}, (-39.0, -7.8, 75.8)),
    ("L2 Init + EWC", "l2_init_ewc", {"strength": 1e-3, "ewc_strength": 10.0}, (-51.1, -7.8, 80.0)),
)


def pages() -> list[Path]:
    """The hand-edited pages under docs/reproduction (not the reports, not claims.md)."""
    return sorted(p for p in PAGE.rglob("*.md") if "report" not in p.relative_to(PAGE).parts
                  and p != CLAIMS_MD)


def written_pages() -> list[Path]:
    """Every page whose generated blocks :func:`main` writes: :func:`pages` and the manual's
    :data:`MANUAL_PAGES`."""
    return [*pages(), *MANUAL_PAGES]


def claims_markdown(every_study: bool = True, judged=None) -> str:
    """What ``plasticlab claims docs/reproduction [--every-study] --markdown FILE`` writes, run
    from the repository root (its notes name the folders as that command does); ``judged``:
    what ``judge_folders([PAGE], every_study=every_study)`` gives, where it is at hand."""
    from plasticlab.report.claims import judge_folders
    from plasticlab.report.field_verdicts import claims_and_field_markdown, find_field_studies

    verdicts, notes = judged or judge_folders([PAGE], every_study=every_study)
    field = find_field_studies([PAGE])
    text = claims_and_field_markdown(verdicts, notes, field)
    return text.replace(f"{REPO}/", "")


def sections(markdown: str) -> dict[str, str]:
    """``claims.md``'s ``## `` and ``### `` sections by title, each without its title line and
    the blank lines around it."""
    parts = re.split(r"(?m)^#{2,3} (.+)\n", markdown)
    return {title: body.strip("\n") + "\n" for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def _minus(x: str) -> str:
    return x.replace("-", "−")


def forgetting_table() -> str:
    """The paper's forgetting numbers beside this study's: BWT, one-step BWT and total online
    accuracy, mean over seeds [95 % bootstrap interval] as ``plasticlab report`` computes them
    (2,000 resamples, seed 0), for the configurations the claims read (EWC in the authors' form)."""
    from plasticlab.report.claims import find_studies
    from plasticlab.report.stats import bootstrap_ci

    (study,), _ = find_studies([PAGE / "forgetting"])
    runs = study.views()[0].runs
    lines = ["| method | BWT, paper | BWT, here | one-step BWT, paper | one-step BWT, here "
             "| total, paper | total, here |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, method, settings, paper in PAPER_FORGETTING:
        c = runs[method]
        held = {k: c.config["params"].get(k) for k in settings}
        if held != settings:
            raise ValueError(f"forgetting: {method} ran with {held}, the paper's table has {settings}")
        here = [bootstrap_ci(v, reps=2000, seed=0).format(scale=100)
                for v in (c.bwt, c.one_step_bwt, c.total)]
        cells = [f"{paper[i]:.1f}" for i in range(3)]
        lines.append(f"| {label} | " + " | ".join(_minus(x) for pair in zip(cells, here, strict=True)
                                                 for x in pair) + " |")
    return "\n".join(lines) + "\n"


def selection_table(study: str) -> str:
    """The protocol's selection that ``study``'s export records: per method, the selected step
    size and settings (those the paper's table names, where it names the method), the grid
    score (mean total online accuracy over the grid seeds) and the number of configurations it
    was chosen from, beside the paper's reported best (``plasticlab report``'s
    ``paper_difference``: "same", or the paper's values where they differ); best score first."""
    from plasticlab.experiments.export import export_selection
    from plasticlab.experiments.paper import best_config
    from plasticlab.methods import method_title
    from plasticlab.report.build import paper_difference

    selection = export_selection(PAGE / study)
    if not selection:
        raise ValueError(f"{study}: its export records no selection yet")
    lines = ["| method | selected | grid score (%) | of | the paper's reported best |",
             "|---|---|---:|---:|---|"]
    for entry in sorted(selection["selected"], key=lambda e: -e["score"]):
        try:
            keys = sorted(best_config(entry["problem"], entry["method"], entry["optimizer"])["params"])
        except ValueError:
            keys = sorted(entry["params"])
        settings = " ".join([f"α {entry['lr']:g}", *(f"{k} {entry['params'][k]:g}" for k in keys)])
        lines.append(f"| {method_title(entry['method'])} | {settings} | "
                     f"{100 * entry['score']:.2f} (seeds {entry['seeds']}) | {entry['candidates']} | "
                     f"{paper_difference(entry)} |")
    return "\n".join(lines) + "\n"


def results_block(key: str) -> str:
    """The block ``results FOLDER · COLUMNS``: the table of the export in ``FOLDER`` (relative
    to docs/reproduction) with ``COLUMNS``, as ``plasticlab report FOLDER --table COLUMNS``
    prints it; ``results A | B · COLUMN``: one column of several exports side by side
    (``--side-by-side``). After it, each at most once: ``· only METHOD, …`` (``--methods``) for
    those rows; for one export, ``· by SETTING, …`` (``--by``) and ``· configurations``
    (``--configurations``)."""
    from plasticlab.report.data import load_results
    from plasticlab.report.results_table import results_table, side_by_side

    folders, _, rest = key.removeprefix("results ").partition(" · ")
    columns, *options = rest.split(" · ")
    folders = folders.split(" | ")
    given = {}
    for option in options:
        word, _, value = option.partition(" ")
        if word not in ("only", "by", "configurations") or word in given or (
                (word == "configurations") != (not value)) or (word != "only" and len(folders) > 1):
            given = None
            break
        given[word] = [v.strip() for v in value.split(",")] if value else True
    if not columns or given is None or not all((PAGE / f / "results.json.gz").is_file() for f in folders):
        raise ValueError(f"block {key!r}: write it `results FOLDER · COLUMNS` or `results FOLDER "
                         "| FOLDER · COLUMN`, each FOLDER an export under docs/reproduction, with "
                         "`· only METHOD, …` after it for some methods' rows and, for one FOLDER, "
                         "`· by SETTING, …` and `· configurations`")
    methods = given.get("only", [])
    if len(folders) == 1:
        return results_table(load_results(PAGE / folders[0]), columns, methods=methods,
                             by=given.get("by", ()), configurations=given.get("configurations", False))
    return side_by_side([(f, load_results(PAGE / f)) for f in folders], columns, methods=methods)


def expected_blocks(markdown: str) -> dict[str, str]:
    """Every block a page may hold, by key, from ``claims.md``'s text ``markdown``; a
    ``results`` block for each one a page asks for."""
    from plasticlab.report.field_verdicts import FIELD_TITLE

    found = sections(markdown)
    expected = {"matrix": found["The claims at a glance"], "forgetting vs the paper": forgetting_table()}
    by_study, _, field = markdown.split("\n## By study\n", 1)[1].split("\nFolders not read", 1)[0] \
        .partition(f"\n## {FIELD_TITLE}\n")
    for title, body in sections(by_study).items():
        expected[f"claims {title}"] = body
    for title, body in sections(field).items():
        expected[f"field {title}"] = body
    asked = {k for p in written_pages() for k in blocks(p.read_text()) if k.startswith("results ")}
    for key in sorted(asked):
        expected[key] = results_block(key)
    for folder in sorted(PAGE.glob("main-*/")):
        if (folder / "results.json.gz").is_file():
            try:
                expected[f"selection {folder.name}"] = selection_table(folder.name)
            except ValueError:
                pass  # no selection yet (the grid still training): a page asking for it fails
    return expected


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of a page's ``text``, by key."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def filled(text: str, expected: dict[str, str]) -> str:
    """``text`` with each generated block replaced by its expected content."""
    def fill(m: re.Match) -> str:
        if m.group(2) not in expected:
            raise KeyError(f"no generated content for block {m.group(2)!r}")
        return m.group(1) + expected[m.group(2)] + m.group(4)
    return BLOCK.sub(fill, text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    markdown = claims_markdown()
    expected = expected_blocks(markdown)
    stale = []
    rewritten = [(p, filled(p.read_text(), expected)) for p in written_pages()]
    for path, new in [(CLAIMS_MD, markdown), *rewritten]:
        if not path.exists() or path.read_text() != new:
            stale.append(path.relative_to(REPO).as_posix())
            if not check:
                path.write_text(new)
    print(("stale: " if check else "written: ") + (", ".join(stale) or "none"))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
