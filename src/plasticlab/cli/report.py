"""``plasticlab report``: the report (tables, figures, statistics) of a results directory or an
export, and its check in a headless browser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_report(args: argparse.Namespace) -> int:
    """``plasticlab report``: build the report (tables, figures, statistics) of a results
    directory or an export; with ``--table``, print one table of it instead (nothing written);
    with ``--figure``, draw one figure of it."""
    _check_options(args)
    if args.figure is not None:
        return save_figure(args.dirs, args.figure, args.out, methods=args.methods,
                           latex=args.latex, max_bins=args.max_bins, reps=args.reps)
    if args.table is not None:
        return print_table(args.dirs, args.table, side_by_side=args.side_by_side,
                           methods=args.methods, by=args.by, configurations=args.configurations,
                           latex=args.latex, reps=args.reps)
    return write_report(args.dirs, args.out, args.formats, max_bins=args.max_bins, reps=args.reps,
                        check=args.check)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options that would be ignored: each belongs to the report, ``--table`` or
    ``--figure``, and those two are one each."""
    given = {"--table": args.table is not None, "--figure": args.figure is not None}
    if all(given.values()):
        raise ValueError("--table and --figure: give one (a table is printed, a figure drawn)")
    table_only = {"--side-by-side": args.side_by_side, "--by": args.by is not None,
                  "--configurations": args.configurations}
    if args.side_by_side and (args.by is not None or args.configurations):
        raise ValueError("--side-by-side sets one column of several studies side by side, a row per "
                         "method; --by and --configurations shape one study's table: give either")
    one_only = {"--methods": args.methods is not None, "--latex": args.latex}
    report_only = {"--check": args.check, "--formats": args.formats != FORMATS}
    wrong = ([o for o, on in table_only.items() if on and not given["--table"]]
             + [o for o, on in one_only.items() if on and not any(given.values())]
             + [o for o, on in report_only.items() if on and any(given.values())]
             + (["--out"] if given["--table"] and args.out is not None else []))
    if wrong:
        mode = next((o for o, on in given.items() if on), "the report (no --table, no --figure)")
        raise ValueError(f"{', '.join(wrong)}: not an option of {mode} (`plasticlab report --help` "
                         "says which option goes with --table, --figure or the report; --table "
                         "prints to stdout)")


FORMATS = "png,svg,pdf"
"""The report's figure files by default."""


def write_report(directory: str | list[str], out: str | None = None, formats: str = FORMATS, *,
                 max_bins: int = 50, reps: int = 2000, check: bool = False) -> int:
    """Build the report of ``directory`` (or of several as one: then ``out`` must be given) into
    ``out`` (None: ``directory/report``) with figure files of ``formats`` (comma-separated; png
    plus any of svg, pdf), print its warnings and where it is; with ``check``, load it in
    headless Chromium. The exit code: 1 when the check saw a problem, else 0."""
    from ..experiments.manifest import code_identity, from_other_code, plugins_changed
    from ..experiments.progress import code_summary
    from ..report.build import build_report, report_folder
    from ..report.data import combine_results, load_results

    names = tuple(f.strip() for f in formats.split(",") if f.strip())
    unknown = sorted(set(names) - {"png", "svg", "pdf"})
    if unknown or "png" not in names:
        raise ValueError(f"--formats {formats!r}: give png plus any of svg, pdf "
                         "(the HTML page embeds the PNGs)")
    directories = [directory] if isinstance(directory, str) else list(directory)
    report_folder(directories, out)  # several without --out: an error before any is read
    if check:
        _chromium_or_error()  # before the report is built, not after: a study's takes minutes
    results = combine_results([load_results(d) for d in directories])
    other_code = from_other_code(results.finished)
    if other_code:
        results.warnings.append(f"{len(other_code)} finished run(s) were trained by other code than "
                                f"this plasticlab ({code_identity()}): {code_summary(other_code)} "
                                f"(`plasticlab verify {' '.join(directories)}` checks whether this "
                                "code gives their numbers)")
    plugins = plugins_changed(results.finished)
    if plugins:
        results.warnings.append(plugins)
    page = build_report(directories, out, formats=names, max_bins=max_bins, reps=reps, results=results)
    _print_warnings(results.warnings)
    print(f"report: {page}")
    print(f"        {page.parent / 'report.md'} (Markdown tables), {page.parent / 'latex'}/ (LaTeX "
          f"floats), {page.parent / 'figures'}/ ({', '.join(names)})")
    if check:
        return _check_in_browser(page)
    return 0


