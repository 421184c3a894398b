"""The examples in examples/ stay runnable (tiny settings, real MNIST)."""

from __future__ import annotations

import pytest

from conftest import REPO, run_script


@pytest.mark.parametrize("script", ["l2_init_any_model.py", "baselines_any_model.py", "field_any_model.py"])
def test_example_runs_and_prints_a_per_task_table(script, data_dir, monkeypatch, capsys):
    out = run_script(REPO / "examples" / script, ["--data-dir", data_dir, "--tasks", "2", "--steps", "20"],
                     monkeypatch, capsys)
    lines = out.strip().splitlines()
    assert lines[0].split()[:3] == ["task", "baseline", "l2_init"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "1"]


def test_the_resume_example_ends_on_the_uninterrupted_weights_only_with_theta0(data_dir, monkeypatch, capsys):
    out = run_script(REPO / "examples" / "resume_any_model.py",
                     ["--data-dir", data_dir, "--tasks", "2", "--steps", "20"], monkeypatch, capsys)
    lines = out.strip().splitlines()
    assert lines[0].split()[:4] == ["task", "uninterrupted", "resumed", "resumed_without_theta0"]
    assert [line.split()[0] for line in lines[1:3]] == ["0", "1"]
    assert lines[-1] == ("final weights equal to the uninterrupted run's: resumed True, "
                         "resumed without θ₀ False")


def test_the_lambda_example_selects_on_the_grid_seeds_and_reports_on_new_ones(data_dir, monkeypatch, capsys):
    out = run_script(REPO / "examples" / "choose_lambda_any_model.py",
                     ["--data-dir", data_dir, "--tasks", "2", "--steps", "20", "--lambdas", "1e-2,1e-3",
                      "--grid-seeds", "2", "--new-seeds", "2"], monkeypatch, capsys)
    lines = out.strip().splitlines()
    assert lines[0].startswith("λ") and [line.split()[0] for line in lines[1:3]] == ["0.01", "0.001"]
    scores = {line.split()[0]: float(line.split()[1]) for line in lines[1:3]}
    best = max(scores, key=scores.get)
    assert lines[3].startswith(f"selected λ = {best}; on 2 new seeds")
    assert lines[4].startswith(f"  L2 Init λ {best}: ") and lines[5].startswith("  without L2 Init: ")
