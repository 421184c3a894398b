"""The report page: self-contained HTML, Markdown summary, and a check in a real (headless) browser."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_chromium
from plasticlab.report import browser
from plasticlab.report.browser import PageCheck, check_page, find_chromium
from plasticlab.report.figures import (
    Band,
    Estimate,
    heatmap_figure,
    interval_figure,
    line_figure,
    save_figure,
)
from plasticlab.report.page import FigureRef, Report, Section, Table, write_html, write_markdown

TRICKY = 'a|b <script>alert("x")</script> & c'
TABLE = Table("Total average online accuracy", ["method", "mean (%)", "95 % CI", "n"],
              [["l2_init", "91.20", "[90.10, 92.30]", "5"], ["baseline", "80.05", "[79.00, 81.10]", "5"],
               [TRICKY, "–", "–", "1"]], note="bootstrap <10 000> resamples")
TABLE2 = Table("Runs", ["problem", "runs"], [["permuted_mnist", "40"], ["5+1 CIFAR", "12"]])


def _figures(out: Path) -> list[FigureRef]:
    x = np.arange(20)
    line = line_figure([Band("l2_init", "l2_init", x, 0.9 - 0.001 * x, 0.88 - 0.001 * x, 0.92 - 0.001 * x, 3),
                        Band("baseline", "baseline", x, 0.9 - 0.01 * x, None, None, 1)],
                       xlabel="task", ylabel="online accuracy", title="Online accuracy", note="20 tasks")
    interval = interval_figure([Estimate("l2_init", "l2_init", 0.85, 0.83, 0.87, 3),
                                Estimate("baseline", "baseline", 0.7, 0.65, 0.74, 3)],
                               xlabel="average online accuracy", title="Summary")
    matrix = np.tril(np.full((5, 5), 0.8))
    matrix[np.triu_indices(5, 1)] = np.nan
    heat = heatmap_figure(matrix, title="Accuracy matrix")
    refs = []
    for stem, fig, caption in (("online", line, "Online accuracy & <bands>"),
                               ("summary", interval, "Summary"),
                               ("matrix", heat, "Accuracy matrix of l2_init")):
        refs.append(FigureRef(stem, caption, save_figure(fig, out / "figures", stem, formats=("png", "svg"))))
    return refs


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> tuple[Path, Report]:
    out = tmp_path_factory.mktemp("report")
    refs = _figures(out)
    report = Report(
        "plasticlab report <Permuted MNIST>",
        [Section("Online accuracy", "Average online accuracy per task.\n\n- binned\n- `hard` tasks only",
                 refs[:2], [TABLE]),
         Section("Accuracy matrix", "", [refs[2]], [TABLE2])],
        header_lines=["source: /runs/pm", "generated: 2024-05-01 12:00", "WARNING: 3 runs missing"],
        warnings=["cbp seed 4 has no results"])
    write_html(report, out / "index.html")
    write_markdown(report, out / "summary.md")
    return out, report


# --- HTML ---------------------------------------------------------------------------------------------

def test_html_is_self_contained(report_dir):
    out, _ = report_dir
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower().replace("&lt;script", "")  # no JavaScript
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) == 3
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    links = re.findall(r'<a href="([^"#][^"]*)"', page)
    assert sorted(Path(link).suffix for link in links) == [".png", ".png", ".png", ".svg", ".svg", ".svg"]
    for link in links:
        assert not Path(link).is_absolute() and (out / link).is_file()


def test_html_escapes_text_and_has_tables_toc_and_warnings(report_dir):
    out, report = report_dir
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "<title>plasticlab report &lt;Permuted MNIST&gt;</title>" in page
    assert "<script>alert" not in page
    for table in (TABLE, TABLE2):
        for cell in [*table.columns, *(c for row in table.rows for c in row)]:
            assert f">{html.escape(cell)}</t" in page, cell  # a <td> or <th> holding exactly the cell
    assert page.count("<table>") == 2
    assert "bootstrap &lt;10 000&gt; resamples" in page
    assert "Online accuracy &amp; &lt;bands&gt;" in page
    assert "<code>hard</code>" in page and "<li>binned</li>" in page
    # table of contents: every section, figure and table, each link pointing at an existing id
    toc = re.search(r'<nav class="toc".*?</nav>', page, re.DOTALL).group(0)
    anchors = re.findall(r'href="#([^"]+)"', toc)
    assert anchors == ["section-1", "table-1", "figure-1", "figure-2", "section-2", "table-2", "figure-3"]
    for anchor in anchors:
        assert f'id="{anchor}"' in page
    warnings = re.search(r'<div class="warnings".*?</div>', page, re.DOTALL).group(0)
    assert "3 runs missing" in warnings and "cbp seed 4 has no results" in warnings
    assert "source: /runs/pm" in page.split('<div class="warnings"')[0]


def test_missing_figure_file_is_reported_not_broken(tmp_path):
    ref = FigureRef("gone", "lost figure", {"png": tmp_path / "gone.png"})
    write_html(Report("r", [Section("s", figures=[ref])]), tmp_path / "index.html")
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert "<img" not in page and "missing" in page


def test_table_rows_must_match_columns():
    with pytest.raises(ValueError):
        Table("bad", ["a", "b"], [["1"]])


# --- Markdown -------------------------------------------------------------------------------------------

def _split_row(line: str) -> list[str]:
    """Cells of a pipe-table row, splitting on unescaped pipes and unescaping them."""
    inner = line.strip()[1:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def test_markdown_pipe_tables_hold_the_exact_cells(report_dir):
    out, _ = report_dir
    text = (out / "summary.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "# plasticlab report <Permuted MNIST>"
    for table in (TABLE, TABLE2):
        head = "| " + " | ".join(table.columns) + " |"
        start = lines.index(head)
        assert re.fullmatch(r"\|(-{3}:?\|)+", lines[start + 1])
        rows = [_split_row(line) for line in lines[start + 2: start + 2 + len(table.rows)]]
        assert rows == table.rows
    assert "| a\\|b <script>" in text  # the pipe escaped
    assert lines[lines.index("| method | mean (%) | 95 % CI | n |") + 1] == "|---|---:|---|---:|"


def test_markdown_figures_headings_and_warnings(report_dir):
    out, _ = report_dir
    text = (out / "summary.md").read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images == ["figures/online.png", "figures/summary.png", "figures/matrix.png"]
    assert all((out / image).is_file() for image in images)
    assert "[SVG](figures/online.svg)" in text
    assert "## Online accuracy" in text and "## Accuracy matrix" in text
    assert "- [Online accuracy](#online-accuracy)" in text
    assert "> ⚠ **Warning:** 3 runs missing" in text
    assert "**Table 1.** Total average online accuracy" in text


# --- the browser check -----------------------------------------------------------------------------------

@needs_chromium
def test_report_page_loads_cleanly_in_chromium(report_dir):
    out, _ = report_dir
    check = check_page(out / "index.html", timeout=30)
    assert check.errors == [], check
    assert check.failed_requests == [] and check.external_requests == [], check
    assert check.images == 3 and check.images_loaded == 3, check
    assert check.title == "plasticlab report <Permuted MNIST>"
    assert check.ok and check.problems == []


def _bare_page(path, body: str):
    """A minimal HTML page with ``body``: the negative controls of the browser check."""
    path.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title></head>'
                    f"<body>{body}</body></html>", encoding="utf-8")
    return path


@needs_chromium
def test_checker_reports_broken_image(tmp_path):
    check = check_page(_bare_page(tmp_path / "broken.html", '<img src="missing.png" alt="gone">'),
                       timeout=30)
    assert not check.ok
    assert check.images == 1 and check.images_loaded == 0
    assert any("missing.png" in url for url in check.broken_images)
    assert any("missing.png" in failed for failed in check.failed_requests)


@needs_chromium
def test_checker_reports_uncaught_exception(tmp_path):
    check = check_page(_bare_page(tmp_path / "throws.html",
                                  '<p>hi</p><script>throw new Error("x")</script>'), timeout=30)
    assert not check.ok
    assert any("Error: x" in message for message in check.exceptions), check
    assert check.images == 0


def test_command_line_exit_codes(tmp_path, monkeypatch, capsys):
    page = tmp_path / "index.html"
    page.write_text("<!DOCTYPE html><title>x</title>", encoding="utf-8")
    monkeypatch.setattr(browser, "find_chromium", lambda: "/usr/bin/true")
    monkeypatch.setattr(browser, "check_page", lambda p, timeout: PageCheck(url="file:///x", images=1,
                                                                            images_loaded=1))
    assert browser.main([str(page)]) == 0
    monkeypatch.setattr(browser, "check_page", lambda p, timeout: PageCheck(url="file:///x", images=2,
                                                                            images_loaded=1,
                                                                            exceptions=["Error: x"]))
    assert browser.main([str(page)]) == 1
    assert "uncaught exception: Error: x" in capsys.readouterr().out
    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    assert browser.main([str(page)]) == 2


def test_find_chromium_honours_environment(tmp_path, monkeypatch):
    fake = tmp_path / "my-chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PLASTICLAB_CHROMIUM", str(fake))
    assert find_chromium() == str(fake)
    monkeypatch.setenv("PLASTICLAB_CHROMIUM", str(tmp_path / "nope"))
    assert find_chromium() is None
