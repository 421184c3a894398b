"""``plasticlab report``: a results directory → figures, tables, one HTML page, a Markdown summary.

What is shown, per problem × optimizer (a *study*):

1. Average online task accuracy vs task, one line per method with a 95 % bootstrap band across
   seeds (5+1 CIFAR: hard tasks only; hundreds of tasks are averaged in bins per seed first).
2. Total average online accuracy per method: mean with a 95 % bootstrap interval, and the
   interquartile mean (IQM) with a stratified-bootstrap interval, as a figure and a table;
   where the study has ``full_reset`` runs, each method's plasticity gap to them task by task
   (:mod:`.plasticity_gap`).
3. Probability of improvement of L2 Init (or, without it, the best method) over each other
   method, with its stratified-bootstrap interval.
4. Network internals at every task end (weight magnitude, srank, effective rank, dead and
   dormant units, gradient norm, test accuracy) when they were recorded.
5. Forgetting (when measured): BWT, one-step BWT and total accuracy; the accuracy matrix.
6. Sweep views: the total accuracy against each swept setting (e.g. λ), through the best
   configuration, and the selection protocol's choices.

With several problems, an aggregate section gives the IQM across problems (stratified
bootstrap over seeds within each problem, as rliable does for games).

Which configuration represents a method: the protocol's selection on its evaluation seeds
when ``selection.json`` is present, otherwise the best by mean total accuracy — the page says
which, because the second is chosen on the seeds it is shown on.

A regression problem's study (its runs record an online squared error, no accuracy) gets the
same parts on its own measure (:class:`~plasticlab.experiments.protocol.Measure`): the error as
it is, not in percent; lower is better, so its best configuration, best window and reference
for the probability of improvement are those of the lowest error, the improvement is
P(X < Y), and a loss of plasticity or a plasticity gap stays positive when the error grows.
The aggregate across problems averages accuracies only.
"""

from __future__ import annotations

import datetime as _dt
import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..experiments.paper import best_config
from ..experiments.protocol import ONLINE_ACCURACY, Measure
from ..methods import BOUNDARY_ORACLE_NOTE, METHODS, boundary_oracle, method_title
from ..optim import optimizer_title
from ..problems import problem_title
from . import figures as F
from . import stats
from .data import (
    INTERNALS,
    PERCENT_METRICS,
    ConfigRuns,
    Results,
    bin_tasks,
    binning_note,
    combine_results,
    flat_settings,
    load_results,
    method_order,
    stream_setting,
    varying_settings,
)
from .latex import write_latex
from .page import FigureRef, Report, Section, Table, write_html, write_markdown
from .plasticity_gap import REFERENCE_METHOD as FROM_SCRATCH
from .plasticity_gap import study_gaps

REFERENCE_METHOD = "l2_init"


def build_report(directory: str | Path | Sequence[str | Path], out: str | Path | None = None, *,
                 formats: Sequence[str] = ("png", "svg", "pdf"), max_bins: int = 50,
                 reps: int = 2000, seed: int = 0, results: Results | None = None) -> Path:
    """Write the report of ``directory`` — or of several results directories as one
    (:func:`~plasticlab.report.data.combine_results`), then ``out`` must be given — to ``out``
    (default ``directory/report``).

    Produces ``index.html`` (self-contained), ``report.md``, every table and figure as a LaTeX
    float (``latex/table-N.tex``, ``latex/figure-N.tex`` and ``latex/report.tex``:
    :mod:`plasticlab.report.latex`),
    ``runs.csv`` (when pandas is installed; the page says when it is not) and every figure as
    ``figures/<name>.{png,svg,pdf}``. Returns the path of ``index.html``. Bootstrap intervals use
    ``reps`` resamples drawn from ``seed`` (the report is reproducible). ``results``: the
    directories already read (:func:`load_results`, :func:`combine_results`; read here otherwise).
    """
    directories = [Path(directory)] if isinstance(directory, str | Path) else [Path(d) for d in directory]
    out = report_folder(directories, out)
    if results is None:
        results = combine_results([load_results(d) for d in directories])
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    ctx = ReportContext(fig_dir, tuple(formats), max_bins, reps, seed)
    sections = [_study_section(part, problem, optimizer, ctx, stream)
                for problem, optimizer in results.studies()
                for stream, part in results.streams(problem, optimizer)]
    aggregate = _aggregate_section(results, ctx)
    if aggregate is not None:
        sections.append(aggregate)
    if not results.configs:
        sections.append(Section("No finished runs", "The store holds no finished run yet."))
    counts = results.status_counts
    header = [*(f"results: {d.resolve()}" for d in directories),
              f"generated {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC} by plasticlab "
              f"{_version()}",
              f"runs: {counts['finished']} finished, {counts['running'] + counts['interrupted']} unfinished, "
              f"{counts['failed']} failed",
              "intervals: 95 % percentile bootstrap across seeds "
              f"({reps} resamples); IQM intervals: stratified bootstrap (rliable's definitions)"]
    if results.configs:
        header.append(_export_runs(results.runs, out / "runs.csv"))
    report = Report(f"plasticlab report — {' + '.join(d.resolve().name for d in directories)}", sections,
                    header, warnings=list(results.warnings))
    write_markdown(report, out / "report.md")
    write_latex(report, out / "latex")
    return write_html(report, out / "index.html")


