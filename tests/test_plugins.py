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

import pytest

from plasticlab.experiments.store import ResultStore
from plasticlab.methods import METHODS, Method
from plasticlab.registry import Registry

PLUGIN = '''
import torch

from plasticlab.methods import Method, Needs
from plasticlab.params import Param
from plasticlab.problems import PermutedMNIST


class Decay(Method):
    """θ ← (1 − ρ)·θ after every step: weight decay as a method of a package of its own."""

    name = "my_decay"
    title = "My Decay"
    description = "θ ← (1 − ρ)·θ after every step"
    hyperparameters = (Param("rho", 1e-3, float, "ρ: the fraction taken off", low=0),)

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True)

    @torch.no_grad()
    def after_step(self, features, x, step):
        for p in self.net.regularized_parameters():
            p.mul_(1 - self.hp["rho"])


class FewerPixels(PermutedMNIST):
    name = "my_permuted"
    title = "My Permuted MNIST"
'''


@pytest.fixture
def plugin_path(tmp_path):
    """A folder that holds the module and an installed distribution's metadata naming it."""
    (tmp_path / "myplugin.py").write_text(PLUGIN)
    info = tmp_path / "myplugin-0.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text("[plasticlab.methods]\nmy_decay = myplugin:Decay\n\n"
                                          "[plasticlab.problems]\nmy_permuted = myplugin:FewerPixels\n")
    return tmp_path


def test_a_plugins_method_and_problem_train_in_a_sweeps_workers_and_are_recorded(plugin_path, data_dir,
                                                                                 tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(textwrap.dedent('''
        name = "plugin"
        problem = "my_permuted"
        methods = ["baseline", "my_decay"]
        seeds = "0-1"
        tasks = 2
        steps_per_task = 20
        [problem_params]
        examples_per_task = 200
        [params.my_decay]
        rho = 0.01
        '''))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "plasticlab", "sweep", str(sweep), "--out", str(out),
                           "--data-dir", str(data_dir), "--workers", "2", "--no-progress"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(plugin_path)})
    assert proc.returncode == 0, proc.stderr
    with ResultStore(out) as store:
        runs = store.runs()
        assert sorted((r["config"]["method"], r["status"]) for r in runs) == [
            ("baseline", "finished"), ("baseline", "finished"),
            ("my_decay", "finished"), ("my_decay", "finished")]
        manifests = {r["config"]["method"]: json.loads(r["manifest"]) if isinstance(r["manifest"], str)
                     else r["manifest"] for r in runs}
    origin = {"entry_point": "myplugin:Decay", "distribution": "myplugin", "version": "0.3"}
    assert manifests["my_decay"]["plugins"] == {
        "method": origin, "problem": {**origin, "entry_point": "myplugin:FewerPixels"}}
    assert manifests["baseline"]["plugins"] == {"problem": {**origin, "entry_point": "myplugin:FewerPixels"}}


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
    monkeypatch.syspath_prepend(str(plugin_path))  # as if installed: its module and its metadata
    monkeypatch.setattr(plasticlab.methods, "METHODS",
                        Registry("method", "plasticlab.methods", Method, builtin["method"]))
    monkeypatch.setattr(plasticlab.problems, "PROBLEMS", Registry(
        "problem", "plasticlab.problems", plasticlab.problems.Problem, builtin["problem"]))
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    assert "  my_decay               θ ← (1 − ρ)·θ after every step [from myplugin 0.3]" in listed
    assert "  my_permuted            " in listed and listed.count("[from myplugin 0.3]") == 2


def test_runs_of_a_plugin_at_another_version_or_no_longer_installed_are_said_so(plugin_path, monkeypatch):
    import plasticlab.experiments.manifest as manifest

    builtin = dict(METHODS)
    monkeypatch.syspath_prepend(str(plugin_path))
    monkeypatch.setattr(manifest, "METHODS", Registry("method", "plasticlab.methods", Method, builtin))
    origin = {"entry_point": "myplugin:Decay", "distribution": "myplugin", "version": "0.3"}

    def run(method, plugins):
        return {"config": {"method": method, "problem": "permuted_mnist"}, "manifest": {"plugins": plugins}}

    same = run("my_decay", {"method": origin})
    older = run("my_decay", {"method": {**origin, "version": "0.2"}})
    gone = run("their_decay", {"method": {**origin, "distribution": "theirs"}})
    assert manifest.plugins_changed([same, run("baseline", {})]) is None
    assert manifest.plugins_changed([same, older, older, gone]) == (
        "2 run(s) of a plugin's method or problem were trained with myplugin 0.2 (myplugin 0.3 is "
        "installed); 1 run(s) of a plugin's method or problem were trained with theirs 0.3 (no "
        "installed package adds method 'their_decay')")
