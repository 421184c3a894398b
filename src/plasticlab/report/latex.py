"""The report's tables and figures as LaTeX, for a paper: one float a file.

:func:`write_latex` writes each :class:`~plasticlab.report.page.Table` of a report as
``table-N.tex`` (N: its number on the page and in ``report.md``), a ``booktabs`` ``table``
float with its caption — the section's title, the table's, and its note — and a label, ready
for ``\\input``; each figure as ``figure-N.tex``, a ``figure`` float of its PDF (its PNG where
no PDF was written) with its caption and label; and ``report.tex``, a document that inputs
them all, to see them typeset (``pdflatex report.tex`` in that folder). The floats need
``booktabs``, ``array`` (a long text column is wrapped), ``graphicx`` (a table wider than the
line is scaled to it; the figures) and ``amssymb`` (the ✓ of a selected configuration).

Cells are the page's formatted strings, escaped for LaTeX: its special characters, and the
report's symbols (θ, λ, ·, ×, −, ≥, ½, †, ✓ …) as LaTeX writes them, so that ``pdflatex``
typesets every table without a package for Unicode; a minus sign before a number is a math
minus. Letters that ``inputenc``'s UTF-8 knows (é, ü …) are kept; a character it does not
know and this module does not map (a method named in another script) is kept too, for
``xelatex`` or ``lualatex``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path

from .page import Report, Table, numeric_columns, relative_path

__all__ = ["GRAPHICS", "PACKAGES", "latex_figure", "latex_label", "latex_table", "latex_text", "write_latex"]

PACKAGES = ("booktabs", "array", "graphicx", "amssymb")
"""The packages the floats need: ``\\usepackage{booktabs,array,graphicx,amssymb}``."""

LONG_CELL = 40
"""A text column whose longest cell has more characters than this is wrapped (:data:`WRAPPED_COLUMN`)."""
WRAPPED_COLUMN = r">{\raggedright\arraybackslash\hyphenpenalty=10000\exhyphenpenalty=10000}p{0.3\linewidth}"
"""A wrapped column's ``array`` specification: 0.3 of the line, ragged right, words whole."""

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
            "|": r"\textbar{}"}
# Symbols of the fonts every TeX has as outlines — no TS1 ``\textonehalf``, ``\textdagger`` or
# ``\S``, which pdflatex draws from bitmaps where cm-super is not installed (the maths fonts'
# instead): a table typesets sharp in any installation.
_TEXT = {"—": "---", "–": "--", "…": r"\ldots{}", "‘": "`", "’": "'", "“": "``", "”": "''",
         "\u00a0": "~", "\u2009": r"\,", "\u202f": r"\,", "⚠": r"(\textbf{!})"}
_MATH = {"<": "<", ">": ">", "−": "-", "·": r"\cdot", "×": r"\times", "±": r"\pm", "≥": r"\geq",
         "≤": r"\leq", "≠": r"\neq", "≈": r"\approx", "∼": r"\sim", "→": r"\rightarrow",
         "←": r"\leftarrow", "⇒": r"\Rightarrow", "↑": r"\uparrow", "↓": r"\downarrow", "∞": r"\infty",
         "√": r"\surd", "∑": r"\sum", "∏": r"\prod", "∂": r"\partial", "∇": r"\nabla", "∈": r"\in",
         "∝": r"\propto", "‖": r"\|", "⊙": r"\odot", "∘": r"\circ", "✓": r"\checkmark", "∅": r"\emptyset",
         "′": r"'", "ℓ": r"\ell", "½": r"\frac{1}{2}", "¼": r"\frac{1}{4}", "¾": r"\frac{3}{4}",
         "°": r"^\circ", "†": r"\dagger", "‡": r"\ddagger", "§": r"\mathsection", "¶": r"\mathparagraph",
         "•": r"\bullet", "$": r"\$"}  # (a text \$ is TS1's too)
_SCRIPTS = {"²": "^2", "³": "^3", "¹": "^1", "⁰": "^0", "⁻": "^-", "⁺": "^+", "ⁿ": "^n", "ᵀ": "^T",
            "₀": "_0", "₁": "_1", "₂": "_2", "₃": "_3", "ᵢ": "_i", "ⱼ": "_j", "ₖ": "_k", "ₜ": "_t"}
_GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"}
_NUMBER_MINUS = re.compile(r"(?<![\w.])-(?=\.?\d)")
_QUOTED = re.compile(r'"([^"\n]*)"')


