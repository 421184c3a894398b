"""The paper's claims judged from the studies' runs: SPEC §12 applied to SPEC §11, by code.

A verdict is computed, never written by hand. Three pieces:

* **The criteria** — one small function each, named in the paper's words (:func:`loses_plasticity`,
  :func:`keeps_plasticity`, :func:`mitigates`, … :func:`one_step_bwt_unchanged`). Each takes the
  per-seed numbers of one or two methods, in percentage points (accuracies × 100), and returns a
  :class:`Finding`: a verdict and the figures it rests on, with 95 % bootstrap intervals over the
  seeds (paired by seed when two methods are compared: :func:`paired_difference`). The
  statistics are :mod:`plasticlab.report.stats`' — the plasticity loss ``L`` of a run is
  :func:`~plasticlab.report.stats.plasticity_loss`, over windows of
  ``w = min(10, max(2, ⌊T/10⌋))`` tasks.
* **The claims** (:data:`CLAIMS`) — SPEC §11 as data: each claim's parts (one per problem, or per
  setting), the study each part reads and the criteria it applies (:class:`Test`), combined with
  *all* or *any*.
* **The studies** (:func:`find_studies`) — the folders holding a study's export or results store,
  named by their ``run.json`` (or the protocol's selection, or the folder). A part of the main
  comparison reads ``main-PROBLEM-OPTIMIZER`` (the protocol's selection) or
  ``best-PROBLEM-OPTIMIZER`` (the paper's reported best), preferring the protocol, then the
  longest run; every verdict names its study, scale and configurations, and which form of CBP
  and ReDo ran (plasticlab's or the authors' reference form, from the runs' parameters).

A claim over several parts **holds** if every part holds, **partly** if some do, **does not
hold** if none do; a part whose study is missing is **not judged**, and so is the claim
(:func:`summarise`, which also gives the verdict over the parts that were judged).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..experiments.export import study_folders
from ..experiments.paper import PROBLEMS as PAPER_PROBLEMS
from ..experiments.presets import AUTHORS_CBP, AUTHORS_REDO, get_preset
from ..experiments.study import read_record
from ..methods import method_title
from ..problems import problem_title
from .data import ConfigRuns, Results, load_results, method_form
from .stats import (
    Interval,
    bootstrap_ci,
    difference_ci,
    plasticity_loss,
    plasticity_window,
    variance_ratio_test,
)

HOLDS, PARTLY, DOES_NOT_HOLD, NOT_JUDGED = "holds", "partly", "does not hold", "not judged"
PLASTICLABS_FORM, AUTHORS_FORM = "plasticlab's form", "the authors' form"
"""The two forms of CBP and ReDo (:func:`cbp_redo_form`): the defaults, and what the authors' code does."""
VERDICTS = (HOLDS, PARTLY, DOES_NOT_HOLD, NOT_JUDGED)
"""Every verdict a claim, a part or a criterion can get."""
REPS, SEED = 2000, 0
"""Bootstrap resamples and seed: ``plasticlab report``'s, so the same numbers get the same intervals."""


# ---------------------------------------------------------------------------------------------
# Findings and the numbers they rest on


@dataclass(frozen=True)
class Finding:
    """A criterion's answer: one of :data:`VERDICTS` and the figures it rests on."""

    verdict: str
    figures: str

    def labelled(self, label: str) -> Finding:
        """The same finding with ``label`` (the methods it is about) before its figures."""
        return Finding(self.verdict, f"{label}: {self.figures}")


def _yes(holds: bool, figures: str) -> Finding:
    return Finding(HOLDS if holds else DOES_NOT_HOLD, figures)


@dataclass(frozen=True)
class Scores:
    """One method's value per seed (total online accuracy, BWT … in points), kept with its seeds
    so that two methods are compared seed by seed."""

    seeds: tuple[int, ...]
    values: np.ndarray


def interval(values) -> Interval:
    """Mean over seeds and its 95 % percentile-bootstrap interval (:func:`~.stats.bootstrap_ci`)."""
    return bootstrap_ci(np.asarray(values, dtype=float), reps=REPS, seed=SEED)


def paired_difference(a: Scores, b: Scores, *, reps: int = REPS, seed: int = SEED) -> Interval:
    """``mean(a − b)`` with its 95 % bootstrap interval (``reps`` resamples from ``seed``), paired
    by seed over the seeds both have (seeds share their task sequence); unpaired when fewer
    than two seeds are shared."""
    shared = [s for s in a.seeds if s in set(b.seeds)]
    if len(shared) >= 2:
        ia = [a.seeds.index(s) for s in shared]
        ib = [b.seeds.index(s) for s in shared]
        return difference_ci(a.values[ia], b.values[ib], paired=True, reps=reps, seed=seed)
    return difference_ci(a.values, b.values, paired=False, reps=reps, seed=seed)


def in_points(i: Interval, digits: int = 2) -> str:
    """An interval of percentage points as the verdicts write it: ``mean [lo, hi]``."""
    return i.format(scale=1, digits=digits)


def signed_points(i: Interval) -> str:
    """A difference in percentage points with its sign: ``+mean [+lo, +hi]``."""
    return f"{i.point:+.2f} [{i.lo:+.2f}, {i.hi:+.2f}]"


def rank_by_total(method: str, totals: Mapping[str, np.ndarray]) -> tuple[int, int, float]:
    """``method``'s rank by mean total (1 = highest), how many methods, its mean."""
    means = {m: float(np.mean(v)) for m, v in totals.items()}
    return 1 + sum(v > means[method] for m, v in means.items() if m != method), len(means), means[method]


# ---------------------------------------------------------------------------------------------
# The criteria (SPEC §12), in percentage points


def loses_plasticity(loss) -> Finding:
    """*Loses plasticity*: the mean plasticity loss L over seeds is at least 2 points and its
    95 % interval's lower bound is above 0."""
    i = interval(loss)
    return _yes(i.point >= 2.0 and i.lo > 0.0, f"L {in_points(i)} (loses: ≥ 2, lower bound > 0)")


def keeps_plasticity(loss) -> Finding:
    """*Keeps plasticity*: the mean plasticity loss L over seeds is at most 1 point."""
    i = interval(loss)
    return _yes(i.point <= 1.0, f"L {in_points(i)} (keeps: ≤ 1)")


def loses_some_plasticity(loss) -> Finding:
    """*Loses some plasticity*: does not keep it — mean L above 1 point (the complement of
    :func:`keeps_plasticity`; SPEC §12 defines no other threshold for "some")."""
    i = interval(loss)
    return _yes(i.point > 1.0, f"L {in_points(i)} (some: > 1)")


def mitigates(loss, baseline_loss) -> Finding:
    """*Mitigates* plasticity loss (against the Baseline, whose L ≥ 2): mean L at most half the
    Baseline's. Where the Baseline loses less than 2 points there is no loss to mitigate, and
    the method mitigates unless it loses plasticity itself (:func:`loses_plasticity`)."""
    i, b = interval(loss), interval(baseline_loss)
    text = f"L {in_points(i)} vs Baseline's {in_points(b)}"
    if b.point < 2.0:
        lost = loses_plasticity(loss).verdict == HOLDS
        return _yes(not lost, f"{text} (Baseline < 2: no loss to mitigate; holds unless it loses plasticity)")
    return _yes(i.point <= 0.5 * b.point, f"{text} (mitigates: ≤ ½ Baseline's)")


def mitigates_only_some(loss, baseline_loss, l2_init_loss) -> Finding:
    """*Mitigates only some* plasticity loss: ½ L_Baseline < L < L_Baseline, or L ≤ ½ L_Baseline
    while L ≥ L_L2Init + 1 point (means over seeds). Where the Baseline loses less than 2 points
    there is no loss to mitigate, and this does not hold."""
    i, b, r = interval(loss), interval(baseline_loss), interval(l2_init_loss)
    text = f"L {in_points(i)}, Baseline's {in_points(b)}, L2 Init's {in_points(r)}"
    if b.point < 2.0:
        return _yes(False, f"{text} (Baseline < 2: no loss to mitigate)")
    some = 0.5 * b.point < i.point < b.point or (i.point <= 0.5 * b.point and i.point >= r.point + 1.0)
    return _yes(some, f"{text} (only some: between ½ and all of the Baseline's, or ≥ L2 Init's + 1)")


