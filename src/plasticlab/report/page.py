"""The report as one self-contained HTML page and as a GitHub-flavoured Markdown summary.

A :class:`Report` is a title, some header lines (source, time, run counts), warnings, and
:class:`Section` values holding prose, :class:`FigureRef` figures (files written by
:func:`plasticlab.report.figures.save_figure`) and :class:`Table` tables whose cells are already
formatted strings. :func:`write_html` embeds every figure (PNG as a base64 data URI), so the page
needs nothing else to display and makes no network request; :func:`write_markdown` links the PNG
files by relative path, for a paper draft or an issue.

Section text is plain text: paragraphs are separated by blank lines, a paragraph whose lines all
start with ``- `` is a bullet list, and ```code``` spans are shown as code.
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

__all__ = ["FigureRef", "Report", "Section", "Table", "markdown_table", "numeric_columns", "relative_path",
           "write_html", "write_markdown"]


@dataclass
class Table:
    """A table: ``rows`` are lists of already formatted cell strings, one per column; ``note`` is a
    caption under it. Cells are converted to ``str``; a row of the wrong length is an error."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    note: str = ""

    def __post_init__(self):
        self.columns = [str(c) for c in self.columns]
        self.rows = [[str(c) for c in row] for row in self.rows]
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.title!r}: row {i} has {len(row)} cells, "
                                 f"expected {len(self.columns)}")


@dataclass
class FigureRef:
    """A saved figure: ``files`` maps a format ("png", "svg", "pdf") to its file (relative paths are
    relative to the current directory, as usual), ``caption`` describes it, ``stem`` names it."""

    stem: str
    caption: str
    files: dict[str, Path]

    def __post_init__(self):
        self.files = {str(k).lower().lstrip("."): Path(v) for k, v in self.files.items()}


@dataclass
class Section:
    """A titled part of the report: prose ``text``, then its ``figures``, then its ``tables``."""

    title: str
    text: str = ""
    figures: list[FigureRef] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass
class Report:
    """The whole report. ``header_lines`` (source directory, time, run counts, ...) are listed under
    the title; ``warnings`` — and header lines starting with "warning" or "⚠" — are shown highlighted."""

    title: str
    sections: list[Section]
    header_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def split_header(self) -> tuple[list[str], list[str]]:
        """(plain header lines, warnings): the warnings list plus header lines that are warnings."""
        plain, warns = [], []
        for line in self.header_lines:
            (warns if _is_warning(line) else plain).append(line)
        return plain, warns + list(self.warnings)


def _is_warning(line: str) -> bool:
    text = line.lstrip()
    return text.lower().startswith("warning") or text.startswith("⚠")


_NUMERIC = re.compile(r"^\s*[+\-−–]?\s*(\d|\.\d|nan\b|inf\b)", re.IGNORECASE)
_EMPTY = {"", "–", "-", "—", "n/a", "na"}


def numeric_columns(table: Table) -> list[bool]:
    """A column is numeric when it has a value and every non-empty cell starts like a number."""
    flags = []
    for c in range(len(table.columns)):
        cells = [row[c].strip() for row in table.rows if row[c].strip().lower() not in _EMPTY]
        flags.append(bool(cells) and all(_NUMERIC.match(cell) for cell in cells))
    return flags


def relative_path(path: Path, start: Path) -> str:
    """``path`` relative to the directory ``start`` with forward slashes (absolute if impossible)."""
    target = Path(path).resolve()
    try:
        return Path(os.path.relpath(target, start.resolve())).as_posix()
    except ValueError:  # another drive on Windows
        return target.as_uri()


def _href(path: Path, start: Path) -> str:
    rel = relative_path(path, start)
    return rel if rel.startswith("file:") else quote(rel, safe="/._-~")


# --- HTML ------------------------------------------------------------------------------------------

