"""``plasticlab report DIR --table COLUMNS``: one table of a study, its columns chosen by name,
its numbers the report's to the digit (the reproduction pages' tables are these)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import needs
from plasticlab.cli import main
from plasticlab.report.data import load_results
from plasticlab.report.latex import PACKAGES
from plasticlab.report.results_table import COLUMNS, parse_columns, results_table, side_by_side, study_table
from test_report_build import results_dir  # noqa: F401  (a store with unfinished runs)

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
PERMUTED = PAGE / "best-permuted_mnist-adam"  # 500 tasks, the paper's best configurations
CIFAR = PAGE / "best-random_label_cifar-adam"  # 10 tasks


@pytest.fixture(scope="module")
def permuted():
    return load_results(PERMUTED)


def _cells(markdown: str) -> dict[str, list[str]]:
    """A Markdown table's rows by their first cell (bold dropped), the header's under "method"."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("|")]
    return {r[0].replace("**", ""): r[1:] for r in rows if not set(r[0]) <= set("-: ")}


def _report_table(folder: Path, number: int) -> dict[str, list[str]]:
    """Table ``number`` of the folder's committed report (``report/report.md``)."""
    text = (folder / "report" / "report.md").read_text(encoding="utf-8")
    body = text.split(f"**Table {number}.**", 1)[1].split("**Table", 1)[0]
    return _cells(body)


def test_the_tables_cells_are_the_reports_tables_to_the_digit(permuted):
    table = _cells(results_table(permuted, "seeds, total, first, best, last, loss, P(improvement)"))
    assert table.pop("method") == ["seeds", "total (%)", "first 10 tasks", "best 10 tasks",
                                   "last 10 tasks", "loss, best − last (points)",
                                   "P(L2 Init > method)"]
    totals, windows = _report_table(PERMUTED, 1), _report_table(PERMUTED, 2)
    totals.pop("method"), windows.pop("method")
    text = (PERMUTED / "report" / "report.md").read_text(encoding="utf-8").split("**Table 3.**")[1]
    improvement = {m.group(1): m.group(2) for m in re.finditer(
        r"(?m)^\| L2 Init \| ([^|]+?) \| 10 vs 10 \| ([^|]+?) \|$", text)}
    assert len(improvement) == 7
    assert set(table) == set(totals) and len(table) == 8
    for method, cells in table.items():
        assert cells[0] == totals[method][0] == "10"
        assert cells[1] == totals[method][1]  # mean [95% CI]
        assert cells[2:6] == windows[method][1:5]
        assert cells[6] == ("—" if method == "L2 Init" else improvement[method])


def test_rows_run_from_the_best_total_down_and_l2_init_is_in_bold(permuted):
    text = results_table(permuted, "total")
    labels = [line.split("|")[1].strip() for line in text.splitlines()[2:]]
    totals = [float(line.split("|")[2].split()[0]) for line in text.splitlines()[2:]]
    assert totals == sorted(totals, reverse=True)
    assert labels[0] == "**L2 Init**" and sum("**" in label for label in labels) == 1


def test_task_columns_are_the_mean_over_seeds_of_those_tasks(permuted):
    table = _cells(results_table(permuted, "task 0, task 499, tasks 2-11"))
    assert table.pop("method") == ["task 0", "task 499", "tasks 2–11"]
    l2_init = next(c for c in permuted.headline("permuted_mnist", "adam")[0] if c.method == "l2_init")
    assert table["L2 Init"] == [f"{100 * l2_init.online[:, 0].mean():.1f}",
                                f"{100 * l2_init.online[:, 499].mean():.1f}",
                                f"{100 * l2_init.online[:, 2:12].mean():.2f}"]


def test_the_seed_sd_is_the_sample_standard_deviation_of_the_totals_in_points(permuted):
    table = _cells(results_table(permuted, "seed s.d."))
    for c in permuted.headline("permuted_mnist", "adam")[0]:
        assert table[c.label] == [f"{np.std(100 * c.total, ddof=1):.2f}"]


