"""``plasticlab report``: a results directory → figures, tables, HTML and Markdown.

A small synthetic store with known numbers stands in for a sweep, so every figure type is
rendered and the tables can be checked digit by digit.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_chromium
from plasticlab.cli import main
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.report.browser import check_page
from plasticlab.report.build import _study_title, build_report, paper_difference
from plasticlab.report.data import Results, bin_tasks, combine_results, load_results

TASKS = 12
SEEDS = (0, 1, 2)
# (method, params) → online accuracy of seed s on task t
CURVES = {
    ("baseline", ()): lambda s, t: 0.80 - 0.01 * t + 0.001 * s,
    ("l2_init", (("strength", 1e-2),)): lambda s, t: 0.85 + 0.002 * s,
    ("l2_init", (("strength", 1e-3),)): lambda s, t: 0.82 + 0.002 * s,
}


def _config(method: str, params: dict, problem: str = "permuted_mnist") -> dict:
    return resolve_config({"problem": problem, "method": method, "params": params,
                           "tasks": TASKS, "steps_per_task": 10}).to_dict()


def _finish(store: ResultStore, config: dict, seed: int, curve) -> str:
    rid = ResultStore.run_id(config, seed)
    store.start_run(rid, config, {"seed": seed})
    online = [curve(seed, t) for t in range(TASKS)]
    matrix = [[curve(seed, m) - 0.01 * (j - m) for m in range(j + 1)] for j in range(TASKS)]
    bwt = float(np.mean([matrix[-1][m] - matrix[m][m] for m in range(TASKS - 1)]))
    store.finish_run(
        rid, {"total_online_accuracy": float(np.mean(online)), "bwt": bwt, "one_step_bwt": -0.01},
        {"online_accuracy": online,
         "weight_magnitude": [0.05 + 0.001 * t for t in range(TASKS)],
         "srank": [[40.0 + t, 30.0 - t] for t in range(TASKS)],
         "effective_rank": [[50.0, 45.0] for _ in range(TASKS)],
         "dead_fraction": [0.01 * t for t in range(TASKS)],
         "dormant_fraction": [0.02 for _ in range(TASKS)],
         "grad_norm": [1.0 for _ in range(TASKS)],
         "task_test_accuracy": [curve(seed, t) - 0.02 for t in range(TASKS)],
         "accuracy_matrix": matrix,
         # stored, never reported: the per-layer form and a method's own measurement
         "weight_magnitude_per_layer": [[0.06, 0.04] for _ in range(TASKS)],
         "tortoise_test_accuracy": [0.5 for _ in range(TASKS)]})
    return rid


@pytest.fixture
def results_dir(tmp_path):
    out = tmp_path / "sweep"
    with ResultStore(out) as store:
        for (method, params), curve in CURVES.items():
            for seed in SEEDS:
                _finish(store, _config(method, dict(params)), seed, curve)
        # a run still going and a failed one: partial results must be reported, not hidden
        running = _config("l2", {"strength": 1e-2})
        store.start_run(ResultStore.run_id(running, 0), running, {})
        store.start_run(ResultStore.run_id(running, 1), running, {})
        store.fail_run(ResultStore.run_id(running, 1), "Traceback ...\nRuntimeError: diverged")
    planned = _config("cbp", {})
    (out / "plan.json").write_text(json.dumps({"sweep": "t", "runs": [
        {"run_id": ResultStore.run_id(planned, 5), "phase": "grid", "seed": 5, "config": planned}]}))
    return out


def expected_total(method, params) -> float:
    curve = CURVES[(method, params)]
    return float(np.mean([np.mean([curve(s, t) for t in range(TASKS)]) for s in SEEDS]))


def test_report_writes_every_figure_type_and_the_page(results_dir, tmp_path):
    out = tmp_path / "report"
    page = build_report(results_dir, out, formats=("png", "svg"), reps=300)
    assert page == out / "index.html"
    stems = ["online_accuracy", "total_accuracy", "improvement", "weight_magnitude", "srank",
             "effective_rank", "dead_fraction", "dormant_fraction", "grad_norm", "task_test_accuracy",
             "accuracy_matrix-baseline", "accuracy_matrix-l2_init_strength_0.01", "sweep-strength"]
    for stem in stems:
        for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<svg")):
            path = out / "figures" / f"permuted_mnist-adam-{stem}.{fmt}"
            assert path.is_file() and path.stat().st_size > 1000, path
            assert magic in path.read_bytes()[:400], path
    html = page.read_text()
    assert html.count("<img") == len(stems)
    assert (out / "report.md").is_file() and (out / "runs.csv").is_file()


def _row(markdown: str, first_cell: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no table row starting with {first_cell!r}")


# The tests of what the report's tables and page say build it without figure files
# (formats=()): a figure is still drawn, not rendered to PNG — 70 % of a build's time here. The
# figure files are the tests' that look at them (every type, the browser check, IQM, steps, λ).


def test_tables_hold_the_expected_numbers(results_dir, tmp_path):
    build_report(results_dir, tmp_path / "r", formats=(), reps=300)
    md = (tmp_path / "r" / "report.md").read_text()
    # the best L2 Init configuration represents the method; the other is in the ranking only
    base = _row(md, "Baseline")
    l2i = _row(md, "L2 Init strength=0.01")
    assert base[1] == "3" and base[2].startswith(f"{100 * expected_total('baseline', ()):.2f} [")
    assert l2i[2].startswith(f"{100 * expected_total('l2_init', (('strength', 1e-2),)):.2f} [")
    # IQM of three seeds (nothing trimmed from 3) is their mean
    assert l2i[3].startswith(f"{100 * expected_total('l2_init', (('strength', 1e-2),)):.2f} [")
    # test accuracy on the last task: curve − 0.02 at task 11, seeds 0..2
    assert base[4].startswith(f"{100 * np.mean([0.80 - 0.11 + 0.001 * s - 0.02 for s in SEEDS]):.2f}")
    # L2 Init beats the Baseline in every pair of runs: P(X > Y) = 1
    poi = _row(md, "L2 Init strength=0.01")  # first table row with that label is the totals table
    assert poi
    assert re.search(r"\| L2 Init strength=0\.01 \| Baseline \| 3 vs 3 \| 1\.00 \[1\.00, 1\.00\] \|", md)
    # forgetting table: BWT = mean over m < 11 of −0.01·(11 − m) = −0.06 → −6.00 pp
    forgetting = [line for line in md.splitlines() if line.startswith("| Baseline | 3 |")]
    assert any("-6.00 [-6.00, -6.00]" in line and "-1.00 [-1.00, -1.00]" in line for line in forgetting)
    # the ranking of configurations on the grid: strength 0.01 first
    assert re.search(r"\| L2 Init \| 1 \| strength=0\.01 \| 3 \| 85\.20 \[", md)
    assert re.search(r"\| L2 Init \| 2 \| strength=0\.001 \| 3 \| 82\.20 \[", md)


def test_partial_results_are_reported_as_warnings(results_dir, tmp_path):
    results = load_results(results_dir)
    text = " ".join(results.warnings)
    assert "1 run(s) unfinished" in text and "l2" in text
    assert "1 run(s) failed" in text and "RuntimeError: diverged" in text
    assert "1 of 1 planned run(s) not started yet" in text and "cbp" in text
    build_report(results_dir, tmp_path / "r", formats=(), reps=100)
    html = (tmp_path / "r" / "index.html").read_text()
    assert "1 run(s) failed" in html and "planned run(s) not started" in html


def test_protocol_selection_is_shown_on_its_evaluation_seeds(results_dir, tmp_path):
    config = _config("l2_init", {"strength": 1e-3})
    with ResultStore(results_dir) as store:
        for seed in (100, 101):  # the protocol picked strength 1e-3 and evaluated it on 100, 101
            _finish(store, config, seed, lambda s, t: 0.5)
    baseline = _config("baseline", {})  # selected, its evaluation seeds not run yet
    (results_dir / "selection.json").write_text(json.dumps({
        "sweep": "t", "evaluation_seeds": [100, 101], "selected": [{
            "problem": "permuted_mnist", "optimizer": "adam", "method": "l2_init", "score": 0.822,
            "seeds": 3, "candidates": 2, "lr": config["lr"], "params": config["params"],
            "config": config}, {
            "problem": "permuted_mnist", "optimizer": "adam", "method": "baseline", "score": 0.7,
            "seeds": 3, "candidates": 1, "lr": baseline["lr"], "params": {}, "config": baseline}]}))
    results = load_results(results_dir)
    headline, how = results.headline("permuted_mnist", "adam")
    chosen = next(c for c in headline if c.method == "l2_init")
    assert chosen.seeds == [100, 101] and np.allclose(chosen.total, 0.5)
    assert "protocol" in how
    build_report(results_dir, tmp_path / "r", formats=(), reps=100)
    md = (tmp_path / "r" / "report.md").read_text()
    assert re.search(r"\| L2 Init \| lr=0\.001 strength=0\.001 \| 82\.20 \(n=3\) \| 2 \| 50\.00 ", md)
    # beside it, where the selection differs from the paper's reported best (λ 1e-2 there)
    assert re.search(r"\| L2 Init \| lr=0\.001 strength=0\.001 \|.*\| strength=0\.01 \|\n", md)
    # a selected method whose evaluation seeds have not run: no grid figure stands in for them
    assert re.search(r"\| Baseline \| lr=0\.001 \| 70\.00 \(n=3\) \| 1 \| not run yet \| lr=0\.0001 \|\n", md)
    # the sweep view averages grid seeds only: strength 1e-3 is still 82.20 there
    assert re.search(r"\| L2 Init \| 2 \| strength=0\.001 \| 3 \| 82\.20 \[", md)


@pytest.mark.parametrize("lr,params,expected", [
    (1e-3, {"period": 625, "threshold": 0.0, "reinit": "fresh"}, "same"),  # settings it reports
    (1e-3, {"period": 625, "threshold": 0.1}, "threshold=0"),
    (1e-4, {"period": 3125, "threshold": 0.0}, "lr=0.001 period=625"),
])
def test_a_selection_says_where_it_differs_from_the_papers_reported_best(lr, params, expected):
    entry = {"problem": "permuted_mnist", "optimizer": "adam", "method": "redo", "lr": lr,
             "params": params}
    assert paper_difference(entry) == expected
    assert paper_difference({**entry, "method": "snr"}) == "—"  # the paper reports none


def test_hundreds_of_tasks_are_binned_per_seed_before_the_statistics():
    values = np.arange(2 * 500, dtype=float).reshape(2, 500)
    x, binned, note = bin_tasks(values, list(range(500)), max_bins=50)
    assert binned.shape == (2, 50) and len(x) == 50
    assert x[0] == 4.5 and binned[1, 0] == np.mean(values[1, :10])
    assert "10 consecutive tasks" in note
    x, same, note = bin_tasks(values, list(range(0, 40, 2)), max_bins=50)
    assert note == "" and np.array_equal(same, values[:, 0:40:2]) and x[1] == 2


def test_five_plus_one_cifar_reports_hard_tasks_only(tmp_path):
    with ResultStore(tmp_path) as store:
        _finish(store, _config("baseline", {}, problem="five_plus_one_cifar"), 0,
                lambda s, t: 0.5 if t % 2 == 0 else 0.9)
    (config,) = load_results(tmp_path).configs
    assert config.reported == list(range(0, TASKS, 2))
    build_report(tmp_path, tmp_path / "r", formats=(), reps=50)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "hard tasks only" in md


def test_report_command_writes_the_page_and_rejects_a_directory_without_a_store(results_dir, tmp_path,
                                                                                capsys):
    assert main(["report", str(results_dir), "--out", str(tmp_path / "r"), "--formats", "png",
                 "--reps", "100"]) == 0
    captured = capsys.readouterr()
    assert str(tmp_path / "r" / "index.html") in captured.out
    assert "planned run(s) not started" in captured.err
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "holds no results store" in capsys.readouterr().err
    assert main(["report", str(results_dir), "--formats", "svg"]) == 2


@needs_chromium
def test_report_page_loads_in_a_real_browser_without_errors(results_dir, tmp_path):
    page = build_report(results_dir, tmp_path / "r", formats=("png",), reps=100)
    check = check_page(page)
    assert check.ok, str(check)
    assert check.images == check.images_loaded == 13


def test_several_problems_get_an_iqm_across_problems(tmp_path):
    with ResultStore(tmp_path) as store:
        for problem in ("permuted_mnist", "random_label_mnist"):
            for (method, params), curve in CURVES.items():
                if params and params[0][1] == 1e-3:
                    continue
                for seed in SEEDS:
                    _finish(store, _config(method, dict(params), problem=problem), seed, curve)
    build_report(tmp_path, tmp_path / "r", formats=("png",), reps=200)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Across problems" in md
    assert (tmp_path / "r" / "figures" / "all-adam-iqm.png").is_file()
    # 3 seeds × 2 problems = 6 scores per method; the IQM drops the lowest and highest 1
    base = sorted(np.mean([CURVES[("baseline", ())](s, t) for t in range(TASKS)]) for s in SEEDS) * 2
    iqm = np.mean(sorted(base)[1:5])
    assert re.search(rf"\| Baseline \| 3 \| {100 * iqm:.2f} \[", md)


def test_a_problem_of_several_batch_sizes_is_left_out_of_the_iqm_across_problems(tmp_path):
    # Permuted MNIST at two batch sizes has a headline per batch size and no one score: the
    # IQM across problems is over the two problems of one stream each, and says so
    with ResultStore(tmp_path) as store:
        for problem in ("permuted_mnist", "random_label_mnist", "random_label_cifar"):
            for method in ("baseline", "l2_init"):
                for batch in ((16, 32) if problem == "permuted_mnist" else (16,)):
                    config = resolve_config({"problem": problem, "method": method,
                                             "tasks": TASKS, "steps_per_task": 10,
                                             "batch_size": batch}).to_dict()
                    for seed in SEEDS:
                        _finish(store, config, seed, CURVES[("baseline", ())])
    build_report(tmp_path, tmp_path / "r", formats=(), reps=100)  # the figure: the test above
    md = (tmp_path / "r" / "report.md").read_text()
    across = md[md.index("## Across problems"):]
    assert ("Left out: permuted_mnist, trained on several streams (batch sizes or task lengths), "
            "each with a headline of its own.") in across
    # 3 seeds × 2 problems = 6 scores per method, as with two problems alone
    base = sorted(np.mean([CURVES[("baseline", ())](s, t) for t in range(TASKS)]) for s in SEEDS) * 2
    assert re.search(rf"\| Baseline \| 3 \| {100 * np.mean(sorted(base)[1:5]):.2f} \[", across)


def test_every_n_steps_measurements_are_drawn_against_the_step(tmp_path):
    config = _config("l2_init", {"strength": 1e-2})
    with ResultStore(tmp_path) as store:
        for seed in SEEDS:
            rid = ResultStore.run_id(config, seed)
            store.start_run(rid, config, {"seed": seed})
            steps = list(range(5, 5 * 121, 5))  # 120 measurements: binned to 50 points
            store.finish_run(rid, {"total_online_accuracy": 0.8},
                             {"online_accuracy": [0.8] * TASKS, "steps.step": steps,
                              "steps.weight_magnitude": [0.01 * s for s in steps],
                              "steps.srank": [[10.0, 20.0] for _ in steps]})
    (c,) = load_results(tmp_path).configs
    assert c.steps[0] == 5 and c.step_metrics["srank"].shape == (3, 120, 2)
    build_report(tmp_path, tmp_path / "r", formats=("png",), reps=100)
    for name in ("weight_magnitude", "srank"):
        path = tmp_path / "r" / "figures" / f"permuted_mnist-adam-steps-{name}.png"
        assert path.is_file() and path.stat().st_size > 1000
    assert "measured every N steps" in (tmp_path / "r" / "report.md").read_text()


def test_lambda_sensitivity_draws_one_line_per_step_size(tmp_path):
    # the paper's λ-sensitivity study: λ swept at two step sizes → one λ curve per α
    with ResultStore(tmp_path) as store:
        for lr in (1e-3, 1e-4):
            for lam in (1e-4, 1e-3, 1e-2):
                config = resolve_config({"problem": "permuted_mnist", "method": "l2_init", "lr": lr,
                                         "params": {"strength": lam}, "tasks": TASKS,
                                         "steps_per_task": 10}).to_dict()
                for seed in SEEDS:
                    _finish(store, config, seed, lambda s, t, lr=lr, lam=lam: 0.5 + lam + lr + 0.001 * s)
    from plasticlab.report.build import ReportContext, _sweep_lines

    configs = load_results(tmp_path).configs
    ctx = ReportContext(tmp_path, ("png",), 50, 100, 0)
    lines = _sweep_lines("l2_init", configs, ["lr", "strength"], "strength", ctx)
    assert [line.label for line in lines] == ["L2 Init lr=0.0001", "L2 Init lr=0.001"]
    assert all(list(line.x) == [1e-4, 1e-3, 1e-2] for line in lines)
    # the best configuration (λ = 1e-2, α = 1e-3) is marked on its own line only
    assert [line.selected for line in lines] == [None, 1e-2]
    np.testing.assert_allclose(lines[1].mean, [0.5 + lam + 1e-3 + 0.001 for lam in (1e-4, 1e-3, 1e-2)])
    # along α: one line per λ (3 values)
    assert len(_sweep_lines("l2_init", configs, ["lr", "strength"], "lr", ctx)) == 3
    build_report(tmp_path, tmp_path / "r", formats=("png",), reps=100)
    assert (tmp_path / "r" / "figures" / "permuted_mnist-adam-sweep-strength.png").is_file()


def test_a_study_of_batch_sizes_is_reported_one_section_per_batch_size(tmp_path):
    # the paper's batch-size study: α swept at each batch size, one task being one pass over
    # the data (so the steps a task differ too). Another batch size is another stream of tasks:
    # the best α is picked per batch size, never across them, and each gets its own sweep.
    best = {1: 1e-4, 32: 1e-3}
    with ResultStore(tmp_path) as store:
        for batch, steps in ((32, 30), (1, 960)):
            for lr in (1e-4, 1e-3):
                for method, params in (("baseline", {}), ("l2_init", {"strength": 1e-2})):
                    config = resolve_config({"problem": "permuted_mnist", "method": method, "lr": lr,
                                             "params": params, "tasks": TASKS, "steps_per_task": steps,
                                             "batch_size": batch}).to_dict()
                    # batch 1 scores higher than batch 32 at any α: a report that ranked across
                    # batch sizes would show batch 1 alone
                    score = (0.7 - 0.1 * (batch == 32) + 0.05 * (lr == best[batch])
                             + 0.01 * (method == "l2_init"))
                    for seed in SEEDS:
                        _finish(store, config, seed, lambda s, t, v=score: v + 0.001 * s)
    results = load_results(tmp_path)
    parts = results.streams("permuted_mnist", "adam")
    assert [stream for stream, _ in parts] == [{"batch_size": 1, "steps_per_task": 960},
                                               {"batch_size": 32, "steps_per_task": 30}]
    for stream, part in parts:
        headline, _ = part.headline("permuted_mnist", "adam")
        assert {(c.method, c.config["lr"], c.config["batch_size"]) for c in headline} == {
            (m, best[stream["batch_size"]], stream["batch_size"]) for m in ("baseline", "l2_init")}
        # within its part, a label names what tells it apart there: the step size
        assert {c.label for c in headline} == {f"{m} lr={best[stream['batch_size']]:g}"
                                               for m in ("Baseline", "L2 Init")}
    out = tmp_path / "r"
    build_report(tmp_path, out, formats=("png",), reps=100)
    md = (out / "report.md").read_text()
    assert re.findall(r"(?m)^## Permuted MNIST.*$", md) == [
        "## Permuted MNIST · Adam · batch 1 · 960 steps a task",
        "## Permuted MNIST · Adam · batch 32 · 30 steps a task"]
    assert f"{TASKS} tasks × 30 steps, batch 32; 4 configuration(s)" in md
    for stem in ("batch1-960steps", "batch32-30steps"):
        assert (out / "figures" / f"permuted_mnist-adam-{stem}-sweep-lr.png").is_file()
    # one stream: one section, named as before (its figures' names: the figure test above)
    single = tmp_path / "single"
    with ResultStore(single) as store:
        for seed in SEEDS:
            _finish(store, _config("baseline", {}), seed, CURVES[("baseline", ())])
    assert [stream for stream, _ in load_results(single).streams("permuted_mnist", "adam")] == [{}]
    build_report(single, single / "r", formats=(), reps=100)
    assert "## Permuted MNIST · Adam\n" in (single / "r" / "report.md").read_text()


def test_report_writes_runs_csv_without_pandas(results_dir, tmp_path, monkeypatch):
    import csv
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now raises ImportError
    page = build_report(results_dir, tmp_path / "r", formats=(), reps=100)
    with open(tmp_path / "r" / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert page.is_file() and rows and {"run_id", "status", "seed", "method", "lr"} <= set(rows[0])
    assert "runs.csv not written" not in (tmp_path / "r" / "report.md").read_text()


def test_streams_come_in_increasing_order_of_the_settings_that_differ_and_one_without_it_last():
    from plasticlab.report.data import ConfigRuns

    def runs(batch, steps):
        cfg = {"problem": "permuted_mnist", "optimizer": "adam", "method": "baseline", "params": {},
               "tasks": 5, "steps_per_task": steps, "lr": 1e-3}
        if batch is not None:
            cfg["batch_size"] = batch
        return ConfigRuns(cfg, "baseline", [0], np.zeros((1, 5)), np.zeros(1), list(range(5)))

    results = Results(Path("."), [runs(128, 78), runs(None, 625), runs(1, 10_000), runs(32, 312)], Counter())
    assert [stream for stream, _ in results.streams("permuted_mnist", "adam")] == [
        {"batch_size": 1, "steps_per_task": 10_000}, {"batch_size": 32, "steps_per_task": 312},
        {"batch_size": 128, "steps_per_task": 78}, {"batch_size": None, "steps_per_task": 625}]


def test_each_form_of_a_method_is_shown_apart_and_the_best_of_a_numeric_grid_once():
    from collections import Counter
    from pathlib import Path

    from plasticlab.report.data import ConfigRuns, Results, method_form

    def runs(method, params, total):
        cfg = {"problem": "permuted_mnist", "optimizer": "adam", "method": method, "params": params}
        return ConfigRuns(cfg, f"{method} {params}", [0, 1], np.zeros((2, 1)), np.array([total, total]),
                          [0])

    configs = [runs("ewc", {"ewc_strength": 10.0, "anchor": "last"}, 0.7),
               runs("ewc", {"ewc_strength": 1.0, "anchor": "last"}, 0.8),
               runs("ewc", {"ewc_strength": 10.0, "anchor": "sum"}, 0.6),
               runs("l2_init", {"strength": 1e-2}, 0.9), runs("l2_init", {"strength": 1e-3}, 0.5)]
    assert method_form(configs[0].config) == (("anchor", "last"),)
    headline, how = Results(Path("."), configs, Counter()).headline("permuted_mnist", "adam")
    shown = {(c.method, float(c.total[0])) for c in headline}
    assert shown == {("ewc", 0.8), ("ewc", 0.6), ("l2_init", 0.9)}
    assert "a method's forms" in how


def test_interrupted_runs_are_reported_as_unfinished_and_resumable(results_dir, tmp_path):  # noqa: F811
    stopped = _config("l2", {"strength": 1e-3})
    with ResultStore(results_dir) as store:
        rid = ResultStore.run_id(stopped, 0)
        store.start_run(rid, stopped, {})
        store.interrupt_run(rid, "SIGINT")
    results = load_results(results_dir)
    assert any("1 run(s) interrupted" in w and "resumes them" in w for w in results.warnings)
    build_report(results_dir, tmp_path / "r", formats=(), reps=100, results=results)
    assert "2 unfinished" in (tmp_path / "r" / "report.md").read_text()  # 1 running + 1 interrupted


@needs_chromium
def test_report_check_loads_the_page_in_chromium_and_says_ok(results_dir, tmp_path, capsys):
    assert main(["report", str(results_dir), "--out", str(tmp_path / "r"), "--formats", "png",
                 "--check"]) == 0
    out = capsys.readouterr().out
    assert "images loaded" in out and out.rstrip().endswith("OK")


def test_report_check_without_chromium_is_a_one_line_error(results_dir, tmp_path, capsys, monkeypatch):
    from plasticlab.report import browser

    monkeypatch.setattr(browser, "find_chromium", lambda: None)
    assert main(["report", str(results_dir), "--out", str(tmp_path / "r"), "--formats", "png",
                 "--check"]) == 2
    assert "--check needs Chromium" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # said before the report is built, not after


def test_plasticity_windows_are_the_first_best_and_last_tasks_and_their_loss():
    from plasticlab.report.build import plasticity_windows

    # two seeds over 40 tasks: rising to a plateau at tasks 10–19, then falling
    t = np.arange(40)
    curve = np.where(t < 10, 0.5 + 0.02 * t, np.where(t < 20, 0.8, 0.8 - 0.01 * (t - 19)))
    online = np.stack([curve, curve + 0.01])
    win = plasticity_windows(online, list(range(40)))
    assert win["w"] == 4 and win["best_from"] == 10  # windows of 40 // 10 tasks
    np.testing.assert_allclose(win["first"], [np.mean(curve[:4]), np.mean(curve[:4]) + 0.01])
    np.testing.assert_allclose(win["best"], [0.8, 0.81])
    np.testing.assert_allclose(win["last"], [np.mean(curve[36:]), np.mean(curve[36:]) + 0.01])
    np.testing.assert_allclose(win["loss"], 0.8 - np.mean(curve[36:]))
    # only reported tasks count (5+1 CIFAR's hard tasks): every other task here
    assert plasticity_windows(online, list(range(0, 40, 2)))["w"] == 2


def test_the_plasticity_table_is_in_reports_of_twenty_tasks_or_more(tmp_path):
    def write(n_tasks, out):
        with ResultStore(out) as store:
            for method, curve in (("baseline", lambda t: 0.8 - 0.005 * t), ("l2_init", lambda t: 0.8)):
                config = resolve_config({"problem": "permuted_mnist", "method": method,
                                         "tasks": n_tasks, "steps_per_task": 10}).to_dict()
                for seed in SEEDS:
                    rid = ResultStore.run_id(config, seed)
                    store.start_run(rid, config, {"seed": seed})
                    online = [curve(t) + 0.001 * seed for t in range(n_tasks)]
                    store.finish_run(rid, {"total_online_accuracy": float(np.mean(online))},
                                     {"online_accuracy": online})
        build_report(out, out / "r", formats=(), reps=200)
        return (out / "r" / "report.md").read_text()

    md = write(20, tmp_path / "long")
    assert "Plasticity over the run" in md
    # the Baseline: best = tasks 0–1 (0.8 − 0.0025), last = tasks 18–19 (0.8 − 0.0925): 9.00 points
    row = _row(md.split("Plasticity over the run")[1], "Baseline")
    assert row[3].startswith("79.85") and "(from task 0)" in row[3]
    assert row[5].startswith("9.00 [9.00, 9.00]")
    assert _row(md.split("Plasticity over the run")[1], "L2 Init")[5].startswith("0.00")
    assert "Plasticity over the run" not in write(12, tmp_path / "short")


def test_a_long_sweeps_configuration_table_shows_each_settings_first_and_last_tasks(tmp_path):
    out = tmp_path / "sweep"
    curves = {1e-2: lambda t: 0.8, 0.0: lambda t: 0.8 - 0.01 * t}  # λ 0 loses plasticity
    with ResultStore(out) as store:
        for strength, curve in curves.items():
            config = resolve_config({"problem": "permuted_mnist", "method": "l2_init",
                                     "params": {"strength": strength}, "tasks": 20,
                                     "steps_per_task": 10}).to_dict()
            for seed in SEEDS:
                rid = ResultStore.run_id(config, seed)
                store.start_run(rid, config, {"seed": seed})
                online = [curve(t) for t in range(20)]
                store.finish_run(rid, {"total_online_accuracy": float(np.mean(online))},
                                 {"online_accuracy": online})
    build_report(out, out / "r", formats=(), reps=100)
    table = (out / "r" / "report.md").read_text().split("Configurations (grid seeds)")[1]
    assert "| first 2 tasks | last 2 tasks | best |" in table
    # λ 0: tasks 0–1 at 0.8 − 0.005, tasks 18–19 at 0.8 − 0.185
    assert re.search(r"\| L2 Init \| 2 \| strength=0 \| 3 \| 70\.50 \[[^]]*\] \| 79\.50 \| 61\.50 \|  \|",
                     table)
    assert re.search(r"\| L2 Init \| 1 \| strength=0\.01 \| 3 \| 80\.00 \[[^]]*\] "
                     r"\| 80\.00 \| 80\.00 \| ✓ \|", table)


@pytest.mark.parametrize("per_seed,tasks,rectangular", [
    ([[0.1, 0.2, 0.3], [0.4, None, 0.6]], 3, [True, True]),        # a None number: NaN either way
    ([[0.1, 0.2], [0.4]], 3, [True, True]),                          # a seed with fewer tasks
    ([[[1.0, 2.0], [3.0, None]], [[5.0, 6.0], [7.0, 8.0]]], 2, [True, True]),
    ([[[1.0, 2.0], None], [[5.0, 6.0], [7.0, 8.0]]], 2, [False, True]),  # a task missing among lists
    ([[[1.0, 2.0], [3.0]], [[5.0], [7.0]]], 2, [False, False]),      # layers of other lengths
    ([[[5.0], [7.0]], [[1.0, 2.0], [3.0, 4.0]]], 2, [False, True]),  # a seed with fewer layers
    ([[], [0.5]], 2, [True, True]),
])
def test_a_metric_stacked_in_one_conversion_equals_it_filled_value_by_value(per_seed, tasks, rectangular):
    from plasticlab.report.data import _as_array, _fill, _fill_rectangular, _stack

    stacked = _stack(per_seed, tasks)
    layers = stacked.shape[2] if stacked.ndim == 3 else 0
    plain = np.full(stacked.shape, np.nan)
    for s, seq in enumerate(per_seed):
        _fill(plain[s], seq, layers)
    np.testing.assert_array_equal(stacked, plain)
    assert [_fill_rectangular(np.full(stacked.shape[1:], np.nan), _as_array(seq))
            for seq in per_seed] == rectangular


def test_every_problem_and_optimizer_has_a_title_of_its_own_that_reports_name_it_by():
    from plasticlab.optim import OPTIMIZERS, optimizer_title
    from plasticlab.problems import PROBLEMS, problem_title

    for registry, title in ((PROBLEMS, problem_title), (OPTIMIZERS, optimizer_title)):
        titles = [title(name) for name in registry]
        assert all(t and t != name for t, name in zip(titles, registry, strict=True))
        assert len(set(titles)) == len(titles)
        assert title("of_another_version") == "of_another_version"
    assert _study_title("permuted_mnist", "upgd_nonprotecting") == "Permuted MNIST · non-protecting UPGD"
    assert _study_title("warm_start_cifar", "sgd") == "Warm-Start CIFAR · SGD"


def _store(folder, problems=("permuted_mnist",), seeds=SEEDS, methods=CURVES):
    with ResultStore(folder) as store:
        for problem in problems:
            for (method, params) in methods:
                for seed in seeds:
                    _finish(store, _config(method, dict(params), problem=problem), seed,
                            CURVES[(method, params)])
    return folder


def _body(markdown: str) -> list[str]:
    # the report without its header (the directories read, when) and warnings (the command's
    # note on runs of other code names the directories)
    return [line for line in markdown.splitlines()
            if line and not line.startswith(("- results:", "- generated", "# ", "> ⚠"))]


@pytest.mark.slow
def test_several_directories_are_reported_as_one_directory_holding_them_all(tmp_path, capsys):
    # each problem trained into a folder of its own, reported together: the same report as
    # one store holding both — its sections, the IQM across problems, the tables, the LaTeX
    a = _store(tmp_path / "pm", ("permuted_mnist",))
    b = _store(tmp_path / "rl", ("random_label_mnist",))
    both = _store(tmp_path / "both", ("permuted_mnist", "random_label_mnist"))
    build_report([a, b], tmp_path / "r", formats=(), reps=100)  # (the figures: the command's, below)
    build_report(both, tmp_path / "one", formats=(), reps=100)
    together = (tmp_path / "r" / "report.md").read_text()
    assert _body(together) == _body((tmp_path / "one" / "report.md").read_text())
    assert "## Across problems" in together and "# plasticlab report — pm + rl" in together
    assert f"- results: {a.resolve()}\n- results: {b.resolve()}\n" in together

    def latex(report):  # each table's file, after its first line (the report's title)
        return [p.read_text().split("\n", 1)[1] for p in sorted((report / "latex").glob("table-*.tex"))]

    assert latex(tmp_path / "r") == latex(tmp_path / "one") and len(latex(tmp_path / "r")) == 9
    assert len((tmp_path / "r" / "runs.csv").read_text().splitlines()) == 1 + 2 * len(CURVES) * len(SEEDS)
    # the command: the same report, with its figures
    assert main(["report", str(a), str(b), "--out", str(tmp_path / "cli"), "--formats", "png",
                 "--reps", "100"]) == 0
    shown = [line for line in _body((tmp_path / "cli" / "report.md").read_text())
             if not line.startswith("![")]
    assert shown == _body(together.replace(" — no image file", ""))
    # several folders need --out (no one folder's report/ to write into)
    capsys.readouterr()
    assert main(["report", str(a), str(b)]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_a_configuration_in_two_directories_is_kept_once_if_they_hold_the_same_runs(tmp_path):
    a = _store(tmp_path / "a", methods=[("baseline", ()), ("l2_init", (("strength", 1e-2),))])
    b = _store(tmp_path / "b", methods=[("l2_init", (("strength", 1e-2),)),
                                        ("l2_init", (("strength", 1e-3),))])
    build_report([a, b], tmp_path / "r", formats=(), reps=100)
    md = (tmp_path / "r" / "report.md").read_text()
    # L2 Init at λ 1e-2 once, on its three seeds; its label now names λ (1e-3 beside it)
    assert "- runs: 9 finished, 0 unfinished, 0 failed" in md
    assert re.search(r"\| L2 Init strength=0\.01 \| 3 \| 85\.20 \[", md)
    assert len((tmp_path / "r" / "runs.csv").read_text().splitlines()) == 1 + 9
    # other runs of one configuration in two places: which to show is not the report's to pick
    c = _store(tmp_path / "c", seeds=(3, 4), methods=[("baseline", ())])
    with pytest.raises(ValueError, match=r"Baseline \(permuted_mnist, adam\) has runs in both .*/a "
                                         r"\(seeds 0, 1, 2\) and .*/c \(seeds 3, 4\)"):
        build_report([a, c], tmp_path / "r2", formats=())
    with pytest.raises(ValueError, match="given twice"):
        build_report([a, a], tmp_path / "r3", formats=())


def test_a_run_one_directory_finished_and_another_holds_unfinished_is_counted_finished_once():
    # (the second folder a copy taken while the run still trained)
    def read(name, status):
        return Results(Path(name), [], Counter({status: 1}), runs=[{"run_id": "r1", "status": status}])

    for parts in ([read("a", "running"), read("b", "finished")],
                  [read("a", "finished"), read("b", "interrupted")]):
        combined = combine_results(parts)
        assert combined.runs == [{"run_id": "r1", "status": "finished"}]
        assert combined.finished == combined.runs
        assert combined.status_counts == Counter(finished=1)


def _select(folder, method, seeds=(100, 101)):
    config = _config(method, {})
    entry = {"problem": config["problem"], "optimizer": "adam", "method": method, "config": config}
    (folder / "selection.json").write_text(json.dumps({"sweep": folder.name, "evaluation_seeds": list(seeds),
                                                        "selected": [entry]}))


def test_a_directorys_protocol_selection_speaks_for_its_own_studies_only(tmp_path):
    a = _store(tmp_path / "a", ("permuted_mnist",), methods=[("baseline", ())])
    b = _store(tmp_path / "b", ("random_label_mnist",), methods=[("baseline", ())])
    _select(a, "baseline")
    build_report([a, b], tmp_path / "r", formats=(), reps=100)  # a selected in its own study
    c = _store(tmp_path / "c", ("permuted_mnist",), methods=[("l2_init", (("strength", 1e-2),))])
    with pytest.raises(ValueError, match=r".*/c has runs of permuted_mnist adam \(L2 Init\), a study that "
                                         r".*/a selected in by the protocol"):
        build_report([a, c], tmp_path / "r2", formats=())
    _select(b, "baseline", seeds=(200, 201))
    with pytest.raises(ValueError, match="evaluate on other seeds"):
        build_report([a, b], tmp_path / "r3", formats=())
