"""The methods since the paper, judged by SPEC §12's fixed tests.

No claim of the paper is about Hare & Tortoise, SNR, TRAC or the other methods published since,
so no verdict of :mod:`plasticlab.report.claims` reads the field studies (``field-PROBLEM``,
``field-toolkit-PROBLEM``). What a reader wants of them is what the paper's claims ask of its own
methods, and the same fixed tests answer it, per method of a field study:

* **plasticity** — *keeps* it (claim 2's test: mean L ≤ 1 point), *loses* it (claim 1's: mean
  L ≥ 2 points, interval above 0), or neither;
* **mitigates** the Baseline's loss (claim 6's test: L ≤ ½ L_Baseline, :func:`~.claims.mitigates`);
* **L2 Init as good as or better** (claim 3's test: mean paired difference L2 Init − method in
  total online accuracy ≥ −0.5 points, :func:`~.claims.as_good_as_or_better`).

Each row also gives the method's total with its interval and its rank in the study. A method
that ran with another optimizer than Adam (UPGD, TRAC: optimizers, run on the Baseline's
network) is a row of its own, paired seed by seed with Adam's L2 Init.

The same tests read the paper's studies that no claim names (:data:`ROBUSTNESS_STUDIES`: SPEC
§7's batch sizes), one setting at a time — the Baseline and L2 Init at each batch size, each
compared with the other at its own batch size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..experiments.paper import PROBLEMS as PAPER_PROBLEMS
from ..methods import method_title
from ..optim import optimizer_title
from .claims import (
    HOLDS,
    Study,
    View,
    as_good_as_or_better,
    find_studies,
    in_points,
    interval,
    keeps_plasticity,
    loses_plasticity,
    markdown_cell,
    mitigates,
    paired_difference,
    rank_by_total,
    signed_points,
)
from .data import ConfigRuns

ROBUSTNESS_STUDIES = {"batch-size": "permuted_mnist"}
"""The paper's studies that no claim of SPEC §11 names, with their problem: judged here by the
same tests, one stream (batch size) at a time (:meth:`~.data.Results.streams`)."""

FIELD_STUDY = re.compile(r"field-(?:toolkit-)?(\w+)")
"""A field study's preset name: ``field-PROBLEM`` (SPEC §10's methods) or
``field-toolkit-PROBLEM`` (the other toolkits' methods, issue 47), on one of the paper's problems."""

KEEPS, LOSES, NEITHER = "keeps", "loses", "neither"
"""A method's plasticity verdict: keeps it (L ≤ 1), loses it (L ≥ 2, interval above 0), or neither."""


@dataclass(frozen=True)
class FieldRow:
    """One method of a field study judged: its name (with the optimizer where not Adam), step
    size, total online accuracy and plasticity loss L (points, [95 % interval]), rank by mean
    total, the three verdicts and the figures of the comparisons behind them."""

    study: str
    scale: str
    method: str
    lr: float
    total: str
    rank: str
    loss: str
    plasticity: str
    mitigates: str
    vs_l2_init: str
    l2_init_as_good: str

    def to_dict(self) -> dict:
        """The row as JSON."""
        return asdict(self)


def _entry_name(optimizer: str, method: str) -> str:
    return method_title(method) if optimizer == "adam" else \
        f"{optimizer_title(optimizer)} ({method_title(method)})"


def field_view(study: Study) -> View:
    """One configuration per method and optimizer of a field study (the best by mean total where
    a method ran several), keyed ``method`` for Adam, ``optimizer:method`` otherwise."""
    runs: dict[str, ConfigRuns] = {}
    for (problem, optimizer), configs in study.results.studies().items():
        if problem != study.problem:
            continue
        for c in configs:
            key = c.method if optimizer == "adam" else f"{optimizer}:{c.method}"
            if key not in runs or np.mean(c.total) > np.mean(runs[key].total):
                runs[key] = c
    return View(study, "", runs)


def judge_field_study(study: Study) -> list[FieldRow]:
    """Every method of a field study against the fixed tests (module docstring), in the order of
    their mean total, highest first; for a study of :data:`ROBUSTNESS_STUDIES`, each of its
    settings so (:meth:`~.claims.Study.views`: one per batch size), its rows named with it."""
    if study.kind == "robustness":
        return [row for view in study.views() for row in _judge_view(study, view, _setting(view))]
    return _judge_view(study, field_view(study), "")


def _setting(view: View) -> str:
    """How a row names its view's setting: ``batch B`` where the study's streams differ in their
    batch size (a task's steps follow it), else the view's own label."""
    return f"batch {view.stream['batch_size']}" if "batch_size" in view.stream else view.label


def _judge_view(study: Study, view: View, setting: str) -> list[FieldRow]:
    """The rows of ``view``'s methods (:func:`judge_field_study`), each named with ``setting``
    where there is one."""
    totals = {k: view.totals(k) for k in view.runs}
    order = sorted(view.runs, key=lambda k: -float(np.mean(totals[k])))
    rows = []
    for key in order:
        c = view.runs[key]
        optimizer, method = key.split(":") if ":" in key else ("adam", key)
        loss = view.losses(key)
        keeps, loses = keeps_plasticity(loss).verdict == HOLDS, loses_plasticity(loss).verdict == HOLDS
        rank, n, _ = rank_by_total(key, totals)
        mitigated = vs = as_good = "—"
        if "baseline" in view.runs and key != "baseline":
            mitigated = mitigates(loss, view.losses("baseline")).verdict
        if "l2_init" in view.runs and key != "l2_init":
            d = paired_difference(view.scores("l2_init", "total"), view.scores(key, "total"))
            vs = signed_points(d)
            as_good = as_good_as_or_better(view.scores("l2_init", "total"), view.scores(key, "total")).verdict
        name = _entry_name(optimizer, method) + (f" · {setting}" if setting else "")
        rows.append(FieldRow(study.name, study.scale, name, float(c.config["lr"]),
                             in_points(interval(totals[key])), f"{rank} of {n}", in_points(interval(loss)),
                             KEEPS if keeps else LOSES if loses else NEITHER, mitigated, vs, as_good))
    return rows


def field_kind(name: str) -> tuple[str, str, str, str] | None:
    """A field study's kind, problem, optimizer and configurations (as
    :func:`~.claims.study_kind` gives a claim's study) — or a study of
    :data:`ROBUSTNESS_STUDIES`'s —, or None for any other study."""
    if name in ROBUSTNESS_STUDIES:
        return "robustness", ROBUSTNESS_STUDIES[name], "adam", "the study's configurations"
    match = FIELD_STUDY.fullmatch(name)
    if not match or match[1] not in PAPER_PROBLEMS:
        return None
    return "field", match[1], "adam", "reference values"


def find_field_studies(paths: Iterable[str | Path]) -> list[Study]:
    """The field studies under ``paths`` (:func:`field_kind`) that hold finished runs and are
    not still training (:func:`~.claims.partial_note`), each loaded once."""
    return find_studies(paths, kind_of=field_kind)[0]


def judge_field(studies: Sequence[Study]) -> dict[str, list[FieldRow]]:
    """Each field study judged (:func:`judge_field_study`), keyed ``"STUDY · SCALE"`` as
    :func:`~.claims.claims_by_study` keys the claims' studies."""
    return {f"{s.name} · {s.scale}": judge_field_study(s) for s in studies}


FIELD_COLUMNS = ("method", "α", "total (%)", "rank", "L (points)", "plasticity",
                 "mitigates the Baseline's loss", "L2 Init − method (total)", "L2 Init as good or better")


def field_table(rows: Sequence[FieldRow]) -> str:
    """One field study's rows as a Markdown table (:data:`FIELD_COLUMNS`)."""
    lines = ["| " + " | ".join(FIELD_COLUMNS) + " |", "|---|---|---:|---:|---:|---|---|---:|---|"]
    for r in rows:
        cells = [r.method, f"{r.lr:g}", r.total, r.rank, r.loss, f"**{r.plasticity}**", r.mitigates,
                 r.vs_l2_init, r.l2_init_as_good]
        lines.append("| " + " | ".join(map(markdown_cell, cells)) + " |")
    return "\n".join(lines) + "\n"


FIELD_TITLE = "The field since the paper, and batch size, by the same tests"
"""The title of ``claims.md``'s field section."""
FIELD_CRITERIA = (
    "Each method of a field study by SPEC §12's fixed tests (no claim of the paper is about "
    "these methods): **plasticity** keeps (mean L ≤ 1 point, claim 2's test), loses (mean L ≥ 2 "
    "points with its interval above 0, claim 1's) or neither; **mitigates** the Baseline's loss "
    "(L ≤ ½ L_Baseline, claim 6's; where the Baseline loses < 2 points, unless it loses "
    "plasticity itself); **L2 Init as good or better** (mean paired difference in total ≥ −0.5 "
    "points, claim 3's). Means over seeds [95 % bootstrap interval], paired by seed; UPGD and "
    "TRAC are optimizers, run on the Baseline's network. The `batch-size` study (SPEC §7; no "
    "claim names batch size) by the same tests, one batch size at a time: its Baseline and L2 "
    "Init, each at its best step size there.")
"""The field section's criteria, in words."""


def field_markdown(judged: dict[str, list[FieldRow]]) -> str:
    """The field section of ``claims.md``: its criteria, then one table per study ("" when no
    field study was read)."""
    if not judged:
        return ""
    lines = [f"## {FIELD_TITLE}", "", FIELD_CRITERIA]
    for key, rows in judged.items():
        lines += ["", f"### {key}", "", field_table(rows).rstrip("\n")]
    return "\n".join(lines) + "\n"


def field_text(judged: dict[str, list[FieldRow]]) -> str:
    """The field studies' rows for a terminal, a line per method."""
    out = []
    for key, rows in judged.items():
        robustness = key.partition(" · ")[0] in ROBUSTNESS_STUDIES
        out.append(f"{'by the same tests' if robustness else 'the field'}: {key}")
        for r in rows:
            versus = (f"L2 Init − it {r.vs_l2_init} ({r.l2_init_as_good})" if r.vs_l2_init != "—"
                      else "the reference")
            out.append(f"  {r.method:<34} total {r.total:<22} L {r.loss:<22} {r.plasticity:<8} "
                       f"mitigates: {r.mitigates:<14} {versus}")
        out.append("")
    return "\n".join(out)



def field_notes_dropped(notes: Sequence[str], studies: Sequence[Study]) -> list[str]:
    """``notes`` (:func:`~.claims.find_studies`' on the folders no claim reads) without those on
    the field studies, which the field section reads."""
    return [n for n in notes if not any(n.startswith(f"{s.folder}: ") for s in studies)]


def claims_and_field_markdown(verdicts, notes: Sequence[str], studies: Sequence[Study]) -> str:
    """What ``plasticlab claims --markdown`` writes: the claims (:func:`~.claims.claims_markdown`),
    then the field section for ``studies`` (:func:`field_markdown`), then the folders not read."""
    from .claims import claims_markdown

    judged = judge_field(studies)
    text = claims_markdown(verdicts, [])
    if judged:
        text += "\n" + field_markdown(judged)
    left = field_notes_dropped(notes, studies)
    return text + ("\nFolders not read: " + "; ".join(left) + ".\n" if left else "")
