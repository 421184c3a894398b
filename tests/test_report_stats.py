"""plasticlab.report.stats: hand-checkable cases, and the definitions against rliable (Agarwal et al. 2021).

The rliable comparisons come twice: against reference values computed once with rliable 1.2.0 and
stored below as literals (these run everywhere), and live against rliable when it can be imported.
rliable 1.2.0 (the latest) requires ``arch<8``, and arch 7.x fails to import with pandas>=3, so
the ``test`` extra pins ``pandas<3`` next to ``rliable==1.2.0``; CI requires the live tests to
run (``PLASTICLAB_REQUIRE_CHECKS=1``), elsewhere they skip with the reason where rliable is not
installed; installed but failing to import, they fail with the reason.
"""

from __future__ import annotations

import importlib.util
import math
import time
from statistics import NormalDist

import numpy as np
import pytest

from conftest import needs
from plasticlab.report.stats import (
    Interval,
    bootstrap_ci,
    bootstrap_ci_columns,
    iqm,
    probability_of_improvement,
    probability_of_improvement_ci,
    stratified_bootstrap_ci,
)

RLIABLE = needs(importlib.util.find_spec("rliable") is not None,
                "rliable is not installed (pip install -c constraints.txt -e '.[test]')")


@pytest.fixture(scope="module")
def rliable():
    """rliable's ``library`` and ``metrics``, imported by the first test that asks for them (the
    import, arch's and scipy's with it, takes a second, which every test process would otherwise
    spend collecting this file). The tests that ask are marked :data:`RLIABLE` (they skip where it
    is not installed, except in CI); an installed rliable that fails to import fails them, with
    the reason (arch<8's TypeError under pandas>=3: the ``test`` extra pins pandas<3)."""
    try:
        from rliable import library, metrics
    except Exception as exc:  # ImportError, or arch<8's TypeError at import under pandas>=3
        pytest.fail(f"rliable cannot be imported here ({type(exc).__name__}: {exc})")
    return library, metrics


# A fixed synthetic [10 runs × 5 tasks] score matrix of accuracies, with one diverged run (row 3).
SCORES = np.array([
    [0.594, 0.595, 0.637, 0.836, 0.799],
    [0.564, 0.647, 0.490, 0.684, 0.677],
    [0.636, 0.619, 0.777, 0.780, 0.702],
    [0.263, 0.243, 0.338, 0.416, 0.395],
    [0.664, 0.666, 0.698, 0.638, 0.763],
    [0.542, 0.725, 0.887, 0.755, 0.626],
    [0.502, 0.722, 0.623, 0.967, 0.676],
    [0.667, 0.652, 0.660, 0.714, 0.752],
    [0.659, 0.589, 0.705, 0.689, 0.946],
    [0.685, 0.674, 0.664, 0.693, 0.841],
])
# Two methods on 3 tasks, 8 and 6 runs, rounded to 0.01 so that ties occur within and across methods.
X = np.array([[0.70, 0.72, 0.69], [0.76, 0.74, 0.73], [0.75, 0.70, 0.70], [0.75, 0.72, 0.74],
              [0.72, 0.72, 0.66], [0.71, 0.66, 0.67], [0.69, 0.80, 0.75], [0.72, 0.74, 0.77]])
Y = np.array([[0.68, 0.65, 0.70], [0.74, 0.70, 0.72], [0.74, 0.73, 0.69], [0.72, 0.71, 0.71],
              [0.72, 0.73, 0.65], [0.70, 0.67, 0.70]])

# Computed with rliable 1.2.0 (arch 7.2.0, pandas 2.3.3, numpy 2.4.6):
# rliable.metrics.aggregate_iqm(SCORES)
RLIABLE_IQM = 0.6683461538461539
# rliable.metrics.probability_of_improvement(X, Y)
RLIABLE_POI = 0.642361111111111
# np.random.seed(0); rliable.library.get_interval_estimates(
#     {"S": SCORES}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=20000)[1]["S"].ravel()
RLIABLE_IQM_CI = (0.644576923076923, 0.6897307692307693)
# np.random.seed(0); rliable.library.get_interval_estimates(
#     {"XY": [X, Y]}, metrics.probability_of_improvement, reps=20000)[1]["XY"].ravel()
# (a list of arrays makes rliable use its StratifiedIndependentBootstrap)
RLIABLE_POI_CI = (0.46527777777777773, 0.8055555555555555)
RLIABLE_REPS = 20000


