"""The committed reproduction page (docs/reproduction/) is what its committed exports give.

Each study's ``report/report.md`` must be the report that this plasticlab builds from the
study's ``results.json.gz``: a change to the statistics, the selection or the tables that
would alter a published number fails here until the reports are rebuilt
(``plasticlab report docs/reproduction/STUDY --formats png``), so no number on the page is
silently stale. Every figure a report shows must be committed beside it.
"""

import re
from pathlib import Path

import pytest

from plasticlab.report.build import build_report

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
STUDIES = sorted(p.parent.name for p in PAGE.glob("*/results.json.gz"))
IMAGE = re.compile(r"^!\[[^\]]*\]\((figures/[^)]+)\)$")
# the report's own header lines that name the time and the place it was built, and the
# command line's note on which code trained the runs (not a number of the study)
VOLATILE = ("- results:", "- generated", "> ⚠")


def _tables_and_text(markdown: str) -> list[str]:
    """The report's lines that carry its content: no header lines that date or place it, no
    image lines (a report built without figure files has none), no blank lines."""
    lines = []
    for line in markdown.splitlines():
        line = line.removesuffix(" — no image file")
        if line.strip() and not line.startswith(VOLATILE) and not IMAGE.match(line):
            lines.append(line)
    return lines


def test_the_page_has_its_studies():
    assert {"best-permuted_mnist-adam", "best-permuted_mnist-sgd", "forgetting", "ablation",
            "lambda-sensitivity", "init"} <= set(STUDIES)


@pytest.mark.parametrize("study", STUDIES)
def test_a_committed_report_is_the_report_of_its_committed_export(study, tmp_path):
    committed = (PAGE / study / "report" / "report.md").read_text(encoding="utf-8")
    build_report(PAGE / study, tmp_path, formats=())
    rebuilt = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert _tables_and_text(rebuilt) == _tables_and_text(committed), (
        f"docs/reproduction/{study}/report/report.md is not what results.json.gz gives now: "
        f"rebuild it with `plasticlab report docs/reproduction/{study} --formats png`")


@pytest.mark.parametrize("study", STUDIES)
def test_every_figure_a_committed_report_shows_is_committed_beside_it(study):
    report = PAGE / study / "report"
    shown = [m.group(1) for line in (report / "report.md").read_text(encoding="utf-8").splitlines()
             if (m := IMAGE.match(line))]
    assert shown, f"{study}: the report shows no figure"
    missing = [name for name in shown if not (report / name).is_file()]
    assert not missing, f"{study}: report.md shows figures that are not there: {missing}"


def test_the_volatile_lines_are_only_the_header_and_the_images():
    """The filter keeps every table row: it drops a line only for being blank, a dated header
    line, the code note, or an image."""
    md = ("# t\n- results: /x\n- generated 2026\n> ⚠ **Warning:** code\n\n| a | b |\n|---|---|\n"
          "| 1 | 2 |\n![Figure 1. c](figures/f.png)\n*Figure 1.* c — no image file\n")
    assert _tables_and_text(md) == ["# t", "| a | b |", "|---|---|", "| 1 | 2 |", "*Figure 1.* c"]
