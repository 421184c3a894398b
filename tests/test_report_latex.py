"""The report's tables and figures as LaTeX (plasticlab.report.latex): what each character
becomes, how a table is laid out, which file a figure includes, and every table of every
committed report typeset by pdflatex, a committed report's figures with them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import needs
from plasticlab.report import latex
from plasticlab.report.latex import PACKAGES, WRAPPED_COLUMN, latex_table, latex_text, write_latex
from plasticlab.report.page import FigureRef, Report, Section, Table

PAGE = Path(__file__).resolve().parents[1] / "docs"

needs_pdflatex = needs(shutil.which("pdflatex") is not None,
                       "no pdflatex to typeset the tables: apt-get install texlive-latex-recommended")


@pytest.mark.parametrize("text,latex", [
    ("Shrink & Perturb", r"Shrink \& Perturb"),
    ("accuracy (%)", r"accuracy (\%)"),
    ("replacement_rate", r"replacement\_rate"),
    ("a#b{c}d~e^f|g\\h", r"a\#b\{c\}d\textasciitilde{}e\textasciicircum{}f\textbar{}g\textbackslash{}h"),
    ("US$ 5", r"US$\$$ 5"),  # (in maths: a text \$ is drawn from bitmaps without cm-super)
    ("P(X > Y) + ½P(X = Y)", r"P(X $>$ Y) + $\frac{1}{2}$P(X = Y)"),
    ("θ₀", r"$\theta_{0}$"),  # one maths run, not $\theta$$_0$ (a display's $$)
    ("λ·‖θ − θ₀‖²", r"$\lambda\cdot\|\theta - \theta_{0}\|^{2}$"),
    ("s⁻¹", r"s$^{-1}$"),  # a run of superscripts is one
    ("Δ and Λ, not Α", r"$\Delta$ and $\Lambda$, not Α"),  # capital alpha: a Latin A in LaTeX
    ("0.06 [-0.17, 0.29]", r"0.06 [$-$0.17, 0.29]"),  # a minus before a number…
    ("lr=1e-3, 5-9, non-protecting", "lr=1e-3, 5-9, non-protecting"),  # …and hyphens elsewhere
    ("−0.5 ≥ x", r"$-$0.5 $\geq$ x"),
    ('"same" — or "—"', "``same'' --- or ``---''"),
    ("full reset †, ✓", r"full reset $\dagger$, $\checkmark$"),
    ("two\nlines", "two lines"),
    ("Müller", "Müller"),  # inputenc's UTF-8 knows it
    ("θ ", r"$\theta$ "), ("x ·", r"x $\cdot$"),  # a space at either end of a maths run
    ("**L2 Init** λ", r"\textbf{L2 Init} $\lambda$"), ("a **b_c** *d*", r"a \textbf{b\_c} *d*"),  # bold
])
def test_text_becomes_latex_that_typesets_it(text, latex):
    assert latex_text(text) == latex


def test_a_wrapped_cell_may_break_after_an_underscore():
    assert latex_text("replacement_rate=0.01", wrapped=True) == r"replacement\_\allowbreak{}rate=0.01"


def test_a_table_has_booktabs_rules_numbers_set_right_and_its_long_text_wrapped():
    table = Table("T", ["method", "settings", "total (%)"],
                  [["L2 Init", "lr=0.001 strength=0.01", "82.84 [82.82, 82.87]"],
                   ["CBP", "lr=0.001 " + "replacement_rate=0.01 " * 3, "80.31 [80.27, 80.34]"]])
    latex = latex_table(table, "C", "tab:t")
    assert r"\begin{tabular}{l" + WRAPPED_COLUMN + "r}" in latex
    assert latex.index(r"\caption{C}") < latex.index(r"\label{tab:t}") < latex.index(r"\toprule") \
        < latex.index(r"\midrule") < latex.index(r"\bottomrule")
    assert r"L2 Init & lr=0.001 strength=0.01 & 82.84 [82.82, 82.87] \\" in latex
    # scaled to the line only where wider than it
    assert r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi" in latex


def test_each_table_is_a_file_numbered_as_on_the_page_with_a_caption_and_a_label_of_its_own(tmp_path):
    one = Table("Total average online accuracy (%)", ["method", "n"], [["L2 Init", "10"]],
                note="mean: bootstrap")
    report = Report("r", [Section("Permuted MNIST · Adam", tables=[one, Table("Forgetting", ["a"], [["1"]])]),
                          Section("No tables"),
                          Section("Permuted MNIST · Adam", tables=[one])])
    stale = tmp_path / "table-9.tex"
    stale.parent.mkdir(exist_ok=True)
    stale.write_text("from a report with more tables")
    files = write_latex(report, tmp_path)
    assert [f.name for f in files] == ["table-1.tex", "table-2.tex", "table-3.tex"]
    assert not stale.exists()
    first = files[0].read_text()
    assert (r"\caption{Permuted MNIST $\cdot$ Adam: Total average online accuracy (\%). mean: bootstrap}"
            in first)
    labels = [re.search(r"\\label\{([^}]*)\}", f.read_text()).group(1) for f in files]
    assert labels == ["tab:permuted-mnist-adam-total-average-online-accuracy",
                      "tab:permuted-mnist-adam-forgetting",
                      "tab:permuted-mnist-adam-total-average-online-accuracy-2"]
    document = (tmp_path / "report.tex").read_text()
    assert [line for line in document.splitlines() if line.startswith(r"\input")] == [
        r"\input{table-1.tex}", r"\input{table-2.tex}", r"\input{table-3.tex}"]
    assert rf"\usepackage{{{','.join(PACKAGES)}}}" in document


def _markdown_tables(path: Path) -> list[Section]:
    """The tables of a report's Markdown (what ``write_markdown`` writes), one section each,
    titled as its file and section."""
    lines = path.read_text(encoding="utf-8").splitlines()
    sections, title = [], ""
    for i, line in enumerate(lines):
        if line.startswith("## "):
            title = line[3:]
        if not (m := re.match(r"\*\*Table \d+\.\*\* (.*)", line)):
            continue
        rows = []
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            cells = [c.strip().replace("\\|", "|").replace("<br>", "\n")
                     for c in re.split(r"(?<!\\)\|", row.strip()[1:-1])]
            rows.append(cells)
        after = lines[i + 2 + len(rows) + 1] if i + 3 + len(rows) < len(lines) else ""
        note = after[1:-1] if after.startswith("*") and after.endswith("*") else ""
        table = Table(m.group(1), rows[0], [r for r in rows[2:]], note=note)
        sections.append(Section(f"{path.parent.parent.relative_to(PAGE)} · {title}", tables=[table]))
    return sections


@needs_pdflatex
def test_every_table_of_every_committed_report_typesets_with_pdflatex(tmp_path):
    # the tables of every report under docs/ (every study, the demo report): their methods,
    # settings, symbols and notes, typeset in one run: no error, no character missing from
    # the font, no table wider than the page
    sections = [s for path in sorted(PAGE.rglob("report.md")) for s in _markdown_tables(path)]
    assert len(sections) > 100
    # and every character the module writes as LaTeX, each in a cell
    every = [*latex._SPECIAL, *latex._TEXT, *latex._MATH, *latex._SCRIPTS, "θ₀", "λ", "Δ", "ü", "é"]
    sections.append(Section("Every symbol", tables=[Table("Characters", ["text"], [[c] for c in every])]))
    files = write_latex(Report("every committed report", sections), tmp_path)
    assert len(files) == len(sections)
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "report.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    log = (tmp_path / "report.log").read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "Missing character" not in log
    # every glyph from an outline font: none drawn from bitmaps (a TS1 symbol where cm-super is
    # not installed, T1 text in the default fonts) that print blurred
    assert not re.findall(r"\S+\.\d+pk\b", log)
    overfull = [line for line in log.splitlines() if line.startswith("Overfull \\hbox")]
    assert not overfull, overfull[:5]
    assert (tmp_path / "report.pdf").stat().st_size > 10_000


def test_each_figure_is_a_float_of_its_pdf_named_from_the_reports_folder(tmp_path):
    report_dir = tmp_path / "report"
    figures = report_dir / "figures"
    both = FigureRef("pm-online", "Online accuracy vs task",
                     {"png": figures / "a.png", "pdf": figures / "a.pdf"})
    svg = FigureRef("pm-svg", "Drawn as SVG alone", {"svg": figures / "b.svg"})  # none pdflatex reads
    png = FigureRef("pm-total", "Total accuracy.", {"png": figures / "c.png"})
    files = write_latex(Report("r", [Section("Permuted MNIST · Adam", figures=[both, svg, png])]),
                        report_dir / "latex")
    assert [f.name for f in files] == ["figure-1.tex", "figure-3.tex"]  # numbered as on the page
    first, third = (f.read_text() for f in files)
    assert r"\includegraphics[width=\linewidth]{figures/a.pdf}" in first  # the PDF, not the PNG
    assert r"\caption{Permuted MNIST $\cdot$ Adam: Online accuracy vs task.}" in first
    assert r"\label{fig:pm-online}" in first
    assert "{figures/c.png}" in third and r"\caption{Permuted MNIST $\cdot$ Adam: Total accuracy.}" in third
    assert r"\graphicspath{{../}}" in (report_dir / "latex" / "report.tex").read_text()


@needs_pdflatex
def test_a_committed_reports_latex_typesets_with_its_figures(tmp_path):
    # report.tex as committed, in its folder (its figures read from the report's figures/),
    # its output written elsewhere
    latex = PAGE / "reproduction" / "main-permuted_mnist-adam" / "report" / "latex"
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error",
                           f"-output-directory={tmp_path}", "report.tex"],
                          cwd=latex, capture_output=True, text=True, timeout=300)
    log = (tmp_path / "report.log").read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, log[-3000:]
    figures = len(list(latex.glob("figure-*.tex")))
    read = set(re.findall(r"^File: \.\./+(figures/\S+) Graphic file", log, flags=re.MULTILINE))
    assert figures > 10 and len(read) == figures  # each figure's file, read
    assert "Missing character" not in log and not re.findall(r"\S+\.\d+pk\b", log)