def performs_poorly_overall(method: str, totals: Mapping[str, np.ndarray]) -> Finding:
    """*Performs poorly overall*: its mean total average online accuracy is in the bottom three
    of the study's methods."""
    rank, n, mean = rank_by_total(method, totals)
    return _yes(rank > n - 3,
                f"total {in_points(interval(totals[method]))}, {rank} of {n} (poorly: bottom 3)")


def top_3(method: str, totals: Mapping[str, np.ndarray]) -> Finding:
    """*In the top 3* by total average online accuracy: rank ≤ 3 by mean total."""
    rank, n, _ = rank_by_total(method, totals)
    return _yes(rank <= 3, f"total {in_points(interval(totals[method]))}, {rank} of {n} (top 3)")


def ranks_first(method: str, totals: Mapping[str, np.ndarray]) -> Finding:
    """*Best* ("does best", "is best"): the highest mean total of those compared."""
    rank, n, _ = rank_by_total(method, totals)
    best = max(totals, key=lambda m: float(np.mean(totals[m])))
    runner = f", first: {method_title(best)} {np.mean(totals[best]):.2f}" if best != method else ""
    return _yes(rank == 1, f"total {in_points(interval(totals[method]))}, {rank} of {n}{runner}")


def clearly_beats_every_other(method: str, scores: Mapping[str, Scores]) -> Finding:
    """*Clearly beats every other* method: against each, the mean paired difference in total is
    at least 1 point and its interval is above 0."""
    parts, ok = [], True
    for other, s in scores.items():
        if other == method:
            continue
        d = paired_difference(scores[method], s)
        ok &= d.point >= 1.0 and d.lo > 0.0
        parts.append(f"− {method_title(other)} {signed_points(d)}")
    return _yes(ok, "; ".join(parts) + " (clearly: ≥ 1, interval above 0, against each)")


def as_good_as_or_better(a: Scores, b: Scores) -> Finding:
    """*A as good as or better than B*: mean paired difference A − B ≥ −0.5 points."""
    d = paired_difference(a, b)
    return _yes(d.point >= -0.5, f"{signed_points(d)} (≥ −0.5)")


def roughly_the_same(a: Scores, b: Scores) -> Finding:
    """*Roughly the same / similar*: |mean paired difference A − B| ≤ 1 point."""
    d = paired_difference(a, b)
    return _yes(abs(d.point) <= 1.0, f"{signed_points(d)} (|·| ≤ 1)")


def below(a: Scores, b: Scores) -> Finding:
    """*A below B*: mean paired difference A − B below 0 with its interval below 0."""
    d = paired_difference(a, b)
    return _yes(d.point < 0.0 and d.hi < 0.0, f"{signed_points(d)} (< 0, interval below 0)")


def much_better(a: Scores, b: Scores) -> Finding:
    """*A much better than B*: mean paired difference A − B ≥ 1 point with its interval above 0."""
    d = paired_difference(a, b)
    return _yes(d.point >= 1.0 and d.lo > 0.0, f"{signed_points(d)} (≥ 1, interval above 0)")


def slightly_worse(a: Scores, b: Scores) -> Finding:
    """*A slightly worse than B*: A is between 0 and 1 point worse, −1 ≤ mean(A − B) < 0."""
    d = paired_difference(a, b)
    return _yes(-1.0 <= d.point < 0.0, f"{signed_points(d)} (in [−1, 0))")


def _window_mean(values: np.ndarray, first: bool, w: int) -> np.ndarray:
    """Per seed (and layer), the mean over the first or last ``w`` tasks (NaN-tolerant)."""
    part = values[:, :w] if first else values[:, -w:]
    return np.nanmean(part, axis=1)


def reduces_weight_magnitude(magnitude, baseline_magnitude, w: int) -> Finding:
    """*Reduces the average weight magnitude*: mean |θ| over the last window of ``w`` tasks at
    most half the Baseline's (``magnitude[s, t]``: seed s's mean |θ| at task t's end)."""
    m = interval(_window_mean(np.asarray(magnitude, dtype=float), False, w))
    b = interval(_window_mean(np.asarray(baseline_magnitude, dtype=float), False, w))
    ratio = m.point / b.point if b.point else math.inf
    return _yes(ratio <= 0.5, f"mean |θ| over the last {w} tasks {m.format(1, 4)} vs Baseline's "
                              f"{b.format(1, 4)}, ratio {ratio:.3f} (≤ 0.5)")


def keeps_srank_high(srank, w: int) -> Finding:
    """*Keeps feature rank (srank) high*: the srank of every hidden layer over the last window
    of ``w`` tasks is at least 0.8 × its first window's (means over seeds); some layers only →
    partly. ``srank[s, t, layer]``."""
    s = np.asarray(srank, dtype=float)
    s = s[:, :, None] if s.ndim == 2 else s
    first = np.nanmean(_window_mean(s, True, w), axis=0)
    last = np.nanmean(_window_mean(s, False, w), axis=0)
    kept = [bool(lt >= 0.8 * f) for f, lt in zip(first, last, strict=True)]
    text = ", ".join(f"layer {k + 1} {f:.1f} → {lt:.1f}"
                     for k, (f, lt) in enumerate(zip(first, last, strict=True)))
    verdict = HOLDS if all(kept) else PARTLY if any(kept) else DOES_NOT_HOLD
    return Finding(verdict, f"srank, first {w} tasks → last {w}: {text} (high: ≥ 0.8×, every layer)")


def best_single_lambda(totals: Mapping[tuple, np.ndarray], claimed: float = 1e-2) -> Finding:
    """*The best single λ*: the λ with the highest mean total, averaged over the step sizes and
    problems run (``totals[(λ, α, problem)]``: the totals of one configuration); holds when it
    is ``claimed``."""
    per_lambda: dict[float, list[float]] = {}
    for (lam, _lr, _problem), values in totals.items():
        per_lambda.setdefault(float(lam), []).append(float(np.mean(values)))
    means = {lam: float(np.mean(v)) for lam, v in per_lambda.items()}
    best = max(means, key=means.get)
    text = ", ".join(f"λ {lam:g} {m:.2f}" for lam, m in sorted(means.items(), key=lambda kv: -kv[1]))
    return _yes(math.isclose(best, claimed), f"mean total over step sizes and problems: {text}")


def more_seed_variance(totals, other_totals) -> Finding:
    """*More seed variance*: one-sided F test that the seeds' totals spread more than the other
    method's (sample s.d.), p < 0.05 (:func:`~.stats.variance_ratio_test`)."""
    ratio, p = variance_ratio_test(totals, other_totals)
    sd, other = float(np.std(totals, ddof=1)), float(np.std(other_totals, ddof=1))
    return _yes(p < 0.05, f"seed s.d. {sd:.2f} vs {other:.2f}, F {ratio:.2f}, p {p:.3f} (p < 0.05)")


def less_plasticity_loss_with_sgd(sgd_losses: Mapping[str, np.ndarray],
                                  adam_losses: Mapping[str, np.ndarray]) -> Finding:
    """*Less plasticity loss with SGD than with Adam*: the mean L over the methods both ran is
    lower with SGD; each method's sign (SGD − Adam) is reported."""
    shared = [m for m in sgd_losses if m in adam_losses]
    if not shared:
        return Finding(NOT_JUDGED, "no method ran with both optimizers")
    sgd = float(np.mean([np.mean(sgd_losses[m]) for m in shared]))
    adam = float(np.mean([np.mean(adam_losses[m]) for m in shared]))
    signs = ", ".join(f"{method_title(m)} {np.mean(sgd_losses[m]) - np.mean(adam_losses[m]):+.2f}"
                      for m in shared)
    return _yes(sgd < adam, f"mean L over {len(shared)} methods: SGD {sgd:.2f}, Adam {adam:.2f}; "
                            f"per method, SGD − Adam: {signs}")


def reduces_forgetting_markedly(bwt: Scores, other_bwt: Scores) -> Finding:
    """*Reduces forgetting (BWT) markedly*: BWT up by at least 5 points from the other's."""
    d = paired_difference(bwt, other_bwt)
    return _yes(d.point >= 5.0, f"BWT change {signed_points(d)} (markedly: ≥ +5)")


