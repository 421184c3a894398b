"""One table of a study's results, its columns chosen by name: for a page or a paper.

A page that quotes a study's numbers asks for them here rather than copying them from the
report: ``plasticlab report DIR --table "total, first, best, last, loss, seed s.d."`` prints the
table (``--latex``: as a float), and ``docs/reproduction/generate.py`` writes it into a page's
``<!-- generated: results FOLDER · COLUMNS -->`` block; :func:`side_by_side_table` sets one
column of several studies side by side (``--side-by-side``). One row per method of the study's
headline (the protocol's selection on its evaluation seeds where the study ran one, else each
method's best), best total first; the paper's method, L2 Init, in bold. Every interval is the
report's: a 95 % percentile bootstrap over seeds (``reps`` resamples drawn from ``seed``), so a
table's numbers are the report's to the digit.

The columns (``COLUMNS`` lists the names; ``A–B`` may be written ``A-B``):

``seeds``
    the number of seeds n.
``lr``
    the step size α (``1e-3``).
``total``
    the total average online accuracy (%), mean over seeds [95 % CI] (a regression: its online
    squared error).
``task T``
    the online accuracy on task T, mean over seeds, to one decimal.
``tasks A–B``
    the mean over tasks A to B (both included) and over seeds, to two decimals.
``first``, ``best``, ``last``
    the plasticity windows of the report's Table 2: the mean over ``w = min(10, T // 10)``
    consecutive reported tasks (T of them, 20 or more), mean over seeds [95 % CI]; the best
    window is the one whose mean over seeds is best, and its cell says where it starts.
``loss``
    best window − last window per seed (the report's loss; 0: none, negative: still
    improving), in points [95 % CI].
``L``
    the claims' plasticity loss (SPEC §12): each run's own best window of ``w = min(10, max(2,
    T // 10))`` tasks minus its last, mean over seeds [95 % CI], in points; at least ``loss``,
    which takes the window best on the mean over seeds.
``seed s.d.``
    the sample standard deviation (n − 1) of the seeds' totals, in points.
``difference``
    L2 Init's total minus the method's (an error: the method's minus L2 Init's), in points,
    paired by seed over the seeds both ran (the claims' comparison; unpaired where fewer than
    two are shared) [95 % CI]; against the best method where the study has no L2 Init.
``P(improvement)``
    P(L2 Init > method) + ½ P(=) over the seeds' totals, with its stratified-bootstrap interval
    (the report's probability of improvement: L2 Init against every other method, or the best
    method where the study has no L2 Init).
``weight magnitude``, ``srank``
    the measurement after the first and after the last reported task, mean over seeds (srank:
    also over the hidden layers), as ``first → last``.
``BWT``, ``one-step BWT``
    backward transfer and its one-step form (SPEC §4), in points [95 % CI]; studies that
    measured forgetting.
``grid score``
    the protocol's score of the selected configuration: its mean total over the grid seeds (%).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from ..experiments.protocol import Measure
from ..methods import method_title
from ..optim import optimizer_title
from ..problems import problem_title
from . import stats
from .build import (
    PLASTICITY_MIN_TASKS,
    _marked,
    _oracle_note,
    _shown,
    improvement_reference,
    plasticity_windows,
)
from .claims import Scores, paired_difference, signed_points
from .data import ConfigRuns, Results, config_key
from .page import Table, markdown_table
from .stats import plasticity_loss

COLUMNS = ("seeds", "lr", "total", "task T", "tasks A–B", "first", "best", "last", "loss", "L",
           "seed s.d.", "difference", "P(improvement)", "weight magnitude", "srank", "BWT", "one-step BWT",
           "grid score")
"""The column names :func:`results_table` knows (``T``, ``A``, ``B``: task numbers)."""

PAPER_METHOD = "l2_init"
"""The method whose rows are bold: the paper's."""

_TASK = re.compile(r"task (\d+)")
_TASKS = re.compile(r"tasks (\d+)\s*[–-]\s*(\d+)")