def mc_tolerance(interval: Interval, reps: int, confidence: float = 0.95, sigmas: float = 6.0) -> float:
    """Allowed difference between two independent percentile-bootstrap bounds, each from ``reps`` replicates.

    The Monte-Carlo standard error of the α-quantile of ``reps`` draws is ``√(α(1−α)/reps) / f(q_α)``;
    for a bootstrap distribution close to normal with sd σ, ``f(q_α) = φ(z)/σ`` and σ ≈ (hi − lo)/(2z).
    The difference of two independent estimates has √2 times that error; allow ``sigmas`` of it.
    """
    alpha = (1 - confidence) / 2
    z = NormalDist().inv_cdf(1 - alpha)
    phi = NormalDist().pdf(z)
    sigma = (interval.hi - interval.lo) / (2 * z)
    return sigmas * math.sqrt(2) * math.sqrt(alpha * (1 - alpha) / reps) / phi * sigma


@pytest.fixture
def global_numpy_seed():
    """rliable draws from NumPy's global generator: seed it, and restore the state afterwards."""
    state = np.random.get_state()
    np.random.seed(0)
    yield
    np.random.set_state(state)


# ---------------------------------------------------------------------------------------------
# Interval


def test_interval_format_and_half_width():
    iv = Interval(0.82524, 0.82311, 0.82704, 5)
    assert iv.format() == "82.52 [82.31, 82.70]"
    assert iv.format(scale=1, digits=3) == "0.825 [0.823, 0.827]"
    assert iv.half_width == pytest.approx(0.82524 - 0.82311)  # the larger side
    assert Interval(0.5, 0.45, 0.6, 3).half_width == pytest.approx(0.1)
    with pytest.raises(AttributeError):  # frozen
        iv.point = 0.0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# bootstrap_ci


def test_bootstrap_of_constant_data_has_zero_width():
    iv = bootstrap_ci([0.7] * 6)
    assert iv.lo == iv.point == iv.hi == pytest.approx(0.7)
    assert iv.half_width == pytest.approx(0.0, abs=1e-15)


def test_bootstrap_single_seed_is_a_point():
    assert bootstrap_ci([0.42]) == Interval(0.42, 0.42, 0.42, 1)
    assert bootstrap_ci(np.array([0.42]), statistic=np.median).format() == "42.00 [42.00, 42.00]"


def test_bootstrap_interval_contains_the_mean_and_stays_in_the_data_range():
    values = [0.81, 0.84, 0.79, 0.90, 0.83]
    iv = bootstrap_ci(values)
    assert iv.point == pytest.approx(np.mean(values))
    assert iv.n == 5
    assert min(values) <= iv.lo < iv.point < iv.hi <= max(values)


def test_wider_confidence_gives_a_wider_interval():
    values = [0.81, 0.84, 0.79, 0.90, 0.83, 0.77]
    i80, i95, i99 = (bootstrap_ci(values, confidence=c) for c in (0.80, 0.95, 0.99))
    assert i99.lo <= i95.lo < i80.lo and i80.hi < i95.hi <= i99.hi
    assert i99.hi - i99.lo > i95.hi - i95.lo > i80.hi - i80.lo


def test_bootstrap_is_reproducible_for_a_seed():
    values = [0.81, 0.84, 0.79, 0.90, 0.83]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) != bootstrap_ci(values, seed=4)


def test_bootstrap_with_a_statistic_without_axis_matches_the_vectorised_call():
    values = [0.81, 0.84, 0.79, 0.90, 0.83, 0.60]
    vectorised = bootstrap_ci(values, statistic=np.median, seed=1)
    per_replicate = bootstrap_ci(values, statistic=lambda v: float(np.median(v)), seed=1)
    assert vectorised == per_replicate