def little_cost_in_plasticity(total: Scores, other_total: Scores) -> Finding:
    """*Little cost in plasticity*: total online accuracy down by at most 2 points from the other's."""
    d = paired_difference(total, other_total)
    return _yes(d.point >= -2.0, f"total change {signed_points(d)} (little cost: ≥ −2)")


def relatively_poor_plasticity(total: Scores, l2_init_total: Scores) -> Finding:
    """*Relatively poor plasticity*: total online accuracy at least 3 points below L2 Init's."""
    d = paired_difference(total, l2_init_total)
    return _yes(d.point <= -3.0, f"total − L2 Init's {signed_points(d)} (poor: ≤ −3)")


def increases_forgetting(bwt: Scores, other_bwt: Scores) -> Finding:
    """*Increases forgetting*: BWT down by at least 2 points from the other's."""
    d = paired_difference(bwt, other_bwt)
    return _yes(d.point <= -2.0, f"BWT change {signed_points(d)} (increases forgetting: ≤ −2)")


def forgets_less(bwt: Scores, other_bwt: Scores) -> Finding:
    """*Forgets less than* the other: the other's BWT is at least 2 points lower — the other
    :func:`increases_forgetting` against this one."""
    d = paired_difference(bwt, other_bwt)
    return _yes(d.point >= 2.0, f"BWT − the other's {signed_points(d)} (forgets less: ≥ +2)")


def one_step_bwt_unchanged(one_step: Scores, other_one_step: Scores) -> Finding:
    """*One-step BWT unchanged*: |difference in one-step BWT| at most 1.5 points."""
    d = paired_difference(one_step, other_one_step)
    return _yes(abs(d.point) <= 1.5, f"one-step BWT change {signed_points(d)} (unchanged: |·| ≤ 1.5)")


CRITERIA: dict[str, Callable[..., Finding]] = {f.__name__: f for f in (
    loses_plasticity, keeps_plasticity, loses_some_plasticity, mitigates, mitigates_only_some,
    performs_poorly_overall, top_3, ranks_first, clearly_beats_every_other, as_good_as_or_better,
    roughly_the_same, below, much_better, slightly_worse, reduces_weight_magnitude,
    keeps_srank_high, best_single_lambda, more_seed_variance, less_plasticity_loss_with_sgd,
    reduces_forgetting_markedly, little_cost_in_plasticity, relatively_poor_plasticity,
    increases_forgetting, forgets_less, one_step_bwt_unchanged)}
"""Every criterion of SPEC §12 by name, as :class:`Test` names them."""


# ---------------------------------------------------------------------------------------------
# The claims (SPEC §11) as data


@dataclass(frozen=True)
class Test:
    """One criterion applied to methods of a study: ``criterion`` names a function of
    :data:`CRITERIA`; ``methods`` are the methods it is about (the first compared with the
    second); ``measure`` what is compared (``total``, ``plasticity`` — minus the loss L, so
    higher keeps more —, ``bwt``, ``one_step_bwt``); ``negate``: the claim is that it does not;
    ``across``: the method is compared with itself across the study's settings, and this one
    is claimed (``init=torch_default``)."""

    criterion: str
    methods: tuple[str, ...] = ()
    measure: str = "total"
    negate: bool = False
    across: str = ""


def _t(criterion: str, *methods: str, measure: str = "total", negate: bool = False,
       across: str = "") -> Test:
    return Test(criterion, methods, measure, negate, across)


@dataclass(frozen=True)
class Part:
    """One part of a claim: ``tests`` on the study of kind ``study`` (``comparison``: the main
    comparison of ``problem`` × ``optimizer``; ``ablation``, ``lambda-sensitivity``, ``init``,
    ``width``, ``depth``, ``forgetting``), combined with ``all`` or ``any``. ``each_view``: judged
    on each setting of the study (each initialisation scheme) and holds where all do.
    ``companion``: the Adam comparison of the same problem is read too (SGD against Adam; the
    Baseline of a study that has none). ``joins_companion``: the study's runs take the place of
    the same methods' in the Adam comparison of the same problem *and length* (the authors'
    CBP and ReDo of ``reference-modes-PROBLEM`` beside the comparison's L2 Init, seed by seed).
    ``form``: the form of CBP and ReDo the part is about (:func:`cbp_redo_form`); a study whose
    CBP or ReDo ran in another does not judge it."""

    study: str
    problem: str
    optimizer: str
    tests: tuple[Test, ...]
    label: str = ""
    combine: str = "all"
    each_view: bool = False
    companion: bool = False
    joins_companion: bool = False
    form: str = ""

    @property
    def title(self) -> str:
        """The part as a table shows it: the problem, and its label."""
        return " · ".join(x for x in (problem_title(self.problem), self.label) if x)


@dataclass(frozen=True)
class Claim:
    """A claim of SPEC §11: its key (``adam-1`` …, ``sgd-…``, ``forgetting-…``), its words and
    its parts. ``need``: it holds when at least that many parts hold ("on four of five")."""

    key: str
    text: str
    parts: tuple[Part, ...]
    need: int | None = None


def _each(problems: Iterable[str], optimizer: str, *tests: Test, **kw) -> tuple[Part, ...]:
    """The same tests on the main comparison of each of ``problems``."""
    return tuple(Part("comparison", p, optimizer, tests, **kw) for p in problems)


def _authors_form(*tests: Test) -> tuple[Part, ...]:
    """The same tests on each problem with CBP and ReDo as the authors' code ran them: their runs
    from ``reference-modes-PROBLEM``, every other method from the Adam comparison of that
    problem at the same length."""
    return tuple(Part("reference-modes", p, "adam", tests, joins_companion=True, form=AUTHORS_FORM)
                 for p in PAPER_PROBLEMS)


def _in_order(*groups: tuple[Part, ...]) -> tuple[Part, ...]:
    """Parts of several :func:`_each` in the paper's order of problems."""
    return tuple(sorted((p for g in groups for p in g), key=lambda p: PAPER_PROBLEMS.index(p.problem)))


_PM, _RLM, _RLC, _FIVE, _CI = PAPER_PROBLEMS
_ALL = PAPER_PROBLEMS
_BUT_FIVE = (_PM, _RLM, _RLC, _CI)
_ADAM, _SGD = "adam", "sgd"

