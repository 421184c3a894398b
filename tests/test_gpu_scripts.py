"""The scripts a GPU machine runs (``docs/reproduction/gpu.sh``, ``benchmarks/gpu.sh``) work before
one is lent: a GPU session is minutes long, and a script that breaks there wastes them."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from conftest import REPO as ROOT

SCRIPTS = [ROOT / "docs" / "reproduction" / "gpu.sh", ROOT / "benchmarks" / "gpu.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_gpu_script_is_valid_bash_and_runs_every_test_marked_cuda(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    every_test_file = r"(tests/|\$\(grep -l 'mark\\\.cuda' tests/test_\*\.py\))"
    assert re.search(r"pytest .*-m cuda " + every_test_file, script.read_text())


def test_the_files_a_gpu_script_runs_hold_every_test_marked_cuda(request):
    # docs/reproduction/gpu.sh gives pytest the files that say `mark.cuda`; a test marked some
    # other way would not run there. The session's items are the whole suite's when the suite
    # runs (run alone, this file's: none marked, nothing to check).
    files = {path.name for path in (ROOT / "tests").glob("test_*.py") if "mark.cuda" in path.read_text()}
    marked = {item.path.name for item in request.session.items if item.get_closest_marker("cuda")}
    assert marked <= files, f"marked cuda, but the GPU script does not give pytest: {marked - files}"


def test_every_test_that_needs_cuda_is_marked_so_the_gpu_scripts_run_it():
    # A test skipped on its own condition instead of the marker would never run on a GPU machine.
    needle = "cuda" + ".is_available"  # spelt so that this line does not match itself
    own_skips = [f"{path.name}:{n}" for path in sorted((ROOT / "tests").glob("test_*.py"))
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if "skipif(" in line and needle in line]
    assert own_skips == [], "mark these @pytest.mark.cuda instead"


@pytest.mark.slow
def test_the_study_script_runs_without_a_gpu_and_compares_its_runs_with_the_committed_ones(tmp_path,
                                                                                          data_dir):
    out, runs = tmp_path / "out", tmp_path / "runs"
    env = dict(os.environ, DEVICE="cpu", RUNS_DIR=str(runs), PYTHONPATH=str(ROOT / "src"))
    # Two of the study's eight methods (the Baseline, L2 Init), on 2 of its 10 seeds (the script
    # hands its options to reproduce): the same steps as the whole study, a twentieth of the
    # training; in the driver's process (a worker process takes ~2 s of a core to start, and
    # the CPU test's point is the script's steps).
    proc = subprocess.run(["bash", str(SCRIPTS[0]), str(data_dir), str(out), "best-permuted_mnist-sgd",
                           "300", "--tasks", "1", "--only", "seed=100,101",
                           "--only", "method=baseline,l2_init", "--executor", "inline"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {"machine.txt", "cuda_tests.txt", "study.log", "status.txt", "results.json.gz",
            "run.json", "compare.txt"} <= {p.name for p in out.iterdir()}
    assert "skipped" in (out / "cuda_tests.txt").read_text()  # no CUDA here: collected, skipped
    log = (out / "study.log").read_text()
    assert "reproduce exited 0" in log and "4 finished runs" in log
    # the first task of the committed 500-task runs, on the CPU: the same runs, bit for bit
    compare = (out / "compare.txt").read_text()
    assert "4 run(s) in both" in compare and compare.count("2 the same bit for bit") == 2
    assert compare.rstrip().endswith("agree within the spread of their seeds")


@pytest.mark.slow
def test_the_grid_pace_counts_a_finished_protocol_study_whole(tmp_path, data_dir):
    # benchmarks/gpu.sh reads the protocol study's wall time or pace with grid_pace.py
    import sys
    import time

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import grid_pace

    sweep = {"name": "pace", "problem": "permuted_mnist", "methods": ["baseline", "l2_init"],
             "optimizer": "adam", "seeds": "0", "tasks": 1, "steps_per_task": 10,
             "grid": {"lr": [1e-3, 1e-4]}, "protocol": {"evaluation_seeds": "100-101"},
             "problem_params": {"examples_per_task": 160}}
    toml = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in sweep.items()
                     if k not in ("grid", "protocol", "problem_params"))
    toml += ('\n[grid]\nlr = [1e-3, 1e-4]\n[protocol]\nevaluation_seeds = "100-101"\n'
             '[problem_params]\nexamples_per_task = 160\n')
    (tmp_path / "pace.toml").write_text(toml)
    from plasticlab.cli import main

    started = time.time()
    # the sweep in this process (a driver or a worker process of its own would take ~2 s of a
    # core to start, and what is read is the results folder)
    assert main(["sweep", str(tmp_path / "pace.toml"), "--out", str(tmp_path / "out"), "--workers", "1",
                 "--executor", "inline", "--data-dir", str(data_dir), "--no-progress"]) == 0
    record = grid_pace.pace(tmp_path / "out", sweep, started, finished_at=time.time())
    # 2 methods × 2 step sizes × 1 seed, then 2 methods × 2 evaluation seeds, 10 steps each
    assert record["member_steps"] == record["member_steps_done"] == (4 + 4) * 10
    assert record["runs_finished"] == 8 and record["wall_s"] > 0


def test_the_philox_grid_is_the_protocol_with_every_draw_on_the_device(tmp_path):
    # benchmarks/gpu.sh's third grid run: main-permuted_mnist-adam as a sweep file whose
    # Shrink & Perturb and CBP draw with Philox, read back by the sweep's own TOML reader
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import philox_grid

    from plasticlab.experiments.presets import get_preset
    from plasticlab.experiments.sweep import expand
    from plasticlab.experiments.workflow import read_sweep_file

    sweep = philox_grid.philox_sweep()
    (tmp_path / "philox.toml").write_text(philox_grid.to_toml(sweep))
    written = read_sweep_file(tmp_path / "philox.toml")
    assert written == sweep
    runs, preset_runs = expand(written), expand(get_preset(philox_grid.STUDY))
    assert len(runs) == len(preset_runs) == 252  # the grid's runs, one for one
    draws = {r.config.method: r.config.params.get("draws") for r in runs}
    assert draws.pop("shrink_perturb") == draws.pop("cbp") == "philox"
    assert set(draws.values()) == {None}  # the other methods as the preset has them


def test_the_mps_script_is_valid_bash_and_without_mps_says_so_and_measures_nothing(tmp_path):
    # benchmarks/gpu_mps.sh: the local executor's grid under CUDA MPS, a second call after gpu.sh
    script = ROOT / "benchmarks" / "gpu_mps.sh"
    for bash in (script, ROOT / "benchmarks" / "gpu_lib.sh"):  # the lib: what gpu.sh shares with it
        assert subprocess.run(["bash", "-n", str(bash)], capture_output=True).returncode == 0
    env = dict(os.environ, PATH="/usr/bin:/bin")  # no nvidia-smi, no nvidia-cuda-mps-control
    done = subprocess.run(["bash", str(script), str(tmp_path / "data"), str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "MPS not measured" in (tmp_path / "out" / "grid_local-mps.txt").read_text()
    assert not (tmp_path / "out" / "grid_local_mps.json").exists()