_CSS = """
:root { --fg: #1d1d1f; --muted: #5f6368; --line: #d9dce1; --bg-alt: #f6f7f9; --accent: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1080px; padding: 24px 28px 48px; color: var(--fg); background: #fff;
  font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 1.7em; margin: 0.2em 0 0.4em; }
h2 { font-size: 1.3em; margin: 2em 0 0.6em; padding-bottom: 0.2em; border-bottom: 1px solid var(--line); }
header ul.meta { list-style: none; padding: 0; margin: 0 0 1em; color: var(--muted); font-size: 0.92em; }
header ul.meta li { margin: 0.1em 0; }
.warnings { border: 1px solid #e0a800; border-left: 6px solid #e0a800; background: #fff8e1;
  padding: 0.6em 1em; margin: 1em 0; border-radius: 4px; }
.warnings p { margin: 0.25em 0; }
.warnings strong { color: #8a5a00; }
p.missing { color: var(--accent); font-weight: 600; }
nav.toc { background: var(--bg-alt); border: 1px solid var(--line); border-radius: 6px;
  padding: 0.6em 1.2em; margin: 1.2em 0; font-size: 0.95em; }
nav.toc h2 { border: 0; margin: 0.3em 0; font-size: 1.05em; }
nav.toc ol { margin: 0.2em 0; padding-left: 1.4em; }
nav.toc ol ol { font-size: 0.92em; color: var(--muted); }
a { color: #1a5fb4; }
code { font: 0.9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--bg-alt);
  padding: 0.05em 0.3em; border-radius: 3px; }
figure { margin: 1.4em 0; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { font-size: 0.92em; color: var(--muted); margin-top: 0.4em; max-width: 900px; }
figcaption .files { white-space: nowrap; margin-left: 0.4em; }
.table-wrap { margin: 1.4em 0; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
caption { text-align: left; font-weight: 600; padding: 0 0 0.4em; }
th, td { border: 1px solid var(--line); padding: 0.3em 0.7em; vertical-align: top; }
th { background: var(--bg-alt); text-align: left; }
tbody tr:nth-child(even) td { background: #fafbfc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
p.note { font-size: 0.88em; color: var(--muted); margin: 0.4em 0 0; }
footer { margin-top: 3em; color: var(--muted); font-size: 0.85em; border-top: 1px solid var(--line);
  padding-top: 0.6em; }
@media print { nav.toc { display: none; } figure, .table-wrap { break-inside: avoid; } }
"""