def report_folder(directories: Sequence[str | Path], out: str | Path | None) -> Path:
    """Where the report of ``directories`` is written: ``out``, or the one directory's
    ``report/``; several directories without ``out`` (or none) are an error, before anything
    is read."""
    if not directories:
        raise ValueError("no results directory to report")
    if out is None and len(directories) > 1:
        raise ValueError(f"a report of {len(directories)} directories needs --out: where to write it")
    return Path(out) if out is not None else Path(directories[0]) / "report"


def _export_runs(runs: Sequence[dict], path: Path) -> str:
    """Write every run read (:attr:`Results.runs`) as CSV; the header line saying so."""
    from ..experiments.run_tables import write_runs_csv

    write_runs_csv(list(runs), path)
    return f"every run's config and summary: {path.name}"


class ReportContext:
    """What the parts of one report share: the folder and formats of its figures, the binning
    of long curves (``max_bins``), the bootstrap's resamples and seed, and the intervals
    computed so far (one bootstrap per set of values, however many tables quote it)."""

    def __init__(self, fig_dir: Path, formats: tuple[str, ...], max_bins: int, reps: int, seed: int):
        self.fig_dir, self.formats, self.max_bins, self.reps, self.seed = (
            fig_dir, formats, max_bins, reps, seed)
        self._intervals: dict[bytes, stats.Interval] = {}

    def save(self, stem: str, caption: str, draw: Callable[..., Any], /, *args, **kwargs) -> FigureRef:
        """The figure ``draw(*args, **kwargs)`` returns, saved in every format asked for.
        ``draw`` is called only when there is a format: a report built for its text alone
        (``formats=()``) spends nothing on figures, and its page names each one without an
        image file."""
        if not self.formats:
            return FigureRef(stem, caption, {})
        fig = draw(*args, **kwargs)
        return FigureRef(stem, caption, F.save_figure(fig, self.fig_dir, stem, self.formats))

    def interval(self, values: np.ndarray) -> stats.Interval:
        """The 95 % percentile-bootstrap interval of the mean of ``values``."""
        # The same totals appear in several tables: bootstrap each set of values once.
        key = np.asarray(values, dtype=float).tobytes()
        if key not in self._intervals:
            self._intervals[key] = stats.bootstrap_ci(values, reps=self.reps, seed=self.seed)
        return self._intervals[key]


def _study_title(problem: str, optimizer: str) -> str:
    return f"{problem_title(problem)} · {optimizer_title(optimizer)}"


def _pct(i: stats.Interval, digits: int = 2) -> str:
    if math.isnan(i.point):
        return "—"
    if i.n < 2:
        return f"{100 * i.point:.{digits}f}"
    return f"{100 * i.point:.{digits}f} [{100 * i.lo:.{digits}f}, {100 * i.hi:.{digits}f}]"


def shown_interval(i: stats.Interval, measure: Measure) -> str:
    """An interval of ``measure``'s values as the tables show it: an accuracy in percent
    (:func:`_pct`), an error as it is, to 4 significant digits of its largest number (one
    number of decimals for the point and both bounds)."""
    if measure.percent:
        return _pct(i)
    if math.isnan(i.point):
        return "—"
    if i.n < 2:
        return measure.format(i.point)
    like = max((abs(v) for v in (i.point, i.lo, i.hi) if math.isfinite(v)), default=math.nan)
    return (f"{measure.format(i.point, like)} [{measure.format(i.lo, like)}, "
            f"{measure.format(i.hi, like)}]")


# Accuracy's captions predate regressions: they keep their words, an error's say which way is
# better wherever a reader could take a larger number for a better one.
def _lower(measure: Measure) -> str:
    return "" if measure.higher_is_better else " (lower is better)"


def _unit_or_direction(measure: Measure) -> str:
    return measure.unit_suffix() if measure.percent else _lower(measure)


def _per_task(measure: Measure) -> str:
    return "online task accuracy" if measure.higher_is_better else measure.name


def _measure_note(measure: Measure) -> str:
    """What a study's section says of its measure (nothing for the accuracy every reader
    expects)."""
    if measure.higher_is_better:
        return ""
    return (f" Runs are judged on the {measure.name}: each task's mean of (ŷ − y)² over its "
            "steps, each prediction made before the step that learns from it; lower is better, "
            "shown as it is.")


STREAM_WORDS = {"batch_size": ("batch {}", "batch{}"), "steps_per_task": ("{} steps a task", "{}steps"),
                "tasks": ("{} tasks", "{}tasks"), "data": ("on {}", "{}")}
"""How a section's title and its figures' file names name a stream setting (:meth:`Results.streams`)."""


