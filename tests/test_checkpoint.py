"""Checkpoints: exact resume for every method, and files that load no code."""

from __future__ import annotations

import os
import pickle

import pytest

from plasticlab import checkpoint as ckpt
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS

SMALL = {"problem": "permuted_mnist", "tasks": 3, "steps_per_task": 20,
         "problem_params": {"examples_per_task": 320}}

EVERY_METHOD = [
    ("baseline", {}, "adam"), ("l2", {"strength": 1e-3}, "adam"), ("l2_init", {"strength": 1e-2}, "sgd"),
    ("l1_init", {"strength": 1e-4}, "adam"), ("huber_init", {"strength": 1e-2, "delta": 0.01}, "adam"),
    ("l2_init_resample", {"strength": 1e-2}, "adam"), ("shrink_perturb", {"shrink": 0.99}, "adam"),
    ("cbp", {"replacement_rate": 0.05, "maturity": 5}, "adam"), ("concat_relu", {}, "adam"),
    ("layer_norm", {}, "adam"), ("redo", {"period": 15, "threshold": 0.1}, "adam"),
    ("ewc", {"fisher_samples": 8}, "adam"), ("l2_init_ewc", {"fisher_samples": 8}, "sgd"),
]
# Every other registered method at its defaults, and every non-default form of every method
# (its non-numeric settings), so a method added later is covered without editing this list.
EVERY_METHOD += [(name, {}, "adam") for name in METHODS if name not in {m for m, _, _ in EVERY_METHOD}]
EVERY_METHOD += [(name, {p.name: choice}, "adam") for name, cls in METHODS.items()
                 for p in cls.hyperparameters if p.choices and p.kind is str
                 for choice in p.choices if choice != p.default]


class Crash(Exception):
    pass


def crash_after(task_to_crash):
    def on_task_end(task, accs):
        if task == task_to_crash:
            raise Crash
    return on_task_end


@pytest.mark.parametrize("method,params,optimizer", EVERY_METHOD)
def test_every_method_resumed_from_its_checkpoint_ends_bit_identical(data_dir, tmp_path, method, params,
                                                                     optimizer):
    cfg = resolve_config({**SMALL, "method": method, "params": params, "optimizer": optimizer,
                          "lr": 1e-3 if optimizer == "adam" else 1e-2})
    whole = train_ensemble(cfg, [0, 1], data_dir=data_dir)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(cfg, [0, 1], data_dir=data_dir, checkpoint=path, on_task_end=crash_after(0))
    resumed = train_ensemble(cfg, [0, 1], data_dir=data_dir, checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


def test_an_ensemble_of_several_methods_and_step_sizes_resumes_bit_identical(data_dir, tmp_path):
    cfg = resolve_config({**SMALL, "method": "baseline"})
    members = dict(member_params=[{}, {"strength": 1e-2}, {"strength": 1e-3}],
                   member_lr=[1e-3, 1e-2, 1e-4], member_methods=["baseline", "l2_init", "l2"])
    whole = train_ensemble(cfg, [0, 1, 2], data_dir=data_dir, **members)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(cfg, [0, 1, 2], data_dir=data_dir, checkpoint=path,
                       on_task_end=crash_after(0), **members)
    with pytest.raises(ckpt.CheckpointError, match="belongs to another run"):  # another ensemble's
        train_ensemble(cfg, [0, 1, 2], data_dir=data_dir, checkpoint=path,
                       **dict(members, member_lr=[1e-3] * 3))
    resumed = train_ensemble(cfg, [0, 1, 2], data_dir=data_dir, checkpoint=path, **members)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


@pytest.fixture
def saved(data_dir, tmp_path):
    """A real checkpoint of a 3-task run stopped after its first task, and its run."""
    cfg = resolve_config({**SMALL, "method": "l2_init"})
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(cfg, [0], data_dir=data_dir, checkpoint=path, measure=False,
                       on_task_end=crash_after(0))
    return cfg, path


class Payload:
    """What an attacker pickles: unpickling it runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_pickle_in_place_of_a_checkpoint_is_refused_and_runs_nothing(data_dir, saved, tmp_path):
    cfg, path = saved
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps({"format": 1, "method": Payload(marker)}))
    with pytest.raises(ckpt.CheckpointError, match=f"{path}.*not a plasticlab checkpoint.*delete"):
        train_ensemble(cfg, [0], data_dir=data_dir, checkpoint=path, measure=False)
    assert not marker.exists()


def test_a_crafted_payload_behind_a_valid_header_is_refused_and_runs_nothing(data_dir, saved, tmp_path):
    cfg, path = saved
    marker = tmp_path / "ran"
    header = ckpt.read_header(path)
    payload = pickle.dumps({"training": Payload(marker)})
    import hashlib
    import json
    forged = dict(format=ckpt.FORMAT, fingerprint=header["fingerprint"], payload_bytes=len(payload),
                  payload_sha256=hashlib.sha256(payload).hexdigest())
    path.write_bytes(ckpt.MAGIC + json.dumps(forged).encode() + b"\n" + payload)
    with pytest.raises(ckpt.CheckpointError, match=f"{path}.*refused.*nothing in it was run"):
        train_ensemble(cfg, [0], data_dir=data_dir, checkpoint=path, measure=False)
    assert not marker.exists()


def test_a_truncated_checkpoint_is_an_error_naming_the_file_and_the_remedy(data_dir, saved):
    cfg, path = saved
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ckpt.CheckpointError, match=f"{path} is truncated.*delete {path}"):
        train_ensemble(cfg, [0], data_dir=data_dir, checkpoint=path, measure=False)


def test_a_corrupted_payload_fails_its_checksum(data_dir, saved):
    cfg, path = saved
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="corrupt"):
        train_ensemble(cfg, [0], data_dir=data_dir, checkpoint=path, measure=False)


def test_the_fingerprint_is_checked_before_the_payload_is_read(data_dir, saved, monkeypatch):
    cfg, path = saved
    other = resolve_config({**SMALL, "method": "l2_init", "lr": 1e-4})

    def no_unpickling(*args, **kwargs):
        raise AssertionError("the payload was read")

    monkeypatch.setattr(ckpt.torch, "load", no_unpickling)
    with pytest.raises(ckpt.CheckpointError, match="belongs to another run"):
        train_ensemble(other, [0], data_dir=data_dir, checkpoint=path, measure=False)