def test_measurements_go_from_the_first_reported_task_to_the_last():
    results = load_results(CIFAR)
    table = _cells(results_table(results, "weight magnitude, srank"))
    baseline = next(c for c in results.headline("random_label_cifar", "adam")[0] if c.method == "baseline")
    w, s = baseline.metrics["weight_magnitude"], baseline.metrics["srank"]
    assert table["Baseline"] == [f"{w[:, 0].mean():.3f} → {w[:, -1].mean():.3f}",
                                 f"{s[:, 0].mean():.0f} → {s[:, -1].mean():.0f}"]


def test_a_folder_of_several_optimizers_names_the_optimizer_of_the_rows_outside_the_most_common():
    """A field study: fifteen Adam methods and UPGD's two optimizers on the Baseline, one table."""
    table = _cells(results_table(load_results(PAGE / "field-random_label_mnist"), "lr, total"))
    assert table.pop("method") == ["α", "total (%)"]
    assert len(table) == 17
    assert table["UPGD (Baseline)"][0] == "1e-2" and table["non-protecting UPGD (Baseline)"][0] == "1e-3"
    assert table["L2 Init"][0] == "1e-4" and table["Concat ReLU"][0] == "1e-3"
    assert not any(name.startswith("Adam") for name in table)


def test_a_folder_of_several_problems_is_one_table_by_problem_each_group_its_own_table():
    from plasticlab.report.data import combine_results

    both = combine_results([load_results(PERMUTED), load_results(CIFAR)])
    with pytest.raises(ValueError, match="its runs are of several problems, which a table's rows must "
                                         r"tell apart: add problem to its settings \(--by\)"):
        results_table(both, "total")
    rows = [r for r in _rows_of(results_table(both, "total, difference", by="problem"))]
    assert rows[0] == ["problem", "method", "total (%)", "L2 Init − method (total, points)"]
    for title, folder in (("Permuted MNIST", PERMUTED), ("Random Label CIFAR", CIFAR)):
        alone = _rows_of(results_table(load_results(folder), "total, difference"))[1:]
        assert [r[1:] for r in rows[1:] if r[0] == title] == alone  # the difference within the problem