CLAIMS: tuple[Claim, ...] = (
    Claim("adam-1", "On all five problems the Baseline either loses plasticity markedly or performs "
                    "poorly overall.",
          _each(_ALL, _ADAM, _t("loses_plasticity", "baseline"),
                _t("performs_poorly_overall", "baseline"), combine="any")),
    Claim("adam-2", "L2 Init keeps plasticity on every problem and is in the top 3 by total average "
                    "online accuracy on each of the five; on 5+1 CIFAR it beats every other method clearly.",
          _in_order(_each(_BUT_FIVE, _ADAM, _t("keeps_plasticity", "l2_init"), _t("top_3", "l2_init")),
                    _each((_FIVE,), _ADAM, _t("keeps_plasticity", "l2_init"), _t("top_3", "l2_init"),
                          _t("clearly_beats_every_other", "l2_init")))),
    Claim("adam-3 CBP (plasticlab's)", "L2 Init is as good as or better than Continual Backprop on four "
                                       "of five problems.",
          _each(_ALL, _ADAM, _t("as_good_as_or_better", "l2_init", "cbp"), form=PLASTICLABS_FORM), need=4),
    Claim("adam-3 CBP (authors')", "The same, against the authors' CBP.",
          _authors_form(_t("as_good_as_or_better", "l2_init", "cbp")), need=4),
    Claim("adam-3 ReDo (plasticlab's)", "… roughly the same holds against ReDo (L2 Init as good as or "
                                        "better, on four of five).",
          _each(_ALL, _ADAM, _t("as_good_as_or_better", "l2_init", "redo"), form=PLASTICLABS_FORM), need=4),
    Claim("adam-3 ReDo (authors')", "The same, against the authors' ReDo.",
          _authors_form(_t("as_good_as_or_better", "l2_init", "redo")), need=4),
    Claim("adam-4", "Concat ReLU does well everywhere except 5+1 CIFAR, where it loses plasticity "
                    "completely; it loses some plasticity on the two random-label problems.",
          _in_order(_each((_PM, _CI), _ADAM, _t("top_3", "concat_relu")),
                    _each((_RLM, _RLC), _ADAM, _t("top_3", "concat_relu"),
                          _t("loses_some_plasticity", "concat_relu")),
                    _each((_FIVE,), _ADAM, _t("loses_plasticity", "concat_relu")))),
    Claim("adam-5", "L2 removes plasticity loss on Permuted MNIST (and Continual ImageNet) but loses "
                    "much plasticity on Random Label MNIST, Random Label CIFAR and 5+1 CIFAR compared "
                    "with L2 Init.",
          _in_order(_each((_PM, _CI), _ADAM, _t("keeps_plasticity", "l2")),
                    _each((_RLM, _RLC, _FIVE), _ADAM, _t("loses_plasticity", "l2"),
                          _t("much_better", "l2_init", "l2", measure="plasticity")))),
    Claim("adam-6", "Shrink & Perturb mitigates plasticity loss on all problems but is consistently "
                    "below L2 Init.",
          _each(_ALL, _ADAM, _t("mitigates", "shrink_perturb"), _t("below", "shrink_perturb", "l2_init"))),
    Claim("adam-7", "Layer Norm mitigates only some plasticity loss.",
          _each(_ALL, _ADAM, _t("mitigates_only_some", "layer_norm"))),
    Claim("adam-8", "L2 and L2 Init both reduce the average weight magnitude; L2 Init keeps feature "
                    "rank (srank) high.",
          _each(_ALL, _ADAM, _t("reduces_weight_magnitude", "l2"), _t("reduces_weight_magnitude", "l2_init"),
                _t("keeps_srank_high", "l2_init"))),
    Claim("adam-9", "Regularizing toward the fixed θ₀ is much better than toward a fresh draw each "
                    "step (L2 Init + Resample); L1 Init also mitigates plasticity loss, slightly worse "
                    "than L2 Init.",
          (Part("ablation", _PM, _ADAM, (_t("much_better", "l2_init", "l2_init_resample"),),
                "θ₀ vs a fresh draw"),
           Part("ablation", _PM, _ADAM,
                (_t("mitigates", "l1_init"), _t("slightly_worse", "l1_init", "l2_init")),
                "L1 Init", companion=True))),
    Claim("adam-10", "λ = 1e-2 is the best single value across problems (sensitivity study, "
                     "α ∈ {1e-4, 1e-3}).",
          (Part("lambda-sensitivity", _PM, _ADAM, (_t("best_single_lambda"),), "λ sensitivity"),)),
    Claim("adam-11 init", "L2 Init does best with PyTorch's default init but mitigates plasticity loss "
                          "under every scheme.",
          (Part("init", _PM, _ADAM, (_t("ranks_first", "l2_init", across="init=torch_default"),),
                "best with the default init"),
           Part("init", _PM, _ADAM, (_t("mitigates", "l2_init"),), "mitigates under every scheme",
                each_view=True))),
    Claim("adam-11 size", "Wider and deeper networks: L2 Init still mitigates plasticity loss.",
          (Part("width", _PM, _ADAM, (_t("mitigates", "l2_init"),), "4× wider"),
           Part("depth", _PM, _ADAM, (_t("mitigates", "l2_init"),), "2 more hidden layers"))),
    Claim("sgd-1", "SGD: less plasticity loss overall than with Adam.",
          _each(_ALL, _SGD, _t("less_plasticity_loss_with_sgd"), companion=True)),
    Claim("sgd-2", "SGD: L2 Init similar to Continual Backprop and ReDo.",
          _each(_ALL, _SGD, _t("roughly_the_same", "l2_init", "cbp"),
                _t("roughly_the_same", "l2_init", "redo"))),
    Claim("sgd-3", "SGD: ReDo with more seed variance (than L2 Init and Continual Backprop).",
          _each(_ALL, _SGD, _t("more_seed_variance", "redo", "l2_init"),
                _t("more_seed_variance", "redo", "cbp"))),
    Claim("sgd-4", "SGD: L2 Init mitigates plasticity loss wherever it occurs.",
          _each(_ALL, _SGD, _t("mitigates", "l2_init"))),
    Claim("sgd-5", "SGD: L2 does not mitigate plasticity loss on Permuted MNIST and Random Label MNIST.",
          _each((_PM, _RLM), _SGD, _t("mitigates", "l2", negate=True))),
    Claim("sgd-6", "SGD: Concat ReLU loses plasticity on Permuted MNIST.",
          _each((_PM,), _SGD, _t("loses_plasticity", "concat_relu"))),
    Claim("sgd-7", "SGD: Concat ReLU is weaker on Continual ImageNet (below L2 Init).",
          _each((_CI,), _SGD, _t("below", "concat_relu", "l2_init"))),
    Claim("sgd-8", "SGD: Layer Norm is best on 5+1 CIFAR.",
          _each((_FIVE,), _SGD, _t("ranks_first", "layer_norm"))),
    Claim("forgetting-1", "Adding EWC to L2 Init reduces forgetting (BWT) markedly with little cost "
                          "in plasticity.",
          (Part("forgetting", _PM, _ADAM,
                (_t("reduces_forgetting_markedly", "l2_init_ewc", "l2_init", measure="bwt"),
                 _t("little_cost_in_plasticity", "l2_init_ewc", "l2_init"))),)),
    Claim("forgetting-2", "EWC alone has relatively poor plasticity but forgets less than L2 Init + EWC.",
          (Part("forgetting", _PM, _ADAM, (_t("relatively_poor_plasticity", "ewc", "l2_init"),
                                            _t("forgets_less", "ewc", "l2_init_ewc", measure="bwt"))),)),
    Claim("forgetting-3", "Adding L2 Init to EWC increases BWT forgetting but leaves one-step BWT unchanged.",
          (Part("forgetting", _PM, _ADAM, (_t("increases_forgetting", "l2_init_ewc", "ewc", measure="bwt"),
                                            _t("one_step_bwt_unchanged", "l2_init_ewc", "ewc",
                                               measure="one_step_bwt"))),)),
)
"""SPEC §11's claims: the Adam claims 1–11 (3 and 11 in two), the SGD paragraph's parts and the
forgetting paragraph's, each with the parts it is judged on (SPEC §12)."""


# ---------------------------------------------------------------------------------------------
# The studies: which folder is which study, its scale, configurations and views

PROTOCOL = "the protocol's selection"
PAPER_BEST = "the paper's reported best"
STUDY_CONFIGS = "the study's configurations"
_FIXED_STUDIES = {"ablation": PROTOCOL, "width": PROTOCOL, "depth": PROTOCOL,
                  "init": STUDY_CONFIGS, "lambda-sensitivity": STUDY_CONFIGS, "forgetting": STUDY_CONFIGS}
"""The studies other than the main comparison that a claim reads, with how their
configurations were chosen; all are Permuted MNIST with Adam."""
_COMPARISON = re.compile(r"(main|best)-(\w+)-(adam|sgd)")
_REFERENCE_MODES = re.compile(r"reference-modes-(\w+)")


def study_kind(name: str) -> tuple[str, str, str, str] | None:
    """``(kind, problem, optimizer, configurations)`` of the study ``name`` (a preset's name),
    or None for a study no claim reads: ``main-P-O`` is the comparison of P × O in the
    protocol's selection, ``best-P-O`` at the paper's reported best configurations,
    ``reference-modes-P`` the authors' CBP and ReDo on P at the paper's best (Adam)."""
    match = _COMPARISON.fullmatch(name)
    if match and match[2] in PAPER_PROBLEMS:
        return "comparison", match[2], match[3], PROTOCOL if match[1] == "main" else PAPER_BEST
    if name in _FIXED_STUDIES:
        return name, "permuted_mnist", "adam", _FIXED_STUDIES[name]
    match = _REFERENCE_MODES.fullmatch(name)
    if match and match[1] in PAPER_PROBLEMS:  # the authors' CBP and ReDo, the paper's best (Adam)
        return "reference-modes", match[1], "adam", PAPER_BEST
    return None


@dataclass
class Study:
    """A study's runs as the claims read them: its preset ``name``, ``folder``, kind, problem,
    optimizer, how its configurations were chosen, and its scale (``fraction`` of the preset's
    full tasks; ``scale`` in words)."""

    name: str
    folder: Path
    kind: str
    problem: str
    optimizer: str
    configurations: str
    results: Results
    fraction: float = 1.0
    scale: str = ""
    _views: list[View] | None = field(default=None, repr=False)

    def views(self) -> list[View]:
        """The study's settings, each one configuration per method (:func:`study_views`)."""
        if self._views is None:
            self._views = study_views(self)
        return self._views