def _study_section(results: Results, problem: str, optimizer: str, ctx: ReportContext,
                   stream: dict | None = None) -> Section:
    """The section of one study (problem × optimizer), or of one of its streams (``stream``:
    the settings that set it apart, :meth:`Results.streams`): its parts 1–6 of the module
    docstring, in that order."""
    study = results.studies()[(problem, optimizer)]
    headline, how = results.headline(problem, optimizer)
    headline.sort(key=lambda c: method_order(c.method))
    stream = dict(stream or {})
    data = {stream_setting(c.config, "data") for c in study}
    if "data" not in stream and data != {None}:
        stream["data"] = data.pop()  # the one data set of a study on a user's images: named too
    stream = {k: Path(v).name if k == "data" else v for k, v in stream.items()}
    stem = "-".join([f"{problem}-{optimizer}",
                     *(STREAM_WORDS[k][1].format(Path(v).stem if k == "data" else v)
                       for k, v in stream.items())])
    cfg = headline[0].config
    text = (f"{cfg['tasks']} tasks × {cfg['steps_per_task']} steps, batch {cfg['batch_size']}; "
            f"{len(study)} configuration(s), {sum(c.n for c in study)} finished run(s). "
            f"Each method (each form of it) is shown by one configuration" + (f" ({how})." if how else ".")
            + _measure_note(results.measure(problem, optimizer)))
    title = " · ".join([_study_title(problem, optimizer), *(
        STREAM_WORDS[k][0].format(f"{v:,}" if isinstance(v, int) else v) for k, v in stream.items())])
    section = Section(title, text)
    _add_online_accuracy(section, headline, stem, ctx)
    _add_total_accuracy(section, headline, stem, ctx)
    _add_plasticity_gap(section, headline, stem, ctx)
    # 2b. plasticity over the run: the first, best and last windows of tasks
    plasticity = _plasticity_table(headline, ctx)
    if plasticity is not None:
        section.tables.append(plasticity)
    _add_improvement(section, headline, stem, ctx)
    _add_internals(section, headline, stem, ctx)
    _add_forgetting(section, headline, stem, ctx)
    _sweep_views(results, study, headline, section, stem, ctx)
    return section


def _add_online_accuracy(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 1: the figure of the study's measure (online accuracy, or a regression's online
    squared error) vs task, one band per method."""
    m = headline[0].measure
    reported = headline[0].reported
    note = binning_note(len(reported), ctx.max_bins)
    hard = " (hard tasks only)" if len(reported) < headline[0].online.shape[1] else ""
    section.figures.append(ctx.save(
        f"{stem}-{m.metric}",
        f"Average {_per_task(m)} vs task{hard}{_lower(m)}; line = mean over seeds, band = 95 % "
        f"bootstrap interval. {note}".strip(),
        _curves_figure, [(c, c.online, np.arange(c.online.shape[1]), c.reported) for c in headline], ctx,
        xlabel="task", ylabel=f"average {_per_task(m)}", title=f"{section.title}: {m.name}{hard}",
        note=note, percent=m.percent))


def _add_total_accuracy(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 2: the total of the study's measure per method, mean and IQM with their
    intervals: a figure and a table (with the last task's test accuracy where it was
    measured; a regression has no test set, and no such column)."""
    m = headline[0].measure
    totals = [(c, ctx.interval(c.total), stats.stratified_bootstrap_ci(
        c.total, statistic=stats.iqm, reps=ctx.reps, seed=ctx.seed)) for c in headline]
    section.figures.append(ctx.save(
        f"{stem}-total_{m.metric.removeprefix('online_')}",
        f"Total average {m.name} per method{_lower(m)}: mean over seeds with a 95 % bootstrap "
        "interval.",
        F.interval_figure, [F.Estimate(c.label, c.method, i.point, i.lo, i.hi, c.n) for c, i, _ in totals],
        xlabel=f"total average {m.name}", title=f"{section.title}: total {m.name}",
        percent=m.percent, value_format=None if m.percent else ".3g"))
    rows = [[marked_label(c.label, c.method), str(c.n), shown_interval(mean, m), shown_interval(iqm, m),
             *([_last_test_accuracy(c, ctx)] if m.percent else [])] for c, mean, iqm in totals]
    test_column = ["test acc., last task"] if m.percent else []
    test_note = "; test accuracy on the last reported task's held-out set" if m.percent else ""
    section.tables.append(Table(
        f"Total average {m.name}{_unit_or_direction(m)}",
        ["method", "n", "mean [95% CI]", "IQM [95% CI]", *test_column], rows,
        "mean: percentile bootstrap over seeds; IQM: interquartile mean over seeds with a "
        f"stratified-bootstrap interval{test_note}." + oracle_note(c.method for c in headline)))


def _last_test_accuracy(c: ConfigRuns, ctx: ReportContext) -> str:
    """The test accuracy (%) on the last reported task's held-out set, with its interval;
    "—" where it was not measured."""
    if "task_test_accuracy" not in c.metrics:
        return "—"
    return _pct(ctx.interval(c.metrics["task_test_accuracy"][:, c.reported[-1]]))