def print_table(directory: str | list[str], columns: str, *, side_by_side: bool = False,
                methods: str | None = None, by: str | None = None, configurations: bool = False,
                latex: bool = False, reps: int = 2000) -> int:
    """Print the Markdown table of ``directory``'s study (or of several directories read as
    one) with ``columns`` (:mod:`plasticlab.report.results_table`'s names, comma-separated);
    with ``side_by_side``, one column of each directory's study instead; ``methods``
    (comma-separated keys): only their rows; ``by`` (comma-separated settings): columns of
    these settings first, the rows grouped by them, each method's headline within each group;
    ``configurations``: a row for every
    configuration, not each method's headline; ``latex``: a ``booktabs`` table float with its
    caption (what the columns hold) and label instead, for a paper. Writes nothing. The exit
    code: 0."""
    from ..report import results_table as tables
    from ..report.data import combine_results, load_results
    from ..report.latex import latex_label, latex_table, latex_text
    from ..report.page import markdown_table

    directories = [directory] if isinstance(directory, str) else list(directory)
    only = _keys(methods)
    if side_by_side:
        if len(directories) < 2:
            raise ValueError("--side-by-side: give two directories or more, one column each")
        studies = [(d, load_results(d)) for d in directories]
        table = tables.side_by_side_table(studies, columns, methods=only, reps=reps)
    else:
        studies = [("", combine_results([load_results(d) for d in directories]))]
        table = tables.study_table(studies[0][1], columns, methods=only, by=by or (),
                                   configurations=configurations, reps=reps)
    # the table holds finished runs alone: say which are not in it, as the report does
    for name, results in studies:
        _print_warnings(results.warnings, f"{name}: " if name else "")
    if latex:
        caption = latex_text(f"{table.title}. {table.note}".strip())
        print(latex_table(table, caption, latex_label(table.title, set())), end="")
    else:
        print(markdown_table(table))
    return 0


def save_figure(directory: str | list[str], measure: str, out: str | None, *,
                methods: str | None = None, latex: bool = False, max_bins: int = 50,
                reps: int = 2000) -> int:
    """Draw ``measure`` against the task for the methods of ``directory``'s study (or of several
    directories read as one; ``methods``: comma-separated keys, only theirs) into the file
    ``out`` (.pdf, .png or .svg) and say where it is: :mod:`plasticlab.report.study_figure`;
    ``latex``: print a LaTeX ``figure`` float of it instead, with its caption and label. The exit
    code: 0."""
    from ..report.data import combine_results, load_results
    from ..report.latex import latex_figure, latex_label, latex_text
    from ..report.study_figure import figure_caption, figure_format, save_study_figure, study_figure

    if out is None:
        raise ValueError(f"--figure {measure}: give --out FILE, a .pdf, .png or .svg to draw it in")
    figure_format(out)
    directories = [directory] if isinstance(directory, str) else list(directory)
    results = combine_results([load_results(d) for d in directories])
    fig = study_figure(results, measure, methods=_keys(methods), max_bins=max_bins, reps=reps)
    _print_warnings(results.warnings)
    caption = figure_caption(fig)
    path = save_study_figure(fig, out)
    if latex:
        print(latex_figure(str(path), latex_text(caption), latex_label(f"{caption.split(':')[0]} {measure}",
                                                                     set(), "fig")), end="")
    else:
        print(f"figure: {path}")
    return 0


def _keys(methods: str | None) -> list[str]:
    """``--methods``' comma-separated keys (none: every method)."""
    return [m.strip() for m in methods.split(",") if m.strip()] if methods else []