def _study_name(folder: Path) -> str:
    """A study folder's preset name: its ``run.json``'s, else the protocol's selection's sweep
    (``selection.json`` beside a results store), else the folder's name."""
    record = read_record(folder / "run.json")
    if record.get("study"):
        return record["study"]
    selection = read_record(folder / "selection.json")
    return selection.get("sweep") or folder.name


def _scale(name: str, folder: Path, runs: Sequence[ConfigRuns], problem: str) -> tuple[float, str]:
    """The study's length against its preset's full length, from the runs (tasks, steps) and
    its ``run.json`` (the ``--scale`` or ``--tasks`` it ran with)."""
    preset = get_preset(name)
    from ..problems import PROBLEMS

    defaults = PROBLEMS[problem].defaults
    full_tasks = preset.get("tasks") or defaults["tasks"]
    full_steps = preset.get("steps_per_task") or defaults["steps_per_task"]
    record = read_record(folder / "run.json")
    if any("steps_per_task" in v for v in preset.get("variants", [])):
        return _scale_of_streams(preset, full_tasks, runs, record)
    tasks = max(int(c.config.get("tasks") or 0) for c in runs)
    steps = max(int(c.config.get("steps_per_task") or 0) for c in runs)
    if tasks >= full_tasks and steps >= full_steps:
        return 1.0, f"full length ({tasks} tasks × {steps:,} steps)"
    return _shortened_scale(record, tasks * steps / (full_tasks * full_steps), tasks, full_tasks, steps,
                            full_steps)


def _scale_of_streams(preset: dict, full_tasks: int, runs: Sequence[ConfigRuns], record: dict
                      ) -> tuple[float, str]:
    """:func:`_scale` of a study whose variants set their own task length (the ``batch-size``
    study: one pass over a task's images at each batch size): each run against its variant's
    full length (the variant of its batch size), the study's fraction the shortest's."""
    lengths = []
    for c in runs:
        variant = next((v for v in preset["variants"] if all(
            c.config.get(k) == x for k, x in v.items() if k not in ("steps_per_task", "tasks"))), {})
        full = variant.get("steps_per_task") or int(c.config["steps_per_task"])
        tasks_full = variant.get("tasks") or full_tasks
        lengths.append((int(c.config["tasks"]) * int(c.config["steps_per_task"]) / (tasks_full * full),
                        int(c.config["tasks"]), int(c.config["steps_per_task"]), full, tasks_full))
    fraction, tasks, steps, full, full_tasks = min(lengths)
    span = sorted({s for _, _, s, _, _ in lengths})
    steps_text = f"{span[0]:,}" if len(span) == 1 else f"{span[0]:,}–{span[-1]:,}"
    if fraction >= 1:
        return 1.0, f"full length ({tasks} tasks × {steps_text} steps)"
    return _shortened_scale(record, fraction, tasks, full_tasks, steps, full)


def _shortened_scale(record: dict, fraction: float, tasks: int, full_tasks: int, steps: int,
                     full_steps: int) -> tuple[float, str]:
    """A shortened study's fraction and scale text, naming the ``--tasks`` or ``--scale`` of its
    ``run.json``."""
    how = (f"--tasks {record['tasks']}" if record.get("tasks") else
           f"--scale {record['scale']:g}" if record.get("scale") else "shortened")
    return fraction, f"{how}: {tasks} of {full_tasks} tasks × {steps:,} of {full_steps:,} steps"


def partial_note(folder: Path) -> str:
    """Why a study folder is not judged yet, or "": its export holds only the runs finished so
    far (its ``run.json`` has :data:`~plasticlab.experiments.study.PARTIAL_EXPORT`) — a protocol
    study without its evaluation, a comparison without some of its methods — and a verdict
    on part of a study is not the study's."""
    from ..experiments.study import PARTIAL_EXPORT

    partial = read_record(folder / "run.json").get(PARTIAL_EXPORT)
    if not partial:
        return ""
    return (f"training, not judged yet: its export holds {partial['finished_runs']} of its "
            f"{partial['planned_runs']} runs (written {partial['written']})")


def find_studies(paths: Iterable[str | Path],
                 kind_of: Callable[[str], tuple[str, str, str, str] | None] = study_kind
                 ) -> tuple[list[Study], list[str]]:
    """The studies under ``paths`` that a claim reads (``kind_of``, :func:`study_kind` unless
    given, names a study's kind, problem, optimizer and configurations), each loaded once; and
    notes on the folders left out (studies no claim reads, studies still training
    (:func:`partial_note`), folders without runs or that could not be read — their parts are
    then not judged)."""
    studies, notes = [], []
    for folder in study_folders(paths):
        name = _study_name(folder)
        kind = kind_of(name)
        if kind is None:
            notes.append(f"{folder}: study {name!r} is read by no claim")
            continue
        if partial := partial_note(folder):
            notes.append(f"{folder}: {partial}")
            continue
        try:
            results = load_results(folder)
        except ValueError as e:  # an unreadable export leaves its study unjudged, not the rest
            notes.append(f"{folder}: not read: {e}")
            continue
        if not results.configs:
            notes.append(f"{folder}: no finished runs")
            continue
        fraction, scale = _scale(name, folder, results.configs, kind[1])
        studies.append(Study(name, folder, *kind, results, fraction, scale))
    return studies, notes


# ---------------------------------------------------------------------------------------------
# Views: one configuration per method, as a part compares them


@dataclass
class View:
    """One setting of a study (all of it, one of its streams, or one initialisation scheme): one
    configuration's runs per method, and the study's windows."""

    study: Study
    label: str
    runs: dict[str, ConfigRuns]
    #: the stream settings that set this view apart (:meth:`~.data.Results.streams`), if any
    stream: dict = field(default_factory=dict)

    def losses(self, method: str) -> np.ndarray:
        """Each seed's plasticity loss L in points (:func:`~.stats.plasticity_loss`)."""
        c = self.runs[method]
        return plasticity_loss(100.0 * c.online[:, c.reported])

    def totals(self, method: str) -> np.ndarray:
        """Each seed's total average online accuracy in points."""
        return 100.0 * self.runs[method].total

    def scores(self, method: str, measure: str) -> Scores:
        """``method``'s seeds and its ``measure`` per seed, in points (``plasticity``: −L)."""
        c = self.runs[method]
        values = {"total": lambda: self.totals(method), "plasticity": lambda: -self.losses(method),
                  "bwt": lambda: 100.0 * _needed(c.bwt, "BWT"),
                  "one_step_bwt": lambda: 100.0 * _needed(c.one_step_bwt, "one-step BWT")}[measure]()
        return Scores(tuple(c.seeds), np.asarray(values, dtype=float))

    def window(self, method: str) -> int:
        """SPEC §12's window for ``method``'s runs (:func:`~.stats.plasticity_window`)."""
        return plasticity_window(len(self.runs[method].reported))

    def metric(self, method: str, name: str) -> np.ndarray:
        """A task-end measurement over the reported tasks, ``[seeds, tasks(, layers)]``."""
        c = self.runs[method]
        return _needed(c.metrics.get(name), name)[:, c.reported]


def _needed(values, what: str):
    if values is None:
        raise LookupError(f"the runs have no {what}")
    return values


def _default_form(config: Mapping) -> bool:
    """Whether a configuration runs its method's default form (its non-numeric settings at
    their defaults: for EWC, the authors' form)."""
    from ..methods import METHODS

    method = METHODS.get(config["method"])
    defaults = method.default_params() if method else {}
    return all(defaults.get(k, v) == v for k, v in method_form(config))


def _one_per_method(configs: Iterable[ConfigRuns]) -> dict[str, ConfigRuns]:
    """One configuration per method: the method's default form where several ran, else the
    highest mean total."""
    by_method: dict[str, list[ConfigRuns]] = {}
    for c in configs:
        by_method.setdefault(c.method, []).append(c)
    return {m: max(cs, key=lambda c: (_default_form(c.config), float(np.mean(c.total))))
            for m, cs in by_method.items()}


