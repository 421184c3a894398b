"""The committed reproduction page (docs/reproduction/) is what its committed exports give.

Each study's ``report/report.md`` must be the report that this plasticlab builds from the
study's ``results.json.gz``: a change to the statistics, the selection or the tables that
would alter a published number fails here until the reports are rebuilt
(``plasticlab report docs/reproduction/STUDY --formats png``), so no number on the page is
silently stale. Every figure a report shows must be committed beside it, the page's status
table must give each study the scale and wall time of its ``run.json``, and every mean [95 % CI]
the page (or docs/methods.md) quotes must be printed by the report its section links. A run
that two studies trained (same config, same seed) must give both the same accuracies.
"""

import json
import re
from pathlib import Path

import pytest

from plasticlab.report.build import build_report

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"


def study_folders(name: str) -> list[str]:
    """The folders under docs/reproduction that hold the file ``name``, as paths relative to
    it: ``STUDY`` for a study at its default scale, ``PARENT/STUDY`` for one run at another scale
    or length (``plasticlab reproduce STUDY --scale S --docs docs/reproduction/PARENT``)."""
    return sorted(p.parent.relative_to(PAGE).as_posix() for p in PAGE.rglob(name))


STUDIES = study_folders("results.json.gz")
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
def test_a_committed_export_is_what_plasticlab_export_writes_today(study, tmp_path):
    """The page's exports hold what `plasticlab export` writes now: only the metrics a report
    reads, to the export's precision, and past PART_BYTES parts of whole runs, so no committed
    file nears the repository's 2 MB limit on one. The gzip bytes, and so where the parts
    split, may differ with the zlib that wrote them; the runs, metrics and selection may not."""
    from plasticlab.experiments.export import PART_BYTES, export_files, export_results, read_export

    export_results(PAGE / study, tmp_path)
    assert read_export(PAGE / study / "results.json.gz") == read_export(tmp_path / "results.json.gz"), (
        f"docs/reproduction/{study}: its export is not what this plasticlab writes; write it "
        f"again with `plasticlab export docs/reproduction/{study} --to docs/reproduction/{study}`")
    assert all(path.stat().st_size <= PART_BYTES for path in export_files(PAGE / study))


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


RECORDED = study_folders("run.json")


@pytest.mark.parametrize("study", RECORDED)
def test_the_status_table_gives_the_scale_and_wall_time_of_the_studys_run_record(study):
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
        commands = reproduce_commands((PAGE / "README.md").read_text(encoding="utf-8"))
        assert any(words[2] == name and all(flag_value(words, f) == v for f, v in wanted.items())
                   for words in commands), (
            f"docs/reproduction/README.md gives no `plasticlab reproduce {name} …` with "
            f"{' '.join(f'{k} {v}' for k, v in wanted.items() if v)}: the command that fills {study}")
    elif record.get("tasks") is None:
        assert record.get("scale", 1.0) == STUDY_SCALES.get(study, 1.0), (
            f"{study} ran at --scale {record.get('scale', 1.0):g}, but `plasticlab reproduce {study}` "
            f"runs it at {STUDY_SCALES.get(study, 1.0):g}: set its default in STUDY_SCALES")


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
REPORT_LINK = re.compile(r"\]\((?:reproduction/)?((?:[\w-]+/)*[\w-]+)/report/")


def quoted_intervals(markdown: str) -> list[tuple[str, set[str], list[str]]]:
    """Each ``## `` section of ``markdown`` that links a study's report: its title, the studies
    it links (``STUDY/report/…``) and every mean [95 % CI] it quotes, minus signs as hyphens."""
    sections = []
    for section in re.split(r"(?m)^## ", markdown)[1:]:
        studies = set(REPORT_LINK.findall(section))
        if studies:
            intervals = [i.replace("−", "-").replace("**", "") for i in INTERVAL.findall(section)]
            sections.append((section.splitlines()[0], studies, intervals))
    return sections


