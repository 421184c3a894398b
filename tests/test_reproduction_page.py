"""The committed reproduction pages (docs/reproduction/) are what their committed exports give.

Each study's ``report/report.md`` must be the report that this plasticlab builds from the
study's ``results.json.gz``: a change to the statistics, the selection or the tables that
would alter a published number fails here until the reports are rebuilt
(``plasticlab report docs/reproduction/STUDY --formats png``), so no number on a page is
silently stale. Every figure a report shows must be committed beside it; the status table
(provenance.md) must give each study the scale and wall time of its ``run.json``; every mean
[95 % CI] a page (or docs/methods.md) quotes must be printed by the report its section links. A
run that two studies trained (same config, same seed) must give both the same accuracies.

No verdict on the pages is written by hand: ``claims.md`` is what ``plasticlab claims
docs/reproduction --every-study --markdown`` writes, the README's matrix what it prints, each
study page's verdicts its rows for that study, and the paper-vs-here table the ``forgetting``
export's numbers (``docs/reproduction/generate.py`` writes them; here they are written again
and compared). Outside those generated blocks no page says *holds*, *partly* or *does not hold*.
"""

import functools
import importlib.util
import json
import re
from pathlib import Path

import pytest

from plasticlab.methods import method_title
from plasticlab.report.build import build_report

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
REPO = PAGE.parents[1]
README = PAGE / "README.md"
PROVENANCE = PAGE / "provenance.md"
FIELD = PAGE / "field.md"
CHANGED = PAGE / "verdicts-changed.md"

_spec = importlib.util.spec_from_file_location("reproduction_generate", PAGE / "generate.py")
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)

PAGES = generate.pages()
"""Every hand-edited page under docs/reproduction: the README, provenance.md, field.md,
verdicts-changed.md and each study's README.md."""


def study_folders(name: str) -> list[str]:
    """The folders under docs/reproduction that hold the file ``name``, as paths relative to
    it: ``STUDY`` for a study at its default scale, ``PARENT/STUDY`` for one run at another scale
    or length (``plasticlab reproduce STUDY --scale S --docs docs/reproduction/PARENT``)."""
    return sorted(p.parent.relative_to(PAGE).as_posix() for p in PAGE.rglob(name))


STUDIES = study_folders("results.json.gz")


@functools.cache
def committed_export(study: str):
    """What the committed export of ``study`` holds (``export_contents``), read once for the
    tests that read it: decoding the page's exports is most of their time. Shared, so read
    only."""
    from plasticlab.experiments.export import export_contents

    return export_contents(PAGE / study / "results.json.gz")


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


def study_page(study: str) -> Path:
    """The page that shows ``study`` (a folder under docs/reproduction): its folder's README.md;
    a study's run at another length (``full-length/STUDY``) on the page of ``STUDY``; the two
    ``field-*`` studies on field.md."""
    name = study.rpartition("/")[2]
    return FIELD if name.startswith("field-") else PAGE / name / "README.md"


def test_the_page_has_its_studies():
    """Every study folder has its page, the README links every page, and a study run at another
    length has a page in its own folder that points to the study's."""
    assert {"best-permuted_mnist-adam", "best-permuted_mnist-sgd", "forgetting", "ablation",
            "lambda-sensitivity", "init"} <= set(STUDIES)
    readme = README.read_text(encoding="utf-8")
    for study in STUDIES:
        page = study_page(study)
        assert page.is_file(), f"{study}: no page ({page.relative_to(PAGE)})"
        assert f"]({page.relative_to(PAGE).as_posix()}" in readme, f"the README does not link {page}"
        text = page.read_text(encoding="utf-8")
        assert f"`{study.rpartition('/')[2]}`" in text, f"{page.relative_to(PAGE)} does not name {study}"
        if "/" in study:
            assert f"](../{study}/" in text, f"{page.relative_to(PAGE)} does not link its run in {study}"
            stub = (PAGE / study / "README.md").read_text(encoding="utf-8")
            assert f"]({Path('../..', study.rpartition('/')[2], 'README.md').as_posix()})" in stub


@pytest.mark.parametrize("study", STUDIES)
def test_a_committed_export_is_what_plasticlab_export_writes_today(study, tmp_path):
    """The page's exports hold what `plasticlab export` writes now: only the metrics a report
    reads, to the export's precision, and past PART_BYTES parts of whole runs, so no committed
    file nears the repository's 2 MB limit on one. The gzip bytes, and so where the parts
    split, may differ with the zlib that wrote them; the runs, metrics and selection may not."""
    from plasticlab.experiments.export import PART_BYTES, exported_from

    # what `plasticlab export` would write of the committed export (the gzip and the parts,
    # test_export's, are left out: compressing the large exports again was most of this test;
    # and the export is read once, as `exported` reads it). No JSON round trip: made of what
    # JSON gave, with floats rounded as JSON keeps them, it is what a round trip would give.
    contents = committed_export(study)
    committed = contents.runs, contents.metrics, contents.selection
    today = exported_from(committed, PAGE / study)
    assert committed == today, (
        f"docs/reproduction/{study}: its export is not what this plasticlab writes; write it "
        f"again with `plasticlab export docs/reproduction/{study} --to docs/reproduction/{study}`")
    assert all(path.stat().st_size <= PART_BYTES for path in contents.files)


