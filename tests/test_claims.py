"""plasticlab.report.claims: SPEC §12's criteria on synthetic runs whose answer is known, the F
distribution's tail against SciPy, claims over parts (a missing study is "not judged"), and
`plasticlab claims` on the committed exports of docs/reproduction."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from plasticlab.experiments.presets import AUTHORS_CBP, AUTHORS_REDO
from plasticlab.report import claims as C
from plasticlab.report.data import ConfigRuns, Results
from plasticlab.report.stats import (
    bootstrap_ci,
    difference_ci,
    f_sf,
    plasticity_loss,
    plasticity_window,
    regularized_incomplete_beta,
    variance_ratio_test,
)


@pytest.fixture(scope="module")
def scipy_stats():
    """``scipy.stats``, imported by the first test that asks for it (a second of a core, which
    every test process would otherwise spend collecting this file); the test skips without it."""
    return pytest.importorskip("scipy.stats")


@pytest.fixture(scope="module")
def scipy_special():
    """``scipy.special``, imported by the first test that asks for it."""
    return pytest.importorskip("scipy.special")


def scores(values, seeds=None) -> C.Scores:
    values = np.asarray(values, dtype=float)
    return C.Scores(tuple(range(len(values)) if seeds is None else seeds), values)


def verdict(finding: C.Finding) -> str:
    return finding.verdict


# --- plasticity loss and its window -----------------------------------------------------------


@pytest.mark.parametrize("tasks, w", [(1, 1), (5, 2), (10, 2), (25, 2), (29, 2), (30, 3), (50, 5),
                                      (99, 9), (100, 10), (500, 10)])
def test_the_window_is_min_10_max_2_a_tenth_of_the_tasks(tasks, w):
    assert plasticity_window(tasks) == w


def test_a_flat_curve_keeps_plasticity_and_a_falling_one_loses_it():
    rng = np.random.default_rng(0)
    flat = 80 + 0.1 * rng.standard_normal((5, 50))
    falling = np.linspace(80, 60, 50)[None, :] + 0.1 * rng.standard_normal((5, 50))
    assert verdict(C.keeps_plasticity(plasticity_loss(flat))) == C.HOLDS
    assert verdict(C.loses_plasticity(plasticity_loss(flat))) == C.DOES_NOT_HOLD
    assert verdict(C.loses_plasticity(plasticity_loss(falling))) == C.HOLDS
    assert verdict(C.keeps_plasticity(plasticity_loss(falling))) == C.DOES_NOT_HOLD
    assert verdict(C.loses_some_plasticity(plasticity_loss(falling))) == C.HOLDS


def test_the_loss_is_a_runs_own_best_window_minus_its_last():
    # w = 2 over 10 tasks: run 0 peaks at tasks 2–3 (mean 90), ends at 70; run 1 is best at its end
    online = np.array([[80, 80, 90, 90, 80, 80, 80, 80, 70, 70],
                       [60, 60, 60, 60, 60, 60, 60, 60, 65, 65]], dtype=float)
    np.testing.assert_allclose(plasticity_loss(online), [20.0, 0.0])
    np.testing.assert_allclose(plasticity_loss(online[0]), [20.0])


def test_the_two_point_and_one_point_boundaries():
    assert verdict(C.loses_plasticity([2.0] * 5)) == C.HOLDS
    assert verdict(C.loses_plasticity([1.99] * 5)) == C.DOES_NOT_HOLD
    # a mean of 2 whose interval reaches 0 does not lose plasticity
    wide = [-6.0, 10.0, -6.0, 10.0, 2.0]
    assert np.mean(wide) == 2.0 and bootstrap_ci(wide, seed=C.SEED).lo <= 0
    assert verdict(C.loses_plasticity(wide)) == C.DOES_NOT_HOLD
    assert verdict(C.keeps_plasticity([1.0] * 5)) == C.HOLDS
    assert verdict(C.keeps_plasticity([1.01] * 5)) == C.DOES_NOT_HOLD
    assert verdict(C.loses_some_plasticity([1.0] * 5)) == C.DOES_NOT_HOLD


def test_mitigates_against_the_baseline():
    assert verdict(C.mitigates([5.0] * 3, [10.0] * 3)) == C.HOLDS
    assert verdict(C.mitigates([5.1] * 3, [10.0] * 3)) == C.DOES_NOT_HOLD
    # a Baseline that loses < 2 points leaves nothing to mitigate: holds unless the method loses
    assert verdict(C.mitigates([1.5] * 3, [1.0] * 3)) == C.HOLDS
    assert verdict(C.mitigates([3.0] * 3, [1.0] * 3)) == C.DOES_NOT_HOLD


def test_mitigates_only_some():
    base = [10.0] * 3
    assert verdict(C.mitigates_only_some([7.0] * 3, base, [0.0] * 3)) == C.HOLDS  # ½ < L < all
    assert verdict(C.mitigates_only_some([10.0] * 3, base, [0.0] * 3)) == C.DOES_NOT_HOLD  # all of it
    assert verdict(C.mitigates_only_some([4.0] * 3, base, [3.0] * 3)) == C.HOLDS  # ≥ L2 Init + 1
    assert verdict(C.mitigates_only_some([4.0] * 3, base, [3.5] * 3)) == C.DOES_NOT_HOLD
    assert verdict(C.mitigates_only_some([1.0] * 3, [1.5] * 3, [0.0] * 3)) == C.DOES_NOT_HOLD


# --- ranks and comparisons ---------------------------------------------------------------------


def test_ranks_top_3_bottom_3_and_first():
    totals = {f"m{k}": np.full(3, 90.0 - k) for k in range(8)}
    assert verdict(C.top_3("m2", totals)) == C.HOLDS
    assert verdict(C.top_3("m3", totals)) == C.DOES_NOT_HOLD
    assert verdict(C.performs_poorly_overall("m5", totals)) == C.HOLDS
    assert verdict(C.performs_poorly_overall("m4", totals)) == C.DOES_NOT_HOLD
    assert verdict(C.ranks_first("m0", totals)) == C.HOLDS
    assert verdict(C.ranks_first("m1", totals)) == C.DOES_NOT_HOLD


def test_paired_intervals_take_out_what_the_seed_shares():
    # each seed moves both methods alike (its task sequence); A is B + 1 on every seed
    seed_effect = np.array([0.0, 8.0, -6.0, 3.0, -9.0, 5.0])
    a, b = scores(70 + seed_effect + 1.0), scores(70 + seed_effect)
    paired = C.paired_difference(a, b)
    assert (paired.point, paired.lo, paired.hi) == pytest.approx((1.0, 1.0, 1.0))
    assert paired == difference_ci(a.values, b.values, paired=True, reps=C.REPS, seed=C.SEED)
    assert paired == bootstrap_ci(a.values - b.values, reps=C.REPS, seed=C.SEED)
    assert verdict(C.much_better(a, b)) == C.HOLDS
    # the same numbers on seeds they do not share: unpaired, and the spread hides the gap
    unpaired = C.paired_difference(a, scores(b.values, seeds=tuple(range(10, 16))))
    assert unpaired.point == pytest.approx(1.0) and unpaired.lo < 0 < unpaired.hi
    assert verdict(C.much_better(a, scores(b.values, seeds=tuple(range(10, 16))))) == C.DOES_NOT_HOLD


def test_pairs_follow_the_shared_seeds_whatever_their_order():
    a = C.Scores((3, 1, 2), np.array([13.0, 11.0, 12.0]))
    b = C.Scores((1, 2, 3, 4), np.array([10.0, 10.0, 10.0, 99.0]))
    d = C.paired_difference(a, b)
    assert d.point == pytest.approx(2.0) and d.n == 3


@pytest.mark.parametrize("diff, good, same, slightly", [
    (0.0, True, True, False), (-0.5, True, True, True), (-0.51, False, True, True),
    (-1.0, False, True, True), (-1.01, False, False, False), (1.0, True, True, False),
    (1.01, True, False, False)])
def test_difference_thresholds(diff, good, same, slightly):
    base = scores([70.0, 75.0, 72.0, 71.0])
    other = scores(base.values + diff)
    assert (verdict(C.as_good_as_or_better(other, base)) == C.HOLDS) is good
    assert (verdict(C.roughly_the_same(other, base)) == C.HOLDS) is same
    assert (verdict(C.slightly_worse(other, base)) == C.HOLDS) is slightly


def test_below_needs_the_interval_below_zero():
    base = scores([70.0, 75.0, 72.0, 71.0])
    assert verdict(C.below(scores(base.values - 0.3), base)) == C.HOLDS
    noisy = scores(base.values + np.array([-2.0, 1.0, -2.0, 1.5]))  # mean −0.375, interval across 0
    assert verdict(C.below(noisy, base)) == C.DOES_NOT_HOLD


def test_clearly_beats_every_other():
    seeds = np.array([0.0, 2.0, -1.0])
    s = {"l2_init": scores(80 + seeds), "a": scores(78 + seeds), "b": scores(79 + seeds)}
    assert verdict(C.clearly_beats_every_other("l2_init", s)) == C.HOLDS
    s["b"] = scores(79.5 + seeds)  # only 0.5 points behind
    assert verdict(C.clearly_beats_every_other("l2_init", s)) == C.DOES_NOT_HOLD


# --- network internals, λ, seed variance, SGD vs Adam, forgetting --------------------------------


def test_reduces_weight_magnitude_at_half_the_baselines():
    base = np.full((3, 20), 0.04)
    assert verdict(C.reduces_weight_magnitude(np.full((3, 20), 0.02), base, 2)) == C.HOLDS
    assert verdict(C.reduces_weight_magnitude(np.full((3, 20), 0.0201), base, 2)) == C.DOES_NOT_HOLD


def test_keeps_srank_high_in_every_layer_some_or_none():
    kept = np.full((3, 20, 2), 50.0)
    one_falls = kept.copy()
    one_falls[:, -2:, 0] = 39.0  # below 0.8 × 50 in layer 1 only
    both_fall = np.full((3, 20, 2), 50.0)
    both_fall[:, -2:, :] = 10.0
    assert verdict(C.keeps_srank_high(kept, 2)) == C.HOLDS
    assert verdict(C.keeps_srank_high(one_falls, 2)) == C.PARTLY
    assert verdict(C.keeps_srank_high(both_fall, 2)) == C.DOES_NOT_HOLD


def test_best_single_lambda_averages_over_step_sizes_and_problems():
    totals = {(1e-2, 1e-3, "p"): [80.0], (1e-2, 1e-4, "p"): [74.0],  # mean 77
              (1e-1, 1e-3, "p"): [78.0], (1e-1, 1e-4, "p"): [73.0]}  # mean 75.5
    assert verdict(C.best_single_lambda(totals)) == C.HOLDS
    totals[(1e-2, 1e-4, "p")] = [70.0]  # best at α 1e-3, but 75 on average
    assert verdict(C.best_single_lambda(totals)) == C.DOES_NOT_HOLD


def test_more_seed_variance_for_unequal_spreads_only(scipy_stats):
    rng = np.random.default_rng(1)
    base = rng.standard_normal(10)
    assert verdict(C.more_seed_variance(80 + base, 60 + base)) == C.DOES_NOT_HOLD  # equal spreads
    assert verdict(C.more_seed_variance(80 + 3 * base, 60 + base)) == C.HOLDS  # 3× the s.d.
    assert verdict(C.more_seed_variance(80 + base, 60 + 3 * base)) == C.DOES_NOT_HOLD  # one-sided
    ratio, p = variance_ratio_test(3 * base, base)
    assert ratio == pytest.approx(9.0)
    assert p == pytest.approx(scipy_stats.f.sf(9.0, 9, 9), rel=1e-10)


def test_less_plasticity_loss_with_sgd_reports_each_methods_sign():
    f = C.less_plasticity_loss_with_sgd({"a": [1.0], "b": [5.0], "c": [0.0]}, {"a": [2.0], "b": [6.0]})
    assert f.verdict == C.HOLDS and "a -1.00" in f.figures and "b -1.00" in f.figures
    assert verdict(C.less_plasticity_loss_with_sgd({"a": [3.0]}, {"a": [2.0]})) == C.DOES_NOT_HOLD
    assert verdict(C.less_plasticity_loss_with_sgd({"a": [3.0]}, {"b": [2.0]})) == C.NOT_JUDGED


def test_the_forgetting_criteria_at_their_thresholds():
    bwt = scores([-60.0, -62.0, -58.0])
    assert verdict(C.reduces_forgetting_markedly(scores(bwt.values + 5), bwt)) == C.HOLDS
    assert verdict(C.reduces_forgetting_markedly(scores(bwt.values + 4.9), bwt)) == C.DOES_NOT_HOLD
    total = scores([81.0, 80.0, 82.0])
    assert verdict(C.little_cost_in_plasticity(scores(total.values - 2), total)) == C.HOLDS
    assert verdict(C.little_cost_in_plasticity(scores(total.values - 2.1), total)) == C.DOES_NOT_HOLD
    assert verdict(C.relatively_poor_plasticity(scores(total.values - 3), total)) == C.HOLDS
    assert verdict(C.relatively_poor_plasticity(scores(total.values - 2.9), total)) == C.DOES_NOT_HOLD
    assert verdict(C.increases_forgetting(scores(bwt.values - 2), bwt)) == C.HOLDS
    assert verdict(C.increases_forgetting(scores(bwt.values - 1.9), bwt)) == C.DOES_NOT_HOLD
    assert verdict(C.forgets_less(scores(bwt.values + 2), bwt)) == C.HOLDS
    assert verdict(C.one_step_bwt_unchanged(scores(bwt.values + 1.5), bwt)) == C.HOLDS
    assert verdict(C.one_step_bwt_unchanged(scores(bwt.values - 1.6), bwt)) == C.DOES_NOT_HOLD


def test_every_criterion_is_named_and_documented():
    for name, f in C.CRITERIA.items():
        assert f.__name__ == name and f.__doc__
    used = {t.criterion for claim in C.CLAIMS for part in claim.parts for t in part.tests}
    assert used <= set(C.CRITERIA)


# --- the F distribution's tail, without SciPy ----------------------------------------------------


def test_the_incomplete_beta_function_against_scipy(scipy_special):
    for a, b, x in itertools.product([0.5, 1.0, 2.5, 4.5, 12.0, 60.0], [0.5, 1.0, 3.0, 9.5, 40.0],
                                     [0.0, 1e-8, 0.01, 0.2, 0.5, 0.8, 0.999, 1.0]):
        assert regularized_incomplete_beta(a, b, x) == pytest.approx(scipy_special.betainc(a, b, x),
                                                                     rel=1e-9, abs=1e-12)


def test_the_f_tail_against_scipy(scipy_stats):
    for f, d1, d2 in itertools.product([1e-3, 0.2, 0.9, 1.0, 1.3, 2.7, 5.9, 20.0, 300.0],
                                       [1, 2, 4, 9, 19, 49], [1, 3, 9, 29, 200]):
        expected = scipy_stats.f.sf(f, d1, d2)
        assert f_sf(f, d1, d2) == pytest.approx(expected, rel=1e-9, abs=1e-15), (f, d1, d2)
    assert f_sf(0.0, 3, 4) == 1.0 and f_sf(math.inf, 3, 4) == 0.0


def test_the_variance_ratio_test_against_scipy_and_its_edges(scipy_stats):
    rng = np.random.default_rng(2)
    x, y = 2 * rng.standard_normal(7), rng.standard_normal(12)
    ratio, p = variance_ratio_test(x, y)
    assert ratio == pytest.approx(np.var(x, ddof=1) / np.var(y, ddof=1))
    assert p == pytest.approx(scipy_stats.f.sf(ratio, 6, 11), rel=1e-10)
    assert variance_ratio_test([1.0, 2.0], [3.0, 3.0]) == (math.inf, 0.0)
    assert math.isnan(variance_ratio_test([1.0, 1.0], [3.0, 3.0])[0])
    with pytest.raises(ValueError):
        variance_ratio_test([1.0], [1.0, 2.0])


# --- claims over parts, on synthetic studies ----------------------------------------------------


def _runs(method: str, online: np.ndarray, seeds=range(100, 103), **params) -> ConfigRuns:
    config = {"problem": "permuted_mnist", "optimizer": "adam", "method": method, "lr": 1e-3,
              "params": dict(params), "tasks": online.shape[1], "steps_per_task": 625}
    tasks = online.shape[1]
    metrics = {"weight_magnitude": np.full((len(online), tasks), 0.03),
               "srank": np.full((len(online), tasks, 2), 50.0)}
    return ConfigRuns(config, method, list(seeds), online, online.mean(axis=1), list(range(tasks)), metrics)


def _study(configs, name="best-permuted_mnist-adam") -> C.Study:
    kind = C.study_kind(name)
    return C.Study(name, Path(name), *kind, Results(Path(name), configs, Counter()), 1.0,
                   "full length (synthetic)")


def _comparison_study() -> C.Study:
    flat = np.full((3, 40), 0.8) + np.array([[0.0], [0.01], [-0.01]])
    falling = np.linspace(0.8, 0.6, 40)[None, :] + np.array([[0.0], [0.01], [-0.01]])
    configs = [_runs("baseline", falling), _runs("l2_init", flat), _runs("l2", flat - 0.01),
               _runs("cbp", flat - 0.02), _runs("redo", flat - 0.03), _runs("shrink_perturb", flat - 0.04),
               _runs("concat_relu", flat - 0.05), _runs("layer_norm", falling + 0.01)]
    return _study(configs)


def test_a_study_of_several_streams_is_viewed_one_stream_at_a_time():
    # runs at another batch size learn other tasks: each method's best is taken per stream,
    # never across them (here batch 32's runs score higher, and would hide batch 16's)
    flat = np.full((3, 40), 0.8)
    configs = []
    for batch, steps, lift in ((16, 625, 0.0), (32, 312, 0.05)):
        for method, score in (("baseline", flat - 0.1), ("l2_init", flat)):
            c = _runs(method, score + lift)
            c.config.update(batch_size=batch, steps_per_task=steps)
            configs.append(c)
    views = _study(configs).views()
    assert [v.label for v in views] == ["batch_size=16 steps_per_task=625",
                                        "batch_size=32 steps_per_task=312"]
    assert [{m: c.config["batch_size"] for m, c in v.runs.items()} for v in views] == [
        {"baseline": 16, "l2_init": 16}, {"baseline": 32, "l2_init": 32}]
    # one stream: one view, unlabelled, as before
    assert [v.label for v in _comparison_study().views()] == [""]


def test_a_claim_with_a_missing_study_is_not_judged():
    verdicts = C.judge_claims([])
    assert {v.summary.verdict for v in verdicts} == {C.NOT_JUDGED}
    assert all(r.verdict == C.NOT_JUDGED and "no study" in r.figures for v in verdicts for r in v.rows)
    one = C.judge_claims([_comparison_study()])
    adam1 = next(v for v in one if v.claim.key == "adam-1")
    by_part = {r.part: r.verdict for r in adam1.rows}
    assert by_part["Permuted MNIST"] == C.HOLDS  # the Baseline falls 20 points
    assert by_part["Random Label MNIST"] == C.NOT_JUDGED
    assert adam1.summary.verdict == C.NOT_JUDGED
    assert "over the 1 judged: holds" in adam1.summary.figures
    assert adam1.rows[0].study == "best-permuted_mnist-adam"
    assert adam1.rows[0].configurations == C.PAPER_BEST and adam1.rows[0].scale


def test_parts_combine_into_holds_partly_does_not_hold():
    claim = C.Claim("x", "words", ())
    rows = [C.Row("x", str(k), v, "") for k, v in enumerate([C.HOLDS, C.HOLDS])]
    assert C.summarise(claim, rows).verdict == C.HOLDS
    rows[1].verdict = C.PARTLY
    assert C.summarise(claim, rows).verdict == C.PARTLY
    rows = [C.Row("x", "a", C.DOES_NOT_HOLD, ""), C.Row("x", "b", C.DOES_NOT_HOLD, "")]
    assert C.summarise(claim, rows).verdict == C.DOES_NOT_HOLD
    four_of_five = C.Claim("y", "on four of five", (), need=4)
    rows = [C.Row("y", str(k), C.HOLDS, "") for k in range(4)] + [C.Row("y", "4", C.NOT_JUDGED, "")]
    assert C.summarise(four_of_five, rows).verdict == C.HOLDS  # 4 hold whatever the fifth says
    rows[0].verdict = C.DOES_NOT_HOLD
    assert C.summarise(four_of_five, rows).verdict == C.NOT_JUDGED
    rows[4].verdict = C.DOES_NOT_HOLD
    assert C.summarise(four_of_five, rows).verdict == C.PARTLY
    assert C.combine([C.Finding(C.DOES_NOT_HOLD, ""), C.Finding(C.HOLDS, "")], "any").verdict == C.HOLDS


def test_the_matrix_and_the_tables_by_study():
    """The claims × problems matrix gives each part's preferred row in its problem's column
    (marked with its scale where shortened; "—" where the claim has no part), the claim's verdict
    over the judged parts beside "not judged", and under it the studies read; the tables by study
    group the judged rows by the study (and scale) they were judged on."""
    pm = C.Part("comparison", "permuted_mnist", "adam", ())
    rlm = C.Part("comparison", "random_label_mnist", "adam", ())
    claim = C.Claim("k", "words | with a bar", (pm, rlm))
    full = "full length (500 tasks × 625 steps)"
    half = "--scale 0.5: 25 of 50 tasks × 15,000 of 30,000 steps"
    rows = [C.Row("k", "Permuted MNIST", C.HOLDS, "f1", "best-permuted_mnist-adam", "a", full, C.PAPER_BEST,
                  "CBP: plasticlab's form"),
            C.Row("k", "Random Label MNIST", C.PARTLY, "f2", "best-random_label_mnist-adam", "b", half,
                  C.PAPER_BEST),
            C.Row("k", "Random Label MNIST", C.HOLDS, "f3", "best-random_label_mnist-adam", "c",
                  "full length (50 tasks × 30,000 steps)", C.PAPER_BEST)]
    judged = C.ClaimVerdict(claim, C.summarise(claim, rows[:2]), rows)
    lonely = C.Claim("m", "one problem", (C.Part("comparison", "five_plus_one_cifar", "adam", ()),))
    missing = C.ClaimVerdict(lonely, C.summarise(lonely, [C.Row("m", "5+1 CIFAR", C.NOT_JUDGED, "no study")]),
                             [C.Row("m", "5+1 CIFAR", C.NOT_JUDGED, "no study")])
    matrix = C.claims_matrix([judged, missing]).splitlines()
    assert matrix[0] == ("| claim | Permuted MNIST | Random Label MNIST | Random Label CIFAR | 5+1 CIFAR "
                         "| Continual ImageNet | over its parts |")
    assert matrix[2] == ("| k: words \\| with a bar | holds | partly (`--scale 0.5`) | — | — | — "
                         "| **partly** |")
    assert matrix[3] == "| m: one problem | — | — | — | not judged | — | **not judged** |"
    assert ("- Random Label MNIST: `best-random_label_mnist-adam` `--scale 0.5` (the paper's reported best)"
            in matrix)
    assert matrix[-1] == "- CBP and ReDo: plasticlab's form"
    tables = C.claims_by_study([judged, missing])
    assert list(tables) == [f"best-permuted_mnist-adam · {full}", f"best-random_label_mnist-adam · {half}",
                            "best-random_label_mnist-adam · full length (50 tasks × 30,000 steps)"]
    assert tables[f"best-random_label_mnist-adam · {half}"].splitlines()[2] == \
        "| k | Random Label MNIST | **partly** | f2 |"
    md = C.claims_markdown([judged, missing])
    assert md.startswith("## The claims at a glance\n") and "\n## By study\n" in md
    assert f"\n### best-random_label_mnist-adam · {half}\n" in md


def test_the_matrix_names_each_study_a_row_read_with_its_own_scale():
    """A row judged on a study and its companion (the L2 Init it compares with) names both
    under the matrix, each with how it was shortened: the companion at the study's scale (its
    row keeps one scale), or at its own (``NAME: SCALE``); a study read by two rows is named
    once."""
    claim = C.Claim("k", "words", (C.Part("comparison", "random_label_cifar", "adam", ()),
                                   C.Part("comparison", "random_label_mnist", "adam", ())))
    fifth = "--scale 0.2: 10 of 50 tasks × 6,000 of 30,000 steps"
    rows = [C.Row("k", "Random Label CIFAR", C.HOLDS, "f", "reference-modes-random_label_cifar + "
                  "best-random_label_cifar-adam", "a + b", fifth, C.PAPER_BEST),
            C.Row("k", "Random Label MNIST", C.HOLDS, "f", "reference-modes-random_label_mnist + "
                  "best-random_label_mnist-adam", "c + d", "--scale 0.5: 25 of 50 tasks; "
                  "best-random_label_mnist-adam: full length (50 tasks)", C.PAPER_BEST)]
    matrix = C.claims_matrix([C.ClaimVerdict(claim, C.summarise(claim, rows), rows)]).splitlines()
    assert ("- Random Label CIFAR: `reference-modes-random_label_cifar` `--scale 0.2`, "
            "`best-random_label_cifar-adam` `--scale 0.2` (the paper's reported best)") in matrix
    assert ("- Random Label MNIST: `reference-modes-random_label_mnist` `--scale 0.5`, "
            "`best-random_label_mnist-adam` (the paper's reported best)") in matrix


def test_a_negated_test_and_a_missing_method():
    view = _comparison_study().views()[0]
    held = C.apply_test(C.Test("mitigates", ("l2_init",)), view)
    assert held.verdict == C.HOLDS
    assert C.apply_test(C.Test("mitigates", ("l2_init",), negate=True), view).verdict == C.DOES_NOT_HOLD
    missing = C.apply_test(C.Test("keeps_plasticity", ("l1_init",)), view)
    assert missing.verdict == C.NOT_JUDGED and "L1 Init" in missing.figures


def test_the_cbp_and_redo_forms_are_read_from_the_runs_parameters():

    assert C.cbp_redo_form({"method": "cbp", "params": {}}) == "plasticlab's form"
    assert C.cbp_redo_form({"method": "cbp", "params": dict(AUTHORS_CBP)}) == "the authors' form"
    assert C.cbp_redo_form({"method": "redo", "params": dict(AUTHORS_REDO)}) == "the authors' form"
    # with SGD, AdamGnT is never used: the new units' init decides
    assert C.cbp_redo_form({"method": "cbp", "params": {"replacement_init": "kaiming"}}, "sgd") == \
        "the authors' form"
    assert C.cbp_redo_form({"method": "redo", "params": {"reinit": "initial"}}).startswith("mixed form")


def _claim(key: str) -> C.Claim:
    return next(c for c in C.CLAIMS if c.key == key)


def _authors_study(cbp_offset: float, redo_offset: float, tasks: int = 40) -> C.Study:
    """``reference-modes-permuted_mnist``: CBP and ReDo in the authors' form, flat at L2 Init's
    level (0.8, seed effects as in :func:`_comparison_study`) plus the offsets."""
    flat = np.full((3, tasks), 0.8) + np.array([[0.0], [0.01], [-0.01]])
    configs = [_runs("cbp", flat + cbp_offset, **AUTHORS_CBP),
               _runs("redo", flat + redo_offset, **AUTHORS_REDO)]
    return _study(configs, name="reference-modes-permuted_mnist")


def test_claim_3_is_judged_with_each_form_of_cbp_and_redo():
    """The plasticlab's-form rows read the comparison's CBP and ReDo; the authors'-form rows put
    reference-modes-P's CBP and ReDo beside the comparison's L2 Init, seed by seed: L2 Init is
    2 points above plasticlab's CBP (holds) and 3 points below the authors' (does not hold)."""
    comparison, authors = _comparison_study(), _authors_study(cbp_offset=0.03, redo_offset=-0.01)
    rows = {v.claim.key: v.rows[0] for v in C.judge_claims([comparison, authors])}
    ours, theirs = rows["adam-3 CBP (plasticlab's)"], rows["adam-3 CBP (authors')"]
    assert ours.verdict == C.HOLDS and ours.figures.startswith("L2 Init − CBP (total): +2.00 [+2.00, +2.00]")
    assert ours.study == "best-permuted_mnist-adam" and "CBP: plasticlab's form" in ours.forms
    assert theirs.verdict == C.DOES_NOT_HOLD
    assert theirs.figures.startswith("L2 Init − CBP (total): -3.00 [-3.00, -3.00]")
    assert theirs.study == "reference-modes-permuted_mnist + best-permuted_mnist-adam"
    assert theirs.forms == "CBP: the authors' form; ReDo: the authors' form"
    assert rows["adam-3 ReDo (authors')"].verdict == C.HOLDS  # ReDo 1 point below L2 Init
    assert rows["adam-3 ReDo (plasticlab's)"].verdict == C.HOLDS
    # without the study, the authors' rows are not judged, and say which study is missing
    alone = {v.claim.key: v.rows[0] for v in C.judge_claims([comparison])}
    assert alone["adam-3 CBP (authors')"].verdict == C.NOT_JUDGED
    assert "reference-modes-permuted_mnist" in alone["adam-3 CBP (authors')"].figures
    assert alone["adam-3 CBP (plasticlab's)"].verdict == C.HOLDS


def test_the_authors_form_is_judged_only_beside_a_comparison_as_long():
    """Pairing L2 Init with CBP needs both at the same length: a comparison of 40 tasks does not
    judge the authors' CBP of 20, and a comparison only is not enough."""
    short = _authors_study(cbp_offset=-0.01, redo_offset=-0.01, tasks=20)
    row = C.judge_part(_claim("adam-3 CBP (authors')"), _claim("adam-3 CBP (authors')").parts[0], short,
                       [_comparison_study(), short])
    assert row.verdict == C.NOT_JUDGED and "as long as reference-modes-permuted_mnist" in row.figures
    assert row.study == "reference-modes-permuted_mnist"


