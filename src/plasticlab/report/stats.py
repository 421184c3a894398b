"""Statistics of ``plasticlab report``: bootstrap intervals, IQM and probability of improvement.

Continual-learning results come from a handful of seeds per method (3–10 typically), each seed
giving one score (e.g. the total average online accuracy, a fraction in [0, 1]) or one curve
(accuracy per task). With so few runs a point estimate alone says little, and the usual
``mean ± 1.96·s/√n`` is a poor interval: it assumes the mean is normally distributed and uses the
normal quantile where, with n = 3, even Student's t would need 4.30 instead of 1.96. It can also
run outside [0, 1]. This module follows Agarwal et al. (2021), "Deep reinforcement learning at the
edge of the statistical precipice" (NeurIPS), and its library *rliable*:

* **Percentile bootstrap** (:func:`bootstrap_ci`, :func:`bootstrap_ci_columns`): resample the
  seeds with replacement, recompute the statistic, and take the ``(1 ± confidence)/2`` quantiles of
  the replicates. No normality assumption, works for any statistic (mean, median, IQM,
  probability of improvement) and stays inside the range of the data. With very few seeds it is
  still optimistic (a bootstrap cannot know about values it never saw), so read the intervals as
  a description of the spread of the seeds, not as a guarantee.
* **Interquartile mean** (:func:`iqm`): the mean of the middle 50 % of all scores. One diverged
  seed moves the mean a lot and the IQM hardly at all, while the IQM uses far more of the data
  than the median and so has a smaller variance.
* **Stratified bootstrap** (:func:`stratified_bootstrap_ci`): with a [runs × tasks] score matrix,
  resample the runs independently within each task (column), so every task keeps its number of
  runs and the set of tasks is held fixed: the interval reflects the uncertainty from the seeds.
* **Paired and unpaired differences** (:func:`difference_ci`): two methods run on the same seeds
  share each seed's task sequence, so their difference is taken seed by seed and bootstrapped
  as one sample (:func:`bootstrap_ci` of the differences); without shared seeds the two samples
  are resampled independently.
* **Plasticity loss** (:func:`plasticity_window`, :func:`plasticity_loss`): SPEC §12's loss of a
  run, its best window of ``w`` consecutive tasks minus its last window.
* **Variance-ratio F test** (:func:`variance_ratio_test`): one-sided, with the F distribution's
  tail from the regularized incomplete beta function (:func:`regularized_incomplete_beta`), so
  the package needs no SciPy.
* **Probability of improvement** (:func:`probability_of_improvement`): the probability that a
  random run of method X scores higher than a random run of method Y on the same task (ties count
  one half), averaged over tasks. 0.5 means the methods cannot be told apart, 1 that every run of
  X beats every run of Y. It says how *often* X wins, not by how much, so report it next to the
  scores; an improvement is "statistically meaningful" in the paper's sense when the lower bound
  of its interval is above 0.5.

Definitions that follow rliable 1.2.0 exactly: :func:`iqm` is ``rliable.metrics.aggregate_iqm``
(``scipy.stats.trim_mean(x, 0.25, axis=None)``); :func:`probability_of_improvement` is
``rliable.metrics.probability_of_improvement`` (the Mann–Whitney U statistic over ``n·m`` per
task, averaged over tasks); :func:`stratified_bootstrap_ci` and
:func:`probability_of_improvement_ci` are ``rliable.library.get_interval_estimates(...,
method="percentile", task_bootstrap=False)`` with its ``StratifiedBootstrap`` and
``StratifiedIndependentBootstrap``, the quantiles being NumPy's linearly interpolated percentiles
as in ``arch``'s ``conf_int``. The random numbers differ (rliable draws from NumPy's global
generator; here every function takes a ``seed`` for ``numpy.random.default_rng``), so the bounds
agree up to Monte-Carlo error, which for a bound is about ``1.5 % × (hi − lo)`` at the default
2000 replicates (rliable's default is 50 000).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Interval",
    "bootstrap_ci",
    "bootstrap_ci_columns",
    "difference_ci",
    "f_sf",
    "iqm",
    "plasticity_loss",
    "plasticity_window",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "regularized_incomplete_beta",
    "stratified_bootstrap_ci",
    "variance_ratio_test",
]

# Upper bound on the elements of one batch of bootstrap replicates held in memory at once.
_BATCH_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval ``[lo, hi]``, from ``n`` runs (seeds)."""

    point: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self) -> float:
        """``max(point − lo, hi − point)``: the larger distance of a bound from the point."""
        return max(self.point - self.lo, self.hi - self.point)

    def format(self, scale: float = 100, digits: int = 2) -> str:
        """``"point [lo, hi]"`` with every number multiplied by ``scale``, e.g. ``"82.52 [82.31, 82.70]"``."""
        p, lo, hi = (f"{scale * v:.{digits}f}" for v in (self.point, self.lo, self.hi))
        return f"{p} [{lo}, {hi}]"