@pytest.mark.parametrize("study", STUDIES)
def test_a_committed_report_is_the_report_of_its_committed_export(study, tmp_path):
    committed = (PAGE / study / "report" / "report.md").read_text(encoding="utf-8")
    build_report(PAGE / study, tmp_path, formats=())
    rebuilt = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert _tables_and_text(rebuilt) == _tables_and_text(committed), (
        f"docs/reproduction/{study}/report/report.md is not what results.json.gz gives now: "
        f"rebuild it with `plasticlab report docs/reproduction/{study} --formats png`")
    # and its tables as LaTeX, a file each, as committed (tests/test_report_latex.py typesets
    # them), and a file for each figure (rebuilt here without its image files, so without them)
    tables = len(re.findall(r"^\*\*Table \d+\.\*\*", rebuilt, flags=re.MULTILINE))
    latex = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "latex").glob("table-*.tex")}
    committed_latex = PAGE / study / "report" / "latex"
    assert tables and len(latex) == tables
    figures = len(re.findall(r"^\*Figure \d+\.\*", committed, flags=re.MULTILINE))
    assert len(list(committed_latex.glob("figure-*.tex"))) == figures
    assert latex == {p.name: p.read_text(encoding="utf-8") for p in committed_latex.glob("table-*.tex")}, (
        f"docs/reproduction/{study}/report/latex/ is not what results.json.gz gives now: rebuild "
        f"it with `plasticlab report docs/reproduction/{study} --formats png`")


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


RECORDED = study_folders("run.json")


@pytest.mark.parametrize("study", RECORDED)
def test_the_status_table_gives_the_scale_and_wall_time_of_the_studys_run_record(study):
    record = json.loads((PAGE / study / "run.json").read_text())
    rows = _status_rows(PROVENANCE.read_text(encoding="utf-8"))
    assert study in rows, f"docs/reproduction/provenance.md: the status table has no row for {study}"
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


def reproduce_commands(markdown: str) -> list[list[str]]:
    """The words of every ``plasticlab reproduce …`` command the page gives, in backticks or on
    a line of a code block (up to a ``#`` comment)."""
    inline = re.findall(r"(?<!`)`(plasticlab reproduce [^`]+)`", markdown)
    lines = re.findall(r"(?m)^(plasticlab reproduce [^#\n]+)", markdown)
    return [command.split() for command in inline + lines]