PAGES_THAT_QUOTE = [PAGE / "README.md", PAGE.parent / "methods.md"]


@pytest.mark.parametrize("page", PAGES_THAT_QUOTE, ids=lambda p: p.name)
def test_every_interval_the_page_quotes_is_in_the_report_of_a_study_its_section_links(page):
    """A number copied by hand onto the page by mistake (a typo, a stale run) fails here: each
    'mean [low, high]' a section quotes must be printed by the committed report of one of the
    studies that section links."""
    sections = quoted_intervals(page.read_text(encoding="utf-8"))
    assert sum(len(intervals) for _, _, intervals in sections) > 0, f"{page}: no quoted interval found"
    for title, studies, intervals in sections:
        reports = "".join((PAGE / study / "report" / "report.md").read_text(encoding="utf-8")
                          for study in sorted(studies))
        missing = [i for i in intervals if i not in reports]
        assert not missing, (f"{page.name}, section {title!r}: {missing} not in the report of "
                             f"{', '.join(sorted(studies))}; copy them again from the report")


def test_a_quoted_interval_is_read_with_its_sign_and_its_section():
    md = ("# p\n## A\nsee [r](depth/report/report.md): 80.88 [80.85, 80.91], loss 0.01 [−0.28, 0.31]\n"
          "and **82.84** [82.82, 82.87]\n## B\nno link: 1.00 [0.50, 2.00]\n"
          "## C\n[r](full-length/best-x/report/report.md), [m](reproduction/init/report/figures/a.png)"
          ": 1.00 [0.50, 2.00]\n")
    assert quoted_intervals(md) == [("A", {"depth"}, ["80.88 [80.85, 80.91]", "0.01 [-0.28, 0.31]",
                                                  "82.84 [82.82, 82.87]"]),
                                    ("C", {"full-length/best-x", "init"}, ["1.00 [0.50, 2.00]"])]


def repeated_runs(exports: dict[str, Path]) -> dict[str, list[tuple[str, list]]]:
    """The runs that more than one study trained — the same config but for the number of tasks,
    and the same seed (``plasticlab compare``'s rule) — each with every study that holds it and
    that study's per-task online accuracy."""
    from plasticlab.experiments.compare import run_key
    from plasticlab.experiments.export import read_export

    held: dict[str, list[tuple[str, list]]] = {}
    for study, path in exports.items():
        runs, metrics, _ = read_export(path)
        for run in runs:
            held.setdefault(run_key(run), []).append((study, metrics[run["run_id"]]["online_accuracy"]))
    return {key: studies for key, studies in held.items() if len(studies) > 1}


def test_a_run_that_two_studies_trained_has_the_same_accuracies_in_both():
    """Studies share runs (the ablation's L2 Init is `best-permuted_mnist-adam`'s; the field's
    paper methods are the `best-*` presets'), trained in other ensembles and sittings, often by
    other commits. Each must give the same online accuracy on every task both ran, to the bit: a
    change to the code that alters a run's numbers shows here as two studies on the page that
    disagree."""
    from plasticlab.experiments.compare import compare_runs

    repeated = repeated_runs({study: PAGE / study / "results.json.gz" for study in STUDIES})
    assert len(repeated) >= 50, "the committed studies should share runs; see the docstring"
    for key, studies in repeated.items():
        (first, accuracy), *others = studies
        for study, other in others:
            _, task = compare_runs(accuracy, other)
            assert task is None, (f"{key}: {first} and {study} differ from task {task} on; rerun the "
                                  "older study")


SITTINGS_ACCOUNT = re.compile(r"\w+ of the page's studies \((.*?); ([\d,]+) runs\) were recorded "
                              r"before plasticlab\s+listed a run's \*sittings\*"
                              r".*?; ([\d,]+) runs\) list each sitting", re.DOTALL)


