"""The paper's selection protocol (SPEC §6), and the measure a study is judged on.

For each problem × optimizer × method: run the grid on 3 seeds, pick the configuration with the
best total online measure (mean over those seeds), then run the winner on 10 new seeds and
report mean and a 95 % interval across them.

The measure is what the runs recorded (:class:`Measure`): a classification problem's runs
record their online accuracy (higher is better), a regression problem's (Dohare et al.'s
slowly-changing regression) their online squared error (lower is better) — the summary key
``total_online_squared_error`` tells them apart, as
:func:`~plasticlab.experiments.verify.online_metric` does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Measure:
    """The per-task measure a study is judged on, as its runs record it.

    ``metric`` names its per-task values in the results store and the export, ``total`` the
    run summary's key of their mean over the reported tasks. ``higher_is_better`` says which
    way is better; ``scale`` is how a value is shown (100: a fraction in percent, 1: as it is)
    and ``unit`` the unit shown after it ("%" or none).
    """

    name: str
    metric: str
    total: str
    higher_is_better: bool
    scale: float
    unit: str
    abbreviation: str  # in a column title: "online acc."

    @property
    def percent(self) -> bool:
        """Whether values are fractions shown in percent."""
        return self.unit == "%"

    @property
    def direction(self) -> str:
        """"higher is better" or "lower is better"."""
        return "higher is better" if self.higher_is_better else "lower is better"

    @property
    def best_word(self) -> str:
        """The extreme that is best: "highest" or "lowest"."""
        return "highest" if self.higher_is_better else "lowest"

    @property
    def comparison(self) -> str:
        """The order that counts as an improvement of X over Y: ">" or "<"."""
        return ">" if self.higher_is_better else "<"

    def oriented(self, values):
        """``values`` signed so that higher is better: as they are, or negated (an error).
        Every "best", "loss" and "improvement" is taken on these, so one rule serves both."""
        return values if self.higher_is_better else -np.asarray(values, dtype=float)

    def rank(self, value: float) -> float:
        """A sort key, larger = better: :meth:`oriented` ``value``, with NaN (a diverged run)
        below every number."""
        value = float(self.oriented(value))
        return -math.inf if math.isnan(value) else value

    def best(self, items: Iterable[T], value: Callable[[T], float]) -> T:
        """The item whose ``value`` is best (:meth:`rank`); ties go to the first."""
        return max(items, key=lambda item: self.rank(value(item)))

    def format(self, value: float, like: float | None = None) -> str:
        """``value`` as a table shows it: an accuracy in percent to 2 decimals, an error to 4
        significant digits (at most 6 decimals, so a difference of rounding noise reads 0) — of
        ``like`` where given, so that an interval's bounds have its point's decimals; "—" for
        NaN."""
        if math.isnan(value):
            return "—"
        if self.percent:
            return f"{self.scale * value:.2f}"
        like = value if like is None or not math.isfinite(like) else like
        if not math.isfinite(value) or like == 0:
            return f"{value:.4g}"
        decimals = min(6, max(0, 3 - math.floor(math.log10(abs(like)))))
        return f"{value:.{decimals}f}"

    def unit_suffix(self, before: str = " ") -> str:
        """The unit in parentheses for a title, " (%)", or nothing."""
        return f"{before}({self.unit})" if self.unit else ""


ONLINE_ACCURACY = Measure("online accuracy", "online_accuracy", "total_online_accuracy",
                          higher_is_better=True, scale=100.0, unit="%", abbreviation="online acc.")
"""A classification problem's measure: the fraction of its online predictions that were right."""
ONLINE_SQUARED_ERROR = Measure("online squared error", "online_squared_error",
                               "total_online_squared_error", higher_is_better=False, scale=1.0,
                               unit="", abbreviation="online sq. error")
"""A regression problem's measure: the mean squared error of its online predictions."""
MEASURES = (ONLINE_SQUARED_ERROR, ONLINE_ACCURACY)


class MissingMeasureError(ValueError):
    """A finished run whose summary holds no total online measure: it cannot be ranked."""


def recorded_measure(summary: Mapping | None, metrics: Collection[str] = ()) -> Measure | None:
    """The measure a run recorded: the one whose total is in its ``summary`` or, failing that,
    whose per-task metric is among ``metrics`` (its stored metric names); None when neither."""
    summary = summary or {}
    for measure in MEASURES:
        if measure.total in summary:
            return measure
    for measure in MEASURES:
        if measure.metric in metrics:
            return measure
    return None


def run_measure(run: Mapping) -> Measure:
    """The measure ``run`` (a finished run's row) is judged on, from its summary's total.
    Raises :class:`MissingMeasureError`, naming the run, when the summary has neither
    ``total_online_accuracy`` nor ``total_online_squared_error``."""
    measure = recorded_measure(run.get("summary"))
    if measure is None:
        cfg = run["config"]
        name = run.get("run_id") or "a run"
        raise MissingMeasureError(
            f"finished run {name} ({cfg['method']} on {cfg['problem']}, {cfg['optimizer']} "
            f"lr={cfg['lr']:g}, params {cfg.get('params') or {}}, seed {run.get('seed', '?')}) has "
            f"neither {ONLINE_ACCURACY.total} nor {ONLINE_SQUARED_ERROR.total} in its summary, so "
            "its configuration cannot be ranked: train it again (`plasticlab sweep … --rerun "
            "--only seed=…`) or remove the run from the results folder")
    return measure


def config_key(config: dict) -> str:
    """A canonical text key of a config (without seed), for grouping runs by configuration."""
    return json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True)


def select_best(runs: Iterable[dict]) -> dict[tuple[str, str, str], dict]:
    """The best configuration per (problem, optimizer, method), by its runs' measure.

    ``runs`` are finished run rows (``config`` and a summary with ``total_online_accuracy`` or,
    on a regression problem, ``total_online_squared_error``, as :meth:`ResultStore.runs`
    returns them). The best configuration has the highest mean total online accuracy, or the
    lowest mean total online squared error; a configuration with a diverged run (NaN) comes
    last. Returns, per group, ``config`` (the winning config), ``score`` (its mean of the
    measure over seeds: a fraction, or a squared error), ``measure`` (the :class:`Measure`),
    ``seeds`` (how many runs it averaged) and ``candidates`` (how many configurations
    competed). Ties go to the configuration seen first. Raises :class:`MissingMeasureError`
    for a run that recorded neither total.
    """
    by_config: dict[str, dict] = {}
    for run in runs:
        cfg = run["config"]
        measure = run_measure(run)
        value = run["summary"][measure.total]
        entry = by_config.setdefault(config_key(cfg), {"config": cfg, "scores": [], "measure": measure})
        entry["scores"].append(math.nan if value is None else float(value))  # None: NaN in JSON
    best: dict[tuple[str, str, str], dict] = {}
    counts: dict[tuple[str, str, str], int] = {}
    for entry in by_config.values():
        cfg, measure = entry["config"], entry["measure"]
        group = (cfg["problem"], cfg["optimizer"], cfg["method"])
        counts[group] = counts.get(group, 0) + 1
        score = sum(entry["scores"]) / len(entry["scores"])
        if group not in best or measure.rank(score) > measure.rank(best[group]["score"]):
            best[group] = {"config": cfg, "score": score, "measure": measure,
                           "seeds": len(entry["scores"])}
    for group, entry in best.items():
        entry["candidates"] = counts[group]
    return best
