"""A regression problem's runs in the report and the selection protocol: judged on their online
squared error, where lower is better, shown as it is (not in percent).

Synthetic stores with known errors pin each part's direction (the best configuration, the
reference and the probability of improvement, the windows' loss, the plasticity gap, the
aggregate across problems); a tiny real protocol sweep on the slowly-changing regression pins
the whole way from ``plasticlab sweep`` to ``plasticlab report``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from plasticlab.cli import main
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.protocol import (
    ONLINE_ACCURACY,
    ONLINE_SQUARED_ERROR,
    MissingMeasureError,
    select_best,
)
from plasticlab.experiments.store import ResultStore
from plasticlab.report.build import build_report, improvement_reference, plasticity_windows
from plasticlab.report.data import load_results
from plasticlab.report.plasticity_gap import study_gaps
from test_report_build import SEEDS, _config, _finish, _row
from test_sweep_exec import INLINE, finished_runs

PROBLEM = "slowly_changing_regression"
TASKS = 20  # the windows table needs 20 reported tasks
# (method, params) → online squared error of seed s on task t
ERRORS = {
    ("full_reset", ()): lambda s, t: 1.0 + 0.001 * s,
    ("baseline", ()): lambda s, t: 0.5 + 0.05 * t + 0.001 * s,  # rising: plasticity lost
    ("l2", (("strength", 1e-2),)): lambda s, t: 0.4 + 0.001 * s,  # the lowest error everywhere
    ("l2", (("strength", 1e-3),)): lambda s, t: 0.9 + 0.001 * s,
}


def _regression_config(method: str, params: dict, optimizer: str = "sgd") -> dict:
    return resolve_config({"problem": PROBLEM, "method": method, "params": params,
                           "optimizer": optimizer, "tasks": TASKS, "steps_per_task": 10}).to_dict()


def _finish_regression(store: ResultStore, config: dict, seed: int, error) -> None:
    rid = ResultStore.run_id(config, seed)
    store.start_run(rid, config, {"seed": seed})
    online = [error(seed, t) for t in range(TASKS)]
    store.finish_run(rid, {"total_online_squared_error": float(np.mean(online))},
                     {"online_squared_error": online,
                      "weight_magnitude": [0.05 for _ in range(TASKS)]})


def _write_regression(store: ResultStore, optimizer: str = "sgd") -> None:
    for (method, params), error in ERRORS.items():
        for seed in SEEDS:
            _finish_regression(store, _regression_config(method, dict(params), optimizer), seed, error)


@pytest.fixture
def regression_dir(tmp_path):
    out = tmp_path / "scr"
    with ResultStore(out) as store:
        _write_regression(store)
    return out


@pytest.fixture
def regression_md(regression_dir, tmp_path):
    build_report(regression_dir, tmp_path / "report", formats=(), reps=200)
    return (tmp_path / "report" / "report.md").read_text()


def test_a_regressions_runs_are_read_with_their_online_squared_error_and_no_warning(regression_dir):
    results = load_results(regression_dir)
    assert not results.warnings and results.measure(PROBLEM, "sgd") == ONLINE_SQUARED_ERROR
    runs = next(c for c in results.configs if c.method == "baseline")
    assert runs.measure == ONLINE_SQUARED_ERROR
    assert runs.online[1] == pytest.approx([0.501 + 0.05 * t for t in range(TASKS)])
    assert runs.total == pytest.approx([0.975 + 0.001 * s for s in SEEDS])  # 0.5 + 0.05 × 9.5


def test_the_headline_best_configuration_is_the_lowest_error_not_the_highest(regression_dir):
    headline, how = load_results(regression_dir).headline(PROBLEM, "sgd")
    l2 = next(c for c in headline if c.method == "l2")
    assert l2.config["params"] == {"strength": 1e-2}
    assert "by the lowest mean total online squared error" in how


def test_the_reference_of_the_probability_of_improvement_is_the_lowest_error_method(regression_dir):
    headline, _ = load_results(regression_dir).headline(PROBLEM, "sgd")
    assert improvement_reference(headline).label == "L2 strength=0.01"


def test_a_method_with_uniformly_lower_error_improves_on_every_other_with_probability_one(regression_md):
    table = regression_md.split("**Table 3.** Probability of improvement")[1].split("**Table 4.")[0]
    assert "| X | Y | seeds | P(X < Y) [95% CI] |" in table
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| L2 strength=0.01 |")]
    assert {(y, p) for _, y, _, p in rows} == {("Baseline", "1.00 [1.00, 1.00]"),
                                               ("full reset †", "1.00 [1.00, 1.00]")}
    assert "a lower error is the improvement" in table


def test_totals_are_shown_as_they_are_not_in_percent(regression_md):
    totals = regression_md.split("Total average online squared error (lower is better)")[1]
    row = _row(totals, "L2 strength=0.01")
    assert row[2] == "0.4010 [0.4000, 0.4020]"  # 0.4 + 0.001 × seed, 4 significant digits
    assert len(row) == 4  # no test-accuracy column: a regression has no held-out test set
    assert "(%)" not in regression_md.split("## Slowly-Changing Regression")[1].split("Figure 1.")[0]


def test_a_rising_error_has_a_positive_loss_from_its_best_window_to_its_last():
    t = np.arange(40)
    online = np.stack([0.5 + 0.01 * t, 0.6 + 0.01 * t])
    win = plasticity_windows(online, list(range(40)), ONLINE_SQUARED_ERROR)
    assert win["best_from"] == 0  # the lowest error: the first window
    np.testing.assert_allclose(win["loss"], [0.36, 0.36])  # last − best, 36 tasks apart
    # the same curve read as an accuracy improves over the run: its best window is the last
    assert plasticity_windows(online, list(range(40)), ONLINE_ACCURACY)["loss"] == pytest.approx([0, 0])


def test_the_windows_table_shows_the_baselines_rising_error_as_plasticity_lost(regression_md):
    table = regression_md.split("Plasticity over the run: online squared error (lower is better)")[1]
    assert "| loss, last − best |" in table
    row = _row(table, "Baseline")
    assert row[3].endswith("(from task 0)")
    assert row[5] == "0.9000 [0.9000, 0.9000]"  # tasks 18–19 vs 0–1: 0.05 × 18
    assert "window whose mean over seeds is lowest" in table


def test_the_plasticity_gap_of_a_regression_is_the_methods_error_minus_the_fresh_runs(regression_dir,
                                                                                  regression_md):
    headline, _ = load_results(regression_dir).headline(PROBLEM, "sgd")
    gaps = {g.runs.method: g.gap for g in study_gaps(headline)}
    assert gaps["baseline"] == pytest.approx(np.tile([0.05 * t - 0.5 for t in range(TASKS)], (3, 1)))
    assert gaps["l2"] == pytest.approx(np.full((3, TASKS), -0.6))  # better than from scratch
    assert "Plasticity gap: the method's online squared error minus that of the full reset runs" in (
        regression_md)


def test_the_configurations_table_ranks_the_lowest_error_first(regression_md):
    table = regression_md.split("Configurations (grid seeds)")[1]
    assert _row(table, "L2")[:3] == ["L2", "1", "strength=0.01"] and _row(table, "L2")[-1] == "✓"
    assert "ranked per method by mean total online squared error, lowest first" in table


def test_a_regression_beside_classification_studies_keeps_its_measure_and_is_not_averaged_with_them(
        tmp_path):
    with ResultStore(tmp_path) as store:
        _write_regression(store, optimizer="adam")
        for problem in ("permuted_mnist", "random_label_mnist"):
            for seed in SEEDS:
                _finish(store, _config("baseline", {}, problem=problem), seed, lambda s, t: 0.8)
                _finish(store, _config("l2", {"strength": 1e-2}, problem=problem), seed,
                        lambda s, t: 0.7)
    build_report(tmp_path, tmp_path / "r", formats=(), reps=100)
    md = (tmp_path / "r" / "report.md").read_text()
    tables = [line.split("** ", 1)[1] for line in md.splitlines() if line.startswith("**Table")]
    assert tables.count("Total average online accuracy (%)") == 2
    assert tables.count("Total average online squared error (lower is better)") == 1
    across = md.split("## Across problems")[1]
    assert "Left out: slowly_changing_regression, judged on the online squared error" in across
    assert "IQM over 2 problems (adam)" in across  # the two classification problems only
    assert _row(across, "Baseline")[2].startswith("80.00")


def _grid_row(method, strength, seed, summary, run_id=None):
    row = {"config": {"problem": PROBLEM, "optimizer": "sgd", "method": method, "lr": 0.01,
                      "params": {"strength": strength}}, "seed": seed, "summary": summary}
    return row | ({"run_id": run_id} if run_id else {})


def test_the_protocol_selects_the_lowest_mean_online_squared_error():
    rows = [_grid_row("l2", 1e-2, s, {"total_online_squared_error": e}) for s, e in enumerate([0.5, 0.7])]
    rows += [_grid_row("l2", 1e-3, s, {"total_online_squared_error": e}) for s, e in enumerate([0.2, 0.4])]
    rows += [_grid_row("l2", 1e-4, s, {"total_online_squared_error": 2.0}) for s in range(2)]
    best = select_best(rows)[(PROBLEM, "sgd", "l2")]
    assert best["config"]["params"] == {"strength": 1e-3}
    assert best["score"] == pytest.approx(0.3) and best["measure"] == ONLINE_SQUARED_ERROR
    assert (best["seeds"], best["candidates"]) == (2, 3)


def test_a_diverged_configuration_is_never_selected_even_when_seen_first():
    rows = [_grid_row("l2", 1e-1, 0, {"total_online_squared_error": math.nan}),
            _grid_row("l2", 1e-2, 0, {"total_online_squared_error": 3.0})]
    assert select_best(rows)[(PROBLEM, "sgd", "l2")]["config"]["params"] == {"strength": 1e-2}


def test_a_finished_run_without_a_total_online_measure_is_an_error_naming_it():
    rows = [_grid_row("l2", 1e-2, 0, {"total_online_squared_error": 0.5}),
            _grid_row("l2", 1e-3, 4, {"wall_time_s": 1.0}, run_id="r-0042")]
    with pytest.raises(MissingMeasureError, match=r"run r-0042 \(l2 on slowly_changing_regression.*"
                                                  r"seed 4\) has neither total_online_accuracy nor "
                                                  r"total_online_squared_error.*--rerun"):
        select_best(rows)


PROTOCOL_SWEEP = f"""
name = "tiny-regression"
problem = "{PROBLEM}"
methods = ["baseline", "l2_init"]
optimizer = "sgd"
lr = 0.01
seeds = "0-1"
tasks = 3
steps_per_task = 20
[grid.l2_init]
strength = [1e-2, 1e-3]
[protocol]
evaluation_seeds = "7-8"
"""


def test_report_of_a_real_regression_protocol_sweep_is_a_full_report(tmp_path, capsys):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(PROTOCOL_SWEEP)
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--no-progress", *INLINE]) == 0
    printed = capsys.readouterr().out
    assert "lowest total online squared error over the grid seeds" in printed
    assert "evaluation on seeds 7..8 (total average online squared error" in printed
    # the protocol chose the lowest grid error, and recorded it as its score
    grid: dict[float, list[float]] = {}
    for run in finished_runs(out).values():
        if run["config"]["method"] == "l2_init" and run["seed"] in (0, 1):
            grid.setdefault(run["config"]["params"]["strength"], []).append(
                run["summary"]["total_online_squared_error"])
    chosen = next(e for e in json.loads((out / "selection.json").read_text())["selected"]
                  if e["method"] == "l2_init")
    assert chosen["params"]["strength"] == min(grid, key=lambda k: sum(grid[k]))
    assert chosen["score"] == pytest.approx(min(np.mean(v) for v in grid.values()))

    assert main(["report", str(out), "--out", str(tmp_path / "r"), "--formats", "png", "--reps", "100"]) == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "left out" not in md and "## Slowly-Changing Regression · SGD" in md
    for stem in ("online_squared_error", "total_squared_error", "improvement", "weight_magnitude"):
        assert (tmp_path / "r" / "figures" / f"{PROBLEM}-sgd-{stem}.png").is_file(), stem
    selection = md.split("Selection protocol")[1]
    assert "Selected by the lowest mean total online squared error on the grid seeds" in selection
    assert _row(selection, "L2 Init")[2] == f"{ONLINE_SQUARED_ERROR.format(chosen['score'])} (n=2)"
    assert "| P(X < Y) [95% CI] |" in md
