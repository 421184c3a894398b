"""The optional task-end measurements as a whole: asked for by name (none by default), member k
of an ensemble measured as seed k alone, training unchanged, and each one reachable from
`plasticlab run --measure`, a sweep's ``measure`` key and `plasticlab list`."""

from __future__ import annotations

import json

import pytest

from plasticlab.cli import main
from plasticlab.engine import train_ensemble
from plasticlab.experiments import ResultStore
from plasticlab.experiments.config import resolve_config
from plasticlab.measure.optional import MEASUREMENTS, parse_measurements
from plasticlab.run_config import Members

SMALL = {"problem": "permuted_mnist", "method": "l2_init", "tasks": 2, "steps_per_task": 5,
         "problem_params": {"examples_per_task": 320}}
EVERY = [name for names, _ in MEASUREMENTS.values() for name in names]


def test_names_are_checked_and_all_asks_for_every_one():
    assert parse_measurements("churn, hessian") == ("hessian", "churn")  # the registry's order
    assert parse_measurements("all") == tuple(MEASUREMENTS)
    assert parse_measurements(None) == () and parse_measurements("") == ()
    with pytest.raises(ValueError, match="unknown measurement.*hessain.*valid: effective_lr"):
        parse_measurements(["hessain"])


def test_member_k_measures_as_seed_k_alone_and_training_is_unchanged(data_dir):
    cfg = resolve_config(SMALL)
    together = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measurements="all",
                              measure_samples=32)
    alone = train_ensemble(Members.from_config(cfg, [1]), data_dir=data_dir, measurements="all",
                           measure_samples=32)
    plain = train_ensemble(Members.from_config(cfg, [1]), data_dir=data_dir, measure_samples=32)
    a, b, c = together.members[1], alone.members[0], plain.members[0]
    for name in EVERY:
        assert len(a.task_metrics[name]) == 2, name
        assert a.task_metrics[name] == b.task_metrics[name], name
        assert name not in c.task_metrics, name  # none by default
    assert a.task_online_accuracy == b.task_online_accuracy == c.task_online_accuracy
    assert {k: v for k, v in c.task_metrics.items()} == {k: b.task_metrics[k] for k in c.task_metrics}
    assert alone.extra["measurements"]["optional"] == list(MEASUREMENTS)
    assert "optional" not in plain.extra["measurements"]
    with pytest.raises(ValueError, match="need the task-end measurements on"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, measure=False,
                       measurements=["churn"])


def test_plasticlab_run_measure_records_them_and_list_names_them(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    args = ["run", "--problem", "permuted_mnist", "--method", "baseline", "--tasks", "2",
            "--steps-per-task", "5", "--set", "examples_per_task=320", "--data-dir", str(data_dir),
            "--out", str(out), "--no-progress", "--no-lock"]
    assert main([*args, "--measure", "all", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)["runs"][0]
    assert all(len(record[name]) == 2 for name in EVERY)
    assert len(record["distance_to_init_per_layer"][0]) == 3
    # the report draws each one's overall value; the compact export keeps it, not the per-layer lists
    from plasticlab.experiments.export import export_results, read_export
    from plasticlab.report.build import build_report
    from plasticlab.report.data import INTERNALS

    drawn = [name for name in EVERY if not name.endswith("_per_layer")]
    assert set(drawn) <= set(INTERNALS)
    build_report(out, tmp_path / "report", formats=())
    page = (tmp_path / "report" / "report.md").read_text()
    assert all(INTERNALS[name][0].upper() + INTERNALS[name][1:] in page for name in drawn)
    export_results(out, tmp_path / "export")
    (kept,) = read_export(tmp_path / "export" / "results.json.gz")[1].values()
    assert set(drawn) <= set(kept) and not any(name.endswith("_per_layer") for name in kept)
    assert main([*args, "--measure", "churn", "--json", "--rerun"]) == 0
    record = json.loads(capsys.readouterr().out)["runs"][0]
    assert "churn" in record and "hessian_top_eigenvalue" not in record
    assert main([*args, "--measure", "curvature"]) == 2
    assert "unknown measurement(s) curvature" in capsys.readouterr().err
    assert main([*args, "--measure", "churn", "--no-measure"]) == 2
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert all(f"  {name} " in listing for name in MEASUREMENTS)


def test_a_sweeps_measure_key_records_them_for_every_run(data_dir, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('name = "m"\nproblem = "permuted_mnist"\nmethods = ["baseline"]\nseeds = "0-1"\n'
                     'tasks = 2\nsteps_per_task = 5\nmeasure = "all"\n'
                     '[problem_params]\nexamples_per_task = 160\n')
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--no-progress",
                 "--executor", "inline", "--no-lock"]) == 0
    with ResultStore(out) as store:
        runs = store.runs(status="finished")
        assert len(runs) == 2
        for run in runs:
            metrics = store.task_metrics(run["run_id"])
            assert all(len(metrics[name]) == 2 for name in EVERY)