def _greek(char: str) -> str | None:
    """``\\theta`` for θ, ``\\Delta`` for Δ; None for a letter LaTeX writes as a Latin one (Α, ο)."""
    name = unicodedata.name(char, "")
    if name.startswith("GREEK SMALL LETTER ") and " " not in name[19:]:
        letter = name[19:].lower()
        return None if letter == "omicron" else "\\" + letter.replace("lamda", "lambda")
    if name.startswith("GREEK CAPITAL LETTER ") and " " not in name[21:]:
        letter = name[21:].capitalize().replace("Lamda", "Lambda")
        return "\\" + letter if letter in _GREEK_CAPITALS else None
    return None


_BOLD = re.compile(r"\*\*(.+?)\*\*")


def latex_text(text: str, wrapped: bool = False) -> str:
    """``text`` as LaTeX typesets it in a paragraph or a table cell: its special characters
    escaped, the symbols of :data:`_TEXT` and :data:`_MATH` and Greek letters written as LaTeX
    writes them (maths runs joined: θ₀ is ``$\\theta_{0}$``), a hyphen before a number as a
    minus sign, "straight quotes" as LaTeX's, and line breaks as spaces. ``wrapped``: a cell of
    a wrapped column, where a line may also break after an underscore (``replacement_rate``).
    Markdown's ``**bold**`` is ``\\textbf``."""
    parts = _BOLD.split(str(text))
    if len(parts) > 1:  # the odd parts are the bold ones
        return "".join(rf"\textbf{{{latex_text(part, wrapped)}}}" if i % 2 else latex_text(part, wrapped)
                       for i, part in enumerate(parts))
    text = _NUMBER_MINUS.sub("−", str(text).replace("\r\n", "\n").replace("\n", " "))
    text = _QUOTED.sub("“\\1”", text)
    out: list[str] = []
    math: list[str] = []

    def close_math() -> None:
        if math:
            out.append("$" + "".join(math) + "$")
            math.clear()

    def is_math(char: str) -> bool:
        return bool(char) and (char in _SCRIPTS or char in _MATH or _greek(char) is not None)

    for i, char in enumerate(text):
        if char == " " and math and is_math(text[i + 1:i + 2]):
            math.append(" ")  # θ − θ₀ is one maths run, its spaces TeX's own
            continue
        script = _SCRIPTS.get(char)
        if script is not None:
            # a run of them is one script: ⁻¹ is ^{-1}
            if math and math[-1][:2] == script[0] + "{":
                math[-1] = math[-1][:-1] + script[1] + "}"
            else:
                math.append(script[0] + "{" + script[1] + "}")
            continue
        symbol = _MATH.get(char) or _greek(char)
        if symbol is not None:
            # a macro followed by a letter would read as a longer macro name: \cdotx
            if math and re.search(r"\\[A-Za-z]+$", math[-1]) and symbol[:1].isalpha():
                math.append(" ")
            math.append(symbol)
            continue
        close_math()
        out.append(_SPECIAL.get(char) or _TEXT.get(char) or char)
        if wrapped and char == "_":
            out.append(r"\allowbreak{}")
    close_math()
    return "".join(out)


def latex_label(text: str, used: set[str], kind: str = "tab") -> str:
    """A ``\\label`` key for ``text``: ``kind`` (``tab``, ``fig``), a colon and its words in lower
    case joined by hyphens, ``-2``, ``-3`` … where another of the report has it already."""
    ascii_words = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    base = f"{kind}:" + ("-".join(re.findall(r"[a-z0-9]+", ascii_words.lower())) or kind)
    label, n = base, 1
    while label in used:
        n += 1
        label = f"{base}-{n}"
    used.add(label)
    return label


def latex_table(table: Table, caption: str, label: str) -> str:
    """``table`` as a ``table`` float: ``booktabs`` rules, numeric columns set right, a text
    column longer than :data:`LONG_CELL` characters wrapped (:data:`WRAPPED_COLUMN`);
    ``caption`` (LaTeX already) above, then ``\\label{label}``. A table wider than the line is
    scaled down to its width (``graphicx``), as a table of intervals often is in two columns."""
    numeric = numeric_columns(table)
    long = [not flag and max(len(c) for c in [table.columns[i], *(row[i] for row in table.rows)]) > LONG_CELL
            for i, flag in enumerate(numeric)]
    # wrapped: ragged right, breaking between words (or after an underscore), never within one
    spec = "".join(WRAPPED_COLUMN if wrap else ("r" if flag else "l")
                   for flag, wrap in zip(numeric, long, strict=True))
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small", rf"\caption{{{caption}}}",
             rf"\label{{{label}}}", r"\medskip", r"\sbox0{\begin{tabular}{" + spec + "}", r"\toprule",
             " & ".join(latex_text(c) for c in table.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_text(c, wrap) for c, wrap in zip(row, long, strict=True)) + r" \\"
              for row in table.rows]
    lines += [r"\bottomrule", r"\end{tabular}}%",
              r"\ifdim\wd0>\linewidth\resizebox{\linewidth}{!}{\usebox0}\else\usebox0\fi", r"\end{table}"]
    return "\n".join(lines) + "\n"