# ---------------------------------------------------------------------------------------------
# Validation helpers


def _as_array(values, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise ValueError(f"{what} is empty: need at least one value")
    nans = int(np.isnan(arr).sum())
    if nans:
        raise ValueError(f"{what} contains {nans} NaN value{'s' if nans != 1 else ''} (of {arr.size})")
    return arr


def _as_matrix(scores, what: str) -> np.ndarray:
    """A [runs × tasks] float matrix; a 1-D input is a single task (one column)."""
    arr = _as_array(scores, what)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 1-D (runs) or 2-D (runs × tasks), got shape {arr.shape}")
    return arr


def _check(confidence: float, reps: int) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps must be a positive integer, got {reps}")
    return (1.0 - confidence) / 2.0


def _percentile_bounds(replicates: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``alpha`` and ``1 − alpha`` quantiles along axis 0 (linear interpolation, as arch)."""
    lo, hi = np.quantile(replicates, [alpha, 1.0 - alpha], axis=0)
    return lo, hi


# ---------------------------------------------------------------------------------------------
# Plain (i.i.d.) percentile bootstrap over seeds


def bootstrap_ci(values, *, statistic: Callable = np.mean, confidence: float = 0.95, reps: int = 2000,
                 seed: int = 0) -> Interval:
    """Percentile-bootstrap interval of ``statistic`` over the 1-D ``values`` (one per seed).

    ``point = statistic(values)``; for ``b = 1..reps`` draw ``values*_b`` as ``n`` values sampled
    with replacement and compute ``θ*_b = statistic(values*_b)``; then ``lo`` and ``hi`` are the
    ``(1 − confidence)/2`` and ``(1 + confidence)/2`` quantiles of the ``θ*_b``. ``statistic``
    is called once on a ``[reps × n]`` array with ``axis=1`` when it accepts that (NumPy
    reductions do), else once per replicate. With ``n = 1`` the interval is ``[point, point]``.
    Raises ``ValueError`` on empty input or NaN values.
    """
    x = _as_array(values, "values")
    if x.ndim != 1:
        raise ValueError(f"values must be 1-D (one value per seed), got shape {x.shape}")
    alpha = _check(confidence, reps)
    n = x.size
    point = float(statistic(x))
    if n == 1:
        return Interval(point, point, point, 1)
    idx = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    samples = x[idx]
    replicates = None
    try:
        replicates = np.asarray(statistic(samples, axis=1), dtype=float)
    except TypeError:
        pass
    if replicates is None or replicates.shape != (reps,):
        replicates = np.array([statistic(s) for s in samples], dtype=float)
    lo, hi = _percentile_bounds(replicates, alpha)
    return Interval(point, float(lo), float(hi), n)


def bootstrap_ci_columns(values, *, confidence: float = 0.95, reps: int = 2000,
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-column mean and percentile-bootstrap interval of a [seeds × T] array (bands on curves).

    Returns ``(mean, lo, hi)``, arrays of length ``T``: ``mean[t]`` is the mean over seeds of
    column ``t`` and ``[lo[t], hi[t]]`` its percentile-bootstrap interval. One resampling of the
    seed indices is shared by all columns (a replicate is a set of seeds, as when rerunning whole
    runs), drawn exactly as :func:`bootstrap_ci` draws it, so column ``t`` equals
    ``bootstrap_ci(values[:, t], confidence=confidence, reps=reps, seed=seed)`` up to rounding.
    Computed as ``counts @ values / n`` with ``counts[b, s]`` the number of times seed ``s`` is in
    replicate ``b``. A 1-D input is a single column. Raises ``ValueError`` on empty input or NaN.
    """
    x = _as_matrix(values, "values")
    alpha = _check(confidence, reps)
    n, _ = x.shape
    mean = x.mean(axis=0)
    if n == 1:
        return mean, mean.copy(), mean.copy()
    idx = np.random.default_rng(seed).integers(0, n, size=(reps, n))
    flat = (idx + n * np.arange(reps)[:, None]).ravel()
    counts = np.bincount(flat, minlength=reps * n).reshape(reps, n).astype(float)
    replicates = counts @ x / n
    lo, hi = _percentile_bounds(replicates, alpha)
    return mean, lo, hi


# ---------------------------------------------------------------------------------------------
# Interquartile mean and stratified bootstrap (rliable)


def iqm(scores) -> float:
    """Interquartile mean of all scores (flattened): the mean of the middle 50 %.

    With the ``N`` scores sorted, ``x_(1) ≤ … ≤ x_(N)`` and ``k = ⌊0.25·N⌋``,
    ``IQM = mean(x_(k+1), …, x_(N−k))``: exactly ``scipy.stats.trim_mean(scores, 0.25, axis=None)``,
    which is ``rliable.metrics.aggregate_iqm``. Raises ``ValueError`` on empty input or NaN.
    """
    x = np.sort(_as_array(scores, "scores"), axis=None)
    k = int(0.25 * x.size)
    return float(np.mean(x[k:x.size - k]))


def _iqm_batched(samples: np.ndarray) -> np.ndarray:
    """:func:`iqm` of each ``samples[b]`` (any trailing shape), vectorised over ``b``."""
    flat = np.sort(samples.reshape(samples.shape[0], -1), axis=1)
    k = int(0.25 * flat.shape[1])
    return flat[:, k:flat.shape[1] - k].mean(axis=1)


def _batches(reps: int, per_rep: int):
    size = max(1, _BATCH_ELEMENTS // max(per_rep, 1))
    for start in range(0, reps, size):
        yield min(size, reps - start)


def _stratified_resample(rng: np.random.Generator, x: np.ndarray, count: int) -> np.ndarray:
    """``count`` stratified resamples of the [runs × tasks] ``x``: runs drawn per task column."""
    n, tasks = x.shape
    idx = rng.integers(0, n, size=(count, n, tasks))
    return x[idx, np.arange(tasks)]


def stratified_bootstrap_ci(scores, statistic: Callable = iqm, *, confidence: float = 0.95,
                            reps: int = 2000, seed: int = 0) -> Interval:
    """Stratified percentile-bootstrap interval of an aggregate ``statistic`` of a [runs × tasks] matrix.

    ``point = statistic(scores)``. Each replicate ``scores*_b`` has, in every task column ``t``,
    ``runs`` values drawn with replacement from that column only (``scores*_b[i, t] =
    scores[r_bit, t]``, ``r_bit`` uniform); ``lo`` and ``hi`` are the ``(1 ∓ confidence)/2``
    quantiles of ``statistic(scores*_b)``. This is rliable's ``StratifiedBootstrap`` with
    ``get_interval_estimates(..., method="percentile", task_bootstrap=False)``. ``statistic``
    takes a [runs × tasks] matrix and returns a scalar; :func:`iqm` (the default) is vectorised,
    other statistics are called once per replicate. A 1-D input is a single task. ``n`` of the
    result is the number of runs.
    """
    x = _as_matrix(scores, "scores")
    alpha = _check(confidence, reps)
    rng = np.random.default_rng(seed)
    point = float(statistic(x))
    parts = []
    for count in _batches(reps, x.size):
        samples = _stratified_resample(rng, x, count)
        if statistic is iqm:
            parts.append(_iqm_batched(samples))
        else:
            parts.append(np.array([statistic(s) for s in samples], dtype=float))
    lo, hi = _percentile_bounds(np.concatenate(parts), alpha)
    return Interval(point, float(lo), float(hi), x.shape[0])


# ---------------------------------------------------------------------------------------------
# Probability of improvement (rliable)


def _poi_batched(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Probability of improvement of ``x[b]`` [n × tasks] over ``y[b]`` [m × tasks], for each ``b``."""
    xb, yb = x[:, :, None, :], y[:, None, :, :]  # broadcast to [batch, n, m, tasks]
    wins = (xb > yb).sum(axis=(1, 2)) + 0.5 * (xb == yb).sum(axis=(1, 2))
    return (wins / (x.shape[1] * y.shape[1])).mean(axis=1)


def _poi_inputs(x, y) -> tuple[np.ndarray, np.ndarray]:
    x = _as_matrix(x, "x")
    y = _as_matrix(y, "y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have the same number of tasks (columns), got {x.shape[1]} "
                         f"and {y.shape[1]}")
    return x, y


def probability_of_improvement(x, y) -> float:
    """Average probability of improvement of X over Y: ``(1/T) Σ_t [P(X_t > Y_t) + ½ P(X_t = Y_t)]``.

    ``x`` is [n × T] (n runs of method X on T tasks), ``y`` is [m × T]. For task ``t``,
    ``P(X_t > Y_t) + ½ P(X_t = Y_t) = (1/(n·m)) Σ_i Σ_j (1[x_it > y_jt] + ½·1[x_it = y_jt])``,
    the Mann–Whitney U statistic of X over ``n·m``; this is
    ``rliable.metrics.probability_of_improvement``. 1-D inputs are a single task. Returns a
    value in [0, 1]; 0.5 for identical samples.
    """
    x, y = _poi_inputs(x, y)
    return float(_poi_batched(x[None], y[None])[0])


def probability_of_improvement_ci(x, y, *, confidence: float = 0.95, reps: int = 2000,
                                  seed: int = 0) -> Interval:
    """:func:`probability_of_improvement` of X over Y with a stratified percentile-bootstrap interval.

    Each replicate resamples the runs of ``x`` and, independently, the runs of ``y``, within each
    task column (rliable's ``StratifiedIndependentBootstrap``, as used by
    ``get_interval_estimates({"X,Y": [x, y]}, metrics.probability_of_improvement)``); ``lo`` and
    ``hi`` are the ``(1 ∓ confidence)/2`` quantiles of the replicated probabilities. ``n`` of the
    result is the smaller of the two numbers of runs.
    """
    x, y = _poi_inputs(x, y)
    alpha = _check(confidence, reps)
    rng = np.random.default_rng(seed)
    point = probability_of_improvement(x, y)
    parts = []
    for count in _batches(reps, x.shape[0] * y.shape[0] * x.shape[1]):
        xs = _stratified_resample(rng, x, count)
        ys = _stratified_resample(rng, y, count)
        parts.append(_poi_batched(xs, ys))
    lo, hi = _percentile_bounds(np.concatenate(parts), alpha)
    return Interval(point, float(lo), float(hi), min(x.shape[0], y.shape[0]))


# ---------------------------------------------------------------------------------------------
# Differences between two methods, paired by seed or not


def difference_ci(x, y, *, paired: bool, confidence: float = 0.95, reps: int = 2000,
                  seed: int = 0) -> Interval:
    """Percentile-bootstrap interval of ``mean(x) − mean(y)`` over seeds.

    ``paired``: ``x[i]`` and ``y[i]`` come from the same seed (two methods on the same task
    sequence), so the statistic is the mean of the per-seed differences and the interval is
    :func:`bootstrap_ci` of ``x − y`` (the same resampling, seeded): what the seed shares —
    an easy or hard task sequence — cancels. Otherwise ``x`` and ``y`` are resampled
    independently (``reps`` draws of each from one generator seeded with ``seed``) and the
    replicate is the difference of their means. ``n`` of the result: the number of pairs, or
    the smaller sample.
    """
    a, b = _as_array(x, "x"), _as_array(y, "y")
    if paired:
        if a.shape != b.shape:
            raise ValueError(f"paired samples must have the same shape, got {a.shape} and {b.shape}")
        return bootstrap_ci(a - b, confidence=confidence, reps=reps, seed=seed)
    alpha = _check(confidence, reps)
    point = float(a.mean() - b.mean())
    if a.size == 1 and b.size == 1:
        return Interval(point, point, point, 1)
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, a.size, size=(reps, a.size))].mean(axis=1)
    rb = b[rng.integers(0, b.size, size=(reps, b.size))].mean(axis=1)
    lo, hi = _percentile_bounds(ra - rb, alpha)
    return Interval(point, float(lo), float(hi), min(a.size, b.size))


# ---------------------------------------------------------------------------------------------
# Plasticity loss (SPEC §12)


def plasticity_window(tasks: int) -> int:
    """SPEC §12's window: ``w = min(10, max(2, ⌊T/10⌋))`` tasks for a run of ``T`` reported
    tasks (never more than ``T``). At least 2 so that one noisy task is never a window; at
    most 10 so that a 500-task run's loss is about its last tasks, not its last fifth."""
    if tasks < 1:
        raise ValueError(f"a run needs at least one task, got {tasks}")
    return min(tasks, min(10, max(2, tasks // 10)))


def plasticity_loss(online, w: int | None = None) -> np.ndarray:
    """Each run's plasticity loss ``L`` (SPEC §12), from ``online[s, t]``, run s's online
    accuracy on its t-th reported task: the mean over the run's **own** best window of ``w``
    consecutive tasks minus the mean over its last ``w`` tasks (``w`` defaults to
    :func:`plasticity_window` of T). ``L ≥ 0``; 0 when the last window is the best. A 1-D input
    is one run. (``plasticlab report``'s plasticity table takes the window that is best on the
    mean over seeds, so its loss is the same or smaller.)"""
    acc = np.asarray(online, dtype=float)
    acc = _as_matrix(acc[None, :] if acc.ndim == 1 else acc, "online")
    tasks = acc.shape[1]
    w = plasticity_window(tasks) if w is None else min(int(w), tasks)
    csum = np.concatenate([np.zeros((acc.shape[0], 1)), np.cumsum(acc, axis=1)], axis=1)
    rolling = (csum[:, w:] - csum[:, :-w]) / w  # [runs, T − w + 1]: each window's mean
    return rolling.max(axis=1) - rolling[:, -1]


# ---------------------------------------------------------------------------------------------
# The F distribution's upper tail, without SciPy

_TINY = 1e-300


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of ``I_x(a, b)`` (Numerical Recipes, 3rd ed., §6.4, ``betacf``),
    evaluated by the modified Lentz method: ``1/(1+ d₁/(1+ d₂/(1+ …)))`` with
    ``d₂ₘ₊₁ = −(a+m)(a+b+m)x / ((a+2m)(a+2m+1))`` and ``d₂ₘ = m(b−m)x / ((a+2m−1)(a+2m))``.
    It converges fast for ``x < (a+1)/(a+b+2)``; the caller swaps ``a, b`` beyond that."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """``I_x(a, b) = B(x; a, b) / B(a, b)``, the regularized incomplete beta function
    (``scipy.special.betainc(a, b, x)``), for ``a, b > 0`` and ``0 ≤ x ≤ 1``:
    ``x^a (1−x)^b / (a·B(a, b))`` times the continued fraction of
    :func:`_beta_continued_fraction` where that converges fast, else ``1 − I_{1−x}(b, a)``."""
    if a <= 0 or b <= 0:
        raise ValueError(f"a and b must be positive, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def f_sf(f: float, d1: float, d2: float) -> float:
    """The upper tail ``P(F > f)`` of the F distribution with ``d1`` and ``d2`` degrees of
    freedom (``scipy.stats.f.sf(f, d1, d2)``): ``I_{d2/(d2 + d1·f)}(d2/2, d1/2)``."""
    if d1 <= 0 or d2 <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {d1} and {d2}")
    if f <= 0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return regularized_incomplete_beta(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def variance_ratio_test(x, y) -> tuple[float, float]:
    """One-sided F test that ``x``'s seeds vary more than ``y``'s: ``F = s_x² / s_y²`` (sample
    variances, n − 1) and its p-value ``P(F_{n_x−1, n_y−1} > F)`` (:func:`f_sf`). Assumes
    normal samples, as the F test does. ``F`` is ``inf`` (p = 0) when ``y`` does not vary and
    ``x`` does, NaN (p = 1) when neither varies. Raises ValueError for fewer than 2 values."""
    a, b = _as_array(x, "x"), _as_array(y, "y")
    if a.size < 2 or b.size < 2:
        raise ValueError(f"the F test needs at least 2 values a sample, got {a.size} and {b.size}")
    va, vb = float(np.var(a, ddof=1)), float(np.var(b, ddof=1))
    if vb == 0.0:
        return (math.inf, 0.0) if va > 0 else (math.nan, 1.0)
    ratio = va / vb
    return ratio, f_sf(ratio, a.size - 1, b.size - 1)