def parse_columns(text: str) -> list[str]:
    """The column names of ``text`` (comma-separated, as ``--table`` and a page's block take
    them), each checked against :data:`COLUMNS`; ``tasks A-B`` is written ``tasks A–B``."""
    names = [" ".join(part.split()) for part in text.split(",")]
    if not all(names):
        raise ValueError(f"table columns {text!r}: an empty name between commas")
    out = []
    for name in names:
        m = _TASKS.fullmatch(name)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if b < a:
                raise ValueError(f"table column {name!r}: the last task comes before the first")
            name = f"tasks {a}–{b}"
        elif not (_TASK.fullmatch(name) or name in COLUMNS):
            raise ValueError(f"table column {name!r} is not one of: {', '.join(COLUMNS)}")
        out.append(name)
    if len(set(out)) != len(out):
        raise ValueError(f"table columns {text!r}: a column named twice")
    return out


def results_table(results: Results, columns: Sequence[str] | str, *, methods: Sequence[str] = (),
                  reps: int = 2000, seed: int = 0) -> str:
    """The Markdown table of ``results`` (one problem, one stream) with ``columns``
    (:func:`parse_columns`'s names, or its text): :func:`study_table` as a pipe table."""
    return markdown_table(study_table(results, columns, methods=methods, reps=reps, seed=seed)) + "\n"


def side_by_side(named: Sequence[tuple[str, Results]], column: str, *, methods: Sequence[str] = (),
                 reps: int = 2000, seed: int = 0) -> str:
    """:func:`side_by_side_table` as a Markdown pipe table."""
    return markdown_table(side_by_side_table(named, column, methods=methods, reps=reps, seed=seed)) + "\n"


def study_table(results: Results, columns: Sequence[str] | str, *, methods: Sequence[str] = (),
                reps: int = 2000, seed: int = 0) -> Table:
    """The table of ``results`` (one problem, one stream) with ``columns``
    (:func:`parse_columns`'s names, or its text), one row per method of each optimizer's
    headline, best total first, and a note saying what its columns hold. Where the runs used
    several optimizers (a field study's UPGD beside its Adam methods), the rows of all but the
    most common one name theirs: ``UPGD (Baseline)``. ``methods``: only the rows of these
    methods (their keys: ``cbp``), where given."""
    names = parse_columns(columns) if isinstance(columns, str) else parse_columns(", ".join(columns))
    headers, rows = _table(results, names, _only(methods, [results]), reps, seed)
    return Table(_title(results), ["method", *headers],
                 [[_bold(label, c), *cells] for label, c, cells in rows],
                 _note(names, [c for _, c, _ in rows]))


def side_by_side_table(named: Sequence[tuple[str, Results]], column: str, *,
                       methods: Sequence[str] = (), reps: int = 2000, seed: int = 0) -> Table:
    """One column of :func:`study_table` for each of several studies, side by side: a row per
    method (by its row's label) in the order of the first study's table, then those the first
    lacks; ``—`` where a study has no such row. ``named``: (the name its column's header
    gives, the study's results), at least two; ``methods``: as :func:`study_table`'s."""
    names = parse_columns(column)
    if len(names) != 1 or len(named) < 2:
        raise ValueError(f"side by side: one column ({column!r}) of two studies or more "
                         f"({len(named)} given)")
    only = _only(methods, [results for _, results in named])
    tables = [_table(results, names, only, reps, seed) for _, results in named]
    cells = [{label: row_cells[0] for label, _, row_cells in rows} for _, rows in tables]
    runs = {label: c for _, rows in tables for label, c, _ in rows}  # the first study's order first
    header = tables[0][0][0]
    return Table(" | ".join(_title(results) for _, results in named),
                 ["method", *(f"{header} · `{study}`" for study, _ in named)],
                 [[_bold(label, c), *(by_label.get(label, "—") for by_label in cells)]
                  for label, c in runs.items()],
                 _note(names, list(runs.values())) + " —: the study has no such run.")


def _title(results: Results) -> str:
    """The problem and the optimizers of ``results``' runs, as the report names them."""
    problems = sorted({p for p, _ in results.studies()})
    optimizers = sorted({o for _, o in results.studies()})
    return f"{' + '.join(map(problem_title, problems))} · {', '.join(map(optimizer_title, optimizers))}"