def _add_plasticity_gap(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 2, where the study has ``full_reset`` runs: the figure of each method's plasticity
    gap, task by task, seed by seed — the from-scratch runs' online accuracy minus its own, or
    on a regression its online squared error minus theirs (positive: worse than from scratch)."""
    gaps = study_gaps(headline)
    if not gaps:
        return
    m, scratch = headline[0].measure, method_title(FROM_SCRATCH)
    note = binning_note(len(gaps[0].runs.reported), ctx.max_bins)
    if m.higher_is_better:
        what = (f"the online accuracy of the {scratch} runs (every task learnt from "
                f"scratch) minus the method's, task by task on the same seed, in points")
        ylabel = f"plasticity gap: {scratch} − method"
    else:
        what = (f"the method's {m.name} minus that of the {scratch} runs (every task learnt "
                f"from scratch), task by task on the same seed")
        ylabel = f"plasticity gap: method − {scratch}"
    section.figures.append(ctx.save(
        f"{stem}-plasticity_gap",
        f"Plasticity gap: {what}; above 0 the "
        f"method learns the task worse than a fresh network. Line = mean over the shared seeds, "
        f"band = 95 % bootstrap interval. {note}".strip(),
        _curves_figure, [(g.runs, g.gap, np.arange(g.gap.shape[1]), g.runs.reported) for g in gaps], ctx,
        xlabel="task", ylabel=ylabel, title=f"{section.title}: plasticity gap", note=note,
        percent=m.percent))


def _add_improvement(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 3: the probability of improvement, a figure and a table (none with one method)."""
    poi = _improvement(headline, ctx)
    if poi is None:
        return
    estimates, table = poi
    m = headline[0].measure
    section.figures.append(ctx.save(
        f"{stem}-improvement", f"Probability that a run of the first method has a "
        f"{'higher' if m.higher_is_better else 'lower'} total {m.name} than a run of the second, "
        f"P(X {m.comparison} Y) + ½P(X = Y), with a 95 % stratified-bootstrap interval; 0.5 = no "
        "difference.",
        F.poi_figure, estimates, title=f"{section.title}: probability of improvement"))
    section.tables.append(table)


def _add_internals(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 4: each internal measurement (:data:`INTERNALS`) at every task end, when every
    method has it, and against the global step for the methods measured every N steps."""
    for name, ylabel in INTERNALS.items():
        percent = name in PERCENT_METRICS
        if all(name in c.metrics for c in headline):
            note = binning_note(headline[0].metrics[name].shape[1], ctx.max_bins)
            section.figures.append(ctx.save(
                f"{stem}-{name}", f"{ylabel[0].upper() + ylabel[1:]} at the end of each task; mean "
                f"and 95 % bootstrap band across seeds. {note}".strip(),
                _curves_figure, [(c, c.metrics[name], np.arange(c.metrics[name].shape[1]), None)
                                 for c in headline], ctx,
                xlabel="task", ylabel=ylabel, percent=percent, note=note, title=f"{section.title}: {ylabel}"))
        stepped = [c for c in headline if name in c.step_metrics]
        if stepped:
            steps_note = binning_note(stepped[0].step_metrics[name].shape[1], ctx.max_bins).replace(
                "tasks", "measurements")
            section.figures.append(ctx.save(
                f"{stem}-steps-{name}", f"{ylabel[0].upper() + ylabel[1:]} measured every N steps "
                f"(`--measure-every`); mean and 95 % bootstrap band across seeds. {steps_note}".strip(),
                _curves_figure, [(c, c.step_metrics[name], c.steps, None) for c in stepped], ctx,
                xlabel="step", ylabel=ylabel, percent=percent, note=steps_note,
                title=f"{section.title}: {ylabel}, every N steps"))


def _add_forgetting(section: Section, headline: list[ConfigRuns], stem: str, ctx: ReportContext) -> None:
    """Part 5, for the methods whose forgetting was measured: a table of BWT and one-step BWT,
    and each one's accuracy matrix."""
    forgetting = [c for c in headline if c.accuracy_matrix is not None]
    if not forgetting:
        return
    m = headline[0].measure
    section.tables.append(Table(
        "Forgetting", ["method", "n", f"total {m.abbreviation}{m.unit_suffix()}", "BWT (pp)",
                       "one-step BWT (pp)"],
        [[c.label, str(c.n), shown_interval(ctx.interval(c.total), m), _pct(ctx.interval(c.bwt)),
          _pct(ctx.interval(c.one_step_bwt))] for c in forgetting],
        "BWT = mean over m < T of A[T, m] − A[m, m]; one-step BWT = mean of A[m+1, m] − A[m, m] "
        "(A[j, m]: test accuracy on task m after task j); mean [95 % bootstrap CI] in "
        "percentage points."))
    for c in forgetting:
        with warnings.catch_warnings():  # above the diagonal every seed is NaN: stays NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            matrix = np.nanmean(c.accuracy_matrix, axis=0)
        section.figures.append(ctx.save(
            f"{stem}-accuracy_matrix-{_slug(_key_label(c))}",
            f"{c.label}: test accuracy (%) on task m after training on task j, mean over "
            f"{c.n} seed(s).",
            F.heatmap_figure, matrix, title=f"{c.label}: accuracy matrix (n={c.n})"))


PLASTICITY_MIN_TASKS = 20
"""Studies with fewer reported tasks get no plasticity table (a window would be 1 task)."""


def plasticity_windows(online: np.ndarray, reported: Sequence[int],
                       measure: Measure = ONLINE_ACCURACY) -> dict:
    """The windows of ``w = min(10, T // 10)`` consecutive reported tasks (T of them) that show
    plasticity loss, from ``online[s, t]`` (seed s's online accuracy on task t, or the
    ``measure`` its runs recorded): the first, the best (the window whose mean over seeds is
    best: the highest accuracy, the lowest error) and the last; returns ``w``, the best
    window's first task, and per seed the mean over each window (``first``, ``best``,
    ``last``, ``[seeds]``) and the loss: ``best − last`` for an accuracy, ``last − best`` for
    an error, so that a positive loss is plasticity lost either way."""
    tasks = np.asarray(reported)
    w = min(10, len(tasks) // 10)
    acc = online[:, tasks]
    rolling = np.stack([acc[:, i:i + w].mean(1) for i in range(len(tasks) - w + 1)], axis=1)
    best = int(np.argmax(measure.oriented(rolling.mean(0))))
    return {"w": w, "best_from": int(tasks[best]), "first": rolling[:, 0],
            "best": rolling[:, best], "last": rolling[:, -1],
            "loss": measure.oriented(rolling[:, best]) - measure.oriented(rolling[:, -1])}


def _plasticity_table(headline: list[ConfigRuns], ctx: ReportContext) -> Table | None:
    """Each method's online accuracy (a regression's online squared error) over its first,
    best and last windows of tasks, and the loss from best to last with its 95 % bootstrap
    interval; None for short studies."""
    if min(len(c.reported) for c in headline) < PLASTICITY_MIN_TASKS:
        return None
    m = headline[0].measure
    rows, w = [], None
    for c in headline:
        win = plasticity_windows(c.online, c.reported, m)
        w = win["w"]
        shown = {k: shown_interval(ctx.interval(win[k]), m) for k in ("first", "best", "last", "loss")}
        rows.append([marked_label(c.label, c.method), str(c.n), shown["first"],
                     f"{shown['best']} (from task {win['best_from']})", shown["last"], shown["loss"]])
    if m.higher_is_better:
        loss_column = "loss, best − last (points)"
        loss_text = "best window to the last is each seed's difference, in percentage points"
    else:
        loss_column = "loss, last − best"
        loss_text = "best window to the last is each seed's difference, last − best"
    return Table(
        f"Plasticity over the run: {m.name}{_unit_or_direction(m)} over windows of tasks",
        ["method", "n", f"first {w} tasks", f"best {w} tasks", f"last {w} tasks", loss_column], rows,
        f"Each column: the mean {m.name} over {w} consecutive reported tasks, mean over "
        f"seeds [95 % bootstrap CI]; best: the window whose mean over seeds is {m.best_word}. "
        f"The loss from the {loss_text}: "
        "plasticity lost over the run (0: none; negative: still improving).")


def _curves_figure(curves: Sequence[tuple[ConfigRuns, np.ndarray, np.ndarray, Sequence[int] | None]],
                   ctx: ReportContext, **figure):
    """:func:`figures.line_figure` of one :func:`curve_band` per ``(runs, values, x, points)``."""
    return F.line_figure([curve_band(c, values, x, ctx, points) for c, values, x, points in curves], **figure)


def curve_band(c: ConfigRuns, values: np.ndarray, x: np.ndarray, ctx: ReportContext,
          points: Sequence[int] | None = None) -> F.Band:
    """``values`` ``[seeds, points(, layers)]`` of ``c`` against ``x`` as a curve with its 95 %
    bootstrap band: layered metrics by their last hidden layer (the features the head reads),
    many points averaged in bins per seed first (:func:`binning_note` says how)."""
    if values.ndim == 3:
        values = values[:, :, -1]
    points = list(range(values.shape[1])) if points is None else list(points)
    _, per_seed, _ = bin_tasks(values, points, ctx.max_bins)
    _, x_binned, _ = bin_tasks(np.asarray(x, dtype=float)[None, :], points, ctx.max_bins)
    mean, lo, hi = stats.bootstrap_ci_columns(per_seed, reps=ctx.reps, seed=ctx.seed)
    return F.Band(c.label, c.method, x_binned[0], np.asarray(mean), np.asarray(lo), np.asarray(hi),
                  c.n)


def improvement_reference(headline: Sequence[ConfigRuns]) -> ConfigRuns:
    """The method the probability of improvement compares every other with: L2 Init where the
    study has it, else the configuration with the best mean total of the study's measure (the
    highest accuracy, the lowest error)."""
    ref = next((c for c in headline if c.method == REFERENCE_METHOD), None)
    if ref is None:
        ref = headline[0].measure.best(headline, lambda c: float(np.mean(c.total)))
    return ref


def _improvement(headline: list[ConfigRuns], ctx: ReportContext):
    if len(headline) < 2:
        return None
    m = headline[0].measure
    ref = improvement_reference(headline)
    estimates, rows = [], []
    for other in headline:
        if other is ref:
            continue
        # on the oriented totals P(X > Y) is P(X better than Y): P(X < Y) for an error
        i = stats.probability_of_improvement_ci(m.oriented(ref.total), m.oriented(other.total),
                                                reps=ctx.reps, seed=ctx.seed)
        label = f"{ref.label} {m.comparison} {other.label}"
        estimates.append(F.Estimate(label, ref.method, i.point, i.lo, i.hi, min(ref.n, other.n)))
        rows.append([marked_label(ref.label, ref.method), marked_label(other.label, other.method),
                     f"{ref.n} vs {other.n}", f"{i.point:.2f} [{i.lo:.2f}, {i.hi:.2f}]"])
    better = "" if m.higher_is_better else ": a lower error is the improvement"
    table = Table("Probability of improvement", ["X", "Y", "seeds", f"P(X {m.comparison} Y) [95% CI]"],
                  rows,
                  f"P(X {m.comparison} Y) + ½ P(X = Y) over runs' total {m.name}{better} "
                  "(Mann–Whitney U / nm); stratified-bootstrap interval."
                  + oracle_note(c.method for c in headline))
    return estimates, table


def marked_label(label: str, method: str) -> str:
    """``label`` with a † when ``method`` is a boundary oracle (told where tasks end)."""
    return f"{label} †" if method in METHODS and boundary_oracle(method) else label


def oracle_note(methods) -> str:
    """The footnote for † when any of ``methods`` is a boundary oracle, else nothing."""
    if any(m in METHODS and boundary_oracle(m) for m in methods):
        return f" † boundary oracle: {BOUNDARY_ORACLE_NOTE}."
    return ""


def _key_label(c: ConfigRuns) -> str:
    """``c``'s label with the method's key in place of its title (``l2_init strength=0.01``):
    file names as the command line names the method, whatever its title."""
    return " ".join([c.method, *c.label.split()[len(method_title(c.method).split()):]])


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in ".-" else "_" for ch in text)


def on_grid_seeds(results: Results, configs: list[ConfigRuns]) -> list[ConfigRuns]:
    """The configurations on their grid seeds only (a protocol's evaluation seeds removed), so
    every point of a sweep view averages comparable seeds."""
    eval_seeds = set((results.selection or {}).get("evaluation_seeds") or [])
    out = []
    for c in configs:
        kept = c.only_seeds([s for s in c.seeds if s not in eval_seeds])
        if kept is not None:
            out.append(kept)
    return out


def _sweep_views(results: Results, study: list[ConfigRuns], headline: list[ConfigRuns],
                 section: Section, stem: str, ctx: ReportContext) -> None:
    grid = on_grid_seeds(results, study)
    by_method: dict[str, list[ConfigRuns]] = {}
    for c in grid:
        by_method.setdefault(c.method, []).append(c)
    swept = {m: [k for k in varying_settings([c.config for c in cs]) if k != "method"]
             for m, cs in by_method.items() if len(cs) > 1}
    if not swept:
        return
    measure = study[0].measure
    # Ranking of every configuration on the grid seeds; on a long stream, with the online
    # accuracy of its first and last tasks, so that a sensitivity study shows which settings
    # lose plasticity, not only which score highest.
    long = min(len(c.reported) for c in grid) >= PLASTICITY_MIN_TASKS
    rows, w = [], None
    for method, configs in sorted(by_method.items(), key=lambda kv: method_order(kv[0])):
        ranked = sorted(configs, key=lambda c: -measure.rank(float(np.mean(c.total))))
        for rank, c in enumerate(ranked, 1):
            mark = "✓" if rank == 1 else ""
            row = [method_title(method), str(rank), _settings_text(c, swept.get(method, [])), str(c.n),
                   shown_interval(ctx.interval(c.total), measure)]
            if long:
                win = plasticity_windows(c.online, c.reported, measure)
                w = win["w"]
                row += [measure.format(win["first"].mean()), measure.format(win["last"].mean())]
            rows.append(row + [mark])
    windows = [f"first {w} tasks", f"last {w} tasks"] if long else []
    order = "" if measure.higher_is_better else f", {measure.best_word} first"
    total = f"total {measure.abbreviation}{measure.unit_suffix()}"
    section.tables.append(Table(
        "Configurations (grid seeds)", ["method", "rank", "settings", "n", total, *windows, "best"],
        rows,
        "Every configuration in the directory on its grid seeds (the protocol's evaluation seeds "
        f"excluded), ranked per method by mean total {measure.name}{order} — the protocol's selection "
        f"rule." + (f" First and last {w} tasks: the mean {measure.name}{measure.unit_suffix()} over those "
                    "tasks, mean over seeds." if long else "")))
    # One figure per swept setting: the accuracy along it, through each method's best config.
    settings = sorted({k for keys in swept.values() for k in keys})
    for setting in settings:
        lines = []
        for method, keys in swept.items():
            if setting in keys:
                lines.extend(_sweep_lines(method, by_method[method], keys, setting, ctx))
        if not lines:
            continue
        section.figures.append(ctx.save(
            f"{stem}-sweep-{_slug(setting)}",
            f"Total average {measure.name}{_lower(measure)} against {setting} on the grid seeds: "
            f"one line per value of the method's other swept setting when there is one with few "
            f"values, else through the method's best configuration (marked). Mean and 95 % "
            f"bootstrap interval.",
            F.sweep_figure, lines, param=setting, ylabel=f"total average {measure.name}",
            title=f"{section.title}: sensitivity to {setting}", percent=measure.percent))
    if results.selection:
        eval_seeds = set(results.selection.get("evaluation_seeds") or [])
        sel_rows = []
        for entry in results.selection.get("selected", []):
            if (entry["problem"], entry["optimizer"]) != (study[0].problem, study[0].optimizer):
                continue
            shown = next((c for c in headline if c.method == entry["method"]), None)
            if shown is not None and eval_seeds and not set(shown.seeds) <= eval_seeds:
                shown = None  # the headline fell back to the grid: no evaluation seed has run
            sel_rows.append([method_title(entry["method"]),
                             _setting_text(entry["lr"], entry["params"], sorted(entry["params"])),
                             f"{measure.format(entry['score'])} (n={entry['seeds']})",
                             str(entry["candidates"]),
                             f"{shown_interval(ctx.interval(shown.total), measure)} (n={shown.n})"
                             if shown else "not run yet",
                             paper_difference(entry)])
        if sel_rows:
            seeds = results.selection.get("evaluation_seeds")
            section.tables.append(Table(
                "Selection protocol", ["method", "selected", f"grid score{measure.unit_suffix()}",
                                       "candidates", f"evaluation{measure.unit_suffix()}",
                                       "the paper's reported best"], sel_rows,
                f"Selected by the {measure.best_word} mean total {measure.name} on the grid seeds, "
                "then run on " + (f"seeds {seeds[0]}–{seeds[-1]}" if seeds else "new seeds") +
                " (SPEC §6). The paper's reported best: the configuration the paper reports for "
                "the method (SPEC §6's tables) — \"same\", or the settings where the selection "
                "differs; \"—\" where the paper reports none."))


def _setting_text(lr: float, params: dict, keys) -> str:
    values = " ".join(f"{k}={params[k]:g}" if isinstance(params[k], float) else f"{k}={params[k]}"
                      for k in keys)
    return f"lr={lr:g} {values}".strip()


def paper_difference(entry: dict) -> str:
    """How the protocol's selection ``entry`` (a ``selection.json`` entry: problem, optimizer,
    method, lr, params) differs from the configuration the paper reports for that method
    (:data:`plasticlab.experiments.paper.BEST`): ``"same"``, the paper's value of each setting
    that differs (``"lr=0.001 threshold=0"``), or ``"—"`` where the paper reports none."""
    try:
        paper = best_config(entry["problem"], entry["method"], entry["optimizer"])
    except ValueError:
        return "—"
    differ = [k for k in sorted(paper["params"])
              if not math.isclose(float(entry["params"].get(k, float("nan"))), float(paper["params"][k]),
                                  rel_tol=1e-9, abs_tol=1e-12)]
    same_lr = math.isclose(float(entry["lr"]), float(paper["lr"]), rel_tol=1e-9)
    if same_lr and not differ:
        return "same"
    text = _setting_text(paper["lr"], paper["params"], differ)
    return text if not same_lr else text.removeprefix(f"lr={paper['lr']:g} ")


MAX_SWEEP_LINES = 4


def _sweep_lines(method: str, configs: list[ConfigRuns], keys: Sequence[str], setting: str,
                 ctx: ReportContext) -> list:
    """The total (accuracy, or a regression's error) of ``method`` along ``setting``: with
    exactly one other swept setting of at most ``MAX_SWEEP_LINES`` values (λ sensitivity at
    two step sizes), one line per value of it; otherwise one line through the best
    configuration, the other settings held there. The best configuration's point is marked."""
    flat = {id(c): flat_settings(c.config) for c in configs}
    best = configs[0].measure.best(configs, lambda c: float(np.mean(c.total)))
    anchor = flat[id(best)]
    others = [k for k in keys if k != setting]
    if len(others) == 1 and len({repr(flat[id(c)].get(others[0])) for c in configs}) <= MAX_SWEEP_LINES:
        other = others[0]
        groups: dict[str, list[ConfigRuns]] = {}  # in the order of the other setting's values
        for c in sorted(configs, key=lambda c: _sort_value(flat[id(c)].get(other))):
            groups.setdefault(repr(flat[id(c)].get(other)), []).append(c)
        labels = {k: f"{method_title(method)} {other}={_value_text(flat[id(g[0])].get(other))}"
                  for k, g in groups.items()}
    else:
        groups = {"": [c for c in configs if all(flat[id(c)].get(k) == anchor.get(k) for k in others)]}
        labels = {"": method_title(method)}
    lines = []
    for key, group in groups.items():
        points = sorted(((flat[id(c)].get(setting), c) for c in group),
                        key=lambda p: _sort_value(p[0]))
        if len(points) < 2 or not all(isinstance(v, (int, float)) for v, _ in points):
            continue
        intervals = [ctx.interval(c.total) for _, c in points]
        lines.append(F.SweepLine(
            labels[key], method, np.array([float(v) for v, _ in points]),
            np.array([i.point for i in intervals]), np.array([i.lo for i in intervals]),
            np.array([i.hi for i in intervals]), min(c.n for _, c in points),
            selected=float(anchor[setting]) if any(c is best for _, c in points) else None))
    return lines


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _sort_value(v):
    return (0, v) if isinstance(v, (int, float)) else (1, str(v))


def _settings_text(c: ConfigRuns, keys: Sequence[str]) -> str:
    flat = flat_settings(c.config)
    return " ".join(f"{k}={flat.get(k):g}" if isinstance(flat.get(k), float) else f"{k}={flat.get(k)}"
                    for k in keys) or "—"


def _aggregate_section(results: Results, ctx: ReportContext) -> Section | None:
    """IQM of the total online accuracy across the classification problems per optimizer ×
    method (stratified bootstrap over seeds per problem). A regression's online squared error
    is another measure, on another scale and the other way round: its studies are left out, and
    the section says so. So is a study of several streams (:meth:`Results.streams`: batch
    sizes, task lengths): it has a headline per stream and no one score for the problem."""
    problems_by_opt: dict[str, list[str]] = {}
    apart: dict[str, set[str]] = {}  # why → problems left out
    for problem, optimizer in results.studies():
        measure = results.measure(problem, optimizer)
        if measure != ONLINE_ACCURACY:
            apart.setdefault(f"judged on the {measure.name}, which is not averaged with "
                             "accuracies", set()).add(problem)
        elif len(results.streams(problem, optimizer)) > 1:
            apart.setdefault("trained on several streams (batch sizes or task lengths), each "
                             "with a headline of its own", set()).add(problem)
        else:
            problems_by_opt.setdefault(optimizer, []).append(problem)
    left_out = "".join(f" Left out: {', '.join(sorted(problems))}, {why}."
                       for why, problems in sorted(apart.items()))
    section = Section("Across problems", "Interquartile mean of total online accuracy over all "
                      "runs of all problems, with a stratified-bootstrap interval (seeds resampled "
                      "within each problem), per method shown by its headline configuration."
                      + left_out)
    for optimizer, problems in problems_by_opt.items():
        if len(problems) < 2:
            continue
        per_method: dict[str, list[np.ndarray]] = {}
        for problem in problems:
            for c in results.headline(problem, optimizer)[0]:
                per_method.setdefault(c.method, []).append(c.total)
        estimates, rows, skipped = [], [], []
        for method in sorted(per_method, key=method_order):
            columns = per_method[method]
            n = min(len(col) for col in columns)
            if len(columns) < len(problems):
                skipped.append(f"{method_title(method)} (on {len(columns)} of {len(problems)} problems)")
                continue
            # rliable's stratified bootstrap needs a runs × problems matrix: the first n seeds of each.
            scores = np.stack([col[:n] for col in columns], axis=1)
            i = stats.stratified_bootstrap_ci(scores, statistic=stats.iqm, reps=ctx.reps, seed=ctx.seed)
            estimates.append(F.Estimate(method_title(method), method, i.point, i.lo, i.hi, n))
            rows.append([method_title(method), str(n), _pct(i)])
        if not estimates:
            continue
        section.figures.append(ctx.save(
            f"all-{optimizer}-iqm", f"IQM over {len(problems)} problems ({optimizer}).",
            F.interval_figure, estimates, xlabel="IQM of total online accuracy",
            title=f"All problems · {optimizer}: IQM", note=f"{len(problems)} problems"))
        section.tables.append(Table(f"IQM across problems ({optimizer})", ["method", "seeds per problem",
                                                                            "IQM [95% CI] (%)"], rows,
                                    "Methods missing on some problems are left out: "
                                    + (", ".join(skipped) if skipped else "none.")))
    return section if section.figures else None


def _version() -> str:
    from .. import __version__

    return __version__


__all__ = ["build_report", "report_folder"]