# Only inline styles and data: images; nothing is fetched from anywhere.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _inline_html(text: str) -> str:
    """Escape ``text`` and show ```code``` spans as code."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans
        return _esc(text)
    return "".join(_esc(p) if i % 2 == 0 else f"<code>{_esc(p)}</code>" for i, p in enumerate(parts))


def _paragraphs(text: str) -> list[list[str]]:
    blocks, current = [], []
    for line in str(text).splitlines():
        if line.strip():
            current.append(line.rstrip())
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    return blocks


def _is_list(block: list[str]) -> bool:
    return all(line.lstrip().startswith(("- ", "* ")) for line in block)


def _text_html(text: str) -> str:
    out = []
    for block in _paragraphs(text):
        if _is_list(block):
            items = "".join(f"<li>{_inline_html(line.lstrip()[2:])}</li>" for line in block)
            out.append(f"<ul>{items}</ul>")
        else:
            out.append("<p>" + "<br>\n".join(_inline_html(line) for line in block) + "</p>")
    return "\n".join(out)


_IMAGE_TYPES = (("png", "image/png"), ("svg", "image/svg+xml"), ("jpg", "image/jpeg"), ("jpeg", "image/jpeg"),
                ("webp", "image/webp"), ("gif", "image/gif"))


def _figure_html(ref: FigureRef, number: int, anchor: str, base: Path) -> str:
    embedded = ""
    missing = [f"{fmt.upper()} {path}" for fmt, path in ref.files.items() if not path.is_file()]
    for fmt, mime in _IMAGE_TYPES:
        path = ref.files.get(fmt)
        if path is not None and path.is_file():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            alt = _esc(f"Figure {number}. {ref.caption}")
            embedded = f'<img src="data:{mime};base64,{data}" alt="{alt}" loading="eager">'
            break
    if not embedded:
        embedded = f'<p class="missing">⚠ figure {_esc(ref.stem)}: no image file to show</p>'
    links = [f'<a href="{_esc(_href(path, base))}">{_esc(fmt.upper())}</a>'
             for fmt, path in ref.files.items() if path.is_file()]
    files = f'<span class="files">[{" · ".join(links)}]</span>' if links else ""
    lost = (f'<p class="missing">⚠ missing file(s): {_esc(", ".join(missing))}</p>' if missing else "")
    return (f'<figure id="{anchor}">\n{embedded}\n<figcaption><strong>Figure {number}.</strong> '
            f"{_inline_html(ref.caption)} {files}</figcaption>\n{lost}</figure>")


def _table_html(table: Table, number: int, anchor: str) -> str:
    numeric = numeric_columns(table)
    cls = [' class="num"' if flag else "" for flag in numeric]
    head = "".join(f"<th{cls[i]} scope=\"col\">{_esc(c)}</th>" for i, c in enumerate(table.columns))
    body = "\n".join("<tr>" + "".join(f"<td{cls[i]}>{_esc(cell)}</td>" for i, cell in enumerate(row))
                     + "</tr>" for row in table.rows)
    note = f'\n<p class="note">{_inline_html(table.note)}</p>' if table.note else ""
    return (f'<div class="table-wrap" id="{anchor}">\n<table>\n<caption>Table {number}. {_esc(table.title)}'
            f"</caption>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>{note}\n</div>")


def write_html(report: Report, path: str | Path) -> Path:
    """Write ``report`` as ONE self-contained HTML file at ``path`` and return the path.

    Figures are embedded (PNG, else SVG, as base64 data URIs) and link to their SVG/PDF/PNG files by
    relative path; tables are HTML tables (numeric columns right-aligned); a table of contents lists
    sections, figures and tables; CSS is inline; a Content-Security-Policy forbids any request, and
    there is no JavaScript. All text is HTML-escaped. A missing figure file is shown as a warning.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.parent
    plain, warns = report.split_header()
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
           '<meta name="generator" content="plasticlab">', '<link rel="icon" href="data:,">',
           f"<title>{_esc(report.title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
           "<header>", f"<h1>{_esc(report.title)}</h1>"]
    if plain:
        items = "".join(f"<li>{_inline_html(line)}</li>" for line in plain)
        out.append(f'<ul class="meta">{items}</ul>')
    if warns:
        out.append('<div class="warnings" role="alert">'
                   + "".join(f"<p><strong>⚠ Warning:</strong> {_inline_html(_strip_warning(w))}</p>"
                             for w in warns) + "</div>")
    out.append("</header>")
    toc, body = [], []
    fig_no = tab_no = 0
    for s, section in enumerate(report.sections, 1):
        sec_id = f"section-{s}"
        entries = []
        parts = [f'<section id="{sec_id}">', f"<h2>{_esc(section.title)}</h2>"]
        if section.text:
            parts.append(_text_html(section.text))
        # Tables first: a section's numbers at a glance, then the figures behind them.
        for table in section.tables:
            tab_no += 1
            parts.append(_table_html(table, tab_no, f"table-{tab_no}"))
            entries.append(f'<li><a href="#table-{tab_no}">Table {tab_no}</a>: {_esc(table.title)}</li>')
        for ref in section.figures:
            fig_no += 1
            parts.append(_figure_html(ref, fig_no, f"figure-{fig_no}", base))
            entries.append(f'<li><a href="#figure-{fig_no}">Figure {fig_no}</a>: '
                           f"{_inline_html(ref.caption)}</li>")
        parts.append("</section>")
        body.append("\n".join(parts))
        sub = f"<ol>{''.join(entries)}</ol>" if entries else ""
        toc.append(f'<li><a href="#{sec_id}">{_esc(section.title)}</a>{sub}</li>')
    if toc:
        out.append(f'<nav class="toc" aria-label="Contents"><h2>Contents</h2><ol>{"".join(toc)}</ol></nav>')
    out.append("<main>")
    out.extend(body)
    if not report.sections:
        out.append('<p class="missing">This report has no sections.</p>')
    out.append("</main>")
    out.append("<footer>Generated by plasticlab. Every figure is embedded in this page; "
               "the linked SVG/PDF files sit beside it.</footer>")
    out.append("</body>\n</html>\n")
    path.write_text("\n".join(out), encoding="utf-8", newline="\n")
    return path