@pytest.mark.parametrize("fn", [bootstrap_ci, bootstrap_ci_columns, iqm, stratified_bootstrap_ci])
def test_nan_and_empty_inputs_are_errors(fn):
    with pytest.raises(ValueError, match="2 NaN values"):
        fn([0.5, float("nan"), 0.7, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        fn([])


def test_nan_in_probability_of_improvement_is_an_error():
    with pytest.raises(ValueError, match="1 NaN value"):
        probability_of_improvement([0.5, float("nan")], [0.4, 0.6])
    with pytest.raises(ValueError, match="empty"):
        probability_of_improvement_ci([], [0.4])


def test_bad_confidence_and_reps_are_errors():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([0.1, 0.2], confidence=95)
    with pytest.raises(ValueError, match="reps"):
        stratified_bootstrap_ci([0.1, 0.2], reps=0)


# ---------------------------------------------------------------------------------------------
# bootstrap_ci_columns


def test_columns_equal_bootstrap_ci_per_column_for_the_same_seed():
    curves = np.random.default_rng(7).uniform(0.5, 0.9, size=(6, 12))
    mean, lo, hi = bootstrap_ci_columns(curves, seed=5)
    for t in range(curves.shape[1]):
        iv = bootstrap_ci(curves[:, t], seed=5)
        assert (mean[t], lo[t], hi[t]) == pytest.approx((iv.point, iv.lo, iv.hi), abs=1e-12)


def test_columns_agree_in_distribution_with_independent_per_column_bootstraps():
    """Sharing one resampling across columns changes nothing per column: bounds from a loop of
    bootstrap_ci with other seeds agree within Monte-Carlo error."""
    curves = np.random.default_rng(8).uniform(0.5, 0.9, size=(8, 20))
    reps = 4000
    mean, lo, hi = bootstrap_ci_columns(curves, reps=reps, seed=0)
    for t in range(curves.shape[1]):
        iv = bootstrap_ci(curves[:, t], reps=reps, seed=1000 + t)
        tol = mc_tolerance(iv, reps)
        assert mean[t] == pytest.approx(iv.point, abs=1e-12)
        assert abs(lo[t] - iv.lo) < tol and abs(hi[t] - iv.hi) < tol


def test_columns_edge_cases():
    one_seed = np.array([[0.2, 0.4, 0.6]])
    mean, lo, hi = bootstrap_ci_columns(one_seed)
    assert np.array_equal(mean, one_seed[0]) and np.array_equal(lo, mean) and np.array_equal(hi, mean)
    constant_columns = np.tile([0.1, 0.5, 0.9], (5, 1))
    mean, lo, hi = bootstrap_ci_columns(constant_columns)
    np.testing.assert_allclose(lo, mean, atol=1e-15)
    np.testing.assert_allclose(hi, mean, atol=1e-15)
    mean, lo, hi = bootstrap_ci_columns([0.1, 0.3, 0.5])  # 1-D: one column of seeds
    assert mean.shape == lo.shape == hi.shape == (1,)


def test_columns_are_fast():
    """500 columns × 10 seeds × 2000 replicates: well under a second (best of three)."""
    curves = np.random.default_rng(0).random((10, 500))
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        bootstrap_ci_columns(curves, reps=2000)
        best = min(best, time.perf_counter() - start)
    assert best < 1.0


# ---------------------------------------------------------------------------------------------
# iqm


def test_iqm_hand_checked():
    assert iqm(np.arange(100)) == pytest.approx(49.5)  # mean of 25..74
    assert iqm([1, 2, 3, 4, 100]) == pytest.approx(3.0)  # ⌊0.25·5⌋ = 1 cut each side: mean(2, 3, 4)
    assert iqm([0, 1, 2, 3, 4, 1000]) == pytest.approx(2.5)  # 1 cut each side: mean(1, 2, 3, 4)
    assert iqm([0, 1, 2, 3, 4, 5, 6, 1000]) == pytest.approx(3.5)  # 2 cut each side: mean(2..5)
    assert iqm([5, 1, 3]) == pytest.approx(3.0)  # ⌊0.75⌋ = 0: the plain mean
    assert iqm([[4, 100], [1, 2], [3, 0]]) == iqm([4, 100, 1, 2, 3, 0])  # all scores, flattened


def test_iqm_equals_scipy_trim_mean():
    from scipy import stats

    rng = np.random.default_rng(0)
    for n in range(1, 30):
        x = rng.normal(size=n) ** 3
        assert iqm(x) == pytest.approx(stats.trim_mean(x, proportiontocut=0.25, axis=None), abs=1e-12)
    assert iqm(SCORES) == pytest.approx(stats.trim_mean(SCORES, 0.25, axis=None), abs=1e-12)


def test_iqm_ignores_a_diverged_seed_that_drags_the_mean():
    scores = [0.80, 0.82, 0.81, 0.79, 0.83, 0.05]
    assert np.mean(scores) == pytest.approx(0.6833333333333333)
    assert iqm(scores) == pytest.approx(0.805)  # mean(0.79, 0.80, 0.81, 0.82)


# ---------------------------------------------------------------------------------------------
# stratified_bootstrap_ci


def test_stratified_bootstrap_resamples_within_task_columns():
    """Columns constant within themselves: every stratified resample is the same matrix, so the
    interval has zero width (resampling runs across tasks would not)."""
    scores = np.array([[0.0, 1.0]] * 4)
    iv = stratified_bootstrap_ci(scores)
    assert iv == Interval(0.5, 0.5, 0.5, 4)
    assert stratified_bootstrap_ci(scores, statistic=np.mean) == Interval(0.5, 0.5, 0.5, 4)


def test_stratified_bootstrap_basic_properties():
    iv = stratified_bootstrap_ci(SCORES, reps=2000, seed=0)
    assert iv.point == pytest.approx(iqm(SCORES)) and iv.n == 10
    assert iv.lo < iv.point < iv.hi
    assert iv == stratified_bootstrap_ci(SCORES, reps=2000, seed=0)
    wider = stratified_bootstrap_ci(SCORES, reps=2000, seed=0, confidence=0.99)
    assert wider.lo <= iv.lo and iv.hi <= wider.hi
    single = stratified_bootstrap_ci(SCORES[:1])
    assert single.lo == single.point == single.hi


def test_stratified_bootstrap_vectorised_iqm_equals_calling_iqm_per_replicate():
    fast = stratified_bootstrap_ci(SCORES, reps=500, seed=2)
    slow = stratified_bootstrap_ci(SCORES, statistic=lambda s: iqm(s), reps=500, seed=2)
    assert (fast.point, fast.lo, fast.hi) == pytest.approx((slow.point, slow.lo, slow.hi), abs=1e-12)


def test_one_dimensional_scores_are_one_task():
    runs = SCORES[:, 2]
    assert stratified_bootstrap_ci(runs, seed=1) == stratified_bootstrap_ci(runs[:, None], seed=1)
    assert probability_of_improvement(X[:, 0], Y[:, 0]) == probability_of_improvement(X[:, :1], Y[:, :1])


# ---------------------------------------------------------------------------------------------
# probability_of_improvement


def test_probability_of_improvement_hand_checked():
    assert probability_of_improvement([0.8, 0.9, 0.85], [0.1, 0.2]) == 1.0  # clearly separated
    assert probability_of_improvement([0.1, 0.2], [0.8, 0.9, 0.85]) == 0.0
    assert probability_of_improvement([0.3, 0.5, 0.4], [0.3, 0.5, 0.4]) == 0.5  # identical samples
    assert probability_of_improvement([0.5, 0.5], [0.5]) == 0.5  # all tied
    # pairs (1,2) (1,3) (2,2) (2,3): one tie → ½ / 4
    assert probability_of_improvement([1, 2], [2, 3]) == 0.125
    # x = [1, 3], y = [2, 2, 3]: 3 > 2 twice, 3 = 3 once → (2 + ½) / 6
    assert probability_of_improvement([1, 3], [2, 2, 3]) == pytest.approx(2.5 / 6, abs=1e-15)
    # averaged over tasks: task 0 gives 1, task 1 gives 0.125
    assert probability_of_improvement([[9, 1], [8, 2]], [[0, 2], [1, 3]]) == 0.5625


def test_probability_of_improvement_complements():
    assert probability_of_improvement(X, Y) + probability_of_improvement(Y, X) == pytest.approx(1.0)


def test_probability_of_improvement_needs_the_same_tasks():
    with pytest.raises(ValueError, match="same number of tasks"):
        probability_of_improvement(X, Y[:, :2])


def test_probability_of_improvement_ci_properties():
    iv = probability_of_improvement_ci(X, Y, reps=2000, seed=0)
    assert iv.point == probability_of_improvement(X, Y) and iv.n == 6
    assert 0.0 <= iv.lo < iv.point < iv.hi <= 1.0
    assert iv == probability_of_improvement_ci(X, Y, reps=2000, seed=0)
    separated = probability_of_improvement_ci([0.8, 0.9, 0.85], [0.1, 0.2])
    assert separated == Interval(1.0, 1.0, 1.0, 2)


# ---------------------------------------------------------------------------------------------
# Against rliable 1.2.0: stored reference values (run everywhere)


def test_point_estimates_equal_stored_rliable_values():
    assert iqm(SCORES) == pytest.approx(RLIABLE_IQM, abs=1e-12)
    assert probability_of_improvement(X, Y) == pytest.approx(RLIABLE_POI, abs=1e-12)


def test_stratified_iqm_interval_matches_stored_rliable_interval():
    iv = stratified_bootstrap_ci(SCORES, reps=RLIABLE_REPS, seed=0)
    tol = mc_tolerance(iv, RLIABLE_REPS)  # ≈ 0.002 here
    assert tol < 0.01
    assert abs(iv.lo - RLIABLE_IQM_CI[0]) < tol and abs(iv.hi - RLIABLE_IQM_CI[1]) < tol


def test_probability_of_improvement_interval_matches_stored_rliable_interval():
    iv = probability_of_improvement_ci(X, Y, reps=RLIABLE_REPS, seed=0)
    tol = mc_tolerance(iv, RLIABLE_REPS)  # ≈ 0.014 here (the interval is wide: 6 and 8 runs)
    assert abs(iv.lo - RLIABLE_POI_CI[0]) < tol and abs(iv.hi - RLIABLE_POI_CI[1]) < tol


# ---------------------------------------------------------------------------------------------
# Against rliable itself (where it can be imported)


@RLIABLE
def test_point_estimates_equal_rliable(rliable):
    _, rly_metrics = rliable
    rng = np.random.default_rng(11)
    cases = [(SCORES, X, Y)]
    for runs_x, runs_y, tasks in [(3, 3, 1), (5, 4, 2), (10, 7, 6), (4, 9, 3)]:
        a = np.round(rng.uniform(0, 1, size=(runs_x, tasks)), 1)  # coarse: many ties
        b = np.round(rng.uniform(0, 1, size=(runs_y, tasks)), 1)
        cases.append((rng.normal(size=(runs_x, tasks)), a, b))
    cases.append((SCORES, X, X))  # identical samples: rliable's special case
    for scores, a, b in cases:
        assert iqm(scores) == pytest.approx(float(rly_metrics.aggregate_iqm(scores)), abs=1e-12)
        assert probability_of_improvement(a, b) == pytest.approx(
            float(rly_metrics.probability_of_improvement(a, b)), abs=1e-12)


@RLIABLE
def test_stratified_iqm_interval_matches_rliable(global_numpy_seed, rliable):
    rly_library, rly_metrics = rliable
    reps = 5000  # rliable loops in Python: ~0.3 ms a replicate
    _, ci = rly_library.get_interval_estimates(
        {"S": SCORES}, lambda s: np.array([rly_metrics.aggregate_iqm(s)]), reps=reps)
    rly_lo, rly_hi = ci["S"].ravel()
    iv = stratified_bootstrap_ci(SCORES, reps=reps, seed=0)
    tol = mc_tolerance(iv, reps)
    assert abs(iv.lo - rly_lo) < tol and abs(iv.hi - rly_hi) < tol


@RLIABLE
def test_probability_of_improvement_interval_matches_rliable_bootstrap(global_numpy_seed, rliable):
    """rliable's StratifiedIndependentBootstrap (what get_interval_estimates uses for [x, y]) with the
    probability of improvement as its statistic; ours equals rliable's metric exactly (tested above),
    and rliable's metric (scipy's Mann–Whitney per replicate) would make this test ~20× slower."""
    reps = 5000
    rly_library, _ = rliable
    bs = rly_library.StratifiedIndependentBootstrap(X, Y)
    rly_lo, rly_hi = bs.conf_int(lambda a, b: np.array([probability_of_improvement(a, b)]),
                                 reps=reps, size=0.95, method="percentile").ravel()
    iv = probability_of_improvement_ci(X, Y, reps=reps, seed=0)
    tol = mc_tolerance(iv, reps)
    assert abs(iv.lo - rly_lo) < tol and abs(iv.hi - rly_hi) < tol