def test_a_form_judges_only_the_rows_of_its_form():
    """A comparison whose CBP ran in the authors' form does not judge the plasticlab's-form row,
    and a reference-modes study run with plasticlab's defaults does not judge the authors' row."""
    comparison = _comparison_study()
    cbp = next(c for c in comparison.results.configs if c.method == "cbp")
    cbp.config["params"].update(AUTHORS_CBP)
    claim = _claim("adam-3 CBP (plasticlab's)")
    row = C.judge_part(claim, claim.parts[0], comparison, [comparison])
    assert row.verdict == C.NOT_JUDGED
    assert row.figures == "CBP ran in the authors' form in best-permuted_mnist-adam, not in plasticlab's form"
    defaults = _study([_runs("cbp", np.full((3, 40), 0.8)), _runs("redo", np.full((3, 40), 0.8))],
                      name="reference-modes-permuted_mnist")
    claim = _claim("adam-3 ReDo (authors')")
    row = C.judge_part(claim, claim.parts[0], defaults, [_comparison_study(), defaults])
    assert row.verdict == C.NOT_JUDGED and row.figures.startswith("ReDo ran in plasticlab's form")


def test_study_names_and_the_preferred_study():
    assert C.study_kind("main-permuted_mnist-sgd") == ("comparison", "permuted_mnist", "sgd", C.PROTOCOL)
    assert C.study_kind("best-random_label_cifar-adam")[3] == C.PAPER_BEST
    assert C.study_kind("forgetting")[0] == "forgetting"
    assert C.study_kind("field-permuted_mnist") is None
    assert C.study_kind("reference-modes-random_label_cifar") == ("reference-modes", "random_label_cifar",
                                                                 "adam", C.PAPER_BEST)
    assert C.study_kind("reference-modes") is None  # both problems at a tenth: no comparison as long
    best, main_half = _comparison_study(), _comparison_study()
    main_half.name, main_half.configurations, main_half.fraction = "main-permuted_mnist-adam", C.PROTOCOL, 0.5
    part = C.CLAIMS[0].parts[0]
    assert C.candidates(part, [best, main_half]) == [main_half, best]


