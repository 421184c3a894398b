"""The methods since the paper judged by SPEC §12's tests (``plasticlab.report.field_verdicts``):
each verdict on synthetic runs whose answer is known, and the section ``plasticlab claims``
writes for the committed field studies."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from conftest import REPO
from plasticlab.cli import main
from plasticlab.report import field_verdicts as F
from plasticlab.report.claims import DOES_NOT_HOLD, HOLDS, Study
from plasticlab.report.data import ConfigRuns, Results

SEEDS = [100, 101, 102]
JITTER = np.array([[0.0], [0.01], [-0.01]])


def _runs(method: str, level, optimizer: str = "adam", tasks: int = 40) -> ConfigRuns:
    """Three seeds of ``method``: online accuracy ``level`` per task (a number: flat), the same
    small seed offsets on every method, so that paired differences are exact."""
    online = np.broadcast_to(np.asarray(level, dtype=float), (tasks,))[None, :] + JITTER
    config = {"problem": "permuted_mnist", "optimizer": optimizer, "method": method, "lr": 1e-3,
              "params": {}, "tasks": tasks, "steps_per_task": 625}
    return ConfigRuns(config, method, SEEDS, online, online.mean(axis=1), list(range(tasks)))


def _field_study(configs) -> Study:
    return Study("field-toolkit-permuted_mnist", Path("synthetic"), "field", "permuted_mnist", "adam",
                 "reference values", Results(Path("synthetic"), configs, Counter()), 1.0,
                 "full length (synthetic)")


def _rows() -> dict[str, F.FieldRow]:
    configs = [_runs("baseline", np.linspace(0.80, 0.60, 40)),     # loses 0.2 → 20 points
               _runs("l2_init", 0.80),                              # flat: keeps
               _runs("weight_clip", 0.78),                          # flat, 2 points below L2 Init
               _runs("dash", 0.83),                                 # flat, 3 points above L2 Init
               _runs("spectral", np.linspace(0.80, 0.785, 40)),     # loses 1.5 points: neither
               _runs("c_chain", np.linspace(0.80, 0.70, 40)),       # loses 10 of the Baseline's 20
               _runs("baseline", 0.74, optimizer="trac")]           # an optimizer: a row of its own
    return {r.method: r for r in F.judge_field_study(_field_study(configs))}


def test_a_flat_method_keeps_plasticity_a_falling_one_loses_it_and_a_slight_fall_is_neither():
    rows = _rows()
    assert rows["L2 Init"].plasticity == rows["Weight Clipping"].plasticity == F.KEEPS
    assert rows["Baseline"].plasticity == rows["C-CHAIN"].plasticity == F.LOSES
    assert rows["spectral regularisation"].plasticity == F.NEITHER


def test_mitigates_at_half_the_baselines_loss():
    rows = _rows()
    assert rows["Weight Clipping"].mitigates == HOLDS
    assert rows["C-CHAIN"].mitigates == HOLDS          # L = 10 of the Baseline's 20: exactly half
    assert rows["Baseline"].mitigates == "—"


def test_l2_init_as_good_or_better_is_claim_3s_test_paired_by_seed():
    rows = _rows()
    assert rows["Weight Clipping"].vs_l2_init == "+2.00 [+2.00, +2.00]"
    assert rows["Weight Clipping"].l2_init_as_good == HOLDS
    assert rows["DASH"].vs_l2_init == "-3.00 [-3.00, -3.00]"
    assert rows["DASH"].l2_init_as_good == DOES_NOT_HOLD
    assert rows["L2 Init"].vs_l2_init == rows["L2 Init"].l2_init_as_good == "—"


def test_rows_run_from_the_highest_total_and_an_optimizer_is_named_with_its_network():
    rows = list(_rows().values())
    assert [r.rank for r in rows] == [f"{i} of 7" for i in range(1, 8)]
    assert rows[0].method == "DASH" and rows[-1].method == "Baseline"
    assert "TRAC (Baseline)" in [r.method for r in rows]


def test_the_batch_size_study_is_judged_one_batch_size_at_a_time(tmp_path):
    # no claim names batch size: the same tests read the study, the Baseline and L2 Init compared
    # at each batch size apart (batch 32's runs score higher, and would hide batch 1's)
    from plasticlab.report.claims import _scale

    configs = []
    for batch, steps, lift in ((1, 10_000, 0.0), (32, 312, 0.05)):
        for method, level in (("baseline", np.linspace(0.80, 0.60, 40)), ("l2_init", 0.80)):
            c = _runs(method, np.asarray(level) + lift)
            c.config.update(batch_size=batch, steps_per_task=steps, tasks=500)
            configs.append(c)
    kind = F.field_kind("batch-size")
    assert kind == ("robustness", "permuted_mnist", "adam", "the study's configurations")
    study = Study("batch-size", tmp_path, *kind,
                  Results(tmp_path, configs, Counter()), 1.0, "full length (synthetic)")
    rows = {r.method: r for r in F.judge_field_study(study)}
    assert list(rows) == ["L2 Init · batch 1", "Baseline · batch 1",
                          "L2 Init · batch 32", "Baseline · batch 32"]
    assert rows["Baseline · batch 1"].vs_l2_init == rows["Baseline · batch 32"].vs_l2_init
    assert rows["L2 Init · batch 32"].rank == "1 of 2" and rows["L2 Init · batch 1"].plasticity == F.KEEPS
    assert rows["Baseline · batch 32"].plasticity == F.LOSES and rows["L2 Init · batch 1"].mitigates == HOLDS
    # each run against its own batch size's full length (a task: one pass over its images)
    assert _scale("batch-size", tmp_path, configs, "permuted_mnist") == (
        1.0, "full length (500 tasks × 312–10,000 steps)")
    for c in configs:
        c.config["tasks"] = 50
    assert _scale("batch-size", tmp_path, configs, "permuted_mnist") == (
        0.1, "shortened: 50 of 500 tasks × 312 of 312 steps")


def test_the_section_names_the_criteria_and_a_table_per_study():
    study = _field_study([_runs("baseline", np.linspace(0.8, 0.6, 40)), _runs("l2_init", 0.8)])
    text = F.field_markdown(F.judge_field([study]))
    assert text.startswith(f"## {F.FIELD_TITLE}\n") and "claim 3's" in text
    assert "### field-toolkit-permuted_mnist · full length (synthetic)" in text
    assert text.count("\n| L2 Init |") == 1 and F.field_markdown({}) == ""


def test_plasticlab_claims_judges_the_committed_field_studies(tmp_path, capsys):
    out_json, out_md = tmp_path / "out.json", tmp_path / "out.md"
    assert main(["claims", str(REPO / "docs" / "reproduction" / "field-permuted_mnist"),
                 "--json", str(out_json), "--markdown", str(out_md)]) == 0
    field = json.loads(out_json.read_text())["field"]
    (key, rows), = field.items()
    assert key.startswith("field-permuted_mnist · full length")
    assert {r["method"] for r in rows} >= {"L2 Init", "Baseline", "Hare & Tortoise", "UPGD (Baseline)"}
    assert all(r["plasticity"] in (F.KEEPS, F.LOSES, F.NEITHER) for r in rows)
    assert f"## {F.FIELD_TITLE}" in out_md.read_text()
    assert "the field: field-permuted_mnist" in capsys.readouterr().out
