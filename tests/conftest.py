"""Shared fixtures: where the real data is, and one torch thread per test process."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import pickle
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from plasticlab.report.browser import INSTALL_HINT, find_chromium

REPO = Path(__file__).resolve().parents[1]

CHECKS_REQUIRED = os.environ.get("PLASTICLAB_REQUIRE_CHECKS") == "1"
"""Set by CI (.ci/run): the browser, LaTeX, rliable and logger checks run there, so they must not
skip — a missing Chromium, pdflatex, rliable, TensorBoard or W&B fails them instead."""


def add_gradient_transforms(method) -> None:
    """Add ``method``'s gradient transforms to ``.grad`` as the training step's chain adds them
    (its penalties, then its own transform), every penalty's λθ in ``.grad`` (no decay handed to
    the optimizer)."""
    from plasticlab.fast import plain_forms
    from plasticlab.step.chain import Chain

    with plain_forms():
        chain = Chain(method, method.optimizer)
    chain.transform_gradient()


def needs(available: bool, reason: str):
    """Skip a test where what it checks with is not ``available`` (``reason`` says what is missing
    and how to get it), except in CI, where a skip would be a check not made: there it runs, and
    fails."""
    return pytest.mark.skipif(not available and not CHECKS_REQUIRED, reason=reason)


def needs_package(name: str):
    """:func:`needs` the optional package ``name`` (plasticlab's extra of that name)."""
    return needs(importlib.util.find_spec(name) is not None,
                 f"{name} is not installed (pip install 'plasticlab[{name}]')")


needs_chromium = needs(find_chromium() is not None, f"no Chromium for the browser check: {INSTALL_HINT}")
"""The report's browser check needs a Chromium."""


torch.set_num_threads(1)


def find_real_data_dir() -> tuple[Path | None, str]:
    """(directory with the real data or None, how it was chosen / why none was found):
    $PLASTICLAB_DATA, else ../shared/data beside the repo."""
    env = os.environ.get("PLASTICLAB_DATA")
    if env:
        return Path(env), "$PLASTICLAB_DATA"
    shared = REPO.parent / "shared" / "data"
    if shared.is_dir():
        return shared, str(shared)
    return None, f"PLASTICLAB_DATA is not set and {shared} does not exist"


def change_recorded_accuracy(export: Path, method: str, task: int, by: float,
                             every_run: bool = False) -> tuple[dict, float]:
    """Add ``by`` to the online accuracy on ``task`` recorded for the first run of ``method`` in
    the export folder ``export`` (for every run of it with ``every_run``), as if another code had
    trained it: the first such run, and the value it had."""
    from plasticlab.experiments.export import EXPORT_NAME

    path = export / EXPORT_NAME
    body = json.loads(gzip.decompress(path.read_bytes()))
    runs = [r for r in body["runs"] if r["config"]["method"] == method]
    was = body["task_metrics"][runs[0]["run_id"]]["online_accuracy"][task]
    for run in runs if every_run else runs[:1]:
        body["task_metrics"][run["run_id"]]["online_accuracy"][task] += by
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    return runs[0], was


def change_recorded_measurement(export: Path, method: str, metric: str, task: int) -> tuple[dict, float]:
    """Move the task-end measurement ``metric`` on ``task`` of the first run of ``method`` in the
    export folder ``export`` by a few units of its 7th significant digit — as a change to
    training that moves the weights by a rounding step would, leaving the online accuracy as it
    was: the run, and the value it had."""
    from plasticlab.experiments.export import EXPORT_NAME

    path = export / EXPORT_NAME
    body = json.loads(gzip.decompress(path.read_bytes()))
    run = next(r for r in body["runs"] if r["config"]["method"] == method)
    values = body["task_metrics"][run["run_id"]][metric]
    was = values[task]
    values[task] = float(format(was * (1 + 5e-6), ".7g"))
    assert values[task] != was
    path.write_bytes(gzip.compress(json.dumps(body).encode()))
    return run, was


HOST_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__")


def count_host_syncs(monkeypatch) -> dict:
    """Count calls that read a tensor back to the host (a sync on GPUs): ``calls["n"]``."""
    calls = {"n": 0}
    for name in HOST_SYNC_METHODS:
        original = getattr(torch.Tensor, name)

        def counting(self, *a, _original=original, **k):
            calls["n"] += 1
            return _original(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return calls


def assert_host_reads_do_not_grow_with_steps(members, data_dir, monkeypatch) -> None:
    """Train ``members`` (a one-task config) for 12 steps, then 24, counting the reads back to
    the host (:func:`count_host_syncs`): twice the steps must not read once more — no round
    trip per step. Warm the code paths (a first run) before calling it."""
    from plasticlab.engine import train_ensemble

    calls = count_host_syncs(monkeypatch)
    members.config.steps_per_task = 12
    train_ensemble(members, data_dir=data_dir, measure=False)
    per_task, calls["n"] = calls["n"], 0
    members.config.steps_per_task = 24
    train_ensemble(members, data_dir=data_dir, measure=False)
    assert calls["n"] == per_task, f"{calls['n']} reads in 24 steps, {per_task} in 12"


REAL_DATA, REAL_DATA_HOW = find_real_data_dir()
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")


def _mnist_missing(root: Path | None) -> str | None:
    """Why real MNIST cannot be read from ``root`` (None when it can)."""
    if root is None:
        return f"real MNIST data not found: {REAL_DATA_HOW}"
    folder = root / "mnist"
    missing = [f for f in MNIST_FILES
               if not (folder / f).is_file() and not (folder / f"{f}.gz").is_file()]
    if missing:
        return f"real MNIST data not found in {folder} (via {REAL_DATA_HOW}): missing {', '.join(missing)}"
    return None


def _cifar10_missing(root: Path | None) -> str | None:
    """Why real CIFAR-10 (official files or a .npz subset) cannot be read from ``root``."""
    if root is None:
        return f"real CIFAR-10 data not found: {REAL_DATA_HOW}"
    folder = root / "cifar10"
    if ((folder / "cifar-10-batches-py").is_dir() or (folder / "cifar-10-python.tar.gz").is_file()
            or (folder.is_dir() and any(folder.glob("*.npz")))):
        return None
    return f"real CIFAR-10 data (official files or a .npz subset) not found in {folder} (via {REAL_DATA_HOW})"


# Each real-data fixture → why its data is missing here (None: present). A test that asks for
# one of them is skipped, with that reason, exactly when its data is missing.
REAL_DATA_MISSING = {
    "real_data_dir": None if REAL_DATA is not None else f"no real dataset directory: {REAL_DATA_HOW}",
    "data_dir": _mnist_missing(REAL_DATA),
    "mnist_dir": _mnist_missing(REAL_DATA),
    "real_mnist_dir": _mnist_missing(REAL_DATA),
    "cifar10_dir": _cifar10_missing(REAL_DATA),
}


def needs_data(fixture: str) -> pytest.MarkDecorator:
    """Skip, with the reason, where the real data behind ``fixture`` is missing (for tests that
    look a data fixture up by name; fixtures made from files the tests write are never missing)."""
    missing = REAL_DATA_MISSING.get(fixture)
    return pytest.mark.skipif(missing is not None, reason=missing or "real data present")


NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def pytest_configure(config) -> None:
    """Once per run (not in each xdist worker): the package's bytecode compiled where Python
    would have written it itself. With PYTHONDONTWRITEBYTECODE set no process writes it, so each
    of the suite's processes — test workers, the CLI run as a user runs it, sweep workers —
    would compile every module of the package it imports again (~0.4 s of a core each, some
    sixty times); compiled here once into the package's own __pycache__ (which git ignores),
    they read it."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):
        import compileall

        import plasticlab

        compileall.compile_dir(str(Path(plasticlab.__file__).parent), quiet=2)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; without xdist there is no -n
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one test process per core this process may run on, as a sweep counts its
    workers; xdist's own count takes physical cores where psutil is installed (one on a VM of
    two hyper-threads) and ignores the CPU affinity there."""
    from plasticlab.experiments.executor import default_workers

    return default_workers()


def _dist_chosen(config) -> bool:
    """Whether the command line (or PYTEST_ADDOPTS, or the ini's addopts) names a --dist mode."""
    args = [*config.invocation_params.args, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")),
            *config.getini("addopts")]
    return any(a in ("--dist", "-d") or a.startswith("--dist=") for a in args)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config, log):
    """``-n``: work stealing instead of xdist's default ``load`` (unless ``--dist`` says
    otherwise). ``load`` hands each process its share up front, so one process can be left with
    minutes of long tests while the other idles; a process that runs out here takes half of what
    the other has not started. With the ``slow`` tests first (below), the two end within seconds
    of each other."""
    if config.getvalue("dist") == "load" and not _dist_chosen(config):
        from xdist.scheduler import WorkStealingScheduling

        return WorkStealingScheduling(config, log)
    return None


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in REAL_DATA_MISSING:
            if fixture in item.fixturenames:
                item.add_marker(needs_data(fixture))
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(NO_CUDA)
    # The long tests (marked slow: tens of seconds each) first, each file's in its order: a
    # long test started last would keep its process running long after the other has ended.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The real dataset directory ($PLASTICLAB_DATA, else ../shared/data)."""
    return REAL_DATA


@pytest.fixture(scope="session")
def data_dir(real_data_dir) -> Path:
    """The directory holding real MNIST (and the CIFAR-10 subset)."""
    return real_data_dir


@pytest.fixture(scope="session")
def mnist_dir(real_data_dir) -> Path:
    """The data directory, with every real MNIST file in ``mnist/``."""
    return real_data_dir


@pytest.fixture(scope="session")
def real_mnist_dir(real_data_dir) -> Path:
    """The real ``mnist/`` folder itself."""
    return real_data_dir / "mnist"


@pytest.fixture(scope="session")
def cifar10_dir(real_data_dir) -> Path:
    """The data directory, with real CIFAR-10 (official files or a .npz subset) in ``cifar10/``."""
    return real_data_dir


# Fake CIFAR-100: pixel (0,0) of the red/green/blue planes holds (class, split, index in class).
CIFAR100_TRAIN_PER_CLASS = 20
CIFAR100_TEST_PER_CLASS = 4


def _cifar100_split(rng: np.random.Generator, per_class: int, split: int) -> dict:
    labels = np.repeat(np.arange(100), per_class)
    index = np.tile(np.arange(per_class), 100)
    order = rng.permutation(len(labels))  # classes interleaved, as in the official files
    labels, index = labels[order], index[order]
    data = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    data[:, 0] = labels  # R plane, pixel (0, 0)
    data[:, 1024] = split  # G plane, pixel (0, 0)
    data[:, 2048] = index  # B plane, pixel (0, 0)
    return {b"data": data, b"fine_labels": labels.tolist(), b"coarse_labels": (labels // 5).tolist(),
            b"filenames": [f"{i}.png".encode() for i in range(len(labels))],
            b"batch_label": b"fake"}


@pytest.fixture(scope="session")
def cifar100_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar100data")
    folder = root / "cifar100" / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(100)
    for name, per_class, split in (("train", CIFAR100_TRAIN_PER_CLASS, 0),
                                   ("test", CIFAR100_TEST_PER_CLASS, 1)):
        (folder / name).write_bytes(pickle.dumps(_cifar100_split(rng, per_class, split), protocol=2))
    return root


# Fake ImageNet-32: image i of class c has pixel (0,0) = (c, i // 256, i % 256), channels last.
IMAGENET_CLASSES = 12


@pytest.fixture(scope="session")
def imagenet_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imagenetdata")
    folder = root / "imagenet32" / "classes"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(32)
    for c in range(IMAGENET_CLASSES):
        images = rng.integers(0, 256, (700, 32, 32, 3), dtype=np.uint8)
        images[:, 0, 0, 0] = c
        images[:, 0, 0, 1] = np.arange(700) // 256
        images[:, 0, 0, 2] = np.arange(700) % 256
        np.save(folder / f"{c}.npy", images)
    return root


PACKAGE = Path(importlib.util.find_spec("plasticlab").origin).parent

WITHOUT_PACKAGE_IMPORTS = (
    "import sys, types\n"
    f"for _name, _folder in (('plasticlab', {str(PACKAGE)!r}),\n"
    f"                       ('plasticlab.experiments', {str(PACKAGE / 'experiments')!r})):\n"
    "    sys.modules[_name] = types.ModuleType(_name)\n"
    "    sys.modules[_name].__path__ = [_folder]\n")
"""The first lines of a child process's script that imports modules of ``plasticlab.experiments``
needing only the standard library (the store, the lock): the two packages are made empty
stand-ins, so that their ``__init__`` imports — torch's, ~2 s of a core — are not run."""


def lock_released(out: Path, within: float = 30.0) -> bool:
    """Whether the writer's lock on the results folder ``out`` is free (or comes free within
    ``within`` seconds): a SIGKILL reaches every process of a killed command's group at once,
    but each of them ends in its own time, and the next command, started at once in the test's
    process, must not find one still ending."""
    import fcntl
    import time

    from plasticlab.experiments.lock import LOCK_NAME

    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + within
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return True
    finally:
        os.close(fd)


def run_script(path: Path, args, monkeypatch, capsys) -> str:
    """Run the script ``path`` as ``python PATH ARGS`` does — as ``__main__``, with that
    ``sys.argv`` — but in this process, and return what it printed: a process of its own takes
    ~2 s of a core to start (torch's import). For the tests of what a script does, not of how a
    process starts or ends. A non-zero ``sys.exit`` fails the test; an error raises."""
    import runpy
    import sys

    monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
    capsys.readouterr()
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit:
        captured = capsys.readouterr()
        assert exit.code in (None, 0), f"{path.name} exited {exit.code}: {captured.err[-3000:]}"
        return captured.out
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def no_machine_calibration(tmp_path, monkeypatch):
    """Tests plan sweeps as on a machine without a `plasticlab bench` calibration: this
    machine's saved one (user cache) must not change how a test's runs are grouped."""
    from plasticlab.experiments import bench

    monkeypatch.setattr(bench, "default_path", lambda: tmp_path / "no-calibration" / "bench.json")
