"""The scripts that run the suite on other Pythons and torch releases
(``benchmarks/python_versions.sh``, ``benchmarks/torch_versions.sh``) parse and say what they
need: their whole runs take an hour and gigabytes of downloads, measured by hand
(docs/README.md#python-versions)."""

from __future__ import annotations

import subprocess

import pytest

from conftest import REPO as ROOT

SCRIPTS = [ROOT / "benchmarks" / "python_versions.sh", ROOT / "benchmarks" / "torch_versions.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_version_script_is_valid_bash_and_without_a_version_says_how_to_call_it(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stdout.startswith(f"usage: bash benchmarks/{script.name} ")


def test_a_python_that_is_not_there_is_named_and_fails_the_script(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPTS[0]), "9.99", "--", "--collect-only"], capture_output=True,
                          text=True, timeout=30, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                                      "PYTHON_VERSIONS_DIR": str(tmp_path / "envs")})
    assert proc.returncode == 1
    assert proc.stdout == "== Python 9.99: no interpreter found (pythonX.Y on PATH, or pyenv's)\n"
    assert not (tmp_path / "envs").exists()
