"""Optional mirrors of the results store: TensorBoard and Weights & Biases (offline)."""

from __future__ import annotations

import pytest

from conftest import needs_package
from plasticlab.cli import main
from plasticlab.loggers import _scalars

TINY = ["run", "--problem", "permuted_mnist", "--method", "l2_init", "--tasks", "2",
        "--steps-per-task", "10", "--set", "examples_per_task=160", "--no-progress", "--json"]


def test_per_task_series_are_extracted_and_per_layer_lists_split():
    series = _scalars({"task_online_accuracy": [0.5, 0.6], "srank": [[3, 4], [5, 6]],
                       "accuracy_matrix": [[0.9], [0.8, 0.7]], "params": {}, "seed": 0})
    assert series == {"task_online_accuracy": [0.5, 0.6], "srank/layer_0": [3.0, 5.0],
                      "srank/layer_1": [4.0, 6.0]}


@needs_package("tensorboard")
def test_tensorboard_gets_one_scalar_per_task(data_dir, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "tb"
    assert main([*TINY, "--data-dir", str(data_dir), "--out", str(tmp_path / "o"),
                 "--tensorboard", str(logdir)]) == 0
    runs = [p for p in logdir.rglob("events.out.tfevents.*")]
    assert len(runs) == 1
    acc = EventAccumulator(str(runs[0].parent))
    acc.Reload()
    values = [e.value for e in acc.Scalars("task_online_accuracy")]
    assert len(values) == 2 and all(0 <= v <= 1 for v in values)


@needs_package("wandb")
def test_wandb_logs_offline(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main([*TINY, "--data-dir", str(data_dir), "--out", str(tmp_path / "o"),
                 "--wandb", "plasticlab-test"]) == 0
    assert list(tmp_path.rglob("offline-run-*"))


def test_a_missing_logging_package_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    from plasticlab.loggers import TensorBoardLogger

    with pytest.raises(RuntimeError, match="pip install 'plasticlab\\[tensorboard\\]'"):
        TensorBoardLogger("x")