def _print_warnings(warnings: list[str], prefix: str = "") -> None:
    """What a results directory's reading warned of (runs unfinished, failed, not started …),
    on stderr: what the printed report, table or figure leaves out."""
    for warning in warnings:
        print(f"warning: {prefix}{warning}", file=sys.stderr)


def _check_in_browser(page: Path) -> int:
    """Load ``page`` in headless Chromium (:mod:`plasticlab.report.browser`; :func:`write_report`
    found it before building the page) and print what it saw: 0 when it loaded cleanly, 1 on
    any problem."""
    from ..report.browser import BrowserError, check_page

    try:
        result = check_page(page)
    except BrowserError as e:
        raise ValueError(f"--check: {e}") from None
    print(result)
    return 0 if result.ok else 1


def _chromium_or_error() -> None:
    """Raise the one-line error of ``--check`` where no Chromium is found."""
    from ..report.browser import INSTALL_HINT, find_chromium

    if find_chromium() is None:
        raise ValueError(f"--check needs Chromium: {INSTALL_HINT}")


def register(sub) -> None:
    """Add ``report`` to the ``plasticlab`` parser."""
    rp = sub.add_parser("report", help="figures, tables, an HTML page, Markdown and LaTeX tables from a "
                                       "results directory, or several as one (works on partial results)")
    rp.add_argument("dirs", nargs="+", metavar="DIR",
                    help="a results directory (--out of run or sweep) or a study's export; several: "
                         "one report of them all (each problem's study, and across problems)")
    rp.add_argument("--out", help="where to write the report (default DIR/report; needed for several DIRs); "
                                  "with --figure, the figure's file")
    rp.add_argument("--formats", default=FORMATS, help="figure files to write (default png,svg,pdf)")
    rp.add_argument("--max-bins", dest="max_bins", type=int, default=50,
                    help="curves with more tasks are averaged in this many bins (default 50)")
    rp.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (default 2000)")
    rp.add_argument("--table", metavar="COLUMNS",
                    help="print one Markdown table of the study instead (nothing written), one row "
                         "per method, with these comma-separated columns: seeds, lr, total, 'task T', "
                         "'tasks A-B', first, best, last, loss, L, 'seed s.d.', difference, P(improvement), "
                         "'weight magnitude', srank, BWT, 'one-step BWT', 'grid score' "
                         "(docs/cli.md#one-table---table)")
    rp.add_argument("--figure", metavar="MEASURE",
                    help="draw one figure instead, into the file --out (.pdf, .png, .svg): MEASURE "
                         "(online, or a task-end measurement: weight_magnitude, srank, dead_fraction "
                         "…) against the task, a band per method (--methods: some; "
                         "docs/cli.md#one-figure---figure)")
    rp.add_argument("--side-by-side", dest="side_by_side", action="store_true",
                    help="with --table and several DIRs: one column (--table names one) for each "
                         "DIR's study, a row per method")
    rp.add_argument("--by", metavar="SETTINGS",
                    help="with --table: these settings as its first columns, the rows grouped by "
                         "them, each method's headline within each group (comma-separated: problem, "
                         "optimizer, form, or a setting of the runs: strength, init, batch_size …); "
                         "several problems or streams in one table")
    rp.add_argument("--configurations", action="store_true",
                    help="with --table: a row for every configuration (a protocol's on its grid "
                         "seeds), not each method's headline: a sensitivity study's table")
    rp.add_argument("--methods", metavar="KEYS",
                    help="with --table or --figure: only these methods (comma-separated keys: cbp,redo)")
    rp.add_argument("--latex", action="store_true",
                    help="with --table: print it as a LaTeX table float (booktabs; caption: what its "
                         "columns hold) instead of Markdown; with --figure: print a figure float of "
                         "the file drawn (caption: what it shows)")
    rp.add_argument("--check", action="store_true",
                    help="then load the page in headless Chromium: console errors, uncaught "
                         "exceptions, failed or external requests, images that did not load "
                         "(exit 1 on any)")
    rp.set_defaults(func=cmd_report)