def _rows_of(markdown: str) -> list[list[str]]:
    """A Markdown table's rows as lists of cells, the header first, the rule left out."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]


def test_a_sensitivity_studys_table_has_a_row_per_configuration_ordered_by_its_settings():
    """lambda-sensitivity: 12 configurations, each total and first/last window the report's
    configuration table gives (to two decimals), ordered by α and then λ."""
    rows = _rows_of(results_table(load_results(PAGE / "lambda-sensitivity"), "total, first, last",
                                  by="lr, strength", configurations=True))
    assert rows[0] == ["α", "λ", "method", "total (%)", "first 10 tasks", "last 10 tasks"]
    report = (PAGE / "lambda-sensitivity" / "report" / "report.md").read_text(encoding="utf-8")
    reported = {(float(lr), float(strength)): (total, first, last) for lr, strength, total, first, last in
                re.findall(r"\| L2 Init \| \d+ \| lr=(\S+) strength=(\S+) \| 3 \| (\S+ \[\S+ \S+\]) \| "
                           r"(\S+) \| (\S+) \|", report)}
    assert len(rows) - 1 == len(reported) == 12
    keys = [(float(lr), float(strength)) for lr, strength, *_ in rows[1:]]
    assert keys == sorted(keys)  # α, then λ, increasing
    for lr, strength, label, total, first, last in rows[1:]:
        assert label == "L2 Init"  # its settings are columns of their own
        assert (total, first.split()[0], last.split()[0]) == reported[(float(lr), float(strength))]


def test_a_table_by_batch_size_stacks_each_streams_own_table():
    """batch-size learns three streams; by batch_size, each batch size's rows are the table of
    its runs alone (its own headline: the best α per method at that batch size)."""
    results = load_results(PAGE / "batch-size")
    rows = _rows_of(results_table(results, "lr, total, loss", by="batch_size"))
    assert rows[0] == ["batch", "method", "α", "total (%)", "loss, best − last (points)"]
    assert [r[0] for r in rows[1:]] == ["1", "1", "32", "32", "128", "128"]
    for stream, part in results.streams("permuted_mnist", "adam"):
        alone = _rows_of(results_table(part, "lr, total, loss"))[1:]
        assert [r[1:] for r in rows[1:] if r[0] == str(stream["batch_size"])] == alone
    assert rows[1][1:4] == ["**L2 Init**", "1e-4", "83.71 [83.67, 83.74]"]


def test_by_a_setting_each_methods_headline_is_taken_within_each_group():
    """init: the headline alone is each method's best scheme (PyTorch's default); by init, each
    method's row under every scheme, its difference to L2 Init's under the same scheme."""
    results = load_results(PAGE / "init")
    assert [r[0] for r in _rows_of(results_table(results, "total"))[1:]] == [
        "**L2 Init init=torch_default**", "Baseline init=torch_default"]
    rows = _rows_of(results_table(results, "total, difference", by="init"))
    schemes = ["kaiming_normal", "kaiming_uniform", "torch_default", "xavier_normal", "xavier_uniform"]
    assert [(r[0], r[1]) for r in rows[1:]] == [(s, m) for s in schemes for m in ("**L2 Init**", "Baseline")]
    every = _rows_of(results_table(results, "total", by="init", configurations=True))
    assert [r[2] for r in rows[1:]] == [r[2] for r in every[1:]]  # one configuration a method a scheme
    assert rows[6][2:] == ["65.73 [64.67, 66.57]", "+17.14 [+16.27, +18.22]"]  # torch_default's Baseline


def test_by_a_setting_a_protocols_selection_stands_where_its_group_holds_it():
    """main-permuted_mnist-adam by α: at 1e-3 L2 Init is its selection on the 10 evaluation
    seeds; the Baseline, selected at 1e-4, is there on its 10 and at 1e-3 its best on 3 grid seeds."""
    rows = {(r[0], r[1]): r[2] for r in _rows_of(results_table(
        load_results(PAGE / "main-permuted_mnist-adam"), "seeds, total", by="lr"))[1:]}
    assert rows[("1e-3", "**L2 Init strength=0.01**")] == "10"
    assert rows[("1e-4", "Baseline")] == "10" and rows[("1e-3", "Baseline")] == "3"


def test_a_folder_of_several_streams_is_an_error_naming_the_settings_that_tell_them_apart():
    with pytest.raises(ValueError, match=r"several streams \(batch sizes or task lengths\), which a "
                                         r"table's rows must tell apart: add batch_size or "
                                         r"steps_per_task to its settings \(--by\)"):
        results_table(load_results(PAGE / "batch-size"), "total")
    with pytest.raises(ValueError, match="several streams"):  # a setting that does not part them
        results_table(load_results(PAGE / "batch-size"), "total", by="init")


def test_the_form_column_says_whose_form_and_the_label_leaves_its_settings():
    rows = _rows_of(results_table(load_results(PAGE / "reference-modes"), "total", by="problem, form"))
    assert rows[0] == ["problem", "form", "method", "total (%)"]
    assert {(r[0], r[1], r[2]) for r in rows[1:]} == {
        (p, f, m) for p in ("Permuted MNIST", "Random Label MNIST")
        for f in ("plasticlab's form", "the authors' form") for m in ("CBP", "ReDo")}
    authors_cbp = [r for r in rows[1:] if r[:3] == ["Random Label MNIST", "the authors' form", "CBP"]]
    assert authors_cbp[0][3] == "43.80 [42.90, 44.60]"


def test_a_column_of_the_step_size_leaves_it_out_of_the_label():
    table = _cells(results_table(load_results(PAGE / "lambda-sensitivity"), "lr, total", configurations=True))
    assert "L2 Init strength=0.01" in table and not any("lr=" in label for label in table)


@pytest.mark.parametrize("by, message", [
    ("stregnth", r"settings stregnth: no such setting in .*lambda-sensitivity's runs; name problem, "
                 r"optimizer, form or a setting its runs hold \(those that vary: lr, strength\)"),
    ("strength, strength", "a setting named twice"),
    ("strength,", "an empty name between commas"),
    ("method", "settings method: no such setting"),
])
def test_settings_are_checked_against_the_runs(by, message):
    with pytest.raises(ValueError, match=message):
        results_table(load_results(PAGE / "lambda-sensitivity"), "total", by=by)


def test_the_step_size_is_named_once():
    with pytest.raises(ValueError, match="lr is named both as a column and in by"):
        results_table(load_results(PAGE / "lambda-sensitivity"), "lr, total", by="lr")


def test_a_column_whose_groups_mean_different_things_is_an_error():
    with pytest.raises(ValueError, match=r"table column 'P\(improvement\)' means 'P\(ReDo > method\)' "
                                         r"for some rows and 'P\(CBP > method\)' for others"):
        results_table(load_results(PAGE / "reference-modes"), "P(improvement)", by="problem, form")


def test_the_command_takes_settings_and_every_configuration(capsys):
    folder = PAGE / "lambda-sensitivity"
    assert main(["report", str(folder), "--table", "total", "--by", "lr, strength", "--configurations"]) == 0
    assert capsys.readouterr().out == results_table(load_results(folder), "total", by="lr, strength",
                                                    configurations=True)
    assert main(["report", str(folder), "--table", "total", "--by", "strength", "--latex"]) == 0
    assert "$\\lambda$: the penalty's strength" in capsys.readouterr().out


def test_column_names_are_checked_and_written_one_way():
    assert parse_columns(" total ,tasks 2-11,  seed   s.d.") == ["total", "tasks 2–11", "seed s.d."]
    assert "total" in COLUMNS
    with pytest.raises(ValueError, match=r"'totl' is not one of: seeds, lr, total"):
        parse_columns("totl")
    with pytest.raises(ValueError, match="an empty name"):
        parse_columns("total,,loss")
    with pytest.raises(ValueError, match="named twice"):
        parse_columns("total, tasks 1-2, tasks 1–2")
    with pytest.raises(ValueError, match="last task comes before the first"):
        parse_columns("tasks 9-2")


@pytest.mark.parametrize("columns, message", [
    ("task 500", r"CBP has no task 500 \(its reported tasks run to task 499\)|no task 500"),
    ("BWT", "did not measure forgetting"),
    ("grid score", "records no protocol selection"),
])
def test_a_column_the_study_cannot_give_is_an_error_naming_what_is_missing(permuted, columns, message):
    with pytest.raises(ValueError, match=message):
        results_table(permuted, columns)


def test_windows_need_as_many_reported_tasks_as_the_reports_plasticity_table():
    with pytest.raises(ValueError, match="reported 10 tasks; the report's windows need 20 or more"):
        results_table(load_results(CIFAR), "first")


def test_the_command_prints_the_table_and_writes_nothing(tmp_path, capsys):
    export = tmp_path / "study"
    export.mkdir()
    (export / "results.json.gz").write_bytes((PERMUTED / "results.json.gz").read_bytes())
    assert main(["report", str(export), "--table", "total, loss"]) == 0
    out = capsys.readouterr().out
    assert out == results_table(load_results(PERMUTED), "total, loss")
    assert out.startswith("| method | total (%) | loss, best − last (points) |\n|---|---:|---:|\n")
    assert sorted(p.name for p in export.iterdir()) == ["results.json.gz"]


def test_a_misspelt_column_on_the_command_line_is_a_one_line_error(capsys):
    assert main(["report", str(PERMUTED), "--table", "totl"]) == 2
    assert "table column 'totl' is not one of" in capsys.readouterr().err


def test_side_by_side_gives_one_column_per_study_and_a_dash_where_a_study_lacks_the_method():
    authors = PAGE / "reference-modes-permuted_mnist"  # the authors' CBP and ReDo only
    named = [("ours", load_results(PERMUTED)), ("authors'", load_results(authors))]
    table = _cells(side_by_side(named, "total"))
    assert table.pop("method") == ["total (%) · `ours`", "total (%) · `authors'`"]
    ours, theirs = _cells(results_table(named[0][1], "total")), _cells(results_table(named[1][1], "total"))
    assert list(table) == [m for m in ours if m != "method"]  # the first study's order
    for method, (a, b) in table.items():
        assert a == ours[method][0]
        assert b == (theirs[method][0] if method in ("CBP", "ReDo") else "—")


def test_only_the_methods_asked_for_are_rows_and_an_unknown_one_is_an_error(permuted):
    assert list(_cells(results_table(permuted, "total", methods=["redo", "l2_init"]))) == [
        "method", "L2 Init", "ReDo"]
    with pytest.raises(ValueError, match="methods redoo: no such runs here; the runs are of baseline, cbp"):
        results_table(permuted, "total", methods=["redoo"])


def test_side_by_side_takes_one_column_of_two_studies_or_more(permuted):
    with pytest.raises(ValueError, match="one column"):
        side_by_side([("a", permuted), ("b", permuted)], "total, loss")
    with pytest.raises(ValueError, match=r"\(1 given\)"):
        side_by_side([("a", permuted)], "total")


def test_the_command_sets_directories_side_by_side_and_keeps_the_methods_asked_for(capsys):
    authors = str(PAGE / "reference-modes-permuted_mnist")
    assert main(["report", str(PERMUTED), authors, "--table", "total", "--side-by-side",
                 "--methods", "cbp,redo"]) == 0
    assert capsys.readouterr().out == side_by_side(
        [(str(PERMUTED), load_results(PERMUTED)), (authors, load_results(authors))], "total",
        methods=["cbp", "redo"])
    assert main(["report", str(PERMUTED), "--table", "total", "--side-by-side"]) == 2
    assert "--side-by-side: give two directories or more" in capsys.readouterr().err


@needs(shutil.which("pdflatex") is not None,
       "no pdflatex to typeset the table: apt-get install texlive-latex-recommended")
def test_the_latex_table_is_a_float_for_a_paper_that_pdflatex_typesets(tmp_path, capsys):
    assert main(["report", str(PAGE / "field-permuted_mnist"), "--table",
                 "lr, total, first, best, last, loss, P(improvement)", "--latex"]) == 0
    float_ = capsys.readouterr().out
    assert float_.startswith("\\begin{table}[htbp]") and "\\label{tab:permuted-mnist-adam-upgd" in float_
    assert ("\\caption{Permuted MNIST $\\cdot$ Adam, UPGD, non-protecting UPGD. $\\alpha$: the step size; "
            "total: the total") in float_
    assert "\\textbf{L2 Init} & 1e-3 & 82.84 [82.82, 82.87]" in float_  # bold, minus signs, dagger
    assert "full reset $\\dagger$" in float_ and "boundary oracle" in float_
    (tmp_path / "t.tex").write_text("\\documentclass{article}\\usepackage[T1]{fontenc}"
                                    f"\\usepackage{{{','.join(PACKAGES)}}}\\begin{{document}}"
                                    f"{float_}\\end{{document}}\n", encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "t.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:]


def test_a_regressions_table_puts_the_lowest_error_first_and_says_so(tmp_path):
    for method in ("baseline", "l2_init"):
        assert main(["run", "--problem", "slowly_changing_regression", "--method", method,
                     "--seeds", "0-2", "--tasks", "20", "--steps-per-task", "10", "--no-progress",
                     "--out", str(tmp_path)]) == 0
    table = study_table(load_results(tmp_path), "total, loss, P(improvement)")
    assert table.columns == ["method", "total", "loss, last − best", "P(L2 Init < method)"]
    totals = [float(row[1].split()[0]) for row in table.rows]
    assert totals == sorted(totals)
    assert table.note.startswith("Total: the total average online squared error, mean over seeds")
    assert "loss: the last window's minus the best's online squared error, per seed [95 %" in table.note
    assert "(lower is better)" in table.note and "points" not in table.note


def test_the_command_says_on_stderr_which_runs_are_not_in_the_table(results_dir, capsys):  # noqa: F811
    assert main(["report", str(results_dir), "--table", "total"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("| method | total (%) |") and "warning" not in out
    assert "warning: 1 run(s) unfinished" in err and "warning: 1 run(s) failed" in err
    assert "warning: 1 of 1 planned run(s) not started yet" in err


def test_the_difference_is_the_claims_paired_difference_to_l2_init():
    """The verdicts' figure for sgd-2 (claims.md): L2 Init − CBP (total): +0.41 [+0.36, +0.46]."""
    table = _cells(results_table(load_results(PAGE / "best-permuted_mnist-sgd"), "difference"))
    assert table.pop("method") == ["L2 Init − method (total, points)"]
    assert table["CBP"] == ["+0.41 [+0.36, +0.46]"] and table["ReDo"] == ["+0.46 [+0.40, +0.51]"]
    assert table["L2 Init"] == ["—"]
    claims = (PAGE / "claims.md").read_text(encoding="utf-8")
    assert "L2 Init − CBP (total): +0.41 [+0.36, +0.46]" in claims