def test_scale_from_the_runs_and_run_json(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"study": "best-random_label_cifar-adam", "scale": 0.2}))
    runs = [_runs("baseline", np.full((2, 10), 0.5))]
    runs[0].config.update(problem="random_label_cifar", steps_per_task=6000)
    fraction, text = C._scale("best-random_label_cifar-adam", tmp_path, runs, "random_label_cifar")
    assert fraction == pytest.approx(0.04)
    assert text == "--scale 0.2: 10 of 50 tasks × 6,000 of 30,000 steps"
    runs[0].config.update(problem="permuted_mnist", steps_per_task=625, tasks=500)
    assert C._scale("best-permuted_mnist-adam", tmp_path, runs, "permuted_mnist")[0] == 1.0


def test_an_unreadable_or_unknown_study_folder_is_a_note(tmp_path):
    bad = tmp_path / "best-permuted_mnist-adam"
    bad.mkdir()
    (bad / "results.json.gz").write_bytes(b"not gzip")
    other = tmp_path / "deeper" / "field-permuted_mnist"
    other.mkdir(parents=True)
    (other / "results.json.gz").write_bytes(b"")
    studies, notes = C.find_studies([tmp_path])
    assert studies == []
    assert any("not read" in n and "best-permuted_mnist-adam" in n for n in notes)
    assert any("read by no claim" in n for n in notes)
    with pytest.raises(ValueError, match="not a folder"):
        C.find_studies([tmp_path / "missing"])


# --- the command on the committed exports --------------------------------------------------------


def test_a_study_still_training_is_a_note_not_a_verdict(tmp_path):
    """A study whose export holds only the runs finished so far (``partial_export`` in its run
    record: ``reproduce`` refreshes it as ensembles finish) is not judged: part of a protocol
    study is not the protocol's selection."""
    from plasticlab.experiments.study import PARTIAL_EXPORT

    folder = tmp_path / "main-permuted_mnist-adam"
    folder.mkdir()
    (folder / "results.json.gz").write_bytes(b"")  # never read: the record says it is partial
    (folder / "run.json").write_text(json.dumps({"study": "main-permuted_mnist-adam", PARTIAL_EXPORT: {
        "finished_runs": 32, "planned_runs": 332, "written": "2026-11-29 09:00:00 UTC"}}))
    studies, notes = C.find_studies([tmp_path])
    assert studies == []
    assert notes == [f"{folder}: training, not judged yet: its export holds 32 of its 332 runs "
                     "(written 2026-11-29 09:00:00 UTC)"]