def _notes(m: Measure) -> dict[str, str]:
    """What each kind of column holds, for a table's note (a paper's caption), in the words of
    the study's measure ``m`` (an accuracy in percent and points, or an error as it is)."""
    name, points = m.name, ", in points" if m.percent else ""
    loss = "best window's minus the last's" if m.higher_is_better else "last window's minus the best's"
    return {
        "lr": "α: the step size",
        "total": f"total: the total average {name}, mean over seeds [95 % bootstrap CI]",
        "task": f"task T: the {name} on task T, mean over seeds",
        "tasks": f"tasks A–B: the {name} over those tasks, mean over them and the seeds",
        "window": f"first, best, last: the {name} over the first, the best and the last window of "
                  "consecutive tasks, mean over seeds [95 % bootstrap CI]",
        "loss": f"loss: the {loss} {name}, per seed{points} [95 % bootstrap CI]",
        "L": f"L: the plasticity loss of SPEC §12, each run's own best window minus its last, mean "
             f"over seeds{points} [95 % bootstrap CI]",
        "seed s.d.": f"seed s.d.: the sample standard deviation (n − 1) of the seeds' totals{points}",
        "difference": "L2 Init − method: the difference of the totals, paired by seed "
                      f"(positive: L2 Init {'higher' if m.higher_is_better else 'lower'}) "
                      "[95 % bootstrap CI]",
        "P(improvement)": f"P: the probability of improvement over the seeds' totals ({m.direction}) "
                          "[stratified-bootstrap 95 % CI]",
        "measurement": "the measurements after the first and the last task, mean over seeds "
                       "(srank: and over the hidden layers)",
        "BWT": "BWT, one-step BWT: backward transfer and its one-step form, in points "
               "[95 % bootstrap CI]",
        "grid score": "grid score: the selected configuration's mean total over the grid seeds",
    }


def _note(names: Sequence[str], runs: Sequence[ConfigRuns]) -> str:
    """What the columns ``names`` hold, one clause each, and the † of a boundary oracle."""
    notes, kinds = _notes(runs[0].measure), []
    for name in names:
        kind = ("task" if _TASK.fullmatch(name) else "tasks" if _TASKS.fullmatch(name)
                else "window" if name in ("first", "best", "last")
                else "measurement" if name in ("weight magnitude", "srank")
                else "BWT" if name in ("BWT", "one-step BWT") else name)
        if kind in notes and kind not in kinds:
            kinds.append(kind)
    text = "; ".join(notes[k] for k in kinds)
    if text[:1].isascii():  # a sentence's capital, but α stays α (Α is another letter)
        text = text[:1].upper() + text[1:]
    return (text + "." if text else "") + _oracle_note(c.method for c in runs)


def _only(methods: Sequence[str], studies: Sequence[Results]) -> frozenset[str] | None:
    """``methods`` as a set (None: every method), each checked to be in one of ``studies``."""
    if not methods:
        return None
    held = {c.method for results in studies for configs in results.studies().values() for c in configs}
    missing = [m for m in methods if m not in held]
    if missing:
        raise ValueError(f"methods {', '.join(missing)}: no such runs here; the runs are of "
                         f"{', '.join(sorted(held))}")
    return frozenset(methods)


def _table(results: Results, names: list[str], only: frozenset[str] | None, reps: int,
           seed: int) -> tuple[list[str], list[tuple[str, ConfigRuns, list[str]]]]:
    """The headers of the columns ``names`` and the rows (of the methods ``only``, or all),
    best total first: each its label, its configuration's runs and its cells."""
    headline = [(label, c) for label, c in _headline(results) if only is None or c.method in only]
    if not headline:
        raise ValueError(f"{results.directory}: none of the methods {', '.join(sorted(only or ()))}")
    m = headline[0][1].measure
    ordered = sorted(headline, key=lambda row: -float(np.mean(m.oriented(row[1].total))))
    rows = [c for _, c in ordered]
    headers, columns = [], []
    for name in names:
        header, column = _column(name, rows, results, reps, seed)
        headers.append(header)
        columns.append(column)
    return headers, [(label, c, [column[i] for column in columns]) for i, (label, c) in enumerate(ordered)]