def study_views(study: Study) -> list[View]:
    """The settings a study's claims compare: the protocol's (or the best) configuration per
    method (:meth:`~.data.Results.headline`), one view per stream where its runs learn several
    (:meth:`~.data.Results.streams`: another batch size or task length is never ranked against
    this one); for ``init``, one per initialisation scheme; for ``forgetting``, the methods in
    their default form (EWC as the authors' code runs it)."""
    configs = study.results.studies().get((study.problem, study.optimizer), [])
    if study.kind == "init":
        schemes = sorted({c.config.get("init", "torch_default") for c in configs})
        return [View(study, f"init={s}", _one_per_method(c for c in configs if c.config.get("init") == s))
                for s in schemes]
    if study.kind in ("forgetting", "lambda-sensitivity"):
        return [View(study, "", _one_per_method(c for c in configs if _default_form(c.config)))]
    return [View(study, " ".join(f"{k}={v}" for k, v in stream.items()),
                 _one_per_method(part.headline(study.problem, study.optimizer)[0]), stream)
            for stream, part in study.results.streams(study.problem, study.optimizer)]


# ---------------------------------------------------------------------------------------------
# Applying a part's tests to a study

_ON_LOSS = {"loses_plasticity", "keeps_plasticity", "loses_some_plasticity"}
_RANKED = {"performs_poorly_overall", "top_3", "ranks_first"}
_PAIRED = {"as_good_as_or_better", "roughly_the_same", "below", "much_better", "slightly_worse",
           "reduces_forgetting_markedly", "little_cost_in_plasticity", "relatively_poor_plasticity",
           "increases_forgetting", "forgets_less", "one_step_bwt_unchanged"}
_EVERY_METHOD = _RANKED | {"clearly_beats_every_other", "less_plasticity_loss_with_sgd"}
"""Criteria that rank or average every method of the study, CBP and ReDo among them."""


def _pair_label(a: str, b: str, measure: str) -> str:
    if measure == "plasticity":
        return f"{method_title(b)}'s L − {method_title(a)}'s L"
    # a BWT criterion's figures say BWT; a total's do not
    return f"{method_title(a)} − {method_title(b)}" + (" (total)" if measure == "total" else "")


def _with_baseline(view: View, companion: View | None) -> View:
    """The view whose Baseline a test compares with: the study's own, else its companion's."""
    if "baseline" in view.runs:
        return view
    if companion is not None and "baseline" in companion.runs:
        return companion
    raise LookupError(f"no Baseline runs in {view.study.name}")


def _apply(test: Test, view: View, companion: View | None) -> Finding:
    """``test``'s criterion on ``view``'s runs (raises LookupError for missing runs)."""
    f, ms, name = CRITERIA[test.criterion], test.methods, test.criterion
    m = ms[0] if ms else ""
    if test.across:
        totals = {v.label: v.totals(m) for v in view.study.views() if m in v.runs}
        return f(test.across, totals).labelled(f"{method_title(m)}, {test.across}")
    if name in _ON_LOSS:
        return f(view.losses(m)).labelled(method_title(m))
    if name == "mitigates":
        return f(view.losses(m), _with_baseline(view, companion).losses("baseline")).labelled(method_title(m))
    if name == "mitigates_only_some":
        base = _with_baseline(view, companion)
        return f(view.losses(m), base.losses("baseline"), view.losses("l2_init")).labelled(method_title(m))
    if name in _RANKED:
        return f(m, {k: view.totals(k) for k in view.runs}).labelled(method_title(m))
    if name == "clearly_beats_every_other":
        return f(m, {k: view.scores(k, "total") for k in view.runs}).labelled(method_title(m))
    if name in _PAIRED:
        return f(view.scores(m, test.measure), view.scores(ms[1], test.measure)).labelled(
            _pair_label(m, ms[1], test.measure))
    if name == "reduces_weight_magnitude":
        base = _with_baseline(view, companion)
        return f(view.metric(m, "weight_magnitude"), base.metric("baseline", "weight_magnitude"),
                 view.window(m)).labelled(method_title(m))
    if name == "keeps_srank_high":
        return f(view.metric(m, "srank"), view.window(m)).labelled(method_title(m))
    if name == "more_seed_variance":
        return f(view.totals(m), view.totals(ms[1])).labelled(f"{method_title(m)} vs {method_title(ms[1])}")
    if name == "less_plasticity_loss_with_sgd":
        if companion is None:
            raise LookupError(f"no Adam study of {view.study.problem} to compare with")
        return f({k: view.losses(k) for k in view.runs}, {k: companion.losses(k) for k in companion.runs})
    if name == "best_single_lambda":
        totals = {(float(c.config.get("params", {}).get("strength", 0.0)), c.config["lr"], c.problem):
                  100.0 * c.total for c in view.study.results.configs if c.method == "l2_init"}
        return f(totals)
    raise ValueError(f"no way to apply criterion {name!r}")


def apply_test(test: Test, view: View, companion: View | None = None) -> Finding:
    """``test`` on one setting of a study (``companion``: the Adam comparison it may need):
    its :class:`Finding`, *not judged* where runs or measurements it needs are missing."""
    needed = [m for m in test.methods if m not in view.runs
              and not (m == "baseline" and companion is not None and m in companion.runs)]
    if needed and not test.across:
        return Finding(NOT_JUDGED, f"no runs of {', '.join(map(method_title, needed))} in {view.study.name}")
    try:
        finding = _apply(test, view, companion)
    except LookupError as e:
        return Finding(NOT_JUDGED, str(e).strip("'\""))
    if test.negate and finding.verdict in (HOLDS, DOES_NOT_HOLD):
        flipped = DOES_NOT_HOLD if finding.verdict == HOLDS else HOLDS
        return Finding(flipped, f"not {test.criterion.replace('_', ' ')}: {finding.figures}")
    return finding


def combine(findings: Sequence[Finding], how: str = "all") -> Finding:
    """Findings of one part together. ``all``: holds if every one holds, partly if some hold
    (or hold partly), does not hold if none; not judged if any is. ``any``: holds if one holds."""
    verdicts = [f.verdict for f in findings]
    figures = "; ".join(f.figures for f in findings)
    if how == "any":
        if HOLDS in verdicts:
            return Finding(HOLDS, figures)
        if NOT_JUDGED in verdicts:
            return Finding(NOT_JUDGED, figures)
        return Finding(PARTLY if PARTLY in verdicts else DOES_NOT_HOLD, figures)
    if NOT_JUDGED in verdicts:
        return Finding(NOT_JUDGED, figures)
    if all(v == HOLDS for v in verdicts):
        return Finding(HOLDS, figures)
    return Finding(PARTLY if HOLDS in verdicts or PARTLY in verdicts else DOES_NOT_HOLD, figures)


def cbp_redo_form(config: Mapping, optimizer: str = "adam") -> str:
    """Which form of CBP or ReDo a configuration ran: *plasticlab's* (the defaults), *the
    authors'* (:data:`~plasticlab.experiments.presets.AUTHORS_CBP`, ``AUTHORS_REDO``: what their
    code does, docs/methods-reference-modes.md) or the settings of a mix. With SGD, CBP's
    ``adam_variant`` changes nothing and is not counted."""
    from ..methods import METHODS

    method = config["method"]
    authors = dict(AUTHORS_CBP if method == "cbp" else AUTHORS_REDO)
    if method == "cbp" and optimizer != "adam":
        authors.pop("adam_variant")
    params, defaults = config.get("params") or {}, METHODS[method].default_params()
    if all(params.get(k, defaults[k]) == v for k, v in authors.items()):
        return AUTHORS_FORM
    if all(params.get(k, defaults[k]) == defaults[k] for k in authors):
        return PLASTICLABS_FORM
    return "mixed form: " + " ".join(f"{k}={params.get(k, defaults[k])}" for k in authors)


def _forms(part: Part, views: Sequence[View]) -> str:
    """The CBP and ReDo forms a part rests on ("" when it does not involve them)."""
    involved = {m for t in part.tests for m in t.methods}
    if not involved & {"cbp", "redo"} and not {t.criterion for t in part.tests} & _EVERY_METHOD:
        return ""
    forms = {}
    for v in views:
        for m in ("cbp", "redo"):
            if m in v.runs:
                name = method_title(m)
                forms.setdefault(f"{name} ({v.study.optimizer})" if len(views) > 1 else name,
                                 cbp_redo_form(v.runs[m].config, v.study.optimizer))
    return "; ".join(f"{m}: {form}" for m, form in forms.items())