def _strip_warning(line: str) -> str:
    """``"WARNING: x"`` / ``"⚠ x"`` -> ``"x"`` (the page adds its own label)."""
    text = line.strip()
    text = re.sub(r"^⚠\s*", "", text)
    return re.sub(r"^warning\s*[:\-–]?\s*", "", text, flags=re.IGNORECASE) or text


# --- Markdown --------------------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    """A pipe-table cell: ``|`` escaped, line breaks as ``<br>``."""
    return str(text).replace("\r\n", "\n").replace("|", "\\|").replace("\n", "<br>").strip()


def markdown_table(table: Table) -> str:
    """``table`` as a Markdown pipe table (no title, no note), numeric columns set right."""
    numeric = numeric_columns(table)
    lines = ["| " + " | ".join(_md_cell(c) for c in table.columns) + " |",
             "|" + "|".join("---:" if flag else "---" for flag in numeric) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def _slug(title: str, used: dict[str, int]) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats."""
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
    count = used.get(slug, 0)
    used[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def _md_link_text(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("\n", " ")


def write_markdown(report: Report, path: str | Path) -> Path:
    """Write ``report`` as GitHub-flavoured Markdown at ``path`` and return the path.

    Headings, a contents list, warnings as a quoted block, each figure as an image link to its PNG
    (relative to ``path``; SVG/PDF linked beneath), and tables as pipe tables (``|`` in cells
    escaped, numeric columns right-aligned). Section text is written as it is.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = path.parent
    plain, warns = report.split_header()
    out = [f"# {report.title}", ""]
    if plain:
        out += [f"- {line}" for line in plain] + [""]
    if warns:
        out += [f"> ⚠ **Warning:** {_strip_warning(w)}" + ("  " if i < len(warns) - 1 else "")
                for i, w in enumerate(warns)] + [""]
    used: dict[str, int] = {_slug(report.title, {}): 1, "contents": 1}
    slugs = [_slug(section.title, used) for section in report.sections]
    if report.sections:
        out += ["## Contents", ""]
        out += [f"- [{_md_link_text(s.title)}](#{slug})"
                for s, slug in zip(report.sections, slugs, strict=True)]
        out.append("")
    fig_no = tab_no = 0
    for section in report.sections:
        out += [f"## {section.title}", ""]
        if section.text:
            out += [section.text.strip(), ""]
        for table in section.tables:
            tab_no += 1
            out += [f"**Table {tab_no}.** {table.title}", "", markdown_table(table), ""]
            if table.note:
                out += [f"*{table.note.strip()}*", ""]
        for ref in section.figures:
            fig_no += 1
            caption = f"Figure {fig_no}. {ref.caption}"
            image = next((ref.files[f] for f, _ in _IMAGE_TYPES if f in ref.files), None)
            if image is not None:
                out += [f"![{_md_link_text(caption)}]({_href(image, base)})", ""]
            others = [f"[{fmt.upper()}]({_href(p, base)})" for fmt, p in ref.files.items() if p != image]
            extra = f" ({' · '.join(others)})" if others else ""
            if image is None:
                extra += " — no image file"
            out += [f"*Figure {fig_no}.* {ref.caption}{extra}", ""]
    path.write_text("\n".join(out).rstrip("\n") + "\n", encoding="utf-8", newline="\n")
    return path
