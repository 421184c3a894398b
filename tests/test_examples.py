"""The examples in examples/ stay runnable (tiny settings, real MNIST)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
@pytest.mark.parametrize("script", ["l2_init_any_model.py", "baselines_any_model.py", "field_any_model.py"])
def test_example_runs_and_prints_a_per_task_table(script, data_dir):
    proc = subprocess.run([sys.executable, str(REPO / "examples" / script), "--data-dir", str(data_dir),
                           "--tasks", "2", "--steps", "20"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["task", "baseline", "l2_init"]
    assert [line.split()[0] for line in lines[1:]] == ["0", "1"]