# ---------------------------------------------------------------------------------------------
# Parts and claims judged


@dataclass
class Row:
    """One claim × part judged on one study: the verdict, the figures it rests on, and what
    they come from (study, its folder, scale, configurations, the CBP and ReDo forms)."""

    claim: str
    part: str
    verdict: str
    figures: str
    study: str = ""
    folder: str = ""
    scale: str = ""
    configurations: str = ""
    forms: str = ""

    def to_dict(self) -> dict:
        """The row as JSON writes it."""
        return dict(self.__dict__)


_PREFERENCE = {PROTOCOL: 0, PAPER_BEST: 1, STUDY_CONFIGS: 2}


def candidates(part: Part, studies: Iterable[Study]) -> list[Study]:
    """The studies a part can be judged on, preferred first: the protocol's selection before the
    paper's reported best, then the longest run."""
    key = (part.study, part.problem, part.optimizer)
    found = [s for s in studies if (s.kind, s.problem, s.optimizer) == key]
    return sorted(found, key=lambda s: (_PREFERENCE[s.configurations], -s.fraction, str(s.folder)))


def _length(study: Study) -> tuple[int, int]:
    """The most tasks and steps per task of ``study``'s runs."""
    configs = [c.config for c in study.results.configs]
    return (max(int(c.get("tasks") or 0) for c in configs),
            max(int(c.get("steps_per_task") or 0) for c in configs))


def _companion(study: Study, studies: Sequence[Study], same_length: bool = False) -> Study | None:
    """The Adam comparison of ``study``'s problem: with the same configurations and scale where
    there is one, else the preferred; with ``same_length``, only one whose runs are as long
    (tasks and steps) as ``study``'s."""
    adam = candidates(Part("comparison", study.problem, "adam", ()), studies)
    adam = [s for s in adam if s is not study and (not same_length or _length(s) == _length(study))]
    return min(adam, key=lambda s: (s.configurations != study.configurations,
                                    abs(s.fraction - study.fraction)), default=None)


def _missing(part: Part) -> str:
    if part.study == "comparison":
        return (f"no study: main-{part.problem}-{part.optimizer} or best-{part.problem}-{part.optimizer} "
                "is not among the folders read")
    if part.study == "reference-modes":
        return f"no study: reference-modes-{part.problem} is not among the folders read"
    return f"no study: {part.study} is not among the folders read"


def _joined(view: View, companion: View) -> View:
    """``view``'s runs in place of the same methods' in ``companion``'s (one setting): a study's
    CBP and ReDo beside the comparison's other methods."""
    return View(view.study, view.label, {**companion.runs, **view.runs})


def _other_form(part: Part, view: View) -> str:
    """Why ``view`` does not judge ``part``: its CBP or ReDo ran in another form than the part
    is about ("" when it did not, or when the part names no form)."""
    for m in sorted({m for t in part.tests for m in t.methods} & {"cbp", "redo"} if part.form else ()):
        if m in view.runs:
            form = cbp_redo_form(view.runs[m].config, view.study.optimizer)
            if form != part.form:
                return f"{method_title(m)} ran in {form} in {view.study.name}, not in {part.form}"
    return ""


def judge_part(claim: Claim, part: Part, study: Study | None, studies: Sequence[Study] = ()) -> Row:
    """``part`` of ``claim`` judged on ``study`` (None: no study, *not judged*); ``studies``:
    where the part's companion (the Adam comparison) is looked for."""
    if study is None:
        return Row(claim.key, part.title, NOT_JUDGED, _missing(part))
    joins = part.joins_companion
    companion_study = _companion(study, studies, joins) if part.companion or joins else None
    if joins and companion_study is None:
        return Row(claim.key, part.title, NOT_JUDGED,
                   f"no study: main-{study.problem}-adam or best-{study.problem}-adam as long as "
                   f"{study.name} ({study.scale}) is not among the folders read",
                   study.name, str(study.folder), study.scale, study.configurations)
    companion = companion_study.views()[0] if companion_study else None
    views = study.views() if part.each_view else study.views()[:1]
    if joins:
        views, companion = [_joined(v, companion) for v in views], None
    other = next(filter(None, (_other_form(part, v) for v in views)), "")
    if other:
        return Row(claim.key, part.title, NOT_JUDGED, other, study.name, str(study.folder), study.scale,
                   study.configurations)
    per_view = [(v, combine([apply_test(t, v, companion) for t in part.tests], part.combine)) for v in views]
    if part.each_view:
        finding = combine([Finding(f.verdict, f"{v.label}: {f.verdict} — {f.figures}") for v, f in per_view])
    else:
        finding = per_view[0][1]
    names, folders, scales = [study.name], [str(study.folder)], [study.scale]
    if companion_study is not None:
        names.append(companion_study.name)
        folders.append(str(companion_study.folder))
        if companion_study.scale != study.scale:
            scales.append(f"{companion_study.name}: {companion_study.scale}")
    configurations = study.configurations + (
        f" ({companion_study.name}: {companion_study.configurations})"
        if companion_study and companion_study.configurations != study.configurations else "")
    return Row(claim.key, part.title, finding.verdict, finding.figures, " + ".join(names),
               " + ".join(folders), "; ".join(scales), configurations,
               _forms(part, views + ([companion] if companion else [])))


def _over(rows: Sequence[Row], need: int | None, unknown: int = 0) -> str:
    """The verdict over judged ``rows`` with ``unknown`` more parts not judged."""
    hold = sum(r.verdict == HOLDS for r in rows)
    if need is not None and hold >= need:
        return HOLDS  # enough parts hold whatever the others would say
    if unknown and (need is None or hold + unknown >= need):
        return NOT_JUDGED
    if need is None and rows and hold == len(rows):
        return HOLDS
    return PARTLY if any(r.verdict in (HOLDS, PARTLY) for r in rows) else DOES_NOT_HOLD


def summarise(claim: Claim, rows: Sequence[Row]) -> Row:
    """The claim's verdict over its parts' rows (one per part): *holds* if every part holds
    (with ``need``, at least that many), *partly* if some do, *does not hold* if none do; *not
    judged* where a part has no runs (unless ``need`` parts hold anyway). Its figures count the
    parts and, where some were not judged, give the verdict over those that were."""
    judged = [r for r in rows if r.verdict != NOT_JUDGED]
    missing = [r.part for r in rows if r.verdict == NOT_JUDGED]
    verdict = _over(judged, claim.need, len(missing))
    words = {HOLDS: ("holds", "hold"), PARTLY: ("partly", "partly"),
             DOES_NOT_HOLD: ("does not hold", "do not hold")}
    tally = {v: sum(r.verdict == v for r in judged) for v in words}
    counts = [f"{n} {words[v][n != 1]}" for v, n in tally.items() if n]
    text = f"of {len(rows)} part{'s' if len(rows) != 1 else ''}: " + ", ".join(counts or ["none judged"])
    if claim.need is not None:
        text += f" (the claim needs {claim.need})"
    if missing:
        text += f"; not judged: {', '.join(missing)}"
        if judged and verdict == NOT_JUDGED:
            text += f" — over the {len(judged)} judged: {_over(judged, None)}"
    return Row(claim.key, "all parts", verdict, text)


@dataclass
class ClaimVerdict:
    """A claim judged: its :class:`Claim`, the summary row (:func:`summarise`) and a row per
    part (several per part with ``every_study``: one per study that part can read)."""

    claim: Claim
    summary: Row
    rows: list[Row]


def judge_claims(studies: Sequence[Study], claims: Sequence[Claim] = CLAIMS,
                 every_study: bool = False) -> list[ClaimVerdict]:
    """Every claim judged on ``studies``: each part on its preferred study (:func:`candidates`),
    or on each of them with ``every_study``; the summary always over the preferred ones."""
    out = []
    for claim in claims:
        rows, preferred = [], []
        for part in claim.parts:
            found = candidates(part, studies)
            judged = [judge_part(claim, part, s, studies) for s in (found if every_study else found[:1])]
            judged = judged or [judge_part(claim, part, None)]
            rows += judged
            preferred.append(judged[0])
        out.append(ClaimVerdict(claim, summarise(claim, preferred), rows))
    return out


