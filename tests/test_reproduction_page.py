"""The committed reproduction page (docs/reproduction/) is what its committed exports give.

Each study's ``report/report.md`` must be the report that this plasticlab builds from the
study's ``results.json.gz``: a change to the statistics, the selection or the tables that
would alter a published number fails here until the reports are rebuilt
(``plasticlab report docs/reproduction/STUDY --formats png``), so no number on the page is
silently stale. Every figure a report shows must be committed beside it, and the page's status
table must give each study the scale and wall time of its ``run.json``.
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


def _status_rows(page: str) -> dict[str, list[str]]:
    """The status table of ``page``: each study named in a row's first cell → the row's cells."""
    table = page.split("## Status", 1)[1].split("\n\n", 2)[1]
    rows = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for study in re.findall(r"`([^`]+)`", cells[0]):
            rows[study] = cells
    return rows


def wall_time(seconds: float) -> str:
    """A study's wall time as the status table gives it: minutes under an hour, else hours."""
    return f"{round(seconds / 60)} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


RECORDED = sorted(p.parent.name for p in PAGE.glob("*/run.json"))


@pytest.mark.parametrize("study", RECORDED)
def test_the_status_table_gives_the_scale_and_wall_time_of_the_studys_run_record(study):
    import json

    record = json.loads((PAGE / study / "run.json").read_text())
    rows = _status_rows((PAGE / "README.md").read_text(encoding="utf-8"))
    assert study in rows, f"docs/reproduction/README.md: the status table has no row for {study}"
    _, scale, wall, _ = rows[study]
    tasks, factor = record.get("tasks"), record.get("scale", 1.0)
    if tasks is not None:
        assert f"--tasks {tasks}" in scale, f"{study} ran with --tasks {tasks}; its row says {scale!r}"
    if factor != 1.0:
        assert f"--scale {factor:g}" in scale, f"{study} ran at --scale {factor:g}; its row says {scale!r}"
    if tasks is None and factor == 1.0:
        assert "full" in scale and "--" not in scale, f"{study} ran at full length; its row says {scale!r}"
    assert wall == wall_time(record["wall_time_s"]), (
        f"{study}: its run.json gives {record['wall_time_s']} s ({wall_time(record['wall_time_s'])}); "
        f"the status table says {wall!r}")


def test_the_status_table_is_read_row_by_row():
    page = ("# p\n\n## Status\n\n| study | scale | wall | status |\n|---|---|---:|---|\n"
            "| [`depth`](#d) | `--tasks 100` | 9 min | run |\n| `a`, `b` studies | — | — | not run |\n"
            "\nWall time: …\n")
    rows = _status_rows(page)
    assert set(rows) == {"depth", "a", "b"} and rows["depth"][1:3] == ["`--tasks 100`", "9 min"]
    assert wall_time(1715.4) == "29 min" and wall_time(5866.5) == "1.6 h"