def _bold(label: str, c: ConfigRuns) -> str:
    """``label`` in bold where ``c`` is of the paper's method."""
    return f"**{label}**" if c.method == PAPER_METHOD else label


def _headline(results: Results, problem: str | None = None) -> list[tuple[str, ConfigRuns]]:
    """Each optimizer's headline configurations of the one problem ``results`` holds (or of
    ``problem``), with the label of each row."""
    studies = results.studies()
    problems = sorted({p for p, _ in studies})
    if problem is None:
        if len(problems) != 1:
            raise ValueError(f"{results.directory}: a table is of one problem; this holds "
                             f"{', '.join(problems) or 'none'}")
        problem = problems[0]
    by_optimizer = {}
    for optimizer in (o for p, o in studies if p == problem):
        if len(results.streams(problem, optimizer)) != 1:
            raise ValueError(f"{results.directory}: its {problem} · {optimizer} runs learn several "
                             "streams (batch sizes or task lengths); a table or a figure is of one "
                             "(`plasticlab report` gives a section to each)")
        by_optimizer[optimizer] = results.headline(problem, optimizer)[0]
    most = max(len(h) for h in by_optimizer.values())
    unnamed = [o for o, h in by_optimizer.items() if len(h) == most]
    unnamed = unnamed[0] if len(unnamed) == 1 else None
    return [(_label(c, None if optimizer == unnamed else optimizer), c)
            for optimizer, h in by_optimizer.items() for c in h]


def _label(c: ConfigRuns, optimizer: str | None) -> str:
    label = _marked(c.label, c.method)
    return label if optimizer is None else f"{optimizer_title(optimizer)} ({label})"


def _column(name: str, rows: list[ConfigRuns], results: Results, reps: int,
            seed: int) -> tuple[str, list[str]]:
    """The header and the cells, row by row, of the column ``name``."""
    m = rows[0].measure
    scale = 100 if m.percent else 1

    def interval(values) -> str:
        return _shown(stats.bootstrap_ci(values, reps=reps, seed=seed), m)

    if name == "seeds":
        return "seeds", [str(c.n) for c in rows]
    if name == "lr":
        return "α", [_step_size(c.config["lr"]) for c in rows]
    if name == "total":
        return f"total{m.unit_suffix()}", [interval(c.total) for c in rows]
    if task := _TASK.fullmatch(name):
        t = int(task.group(1))
        return f"task {t}", [_value(_task_values(c, t, t).mean(), m, 1) for c in rows]
    if tasks := _TASKS.fullmatch(name):
        a, b = int(tasks.group(1)), int(tasks.group(2))
        return f"tasks {a}–{b}", [_value(_task_values(c, a, b).mean(), m, 2) for c in rows]
    if name in ("first", "best", "last", "loss"):
        windows = [_windows(c) for c in rows]
        w = windows[0]["w"]
        if name == "loss":
            header = "loss, best − last (points)" if m.higher_is_better else "loss, last − best"
            return header, [interval(win["loss"]) for win in windows]
        cells = [interval(win[name]) for win in windows]
        if name == "best":
            cells = [f"{cell} (from task {win['best_from']})"
                     for cell, win in zip(cells, windows, strict=True)]
        return f"{name} {w} tasks", cells
    if name == "L":
        return f"L{' (points)' if m.percent else ''}", [
            interval(plasticity_loss(m.oriented(np.asarray(c.online)[:, c.reported]))) for c in rows]
    if name == "seed s.d.":
        return "seed s.d.", [f"{np.std(scale * np.asarray(c.total), ddof=1):.2f}" if c.n > 1 else "—"
                             for c in rows]
    if name == "difference":
        ref = improvement_reference(rows)

        def scores(c: ConfigRuns) -> Scores:
            return Scores(tuple(c.seeds), scale * np.asarray(m.oriented(c.total), dtype=float))

        # oriented, so that a positive difference is the reference's lead either way
        ref_title = method_title(ref.method)
        pair = (ref_title, "method") if m.higher_is_better else ("method", ref_title)
        return (f"{pair[0]} − {pair[1]} (total{', points' if m.percent else ''})",
                ["—" if c is ref else signed_points(paired_difference(scores(ref), scores(c),
                                                                      reps=reps, seed=seed))
                 for c in rows])
    if name == "P(improvement)":
        ref = improvement_reference(rows)
        cells = []
        for c in rows:
            if c is ref:
                cells.append("—")
                continue
            i = stats.probability_of_improvement_ci(m.oriented(ref.total), m.oriented(c.total),
                                                    reps=reps, seed=seed)
            cells.append(f"{i.point:.2f} [{i.lo:.2f}, {i.hi:.2f}]")
        return f"P({method_title(ref.method)} {m.comparison} method)", cells
    if name in ("weight magnitude", "srank"):
        metric = name.replace(" ", "_")
        digits = 3 if metric == "weight_magnitude" else 0
        # srank per layer: the mean over the hidden layers, as the pages' prose quotes it (the
        # report's figure draws the last hidden layer's)
        header = "srank (mean of the hidden layers)" if metric == "srank" else name
        return f"{header}, first → last task", [_first_last(c, metric, digits) for c in rows]
    if name in ("BWT", "one-step BWT"):
        attr = "bwt" if name == "BWT" else "one_step_bwt"
        missing = [c.label for c in rows if getattr(c, attr) is None]
        if missing:
            raise ValueError(f"table column {name!r}: {', '.join(missing)} did not measure forgetting "
                             "(run with --measure-forgetting)")
        return f"{name} (points)", [interval(getattr(c, attr)) for c in rows]
    if name == "grid score":
        return f"grid score{m.unit_suffix()}", [_grid_score(c, results) for c in rows]
    raise AssertionError(name)  # parse_columns admits only the names above