def judge_folders(paths: Iterable[str | Path], every_study: bool = False
                  ) -> tuple[list[ClaimVerdict], list[str]]:
    """:func:`judge_claims` on the studies under ``paths`` (:func:`find_studies`), and the notes
    on the folders left out."""
    studies, notes = find_studies(paths)
    return judge_claims(studies, every_study=every_study), notes


# ---------------------------------------------------------------------------------------------
# The table, as text, Markdown and JSON

PART_COLUMNS = ("claim", "part", "verdict", "figures", "study", "scale", "configurations", "forms")
"""The columns of a part's row, as :class:`Row` names them (``forms``: CBP's and ReDo's)."""
_HEADERS = {"forms": "CBP / ReDo form"}


def claims_json(verdicts: Sequence[ClaimVerdict], notes: Sequence[str] = ()) -> dict:
    """The judged claims as JSON: each claim's key, words, verdict, summary and parts' rows
    (:meth:`Row.to_dict`), and the notes on folders left out."""
    return {"verdicts": list(VERDICTS),
            "claims": [{"key": v.claim.key, "text": v.claim.text, "verdict": v.summary.verdict,
                        "summary": v.summary.figures, "parts": [r.to_dict() for r in v.rows]}
                       for v in verdicts],
            "notes": list(notes)}


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table (— when empty)."""
    return (text or "—").replace("|", "\\|").replace("\n", " ")


def _preferred(verdict: ClaimVerdict) -> dict[str, Row]:
    """Each part's row on its preferred study (the first of its rows), by part title."""
    rows: dict[str, Row] = {}
    for r in verdict.rows:
        rows.setdefault(r.part, r)
    return rows


def _shortened(scale: str) -> str:
    """How a study was shortened (``--scale 0.2``), or "" at full length."""
    first = scale.split("; ")[0]
    return "" if not first or first.startswith("full length") else first.split(":")[0]


def _named_scales(row: Row) -> list[tuple[str, str]]:
    """Each study a row read (its own, then a companion's) with how it was shortened: a
    companion at the study's scale has no entry of its own in ``row.scale``, one at another
    scale has ``NAME: SCALE``."""
    names, scales = row.study.split(" + "), row.scale.split("; ")
    own = _shortened(scales[0])
    named = [(names[0], own)]
    for name in names[1:]:
        entry = next((s.removeprefix(f"{name}: ") for s in scales[1:] if s.startswith(f"{name}: ")), None)
        named.append((name, own if entry is None else _shortened(entry)))
    return named


def claims_matrix(verdicts: Sequence[ClaimVerdict]) -> str:
    """The claims × the paper's five problems, as Markdown: each cell the verdict of the claim's
    part(s) on that problem, judged on the preferred study (marked with its ``--scale`` where
    shortened; "—" where the claim has no part there), the last column the claim's own verdict;
    then, per problem, the studies read with their configurations, and the CBP/ReDo forms."""
    names = [problem_title(p) for p in PAPER_PROBLEMS]
    lines = ["| claim | " + " | ".join(names) + " | over its parts |", "|---" * (len(names) + 2) + "|"]
    read: dict[str, dict[str, str]] = {p: {} for p in PAPER_PROBLEMS}
    forms: set[str] = set()
    for v in verdicts:
        rows, cells = _preferred(v), []
        for problem in PAPER_PROBLEMS:
            parts = [p for p in v.claim.parts if p.problem == problem]
            said = []
            for part in parts:
                r = rows[part.title]
                how = _shortened(r.scale)
                text = r.verdict + (f" (`{how}`)" if how else "")
                said.append(f"{part.label}: {text}" if len(parts) > 1 and part.label else text)
                if r.verdict != NOT_JUDGED:
                    for name, shortened in _named_scales(r):
                        study = f"`{name}`" + (f" `{shortened}`" if shortened else "")
                        read[problem].setdefault(study, r.configurations.split(" (")[0])
                    forms.update(f.split(": ", 1)[1] for f in r.forms.split("; ") if ": " in f)
            cells.append("; ".join(said))
        judged = [r for r in rows.values() if r.verdict != NOT_JUDGED]
        over = f"**{v.summary.verdict}**"
        if v.summary.verdict == NOT_JUDGED and judged:
            over += f" (the {len(judged)} judged: {_over(judged, None)})"
        lines.append(f"| {v.claim.key}: {markdown_cell(v.claim.text)} | "
                     + " | ".join(map(markdown_cell, cells)) + f" | {over} |")
    lines.append("")
    for problem in PAPER_PROBLEMS:
        if read[problem]:
            by_kind: dict[str, list[str]] = {}
            for study, configurations in read[problem].items():
                by_kind.setdefault(configurations, []).append(study)
            lines.append(f"- {problem_title(problem)}: " + "; ".join(
                f"{', '.join(studies)} ({kind})" for kind, studies in by_kind.items()))
    if forms:
        lines.append(f"- CBP and ReDo: {', '.join(sorted(forms))}")
    return "\n".join(lines) + "\n"


def _study_key(row: Row) -> str:
    """A study as the per-study tables title it: its name and scale (the first of the row's)."""
    return f"{row.study.split(' + ')[0]} · {row.scale.split('; ')[0]}"


def claims_by_study(verdicts: Sequence[ClaimVerdict]) -> dict[str, str]:
    """The judged parts grouped by the study each was judged on (the first one named, at its
    scale: with ``every_study`` a study run at two scales has two), each as a Markdown table of
    claim, part, verdict and figures; keyed by ``"STUDY · SCALE"``, in the order first judged."""
    tables: dict[str, list[str]] = {}
    for v in verdicts:
        for r in v.rows:
            if r.verdict == NOT_JUDGED:
                continue
            lines = tables.setdefault(_study_key(r), ["| claim | part | verdict | figures |",
                                                      "|---|---|---|---|"])
            lines.append(f"| {v.claim.key} | {markdown_cell(r.part)} | **{r.verdict}** | "
                         f"{markdown_cell(r.figures)} |")
    return {key: "\n".join(lines) + "\n" for key, lines in tables.items()}


def claims_markdown(verdicts: Sequence[ClaimVerdict], notes: Sequence[str] = ()) -> str:
    """The judged claims as Markdown: the claims × problems matrix (:func:`claims_matrix`), a
    table of claims (verdict and summary), one row per claim × part with its figures, study,
    scale, configurations and CBP/ReDo form, and the parts by study (:func:`claims_by_study`)."""
    lines = ["## The claims at a glance", "", claims_matrix(verdicts).rstrip("\n"), "",
             "## The paper's claims, judged (SPEC §11 by §12)", "",
             "| claim | the paper's words | verdict | over its parts |", "|---|---|---|---|"]
    lines += [f"| {v.claim.key} | {markdown_cell(v.claim.text)} | **{v.summary.verdict}** "
              f"| {markdown_cell(v.summary.figures)} |" for v in verdicts]
    lines += ["", "## Each claim × part", "",
              "| " + " | ".join(_HEADERS.get(c, c) for c in PART_COLUMNS) + " |",
              "|" + "---|" * len(PART_COLUMNS)]
    for v in verdicts:
        for r in v.rows:
            cells = [markdown_cell(str(getattr(r, c))) for c in PART_COLUMNS]
            cells[2] = f"**{r.verdict}**"
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## By study"]
    for key, table in claims_by_study(verdicts).items():
        lines += ["", f"### {key}", "", table.rstrip("\n")]
    if notes:
        lines += ["", "Folders not read: " + "; ".join(notes) + "."]
    return "\n".join(lines) + "\n"


def claims_text(verdicts: Sequence[ClaimVerdict]) -> str:
    """The judged claims for a terminal: per claim, its key, verdict and words, its summary,
    then one line per part (verdict, study, scale, configurations, forms) with its figures
    indented below."""
    out = []
    for v in verdicts:
        out.append(f"{v.claim.key:<14} {v.summary.verdict.upper():<14} {v.claim.text}")
        out.append(f"{'':<29} {v.summary.figures}")
        for r in v.rows:
            where = " · ".join(x for x in (r.study, r.scale, r.configurations, r.forms) if x)
            out.append(f"  {r.part:<38} {r.verdict:<14} {where}")
            out.append(f"      {r.figures}")
        out.append("")
    return "\n".join(out)