def test_the_page_names_the_studies_whose_runs_were_recorded_before_runs_listed_their_sittings():
    """The page says which studies' manifests cannot tell which code trained each sitting; a
    study run since lists them, so that account goes stale with every study landed."""
    from fnmatch import fnmatch

    from plasticlab.experiments.export import read_export

    without, count = set(), {False: 0, True: 0}
    for study in STUDIES:
        runs, _, _ = read_export(PAGE / study / "results.json.gz")
        listed = [bool(run["manifest"].get("sittings")) for run in runs]
        assert len(set(listed)) == 1, f"{study}: some runs list their sittings, some do not"
        count[listed[0]] += len(runs)
        if not listed[0]:
            without.add(study)
    match = SITTINGS_ACCOUNT.search((PAGE / "README.md").read_text())
    assert match, "the page's paragraph on runs recorded before sittings is gone or reworded"
    named = re.findall(r"`([^`]+)`", match.group(1))
    assert {s for s in STUDIES if any(fnmatch(s, pattern) for pattern in named)} == without
    assert [int(match.group(n).replace(",", "")) for n in (2, 3)] == [count[False], count[True]]


# the names the page's tables give the methods of the paper (bold marks the page's own method)
METHOD_NAMES = {"Baseline": "baseline", "L2": "l2", "L2 Init": "l2_init",
                "Shrink & Perturb": "shrink_perturb", "CBP": "cbp", "Continual Backprop": "cbp",
                "Concat ReLU": "concat_relu", "Layer Norm": "layer_norm", "ReDo": "redo"}


def seed_sd_columns(markdown: str) -> list[tuple[str, set[str], dict[str, str]]]:
    """Each ``## `` section of ``markdown`` with a table whose column is headed ``seed s.d.``:
    its title, the studies it links (``STUDY/report/…``) and the column's cell per method
    (the method's name as the report's configs have it)."""
    found = []
    for section in re.split(r"(?m)^## ", markdown)[1:]:
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
            found.append((section.splitlines()[0], set(REPORT_LINK.findall(section)), cells))
    return found


def test_a_seed_sd_the_page_gives_is_the_sample_standard_deviation_of_the_seeds_totals():
    """The page's verdicts quote the spread of a method's seeds as the sample standard deviation
    (n − 1) of their totals; its tables must give the same statistic, to the digits they print,
    of the runs that the section's linked export holds."""
    import numpy as np

    from plasticlab.report.data import load_results

    columns = seed_sd_columns((PAGE / "README.md").read_text(encoding="utf-8"))
    assert columns, "the page has no table with a 'seed s.d.' column"
    for title, studies, cells in columns:
        assert len(studies) == 1, f"section {title!r} links {sorted(studies)}: which export is it?"
        results = load_results(PAGE / studies.pop())
        for (problem, optimizer), _ in results.studies().items():
            for runs in results.headline(problem, optimizer)[0]:
                shown = cells.pop(runs.method, None)
                assert shown is not None, f"section {title!r}: its table has no row for {runs.method}"
                digits = len(shown.partition(".")[2])
                sd = np.std(np.asarray(runs.total) * 100, ddof=1)
                assert f"{sd:.{digits}f}" == shown, (
                    f"section {title!r}, {runs.method}: seed s.d. {shown}, the export's is {sd:.4f}")
        assert not cells, f"section {title!r}: {sorted(cells)} are not in the export"


def test_a_seed_sd_column_is_read_per_method_from_its_own_table():
    md = ("# p\n## A\n[r](x/report/report.md)\n\n| method | total | seed s.d. (points) |\n|---|---:|---:|\n"
          "| **L2 Init** | 80.41 | 0.04 |\n| Continual Backprop | 79.99 | 0.09 |\n\n"
          "| method | other |\n|---|---|\n| L2 | 1 |\n## B\nno table\n")
    assert seed_sd_columns(md) == [("A", {"x"}, {"l2_init": "0.04", "cbp": "0.09"})]