def _step_size(lr: float) -> str:
    """``lr`` as the paper writes a step size: ``1e-3`` for a power of ten, else as it is."""
    exponent = round(math.log10(lr)) if lr > 0 else 0
    return f"1e{exponent}" if lr > 0 and math.isclose(lr, 10.0 ** exponent, rel_tol=1e-9) else f"{lr:g}"


def _value(x: float, m: Measure, digits: int) -> str:
    """A value of the measure ``m`` as a table shows it: an accuracy in percent to ``digits``
    decimals, an error as its measure formats it."""
    return f"{100 * x:.{digits}f}" if m.percent else m.format(x)


def _task_values(c: ConfigRuns, a: int, b: int) -> np.ndarray:
    """``online[:, a..b]`` (tasks a to b, both included), which must all have been reported."""
    missing = [t for t in range(a, b + 1) if t not in c.reported]
    if missing:
        last = max(c.reported)
        raise ValueError(f"table column: {c.label} has no task {missing[0]} "
                         f"(its reported tasks run to task {last})")
    return np.asarray(c.online)[:, a:b + 1]


def _windows(c: ConfigRuns) -> dict:
    if len(c.reported) < PLASTICITY_MIN_TASKS:
        raise ValueError(f"table columns first/best/last/loss: {c.label} reported {len(c.reported)} "
                         f"tasks; the report's windows need {PLASTICITY_MIN_TASKS} or more (ask for "
                         "'task T' columns instead)")
    return plasticity_windows(c.online, c.reported, c.measure)


def _first_last(c: ConfigRuns, metric: str, digits: int) -> str:
    if metric not in c.metrics:
        raise ValueError(f"table column {metric.replace('_', ' ')!r}: {c.label}'s runs did not "
                         f"measure {metric}")
    values = np.asarray(c.metrics[metric], dtype=float)
    at = [c.reported[0], c.reported[-1]]
    first, last = (float(np.nanmean(values[:, t])) for t in at)
    return f"{first:.{digits}f} → {last:.{digits}f}"


def _grid_score(c: ConfigRuns, results: Results) -> str:
    key = config_key(c.config)
    for entry in (results.selection or {}).get("selected", []):
        if config_key(entry["config"]) == key:
            return _value(entry["score"], c.measure, 2)
    raise ValueError(f"table column 'grid score': {results.directory} records no protocol "
                     f"selection of {c.label} (a study run with the selection protocol has one)")
