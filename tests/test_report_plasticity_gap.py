"""The plasticity gap: each task's online accuracy of the from-scratch runs (full_reset) minus a
method's, seed by seed — its numbers, and the report's figure where a study has full_reset."""

from __future__ import annotations

import numpy as np
import pytest

from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.report.build import build_report
from plasticlab.report.data import load_results
from plasticlab.report.plasticity_gap import plasticity_gap, study_gaps

TASKS = 4


def test_the_gap_is_the_fresh_runs_accuracy_minus_the_methods_on_the_same_seed():
    online = np.array([[0.9, 0.8, 0.7], [0.6, 0.6, 0.6]])  # seeds 3, 1
    fresh = np.array([[0.8, 0.8, 0.8], [0.9, 0.9, 0.9], [0.5, 0.5, 0.5]])  # seeds 1, 3, 7
    shared, gap = plasticity_gap(online, [3, 1], fresh, [1, 3, 7])
    assert shared == [3, 1]
    assert gap == pytest.approx(np.array([[0.0, 0.1, 0.2], [0.2, 0.2, 0.2]]))
    shared, gap = plasticity_gap(online, [3, 1], fresh[2:], [7])
    assert shared == [] and gap.shape == (0, 3)


def _finish(store: ResultStore, method: str, seed: int, curve) -> None:
    config = resolve_config({"problem": "permuted_mnist", "method": method, "tasks": TASKS,
                             "steps_per_task": 10}).to_dict()
    rid = ResultStore.run_id(config, seed)
    store.start_run(rid, config, {"seed": seed})
    online = [curve(seed, t) for t in range(TASKS)]
    store.finish_run(rid, {"total_online_accuracy": float(np.mean(online))}, {"online_accuracy": online})


def test_a_study_with_full_reset_runs_draws_every_methods_gap(tmp_path):
    # Baseline loses 5 points a task against a reset that stays at 0.8; L2 Init keeps up.
    out = tmp_path / "study"
    with ResultStore(out) as store:
        for seed in (0, 1, 2):
            _finish(store, "full_reset", seed, lambda s, t: 0.8 + 0.001 * s)
            _finish(store, "baseline", seed, lambda s, t: 0.8 + 0.001 * s - 0.05 * t)
            _finish(store, "l2_init", seed, lambda s, t: 0.8 + 0.001 * s)
    results = load_results(out)
    gaps = {g.runs.method: g for g in study_gaps(results.headline("permuted_mnist", "adam")[0])}
    assert set(gaps) == {"baseline", "l2_init"}
    assert gaps["baseline"].gap == pytest.approx(np.tile([0.0, 0.05, 0.10, 0.15], (3, 1)))
    assert gaps["l2_init"].gap == pytest.approx(np.zeros((3, TASKS)))
    build_report(out, tmp_path / "report", formats=(), reps=200, results=results)
    assert "*Figure 3.* Plasticity gap: the online accuracy of the full reset runs" in (
        tmp_path / "report" / "report.md").read_text()


def test_a_study_without_full_reset_has_no_gap():
    from plasticlab.report.data import ConfigRuns

    runs = ConfigRuns({"method": "baseline"}, "baseline", [0], np.zeros((1, 2)), np.zeros(1), [0, 1])
    assert study_gaps([runs]) is None