def flag_value(words: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in a command's ``words``; None when it is not given."""
    return words[words.index(flag) + 1] if flag in words else None


def test_the_commands_a_page_gives_are_read_word_by_word():
    md = ("run `plasticlab reproduce a --scale 1 --docs\ndocs/reproduction/full-length`, not `ls`\n"
          "```bash\nplasticlab reproduce b --tasks 2    # a comment\n```\n")
    assert reproduce_commands(md) == [["plasticlab", "reproduce", "a", "--scale", "1", "--docs",
                                       "docs/reproduction/full-length"],
                                      ["plasticlab", "reproduce", "b", "--tasks", "2"]]
    assert flag_value(reproduce_commands(md)[0], "--scale") == "1"
    assert flag_value(reproduce_commands(md)[0], "--tasks") is None


@pytest.mark.parametrize("study", RECORDED)
def test_reproduce_without_flags_runs_a_study_at_the_scale_the_page_shows(study):
    """`plasticlab reproduce STUDY` with no --scale reproduces the page's run of it: a study run
    here at a shortened scale has that scale as its default (``STUDY_SCALES``), unless the page
    ran it shortened by ``--tasks``, which its row says. A study also run at another scale has
    a folder of its own, ``PARENT/STUDY``, and the page gives the command that fills it."""
    from plasticlab.experiments.study import STUDY_SCALES

    record = json.loads((PAGE / study / "run.json").read_text())
    parent, name = study.rpartition("/")[::2]
    assert record["study"] == name, f"docs/reproduction/{study} holds a run of {record['study']}"
    if parent:
        scale, default = record.get("scale", 1.0), STUDY_SCALES.get(name, 1.0)
        wanted = {"--docs": f"docs/reproduction/{parent}",
                  "--scale": None if scale == default else f"{scale:g}",
                  "--tasks": None if record.get("tasks") is None else str(record["tasks"])}
        for page in (study_page(study), PAGE / study / "README.md"):
            commands = reproduce_commands(page.read_text(encoding="utf-8"))
            assert any(words[2] == name and all(flag_value(words, f) == v for f, v in wanted.items())
                       for words in commands), (
                f"docs/reproduction/{page.relative_to(PAGE)} gives no `plasticlab reproduce {name} …` with "
                f"{' '.join(f'{k} {v}' for k, v in wanted.items() if v)}: the command that fills {study}")
    elif record.get("tasks") is None:
        assert record.get("scale", 1.0) == STUDY_SCALES.get(study, 1.0), (
            f"{study} ran at --scale {record.get('scale', 1.0):g}, but `plasticlab reproduce {study}` "
            f"runs it at {STUDY_SCALES.get(study, 1.0):g}: set its default in STUDY_SCALES")
    if not parent:
        scale = record.get("scale", 1.0)
        commands = reproduce_commands(study_page(study).read_text(encoding="utf-8"))
        assert any(words[2] == name and flag_value(words, "--docs") is None
                   and flag_value(words, "--scale") in (None, f"{scale:g}")
                   and flag_value(words, "--tasks") == (None if record.get("tasks") is None
                                                        else str(record["tasks"]))
                   for words in commands), (
            f"{study_page(study).relative_to(PAGE)} gives no `plasticlab reproduce {name}` that "
            f"fills docs/reproduction/{study} (at --scale {scale:g})")


def test_the_status_table_is_read_row_by_row():
    page = ("# p\n\n## Status\n\n| study | scale | wall | status |\n|---|---|---:|---|\n"
            "| [`depth`](#d) | `--tasks 100` | 9 min | run |\n| `a`, `b` studies | — | — | not run |\n"
            "\nWall time: …\n")
    rows = _status_rows(page)
    assert set(rows) == {"depth", "a", "b"} and rows["depth"][1:3] == ["`--tasks 100`", "9 min"]
    assert wall_time(1715.4) == "29 min" and wall_time(5866.5) == "1.6 h"


# a mean with its interval as the reports print it, e.g. "82.84 [82.82, 82.87]" or
# "**0.01** [−0.28, 0.31]" (the page writes a minus sign where the report writes a hyphen, and
# bolds a leading mean)
INTERVAL = re.compile(r"[−-]?\d+\.\d+(?:\*\*)? \[[−-]?\d+\.\d+, [−-]?\d+\.\d+\]")
# a link into a study's report, relative to the page: "STUDY/report/…", "report/…" (the page's
# own study), "../full-length/STUDY/report/…", "reproduction/STUDY/report/…" (from docs/)
REPORT_LINK = re.compile(r"\]\(((?:\.\./|[\w-]+/)*?)report/")


def without_generated_blocks(markdown: str) -> str:
    """``markdown`` without its generated blocks (checked against the code that writes them)."""
    return generate.BLOCK.sub("", markdown)


def linked_studies(section: str, base: Path) -> set[str]:
    """The study folders (relative to docs/reproduction) whose reports ``section`` of a page in
    folder ``base`` links."""
    found = set()
    for prefix in REPORT_LINK.findall(section):
        folder = (base / prefix).resolve()
        if folder.is_relative_to(PAGE) and (folder / "report").is_dir():
            found.add(folder.relative_to(PAGE).as_posix())
    return found


def quoted_intervals(markdown: str, base: Path = PAGE) -> list[tuple[str, set[str], list[str]]]:
    """Each section of ``markdown`` (the text before the first ``## ``, then each ``## ``
    section) that quotes a mean [95 % CI] or links a study's report: its title, the studies it
    links (relative to the page's folder ``base``) and every mean [95 % CI] it quotes, minus
    signs as hyphens; generated blocks left out."""
    sections = []
    for section in re.split(r"(?m)^## ", without_generated_blocks(markdown)):
        studies = linked_studies(section, base)
        intervals = [i.replace("−", "-").replace("**", "") for i in INTERVAL.findall(section)]
        if studies or intervals:
            sections.append((section.splitlines()[0], studies, intervals))
    return sections


PAGES_THAT_QUOTE = [page for page in PAGES if page != CHANGED] + [PAGE.parent / "methods.md"]


@pytest.mark.parametrize("page", PAGES_THAT_QUOTE, ids=lambda p: p.relative_to(PAGE.parent).as_posix())
def test_every_interval_a_page_quotes_is_in_the_report_of_a_study_its_section_links(page):
    """A number copied by hand onto a page by mistake (a typo, a stale run) fails here: each
    'mean [low, high]' a section quotes must be printed by the committed report of one of the
    studies that section links (a section that quotes one links at least one report)."""
    sections = quoted_intervals(page.read_text(encoding="utf-8"), page.parent)
    for title, studies, intervals in sections:
        assert studies or not intervals, (
            f"{page.name}, section {title!r} quotes {intervals} but links no report")
        reports = "".join((PAGE / study / "report" / "report.md").read_text(encoding="utf-8")
                          for study in sorted(studies))
        missing = [i for i in intervals if i not in reports]
        assert not missing, (f"{page.name}, section {title!r}: {missing} not in the report of "
                             f"{', '.join(sorted(studies))}; copy them again from the report")


def test_the_pages_quote_intervals():
    quoting = [page for page in PAGES_THAT_QUOTE
               if any(i for _, _, i in quoted_intervals(page.read_text(encoding="utf-8"), page.parent))]
    assert FIELD in quoting  # (methods.md's tables of the field studies are generated blocks now)
    # the study pages' tables are generated (and skipped here); their prose still quotes
    assert sum(1 for page in quoting if page.name == "README.md") >= 5, "the study pages quote no interval"


def test_a_quoted_interval_is_read_with_its_sign_and_its_section():
    md = ("# p\n## A\nsee [r](depth/report/report.md): 80.88 [80.85, 80.91], loss 0.01 [−0.28, 0.31]\n"
          "and **82.84** [82.82, 82.87]\n## B\nno link: 1.00 [0.50, 2.00]\n"
          "## C\n[r](full-length/best-random_label_mnist-adam/report/report.md), "
          "[m](../reproduction/init/report/figures/a.png): 1.00 [0.50, 2.00]\n"
          "<!-- generated: x -->\n2.00 [1.00, 3.00]\n<!-- end generated -->\n")
    assert quoted_intervals(md) == [
        ("A", {"depth"}, ["80.88 [80.85, 80.91]", "0.01 [-0.28, 0.31]", "82.84 [82.82, 82.87]"]),
        ("B", set(), ["1.00 [0.50, 2.00]"]),
        ("C", {"full-length/best-random_label_mnist-adam", "init"}, ["1.00 [0.50, 2.00]"])]
    # a study page links its own report as report/…, and others' as ../STUDY/report/…
    assert linked_studies("[r](report/report.md) [s](../ablation/report/report.md)",
                          PAGE / "depth") == {"depth", "ablation"}


def repeated_runs(studies: list[str]) -> dict[str, list[tuple[str, dict, dict]]]:
    """The runs that more than one of the committed ``studies`` trained — the same config but for
    the number of tasks, and the same seed (``plasticlab compare``'s rule) — each with every
    study that holds it, that study's row of it and its per-task metrics."""
    from plasticlab.experiments.compare import run_key

    held: dict[str, list[tuple[str, dict, dict]]] = {}
    for study in studies:
        contents = committed_export(study)
        runs, metrics = contents.runs, contents.metrics
        for run in runs:
            held.setdefault(run_key(run), []).append((study, run, metrics[run["run_id"]]))
    return {key: studies for key, studies in held.items() if len(studies) > 1}


def test_a_run_that_two_studies_trained_has_the_same_accuracies_in_both():
    """Studies share runs (the ablation's L2 Init is `best-permuted_mnist-adam`'s; the field's
    paper methods are the `best-*` presets'), trained in other ensembles and sittings, often by
    other commits. Each must give the same online accuracy on every task both ran, to the bit,
    and the same task-end measurements to the export's digits (`plasticlab compare`'s test): a
    change to the code that alters a run's numbers shows here as two studies on the page that
    disagree — by its measurements from the first tasks on, where the accuracies may agree for
    several (provenance.md, on 820d403)."""
    from plasticlab.experiments.compare import first_difference

    repeated = repeated_runs(STUDIES)
    assert len(repeated) >= 50, "the committed studies should share runs; see the docstring"
    measured = 0
    for key, studies in repeated.items():
        (first, run, metrics), *others = studies
        for study, other, other_metrics in others:
            _, parted, compared = first_difference(run, metrics, other, other_metrics)
            measured += bool(compared)
            assert parted is None, (f"{key}: {first} and {study} differ from task {parted[0]} on, in "
                                    f"{parted[1]}; rerun the older study")
    assert measured >= 300, "the shared runs measured alike are compared on their measurements too"
    said = re.search(r"\(([\d,]+) runs are shared so today\)", PROVENANCE.read_text())
    assert said and int(said.group(1).replace(",", "")) == len(repeated), (
        f"provenance.md should say how many runs the studies share: {len(repeated)}")


SITTINGS_ACCOUNT = re.compile(r"\w+ of the pages' studies \((.*?); ([\d,]+) runs\) were recorded "
                              r"before plasticlab\s+listed a run's \*sittings\*"
                              r".*?; ([\d,]+) runs\) list each sitting", re.DOTALL)


def test_the_page_names_the_studies_whose_runs_were_recorded_before_runs_listed_their_sittings():
    """The page says which studies' manifests cannot tell which code trained each sitting (a
    study with some runs trained again since, as `best-permuted_mnist-sgd`'s L2 Init, is one of
    them), and counts the runs on either side; a study run since lists them, so that account
    goes stale with every study landed."""
    from fnmatch import fnmatch

    without, count = set(), {False: 0, True: 0}
    for study in STUDIES:
        for run in committed_export(study).runs:
            listed = bool(run["manifest"].get("sittings"))
            count[listed] += 1
            if not listed:
                without.add(study)
    match = SITTINGS_ACCOUNT.search(PROVENANCE.read_text())
    assert match, "provenance.md's paragraph on runs recorded before sittings is gone or reworded"
    named = re.findall(r"`([^`]+)`", match.group(1))
    assert {s for s in STUDIES if any(fnmatch(s, pattern) for pattern in named)} == without
    assert [int(match.group(n).replace(",", "")) for n in (2, 3)] == [count[False], count[True]]


# a link to a study's page or its report, relative to the page: "../STUDY/README.md", "STUDY/report/…"
STUDY_LINK = re.compile(r"\]\(((?:\.\./|[\w.-]+/)*?)(?:README\.md|report/)")
PERCENT = re.compile(r"(?<![\d.\[])(\d+\.\d{1,2}) ?%")
# a paragraph that quotes an export no longer committed: "(that export is in the history at `85715d5`)"
HISTORY = "in the history at `"


@functools.cache
def export_percentages(study: str) -> frozenset[str]:
    """Every percentage the export in ``study`` gives a page to quote, to one and two decimals:
    each configuration's online accuracy per task (mean over seeds; each seed's on the first and
    the last task), its total per seed and mean, and its mean over every window of consecutive
    tasks the report's Table 2 takes."""
    import numpy as np

    from plasticlab.report.data import load_results

    values = set()
    for configs in load_results(PAGE / study).studies().values():
        for c in configs:
            online = 100 * np.asarray(c.online)[:, c.reported]
            w = min(10, len(c.reported) // 10) or 1
            means = [*online.mean(0), *online[:, 0], *online[:, -1], *(100 * np.asarray(c.total)),
                     100 * float(np.mean(c.total)),
                     *(online[:, i:i + w].mean() for i in range(online.shape[1] - w + 1))]
            values |= {f"{x:.{d}f}" for x in means for d in (1, 2)}
    return frozenset(values)


def quoted_percentages(markdown: str, base: Path) -> list[tuple[str, set[str], list[str]]]:
    """Each section of ``markdown`` (split at ``## ``) that quotes a percentage (``NN.N %``): its
    title, the studies whose page or report it links, with the page's own folder's, and those
    percentages; generated blocks and paragraphs about a run in the history left out."""
    own = {base.relative_to(PAGE).as_posix()} if (base / "results.json.gz").is_file() else set()
    found = []
    for section in re.split(r"(?m)^## ", without_generated_blocks(markdown)):
        studies = set(own)
        for prefix in STUDY_LINK.findall(section):
            folder = (base / prefix).resolve()
            if folder.is_relative_to(PAGE) and (folder / "results.json.gz").is_file():
                studies.add(folder.relative_to(PAGE).as_posix())
        quoted = [n for paragraph in section.split("\n\n") if HISTORY not in " ".join(paragraph.split())
                  for n in PERCENT.findall(paragraph)]
        if quoted:
            found.append((section.splitlines()[0], studies, quoted))
    return found


# provenance.md and verdicts-changed.md quote runs of other commits and the paper, by design
PAGES_OF_RUNS = [page for page in PAGES if page not in (PROVENANCE, CHANGED)]


@pytest.mark.parametrize("page", PAGES_OF_RUNS, ids=lambda p: p.relative_to(PAGE).as_posix())
def test_every_percentage_a_page_quotes_is_one_its_linked_exports_give(page):
    """A percentage written into a page's prose by hand ("falls from 89.7 % at task 2 to 11.4 %")
    must be one the exports of the studies its section links (or its own folder's) give, to the
    digits written: per-task means, totals, windows. A re-run that changes a study's numbers
    fails here until the prose says the new ones."""
    for title, studies, quoted in quoted_percentages(page.read_text(encoding="utf-8"), page.parent):
        where = f"{page.relative_to(PAGE).as_posix()}, section {title!r}"
        assert studies, f"{where} quotes {quoted} but links no study's page or report"
        given = frozenset().union(*(export_percentages(s) for s in sorted(studies)))
        missing = [n for n in quoted if n not in given]
        assert not missing, (f"{where}: {missing} % is no per-task mean, total or window of "
                             f"{', '.join(sorted(studies))}; write what the export gives")


def test_a_percentage_is_checked_against_the_studies_its_section_links():
    md = ("# p\nsee [the page](../depth/README.md): 80.88 % and 12.34 %, not [1.00, 2.00] %\n\n"
          "The first run (that export is in the history at `abc1234`) scored 55.5 %.\n"
          "<!-- generated: x -->\n33.3 %\n<!-- end generated -->\n## B\nnone here\n")
    assert quoted_percentages(md, PAGE / "width") == [("# p", {"width", "depth"}, ["80.88", "12.34"])]
    assert "80.88" in export_percentages("depth") and "12.34" not in export_percentages("depth")


# the names the page's tables give the methods of the paper (bold marks the page's own method)
METHOD_NAMES = {"Baseline": "baseline", "L2": "l2", "L2 Init": "l2_init",
                "Shrink & Perturb": "shrink_perturb", "CBP": "cbp", "Continual Backprop": "cbp",
                "Concat ReLU": "concat_relu", "Layer Norm": "layer_norm", "ReDo": "redo"}


def seed_sd_columns(markdown: str, base: Path = PAGE) -> list[tuple[str, set[str], dict[str, str]]]:
    """Each section of ``markdown`` (the text before the first ``## ``, then each ``## ``
    section) with a table whose column is headed ``seed s.d.``: its title, the studies it links
    (relative to the page's folder ``base``) and the column's cell per method (the method's name
    as the report's configs have it)."""
    found = []
    for section in re.split(r"(?m)^## ", markdown):
        cells: dict[str, str] = {}
        column = None
        for line in section.splitlines():
            row = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if not row:
                column = None
            elif column is None:
                column = next((i for i, c in enumerate(row) if c.startswith("seed s.d.")), None)
            elif not set(row[0]) <= set("-: "):
                name = row[0].replace("**", "")
                assert name in METHOD_NAMES, f"a 'seed s.d.' table names {name!r}: add it to METHOD_NAMES"
                cells[METHOD_NAMES[name]] = row[column]
        if cells:
            found.append((section.splitlines()[0], linked_studies(section, base), cells))
    return found


def _results_table_headers(text: str):
    """Each table header of ``text`` that names a ``method`` or a ``total`` column (a table of
    an export's numbers), as a regular-expression match of its line."""
    for m in re.finditer(r"(?m)^\|.*\|\n\|[-:| ]+\|$", text):
        cells = [cell.strip() for cell in m.group(0).split("\n")[0].strip("|").split("|")]
        if "method" in cells or any("total" in cell for cell in cells):
            yield m


def test_every_table_of_results_is_generated_from_the_exports():
    """A table whose rows are methods or configurations (a ``method`` or a ``total`` column)
    is a ``results`` block (``plasticlab report --table``'s output, one study's or several side
    by side, rewritten by generate.py), or a verdicts or selection block: no number of an
    export is copied into a page by hand."""
    tables = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        spans = [(m.start(), m.end()) for m in generate.BLOCK.finditer(text)]
        for m in _results_table_headers(text):
            tables += 1
            assert any(a <= m.start() < b for a, b in spans), (
                f"{page.relative_to(PAGE).as_posix()}, line {text.count(chr(10), 0, m.start()) + 1}: a "
                "table of results written by hand; put it in a `<!-- generated: results FOLDER · "
                "COLUMNS -->` block (docs/cli.md#one-table---table; `· by SETTING, …` and `· "
                "configurations` for a sensitivity study's) and run `python docs/reproduction/generate.py`")
    assert tables >= 30, f"the pages hold {tables} tables of results: is the pattern still theirs?"


def test_the_check_for_tables_of_results_sees_a_table_of_configurations():
    hand = "| λ | α = 1e-3: total |\n|---|---:|\n| 0 | 65.73 |\n"
    assert len(list(_results_table_headers(hand))) == 1
    assert not list(_results_table_headers("| study | what it runs |\n|---|---|\n"))


def test_a_results_block_is_the_table_command_of_an_export_under_the_reproduction():
    from plasticlab.report.data import load_results
    from plasticlab.report.results_table import results_table, side_by_side

    assert generate.results_block("results best-permuted_mnist-adam · total, loss") == results_table(
        load_results(PAGE / "best-permuted_mnist-adam"), "total, loss")
    assert generate.results_block(
        "results best-permuted_mnist-adam | reference-modes-permuted_mnist · total · only cbp, redo") == \
        side_by_side([(f, load_results(PAGE / f)) for f in ("best-permuted_mnist-adam",
                                                            "reference-modes-permuted_mnist")],
                     "total", methods=["cbp", "redo"])
    assert generate.results_block("results init · total · only l2_init · by init · configurations") == \
        results_table(load_results(PAGE / "init"), "total", methods=["l2_init"], by="init",
                      configurations=True)
    for key in ("results nowhere · total", "results best-permuted_mnist-adam",
                "results best-permuted_mnist-adam · total · cbp",
                "results init · total · by init · by lr", "results init · total · by",
                "results init · total · configurations now",
                "results best-permuted_mnist-adam | reference-modes-permuted_mnist · total · by problem"):
        with pytest.raises(ValueError, match="write it `results FOLDER · COLUMNS`"):
            generate.results_block(key)


def test_a_seed_sd_a_page_gives_is_the_sample_standard_deviation_of_the_seeds_totals():
    """The pages quote the spread of a method's seeds as the sample standard deviation (n − 1)
    of their totals; their tables must give the same statistic, to the digits they print, of
    the runs that the section's linked export holds."""
    import numpy as np

    from plasticlab.report.data import load_results

    columns = [(page, *c) for page in PAGES
               for c in seed_sd_columns(page.read_text(encoding="utf-8"), page.parent)]
    assert len(columns) >= 2, "the pages have no table with a 'seed s.d.' column"
    for page, title, studies, cells in columns:
        where = f"{page.relative_to(PAGE)}, section {title!r}"
        assert len(studies) == 1, f"{where} links {sorted(studies)}: which export is it?"
        results = load_results(PAGE / studies.pop())
        for (problem, optimizer), _ in results.studies().items():
            for runs in results.headline(problem, optimizer)[0]:
                shown = cells.pop(runs.method, None)
                assert shown is not None, f"{where}: its table has no row for {runs.method}"
                digits = len(shown.partition(".")[2])
                sd = np.std(np.asarray(runs.total) * 100, ddof=1)
                assert f"{sd:.{digits}f}" == shown, (
                    f"{where}, {runs.method}: seed s.d. {shown}, the export's is {sd:.4f}")
        assert not cells, f"{where}: {sorted(cells)} are not in the export"


def test_a_seed_sd_column_is_read_per_method_from_its_own_table():
    md = ("# p\n## A\n[r](x/report/report.md)\n\n| method | total | seed s.d. (points) |\n|---|---:|---:|\n"
          "| **L2 Init** | 80.41 | 0.04 |\n| Continual Backprop | 79.99 | 0.09 |\n\n"
          "| method | other |\n|---|---|\n| L2 | 1 |\n## B\nno table\n")
    assert seed_sd_columns(md) == [("A", set(), {"l2_init": "0.04", "cbp": "0.09"})]
    assert seed_sd_columns(md.replace("x/report", "depth/report"))[0][1] == {"depth"}


# --- the verdicts: computed, never written by hand -----------------------------------------------


@pytest.fixture(scope="module")
def claims_every_study(tmp_path_factory) -> str:
    """What ``plasticlab claims docs/reproduction --every-study --markdown FILE`` writes, run
    from the repository root as generate.py's docstring says."""
    return _claims_markdown(tmp_path_factory.mktemp("claims"), "--every-study")


@pytest.fixture(scope="module")
def judged_every_study():
    """``judge_folders([PAGE], every_study=True)``: every study's verdicts, judged once for the
    tests that read them."""
    from plasticlab.report.claims import judge_folders

    return judge_folders([PAGE], every_study=True)


def _claims_markdown(folder: Path, *options: str, printed: list | None = None) -> str:
    """What ``plasticlab claims docs/reproduction OPTIONS --markdown FILE`` writes, run from the
    repository root; what it printed is appended to ``printed``."""
    import contextlib
    import io
    import os

    from plasticlab.cli import main

    out, cwd, stdout = folder / "claims.md", Path.cwd(), io.StringIO()
    try:
        os.chdir(REPO)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
            assert main(["claims", "docs/reproduction", *options, "--markdown", str(out)]) == 0
    finally:
        os.chdir(cwd)
    if printed is not None:
        printed.append(stdout.getvalue())
    return out.read_text()


def test_claims_md_is_what_plasticlab_claims_writes(claims_every_study, judged_every_study):
    assert (PAGE / "claims.md").read_text() == claims_every_study, (
        "docs/reproduction/claims.md is not what `plasticlab claims docs/reproduction --every-study "
        "--markdown …` writes now: run `python docs/reproduction/generate.py`")
    assert generate.claims_markdown(judged=judged_every_study) == claims_every_study


def test_the_readme_matrix_is_what_plasticlab_claims_prints(tmp_path):
    """The README's claims × problems matrix is the command's, without --every-study too (the
    matrix reads each part's preferred study either way); its JSON on the committed exports
    judges every claim, each judged part with its study, scale, configurations and CBP/ReDo
    forms."""
    from plasticlab.report import claims as C

    said: list[str] = []
    written = _claims_markdown(tmp_path, "--json", str(tmp_path / "claims.json"), printed=said)
    printed = generate.sections(written)["The claims at a glance"]
    readme = generate.blocks(README.read_text(encoding="utf-8"))
    assert readme.get("matrix") == printed, (
        "the README's matrix is not what `plasticlab claims docs/reproduction --markdown …` prints: "
        "run `python docs/reproduction/generate.py`")
    assert "## The claims at a glance\n" in README.read_text(encoding="utf-8")
    table = json.loads((tmp_path / "claims.json").read_text())
    assert [c["key"] for c in table["claims"]] == [c.key for c in C.CLAIMS]
    for claim in table["claims"]:
        assert claim["verdict"] in C.VERDICTS
        assert claim["parts"] and all(p["verdict"] in C.VERDICTS for p in claim["parts"])
        for part in claim["parts"]:
            if part["verdict"] != C.NOT_JUDGED:
                assert part["study"] and part["scale"] and part["configurations"]
    judged = [p for c in table["claims"] for p in c["parts"] if p["verdict"] != C.NOT_JUDGED]
    assert judged, "the committed studies judge some parts"
    assert any("full-length" in p["folder"] for p in judged), "the full-length studies are read"
    assert all(p["forms"] for p in judged if "CBP" in p["figures"] or "ReDo" in p["figures"])
    assert written.count("\n| adam-") >= len([c for c in C.CLAIMS if c.key.startswith("adam-")])
    assert "adam-1" in said[0] and "forgetting-3" in said[0]


def test_the_manuals_tables_of_a_study_are_what_its_export_gives():
    """docs/methods.md quotes the field studies' tables: ``results`` blocks that generate.py
    writes as it writes the pages'."""
    for page in generate.MANUAL_PAGES:
        found = generate.blocks(page.read_text(encoding="utf-8"))
        assert found and all(key.startswith("results ") for key in found), page.name
        for key, body in found.items():
            assert body == generate.results_block(key), (
                f"{page.name}: block {key!r} is not what the export gives now: run `python "
                "docs/reproduction/generate.py`")


def test_every_generated_block_is_what_the_exports_give(claims_every_study):
    """Each page's generated blocks are what generate.py writes from the exports now; every study
    that a claim's part was judged on has its verdicts on its own page, once: the page of its
    folder (``STUDY/``, or a folder of one run of it, as ``half-length/STUDY/``)."""
    expected = generate.expected_blocks(claims_every_study)
    placed: dict[str, list[str]] = {}
    for page in PAGES:
        for key, body in generate.blocks(page.read_text(encoding="utf-8")).items():
            where = page.relative_to(PAGE).as_posix()
            assert key in expected, f"{where}: a generated block {key!r} that nothing writes"
            assert body == expected[key], (f"{where}: block {key!r} is not what the exports give now: "
                                           "run `python docs/reproduction/generate.py`")
            placed.setdefault(key, []).append(where)
    manual = {key for page in generate.MANUAL_PAGES
              for key in generate.blocks(page.read_text(encoding="utf-8"))}
    assert set(placed) | manual == set(expected), (
        f"blocks on no page: {sorted(set(expected) - set(placed) - manual)}")
    assert placed["matrix"] == ["README.md"] and placed["forgetting vs the paper"] == ["README.md"]
    for key, where in placed.items():
        if key.startswith("claims "):
            study = key.removeprefix("claims ").split(" · ")[0]
            assert len(where) == 1 and Path(where[0]).parent.name == study, (
                f"{key!r} is on {where}, not on {study}'s page")


def test_the_forgetting_table_is_the_reports_and_the_papers():
    """The paper-vs-here table's numbers are the forgetting report's Table 4 (the authors' EWC)
    and SPEC §11's."""
    report = (PAGE / "forgetting" / "report" / "report.md").read_text(encoding="utf-8")
    methods = {method_title(m): m for m in ("l2_init", "ewc", "l2_init_ewc")}
    rows = {}
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        # a row of the report's Table 4: "L2 Init", "EWC anchor=last …" (the authors' EWC)
        if len(cells) == 5 and cells[1] == "5" and ("anchor=" not in cells[0] or "anchor=last" in cells[0]):
            rows[methods.get(cells[0].split(" anchor=")[0])] = cells
    table = generate.forgetting_table().replace("−", "-").splitlines()[2:]
    assert len(table) == 3
    paper = {"l2_init": ("-63.4", "-11.3", "81.1"), "ewc": ("-39.0", "-7.8", "75.8"),
             "l2_init_ewc": ("-51.1", "-7.8", "80.0")}
    for line, (label, method, _, _) in zip(table, generate.PAPER_FORGETTING, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == label
        assert cells[1::2] == list(paper[method]), f"{label}: the paper's numbers are {paper[method]}"
        _, _, total, bwt, one_step = rows[method]
        assert cells[2::2] == [bwt, one_step, total], f"{label}: not the forgetting report's Table 4"


def test_the_readme_fits_on_one_screen():
    # counted in UTF-8 bytes, the stricter count (×, →, − take two or three), as the project's
    # own check counts it
    size = len(README.read_bytes())
    assert size <= 12_000, f"docs/reproduction/README.md is {size:,} bytes; its budget is 12,000"


VERDICT_WORD = re.compile(r"(?i)\b(holds?|partly)\b")  # "holds", "partly", "does not hold"


def hand_written_verdict_words(markdown: str, criteria: bool = False) -> list[str]:
    """Where ``markdown`` says *holds*, *partly* or *does not hold* outside its generated blocks
    (and, with ``criteria``, outside its ``## The criteria`` section, which defines the words)."""
    text = without_generated_blocks(markdown)
    if criteria:
        text = re.sub(r"(?ms)^## The criteria\n.*?(?=^## )", "", text)
    return [f"{m.group(0)!r} in …{text[max(0, m.start() - 40):m.end() + 20]}…".replace("\n", " ")
            for m in VERDICT_WORD.finditer(text)]


@pytest.mark.parametrize("page", [p for p in PAGES if p != CHANGED],
                         ids=lambda p: p.relative_to(PAGE).as_posix())
def test_no_page_states_a_verdict_by_hand(page):
    """A verdict is computed (SPEC §12): a page says *holds*, *partly* or *does not hold* only
    inside a generated block (the README also where its criteria define the words). Other words
    serve for everything else ("has", "keeps", "stays"); verdicts-changed.md, which quotes the
    old hand-written page, is held to the command by the next test instead."""
    found = hand_written_verdict_words(page.read_text(encoding="utf-8"), criteria=page == README)
    assert not found, f"{page.relative_to(PAGE)} states verdicts by hand: {found}"


def test_the_verdict_word_check_sees_what_it_should():
    md = ("# p\nThe part holds here. It is partly so.\n<!-- generated: x -->\n| a | **holds** |\n"
          "<!-- end generated -->\nThe subset has 1,000 images; a threshold; the holder.\n"
          "## The criteria\nA claim **holds** if…\n## Next\nDoes not hold.\n")
    words = hand_written_verdict_words(md, criteria=True)
    assert [w.split()[0] for w in words] == ["'holds'", "'partly'", "'hold'"]
    assert len(hand_written_verdict_words(md)) == 4


def test_every_verdict_change_is_what_plasticlab_claims_gives(judged_every_study):
    """verdicts-changed.md lists parts whose verdict differs from the old hand-written page's:
    each one's new verdict and figures must be the command's for that claim, part and study."""
    from plasticlab.report.claims import _study_key

    verdicts, _ = judged_every_study
    rows = {(v.claim.key, r.part, _study_key(r)): r for v in verdicts for r in v.rows}
    text = CHANGED.read_text(encoding="utf-8")
    entries = re.findall(r"(?m)^## (\S+) · .*\n\n- \*\*study\*\*: `([^`]+)` · (.+)\n- \*\*part\*\*: (.+)\n"
                         r"- \*\*old → new\*\*: (.+?) → (.+)\n- \*\*figures\*\*: (.+)\n"
                         r"- \*\*why\*\*: .+", text)
    assert len(entries) == text.count("\n## ") and entries, "verdicts-changed.md: an entry is not in the form"
    assert f"{len(entries)} parts changed" in text
    for key, study, scale, part, old, new, figures in entries:
        row = rows.get((key, part, f"{study} · {scale}"))
        assert row is not None, f"verdicts-changed.md: claims judges no {key} · {part} on {study} · {scale}"
        assert old != new and row.verdict == new, f"{key} · {part} · {scale}: claims says {row.verdict}"
        assert row.figures == figures, f"{key} · {part} · {scale}: the figures are now {row.figures}"


def test_a_selection_block_gives_the_protocols_choice_beside_the_papers_reported_best():
    # ablation ran the protocol's selection: L2 Init's is the paper's; the paper reports none
    # for L1 Init and L2 Init + Resample
    table = generate.selection_table("ablation")
    rows = {row.split(" | ")[0].strip("| "): row for row in table.splitlines()[2:]}
    assert rows["L2 Init"].endswith("| α 0.001 strength 0.01 | 82.86 (seeds 3) | 8 | same |")
    assert rows["L1 Init"].endswith("| — |") and rows["L2 Init + Resample"].endswith("| — |")
    with pytest.raises(ValueError, match="records no selection"):
        generate.selection_table("best-permuted_mnist-adam")