@pytest.mark.parametrize("options, message", [
    (["--latex"], "--latex: not an option of the report"),
    (["--methods", "cbp"], "--methods: not an option of the report"),
    (["--table", "total", "--figure", "srank", "--out", "x.pdf"], "--table and --figure: give one"),
    (["--table", "total", "--check"], "--check: not an option of --table"),
    (["--table", "total", "--out", "t.md"], "--out: not an option of --table"),
    (["--figure", "srank", "--side-by-side", "--out", "x.pdf"], "--side-by-side: not an option of --figure"),
    (["--figure", "srank", "--formats", "png", "--out", "x.pdf"], "--formats: not an option of --figure"),
    (["--by", "lr"], "--by: not an option of the report"),
    (["--figure", "srank", "--configurations", "--out", "x.pdf"],
     "--configurations: not an option of --figure"),
    (["--table", "total", "--side-by-side", "--by", "lr"],
     "--by and --configurations shape one study's table"),
])
def test_an_option_that_would_be_ignored_is_an_error(options, message, capsys):
    assert main(["report", str(PERMUTED), *options]) == 2
    assert message in capsys.readouterr().err


def test_l_is_the_claims_plasticity_loss_and_at_least_the_reports_loss():
    """The verdicts' figures for sgd-4 (claims.md): L2 Init's L 0.43 [0.27, 0.60], the Baseline's
    13.31 [12.44, 14.24]; the report's loss takes the window best on the mean, so L ≥ it."""
    table = _cells(results_table(load_results(PAGE / "best-permuted_mnist-sgd"), "loss, L"))
    assert table.pop("method") == ["loss, best − last (points)", "L (points)"]
    assert table["L2 Init"][1] == "0.43 [0.27, 0.60]" and table["Baseline"][1] == "13.31 [12.44, 14.24]"
    assert all(float(L.split()[0]) >= float(loss.split()[0]) for loss, L in table.values())
    assert "L2 Init: L 0.43 [0.27, 0.60] vs Baseline's 13.31 [12.44, 14.24]" in (
        PAGE / "claims.md").read_text(encoding="utf-8")
