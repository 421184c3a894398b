"""One table of a study's results, its columns chosen by name: for a page or a paper.

A page that quotes a study's numbers asks for them here rather than copying them from the
report: ``plasticlab report DIR --table "total, first, best, last, loss, seed s.d."`` prints the
table (``--latex``: as a float), and ``docs/reproduction/generate.py`` writes it into a page's
``<!-- generated: results FOLDER · COLUMNS -->`` block; :func:`side_by_side_table` sets one
column of several studies side by side (``--side-by-side``). One row per method of the study's
headline (the protocol's selection on its evaluation seeds where the study ran one, else each
method's best), best total first; the paper's method, L2 Init, in bold. Settings may be columns
of their own, the rows grouped by them (``by``: ``--by strength``; several problems or streams
in one table), and every configuration a row (``configurations``: a sensitivity study's table).
Every interval is the report's: a 95 % percentile bootstrap over seeds (``reps`` resamples
drawn from ``seed``), so a table's numbers are the report's to the digit.

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

import dataclasses
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
    improvement_reference,
    marked_label,
    on_grid_seeds,
    oracle_note,
    plasticity_windows,
    shown_interval,
)
from .claims import Scores, cbp_redo_form, paired_difference, signed_points
from .data import (
    STREAM_SETTINGS,
    ConfigRuns,
    Results,
    config_key,
    flat_settings,
    method_form,
    varying_settings,
)
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
                  by: Sequence[str] | str = (), configurations: bool = False, reps: int = 2000,
                  seed: int = 0) -> str:
    """The Markdown table of ``results`` with ``columns`` (:func:`parse_columns`'s names, or its
    text): :func:`study_table` as a pipe table."""
    return markdown_table(study_table(results, columns, methods=methods, by=by,
                                      configurations=configurations, reps=reps, seed=seed)) + "\n"


def side_by_side(named: Sequence[tuple[str, Results]], column: str, *, methods: Sequence[str] = (),
                 reps: int = 2000, seed: int = 0) -> str:
    """:func:`side_by_side_table` as a Markdown pipe table."""
    return markdown_table(side_by_side_table(named, column, methods=methods, reps=reps, seed=seed)) + "\n"


def study_table(results: Results, columns: Sequence[str] | str, *, methods: Sequence[str] = (),
                by: Sequence[str] | str = (), configurations: bool = False, reps: int = 2000,
                seed: int = 0) -> Table:
    """The table of ``results`` with ``columns`` (:func:`parse_columns`'s names, or its text),
    one row per method of each optimizer's headline, best total first, and a note saying what
    its columns hold. Where the runs used several optimizers (a field study's UPGD beside its
    Adam methods), the rows of all but the most common one name theirs: ``UPGD (Baseline)``.
    ``methods``: only the rows of these methods (their keys: ``cbp``), where given.

    ``by`` (:func:`parse_settings`): settings shown as the first columns, the rows grouped by
    them in increasing order and best total first within a group, each method's headline taken
    within each group (each method's best under each initialisation scheme), each setting a
    column of its own rather than a part of the row's label; a study of several problems or
    streams (the ``batch-size`` study's batch sizes) is one table when these settings tell its
    parts apart.
    ``configurations``: a row for every configuration (a protocol's on its grid seeds) instead
    of each method's headline — a sensitivity study's table — the paper's method no longer in
    bold, as every row may be of it."""
    names = parse_columns(columns) if isinstance(columns, str) else parse_columns(", ".join(columns))
    settings = parse_settings(by, results)
    if "lr" in settings and "lr" in names:
        raise ValueError("table: lr is named both as a column and in by; name it once")
    headers, rows = _table(results, names, only_methods(methods, [results]), reps, seed, settings,
                           configurations)
    return Table(table_title(results), [*(_setting_header(k) for k in settings), "method", *headers],
                 [[*_group_key(c, settings),
                   label if configurations else _bold(label, c), *cells] for label, c, cells in rows],
                 _note(names, [c for _, c, _ in rows], settings)
                 + (_CONFIGURATIONS_NOTE[bool(results.selection)] if configurations else ""))


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
    only = only_methods(methods, [results for _, results in named])
    tables = [_table(results, names, only, reps, seed) for _, results in named]
    cells = [{label: row_cells[0] for label, _, row_cells in rows} for _, rows in tables]
    runs = {label: c for _, rows in tables for label, c, _ in rows}  # the first study's order first
    header = tables[0][0][0]
    return Table(" | ".join(table_title(results) for _, results in named),
                 ["method", *(f"{header} · `{study}`" for study, _ in named)],
                 [[_bold(label, c), *(by_label.get(label, "—") for by_label in cells)]
                  for label, c in runs.items()],
                 _note(names, list(runs.values())) + " —: the study has no such run.")


def table_title(results: Results) -> str:
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


def _note(names: Sequence[str], runs: Sequence[ConfigRuns], settings: Sequence[str] = ()) -> str:
    """What the columns ``names`` (after those of the ``settings``) hold, one clause each, and
    the † of a boundary oracle."""
    notes = {**SETTING_NOTES, **_notes(runs[0].measure)}
    kinds = [k for k in settings if k in notes]
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
    return (text + "." if text else "") + oracle_note(c.method for c in runs)


def only_methods(methods: Sequence[str], studies: Sequence[Results]) -> frozenset[str] | None:
    """``methods`` as a set (None: every method), each checked to be in one of ``studies``."""
    if not methods:
        return None
    held = {c.method for results in studies for configs in results.studies().values() for c in configs}
    missing = [m for m in methods if m not in held]
    if missing:
        raise ValueError(f"methods {', '.join(missing)}: no such runs here; the runs are of "
                         f"{', '.join(sorted(held))}")
    return frozenset(methods)


def _table(results: Results, names: list[str], only: frozenset[str] | None, reps: int, seed: int,
           settings: Sequence[str] = (), configurations: bool = False
           ) -> tuple[list[str], list[tuple[str, ConfigRuns, list[str]]]]:
    """The headers of the columns ``names`` and the rows (of the methods ``only``, or all), in
    :func:`_rows`' order: each its label, its configuration's runs and its cells. A column's
    cells are computed over each group of rows that share their ``settings`` (the whole table
    where there are none), so that a difference or a probability of improvement compares rows
    of one problem and one stream."""
    rows = _rows(results, only, settings, configurations, shown=("lr",) if "lr" in names else ())
    groups: dict[tuple, list[int]] = {}
    for i, (_, c) in enumerate(rows):
        groups.setdefault(_group_key(c, settings), []).append(i)
    headers: list[str] = []
    cells: list[list[str]] = [[] for _ in rows]
    for at in groups.values():
        for j, name in enumerate(names):
            header, column = _column(name, [rows[i][1] for i in at], results, reps, seed)
            if j == len(headers):
                headers.append(header)
            elif headers[j] != header:
                raise ValueError(f"table column {name!r} means {headers[j]!r} for some rows and "
                                 f"{header!r} for others; ask for it in a table of each")
            for i, cell in zip(at, column, strict=True):
                cells[i].append(cell)
    return headers, [(label, c, row_cells) for (label, c), row_cells in zip(rows, cells, strict=True)]


def _bold(label: str, c: ConfigRuns) -> str:
    """``label`` in bold where ``c`` is of the paper's method."""
    return f"**{label}**" if c.method == PAPER_METHOD else label


def _rows(results: Results, only: frozenset[str] | None, settings: Sequence[str],
          configurations: bool, shown: Sequence[str] = ()) -> list[tuple[str, ConfigRuns]]:
    """The table's rows, each its label and its runs: every problem's and every stream's
    headline (or every configuration), of the methods ``only`` (or all), ordered by
    ``settings`` and then best total first. Rows of several problems or streams must be told
    apart by ``settings``; rows of several measures cannot share a table. A label leaves out
    the settings in columns of their own: ``settings`` and ``shown``."""
    problems = sorted({p for p, _ in results.studies()})
    gathered = [row for problem in problems
                for row in _gather(results, problem, configurations=configurations, streams=True,
                                   settings=settings)
                if only is None or row[0].method in only]
    if not gathered:
        raise ValueError(f"{results.directory}: none of the methods {', '.join(sorted(only or ()))}")
    parts_of: dict[tuple, set] = {}
    for c, _, part in gathered:
        parts_of.setdefault(_group_key(c, settings), set()).add(part)
    if any(len(parts) > 1 for parts in parts_of.values()):
        parts = {part for _, _, part in gathered}
        need = ((["problem"] if len({p for p, _ in parts}) > 1 else [])
                + [k for k in STREAM_SETTINGS if len({dict(s).get(k) for _, s in parts}) > 1])
        what = "problems" if len({p for p, _ in parts}) > 1 else "streams (batch sizes or task lengths)"
        raise ValueError(f"{results.directory}: its runs are of several {what}, which a table's rows "
                         f"must tell apart: add {' or '.join(need)} to its settings (--by)")
    measures = {c.measure.name for c, _, _ in gathered}
    if len(measures) > 1:
        raise ValueError(f"{results.directory}: its problems measure different things "
                         f"({', '.join(sorted(measures))}); give each kind a table of its own (--methods)")
    m = gathered[0][0].measure
    gathered.sort(key=lambda row: (tuple(_setting_order(k, row[0]) for k in settings),
                                   -float(np.mean(m.oriented(row[0].total)))))
    return [(_label(c, None if "optimizer" in settings else optimizer, _hidden(c, [*settings, *shown])), c)
            for c, optimizer, _ in gathered]


def _gather(results: Results, problem: str, *, configurations: bool = False, streams: bool = False,
            settings: Sequence[str] = ()) -> list[tuple[ConfigRuns, str | None, tuple]]:
    """The configurations of ``problem``: each optimizer's headline (``configurations``: every
    configuration, a protocol's on its grid seeds), each with the optimizer its label must name
    (all but the most common one's; None) and its part (the problem and its stream's settings).
    The headline is taken in each stream and, with ``settings``, among the configurations
    that share their values (each method's best at each λ, each initialisation scheme …: the
    protocol's selection where the group holds it). Runs of several streams (``streams`` False)
    are refused: a figure is of one."""
    studies = results.studies()
    by_optimizer: dict[str, list[tuple[ConfigRuns, tuple]]] = {}
    for optimizer in (o for p, o in studies if p == problem):
        parts = results.streams(problem, optimizer)
        if len(parts) > 1 and not streams:
            raise ValueError(f"{results.directory}: its {problem} · {optimizer} runs learn several "
                             "streams (batch sizes or task lengths); a figure is of one "
                             "(`plasticlab report` gives a section to each)")
        by_optimizer[optimizer] = [
            (c, tuple(sorted(stream.items())))
            for stream, part in parts
            for c in (on_grid_seeds(part, part.studies()[(problem, optimizer)]) if configurations
                      else _headline_by(part, problem, optimizer, settings))]
    most = max(len(rows) for rows in by_optimizer.values())
    unnamed = [o for o, rows in by_optimizer.items() if len(rows) == most]
    unnamed = unnamed[0] if len(unnamed) == 1 else None
    return [(c, None if optimizer == unnamed else optimizer, (problem, stream))
            for optimizer, rows in by_optimizer.items() for c, stream in rows]


def _headline_by(part: Results, problem: str, optimizer: str, settings: Sequence[str]) -> list[ConfigRuns]:
    """The headline of ``part`` (one stream of ``problem`` × ``optimizer``) in each group of
    configurations that share their ``settings``' values (:meth:`Results.headline`'s choice,
    made within the group)."""
    groups: dict[tuple, list[ConfigRuns]] = {}
    for c in part.studies()[(problem, optimizer)]:
        groups.setdefault(_group_key(c, settings), []).append(c)
    if len(groups) == 1:
        return part.headline(problem, optimizer)[0]
    return [c for configs in groups.values()
            for c in dataclasses.replace(part, configs=configs).headline(problem, optimizer)[0]]


def headline_rows(results: Results, problem: str) -> list[tuple[str, ConfigRuns]]:
    """Each optimizer's headline configurations of ``problem`` (one stream), with the label of
    each row: a figure's curves (:mod:`.study_figure`)."""
    return [(_label(c, optimizer), c) for c, optimizer, _ in _gather(results, problem)]


def _label(c: ConfigRuns, optimizer: str | None, hidden: frozenset[str] = frozenset()) -> str:
    """``c``'s label — its method and the settings that tell it apart — without the settings
    ``hidden`` (shown in columns of their own), marked † for a boundary oracle, naming
    ``optimizer`` where given."""
    label = c.label
    if hidden:
        title = method_title(c.method)
        label = " ".join([title, *(part for part in label[len(title):].split()
                                   if part.split("=", 1)[0] not in hidden)])
    label = marked_label(label, c.method)
    return label if optimizer is None else f"{optimizer_title(optimizer)} ({label})"


SETTING_HEADERS = {"problem": "problem", "optimizer": "optimizer", "form": "form", "lr": "α",
                   "strength": "λ", "batch_size": "batch", "steps_per_task": "steps a task",
                   "init": "initialisation"}
"""The header of a setting's column (:func:`study_table`'s ``by``) where it is not the name."""

SETTING_NOTES = {"strength": "λ: the penalty's strength", "batch_size": "batch: the batch size",
                 "steps_per_task": "steps a task: the steps of each task",
                 "init": "initialisation: the network's initialisation scheme",
                 "form": "form: the method as plasticlab writes it or as its authors' code does"}
"""What a setting's column holds, for a table's note (``lr``'s is the ``lr`` column's)."""

PSEUDO_SETTINGS = ("problem", "optimizer", "form")
"""The ``by`` names that are not one of a run's settings as written: the problem and the
optimizer as papers name them, and a method's form (:func:`_form`)."""

_CONFIGURATIONS_NOTE = {False: " A row per configuration.",
                        True: " A row per configuration of the grid, on its grid seeds."}


def parse_settings(by: Sequence[str] | str, results: Results) -> list[str]:
    """The settings ``by`` names (a list, or comma-separated text), each checked against
    ``results``' runs: ``problem``, ``optimizer``, ``form`` (:func:`_form`) or a setting as
    :func:`~plasticlab.report.data.flat_settings` names it (``strength``, ``init``,
    ``batch_size``, ``problem.examples`` …)."""
    parts = by.split(",") if isinstance(by, str) else list(by)
    if isinstance(by, str) and not by.strip():
        return []
    names = [" ".join(str(part).split()) for part in parts]
    if not all(names):
        raise ValueError(f"settings {by!r}: an empty name between commas")
    held = {k for c in results.configs for k in flat_settings(c.config)} - {"method"}
    unknown = [n for n in names if n not in PSEUDO_SETTINGS and n not in held]
    if unknown:
        varying = [k for k in varying_settings([c.config for c in results.configs])
                   if k not in ("method", *PSEUDO_SETTINGS)]
        raise ValueError(f"settings {', '.join(unknown)}: no such setting in {results.directory}'s "
                         f"runs; name problem, optimizer, form or a setting its runs hold (those "
                         f"that vary: {', '.join(varying) or 'none'})")
    if len(set(names)) != len(names):
        raise ValueError(f"settings {by!r}: a setting named twice")
    return names


def _form(c: ConfigRuns) -> str | None:
    """``c``'s form of its method: plasticlab's or the authors' for CBP and ReDo
    (:func:`~plasticlab.report.claims.cbp_redo_form`), else its non-numeric method settings
    (:func:`~plasticlab.report.data.method_form`); None where the method has none."""
    if c.method in ("cbp", "redo"):
        return cbp_redo_form(c.config, c.optimizer)
    return " ".join(f"{k}={v}" for k, v in method_form(c.config)) or None


def _hidden(c: ConfigRuns, settings: Sequence[str]) -> frozenset[str]:
    """The settings ``c``'s label leaves out: those shown in columns, and with ``form`` the
    method settings that make it."""
    return frozenset([*settings, *((k for k, _ in method_form(c.config)) if "form" in settings else ())])


def _setting_value(key: str, c: ConfigRuns):
    return _form(c) if key == "form" else flat_settings(c.config).get(key)


def _setting_cell(key: str, c: ConfigRuns) -> str:
    """The setting ``key`` of ``c`` as its column shows it (``—``: the run has no such setting)."""
    if key == "problem":
        return problem_title(c.problem)
    if key == "optimizer":
        return optimizer_title(c.optimizer)
    value = _setting_value(key, c)
    if value is None:
        return "—"
    if isinstance(value, float):
        return _step_size(value)
    return str(value)


def _group_key(c: ConfigRuns, settings: Sequence[str]) -> tuple[str, ...]:
    """``c``'s cells of the ``settings``: its row's first cells, and the group it is in."""
    return tuple(_setting_cell(k, c) for k in settings)


def _setting_order(key: str, c: ConfigRuns) -> tuple:
    """Where ``c``'s setting ``key`` sorts: none first, then numbers in increasing order, then
    text in alphabetical order (a problem by its key)."""
    value = c.problem if key == "problem" else c.optimizer if key == "optimizer" else _setting_value(key, c)
    if value is None:
        return (0, 0.0, "")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    return (2, 0.0, str(value))


def _setting_header(key: str) -> str:
    return SETTING_HEADERS.get(key, key)


def _column(name: str, rows: list[ConfigRuns], results: Results, reps: int,
            seed: int) -> tuple[str, list[str]]:
    """The header and the cells, row by row, of the column ``name``."""
    m = rows[0].measure
    scale = 100 if m.percent else 1

    def interval(values) -> str:
        return shown_interval(stats.bootstrap_ci(values, reps=reps, seed=seed), m)

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
