"""A method and a problem of another package, named in its entry points ``plasticlab.methods`` and
``plasticlab.problems``, train like plasticlab's own — in a sweep's worker processes too — and
their runs record where they came from; a plugin that cannot be one is an error naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

from conftest import REPO
from plasticlab.experiments.store import ResultStore
from plasticlab.methods import METHODS, Method
from plasticlab.registry import Registry

PLUGIN = REPO / "examples" / "plugin"
"""The example plugin package (its pyproject.toml names a method and a problem)."""


@pytest.fixture
def plugin_path(tmp_path):
    """The example package as ``pip install -e examples/plugin`` would leave it: its folder on the
    path, and an installed distribution's metadata with its pyproject's entry points."""
    project = tomllib.loads((PLUGIN / "pyproject.toml").read_text())["project"]
    info = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()) + "\n"
        for group, points in project["entry-points"].items()))
    return os.pathsep.join([str(PLUGIN), str(tmp_path)])


@pytest.mark.slow
def test_a_plugins_method_and_problem_train_in_a_sweeps_workers_and_are_recorded(plugin_path, data_dir,
                                                                                 tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(textwrap.dedent('''
        name = "plugin"
        problem = "permuted_mnist_quick"
        methods = ["baseline", "decay"]
        seeds = "0-1"
        tasks = 2
        steps_per_task = 20
        [problem_params]
        examples_per_task = 200
        [params.decay]
        rho = 0.01
        '''))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "plasticlab", "sweep", str(sweep), "--out", str(out),
                           "--data-dir", str(data_dir), "--workers", "2", "--no-progress"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": plugin_path})
    assert proc.returncode == 0, proc.stderr
    with ResultStore(out) as store:
        runs = store.runs()
        assert sorted((r["config"]["method"], r["status"]) for r in runs) == [
            ("baseline", "finished"), ("baseline", "finished"),
            ("decay", "finished"), ("decay", "finished")]
        manifests = {r["config"]["method"]: json.loads(r["manifest"]) if isinstance(r["manifest"], str)
                     else r["manifest"] for r in runs}
    origin = {"entry_point": "plasticlab_decay.methods:Decay", "distribution": "plasticlab-decay",
              "version": "0.1.0"}
    problem = {**origin, "entry_point": "plasticlab_decay.problems:PermutedMNISTQuick"}
    assert manifests["decay"]["plugins"] == {"method": origin, "problem": problem}
    assert manifests["baseline"]["plugins"] == {"problem": problem}


class NotAMethod:
    name = "not_a_method"


class Misnamed(Method):
    name = "another_name"


class MyMethod(Method):
    name = "my_method"


def registry(monkeypatch, *points: tuple[str, str]) -> Registry:
    builtin = dict(METHODS)  # plasticlab's own registry loaded first, with this machine's plugins
    entries = [metadata.EntryPoint(name, value, "plasticlab.methods") for name, value in points]
    monkeypatch.setattr(metadata, "entry_points", lambda group: [e for e in entries if e.group == group])
    return Registry("method", "plasticlab.methods", Method, builtin)


@pytest.mark.parametrize("name, value, message", [
    ("l2_init", f"{__name__}:Misnamed", "'l2_init' is plasticlab's own method; give the plugin's "
                                        "method another name"),
    ("not_a_method", f"{__name__}:NotAMethod", "is not a plasticlab.methods.base.Method subclass"),
    ("my_method", f"{__name__}:Misnamed", "its class is named 'another_name'; the entry point's "
                                          "name must be"),
    ("gone", "no_such_module_here:Gone", "does not load: ModuleNotFoundError"),
])
def test_a_plugin_that_cannot_be_one_is_an_error_naming_its_entry_point(monkeypatch, name, value, message):
    methods = registry(monkeypatch, (name, value))
    with pytest.raises(RuntimeError, match=f"entry point {name} = '{value}' of no distribution .*"):
        methods["baseline"]
    with pytest.raises(RuntimeError) as raised:
        list(methods)
    assert message in str(raised.value)


def test_two_plugins_naming_one_method_are_refused(monkeypatch):
    methods = registry(monkeypatch, ("my_method", f"{__name__}:MyMethod"), ("my_method", "elsewhere:Other"))
    with pytest.raises(RuntimeError, match="names a method 'my_method' too; uninstall one of them"):
        len(methods)


def test_plasticlabs_own_registry_loads_its_plugins_at_the_first_lookup_once(monkeypatch):
    calls, builtin = [], dict(METHODS)
    monkeypatch.setattr(metadata, "entry_points", lambda group: calls.append(group) or [])
    methods = Registry("method", "plasticlab.methods", Method, builtin)
    assert calls == []  # built, nothing loaded
    assert methods["l2_init"] is METHODS["l2_init"] and "l2_init" in methods and len(methods) == len(METHODS)
    assert calls == ["plasticlab.methods"] and methods.origin("l2_init") is None


def test_plasticlab_list_names_a_plugins_distribution_and_version(plugin_path, monkeypatch, capsys):
    import plasticlab.methods
    import plasticlab.problems
    from plasticlab.cli import main

    builtin = {"method": dict(METHODS), "problem": dict(plasticlab.problems.PROBLEMS)}  # loaded first
    for folder in plugin_path.split(os.pathsep):  # as if installed: its modules and its metadata
        monkeypatch.syspath_prepend(folder)
    monkeypatch.setattr(plasticlab.methods, "METHODS",
                        Registry("method", "plasticlab.methods", Method, builtin["method"]))
    monkeypatch.setattr(plasticlab.problems, "PROBLEMS", Registry(
        "problem", "plasticlab.problems", plasticlab.problems.Problem, builtin["problem"]))
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert ("  decay                  θ ← (1 − ρ)·θ after every step (a plugin's method) "
            "[from plasticlab-decay 0.1.0]") in listed
    assert "  permuted_mnist_quick   " in listed and listed.count("[from plasticlab-decay 0.1.0]") == 2


def test_runs_of_a_plugin_at_another_version_or_no_longer_installed_are_said_so(plugin_path, monkeypatch):
    import plasticlab.experiments.manifest as manifest

    builtin = dict(METHODS)
    for folder in plugin_path.split(os.pathsep):
        monkeypatch.syspath_prepend(folder)
    monkeypatch.setattr(manifest, "METHODS", Registry("method", "plasticlab.methods", Method, builtin))
    origin = {"entry_point": "plasticlab_decay.methods:Decay", "distribution": "plasticlab-decay",
              "version": "0.1.0"}

    def run(method, plugins):
        return {"config": {"method": method, "problem": "permuted_mnist"}, "manifest": {"plugins": plugins}}

    same = run("decay", {"method": origin})
    older = run("decay", {"method": {**origin, "version": "0.0.9"}})
    gone = run("their_decay", {"method": {**origin, "distribution": "theirs"}})
    assert manifest.plugins_changed([same, run("baseline", {})]) is None
    assert manifest.plugins_changed([same, older, older, gone]) == (
        "2 run(s) of a plugin's method or problem were trained with plasticlab-decay 0.0.9 "
        "(plasticlab-decay 0.1.0 is installed); 1 run(s) of a plugin's method or problem were "
        "trained with theirs 0.1.0 (no installed package adds method 'their_decay')")