GRAPHICS = ("pdf", "png", "jpg", "jpeg")
"""The figure files ``pdflatex`` includes, in the order a figure's is chosen (vector first)."""


def latex_figure(path: str, caption: str, label: str) -> str:
    """A ``figure`` float of the figure file ``path`` (relative to the report's folder, where
    ``\\graphicspath`` points) at the line's width, ``caption`` (LaTeX already) and
    ``\\label{label}`` below it."""
    return "\n".join([r"\begin{figure}[htbp]", r"\centering",
                      rf"\includegraphics[width=\linewidth]{{{path}}}", rf"\caption{{{caption}}}",
                      rf"\label{{{label}}}", r"\end{figure}"]) + "\n"


def write_latex(report: Report, folder: str | Path) -> list[Path]:
    """Write every table of ``report`` into ``folder`` as ``table-N.tex`` and every figure as
    ``figure-N.tex`` (numbered as on the page), and ``report.tex``, a document inputting them
    all in the page's order; return the files written. A table's caption is its section's
    title and its own, then its note; a figure's, its section's title and its caption. A
    figure's file (:data:`GRAPHICS`: its PDF where written, else its PNG) is named relative to
    the report's folder, ``folder``'s parent: ``\\graphicspath{{path/to/report/}}`` finds it.
    Earlier ``table-*.tex`` and ``figure-*.tex`` files in ``folder`` (a report that had more)
    are removed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for stale in [*folder.glob("table-*.tex"), *folder.glob("figure-*.tex")]:
        stale.unlink()
    used: set[str] = set()
    files: list[Path] = []
    tables = figures = 0
    needs = f"% needs \\usepackage{{{','.join(PACKAGES)}}}\n"
    for section in report.sections:
        for table in section.tables:
            tables += 1
            title = f"{section.title}: {table.title}"
            note = table.note.strip()
            caption = latex_text(title) + "." + (f" {latex_text(note)}" if note else "")
            files.append(folder / f"table-{tables}.tex")
            files[-1].write_text(f"% {report.title}, table {tables}: {title}\n{needs}"
                                 + latex_table(table, caption, latex_label(title, used)),
                                 encoding="utf-8", newline="\n")
        for ref in section.figures:
            figures += 1
            file = next((ref.files[f] for f in GRAPHICS if f in ref.files), None)
            if file is None:
                continue  # no file pdflatex reads (an SVG alone): the page shows it, a paper cannot
            path = relative_path(file, folder.parent)
            files.append(folder / f"figure-{figures}.tex")
            caption = f"{section.title}: {ref.caption.strip()}"
            caption += "" if caption.endswith((".", "?", "!")) else "."
            files[-1].write_text(f"% {report.title}, figure {figures}: {ref.caption}\n{needs}"
                                 "% its file is named from the report's folder: "
                                 "\\graphicspath{{path/to/report/}}\n"
                                 + latex_figure(path, latex_text(caption),
                                                latex_label(ref.stem, used, "fig")),
                                 encoding="utf-8", newline="\n")
    (folder / "report.tex").write_text(_document(report.title, [f.name for f in files]),
                                       encoding="utf-8", newline="\n")
    return files


def _document(title: str, names: Sequence[str]) -> str:
    """A LaTeX document that inputs the tables and figures ``names`` (files beside it, their
    figures' files from the folder above), each on its page."""
    body = "\n".join(rf"\input{{{name}}}" + "\n\\clearpage" for name in names) or "No tables or figures."
    return "\n".join([r"\documentclass{article}", r"\usepackage[utf8]{inputenc}",
                      r"\usepackage[margin=2cm]{geometry}", rf"\usepackage{{{','.join(PACKAGES)}}}",
                      r"\graphicspath{{../}}", rf"\title{{{latex_text(title)}}}", r"\date{}",
                      r"\begin{document}", r"\maketitle", body, r"\end{document}", ""])
