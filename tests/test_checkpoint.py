"""Checkpoints: exact resume for every method, and files that load no code."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from plasticlab import checkpoint as ckpt
from plasticlab import engine
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS
from plasticlab.run_config import Members

# Test accuracy on the first 500 test images of each task (test_examples), not all 10,000:
# measuring those took half of each run here, and what a resume must give back — every
# task's metrics, test accuracy among them — is the same check on 500.
SMALL = {"problem": "permuted_mnist", "tasks": 3, "steps_per_task": 20, "test_examples": "500",
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
# EWC's forms estimate the Fisher on 8 examples, not the default 992 (how many is no part of a
# form; the 992 made each of these cases 3-4 s on one core).
SMALLER = {"ewc": {"fisher_samples": 8}, "l2_init_ewc": {"fisher_samples": 8}}
EVERY_METHOD += [(name, {p.name: choice, **SMALLER.get(name, {})}, "adam") for name, cls in METHODS.items()
                 for p in cls.hyperparameters if p.choices and p.kind is str
                 for choice in p.choices if choice != p.default]


class Crash(Exception):
    pass


def crash_after(task_to_crash):
    def on_task_end(task, accs):
        if task == task_to_crash:
            raise Crash
    return on_task_end


def test_an_ensemble_of_several_methods_and_step_sizes_resumes_bit_identical(data_dir, tmp_path):
    cfg = resolve_config({**SMALL, "method": "baseline"})
    params = [{}, {"strength": 1e-2}, {"strength": 1e-3}]
    members = Members.from_config(cfg, [0, 1, 2], params, [1e-3, 1e-2, 1e-4],
                                  ["baseline", "l2_init", "l2"])
    whole = train_ensemble(members, data_dir=data_dir)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(members, data_dir=data_dir, checkpoint=path, on_task_end=crash_after(0))
    with pytest.raises(ckpt.CheckpointError, match="belongs to another run"):  # another ensemble's
        train_ensemble(Members.from_config(cfg, [0, 1, 2], params, [1e-3] * 3,
                                           ["baseline", "l2_init", "l2"]),
                       data_dir=data_dir, checkpoint=path)
    resumed = train_ensemble(members, data_dir=data_dir, checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


def stop_at_call(n: int):
    """A ``stop`` that answers True at its n-th call (asked between every two steps: the
    engine's poll interval set to 0 by the test)."""
    calls = iter(range(1, 10**9))
    return lambda: next(calls) >= n


@pytest.mark.parametrize("method,params,optimizer", EVERY_METHOD)
def test_every_method_resumes_bit_identical_from_a_task_end_and_from_between_two_steps(
        data_dir, tmp_path, monkeypatch, method, params, optimizer):
    # One uninterrupted run, then one interrupted twice that must end as it does: (1) a crash
    # after task 0's end, resumed from that task end's checkpoint; (2) that resume stopped
    # between two steps of a task (step 8 of task 1), which saves the state there, resumed from
    # that step with every step measurement and the task's count kept. A resume from the task
    # end that went wrong shows in the end as one from between two steps does.
    monkeypatch.setattr(engine, "STOP_POLL_S", 0.0)
    cfg = resolve_config({**SMALL, "method": method, "params": params, "optimizer": optimizer,
                          "lr": 1e-3 if optimizer == "adam" else 1e-2})

    def train(**kwargs):
        return train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure_every=6,
                              **kwargs)

    def assert_same(resumed):
        for a, b in zip(whole.members, resumed.members, strict=True):
            assert a.task_online_accuracy == b.task_online_accuracy
            assert a.task_metrics == b.task_metrics
            assert a.step_metrics == b.step_metrics

    whole = train()
    path = tmp_path / "run.ckpt"  # a task end's save, then one between two steps
    with pytest.raises(Crash):
        train(checkpoint=path, on_task_end=crash_after(0))
    header = ckpt.read_header(path)
    assert (header["next_task"], header["steps_in_task"]) == (1, 0)

    with pytest.raises(engine.TrainingStopped, match="stopped at step 8 of task 1"):
        train(checkpoint=path, stop=stop_at_call(8))
    assert ckpt.read_header(path)["steps_in_task"] == 8
    resumed = train(checkpoint=path)
    assert_same(resumed)
    sittings = resumed.extra["sittings"]
    assert [(s["from_task"], s.get("from_step", 0)) for s in sittings] == [(0, 0), (1, 0), (1, 8)], sittings


def test_timed_checkpoints_between_steps_resume_bit_identical_and_are_written_in_the_background(
        data_dir, tmp_path):
    cfg = resolve_config({**SMALL, "method": "l2_init", "params": {"strength": 1e-2}})
    whole = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir)
    path = tmp_path / "run.ckpt"
    calls = []

    def crash_at_step_10_of_task_1(n):  # progress: told after steps 10 and 20 of each task
        calls.append(n)
        if len(calls) == 3:
            raise Crash
    with pytest.raises(Crash):
        # a save after every step (checkpoint_every 1e-9 s); the crash comes before step 10's
        train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path,
                       checkpoint_every=1e-9, on_steps=crash_at_step_10_of_task_1,
                       progress_every=10)
    header = ckpt.read_header(path)  # written out before the crash left train_ensemble
    assert (header["next_task"], header["steps_in_task"]) == (1, 9)
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics
    with pytest.raises(ValueError, match="checkpoint_every must be > 0"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path,
                       checkpoint_every=0)


def test_a_checkpoint_write_that_fails_in_the_background_fails_the_next_save(tmp_path):
    writer = ckpt.CheckpointWriter()
    blocked = tmp_path / "file"
    blocked.write_text("a file where the checkpoint's folder should be")
    writer.save(blocked / "run.ckpt", "f", {"next_task": 1})
    with pytest.raises(OSError):
        writer.wait()
    writer.save(tmp_path / "run.ckpt", "f", {"next_task": 1})
    writer.wait()
    assert ckpt.read_header(tmp_path / "run.ckpt")["next_task"] == 1


@pytest.fixture
def saved(data_dir, tmp_path):
    """A real checkpoint of a 3-task run stopped after its first task, and its run."""
    cfg = resolve_config({**SMALL, "method": "l2_init"})
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False,
                       on_task_end=crash_after(0))
    return cfg, path


class Payload:
    """What an attacker pickles: unpickling it runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_saved_steps_counts_tasks_done_and_the_task_in_flight_and_none_without_a_file(tmp_path):
    # the one reader the planner, the dry run's estimate and the sweep's progress count from
    path = tmp_path / "ensemble.ckpt"
    assert ckpt.saved_steps(path, 100) is None
    ckpt.save(path, "x", {"next_task": 3, "in_flight": {"step": 40}})  # 40 steps into task 3
    assert ckpt.saved_steps(path, 100) == 340
    ckpt.save(path, "x", {"next_task": 2})  # at a task end
    assert ckpt.saved_steps(path, 100) == 200
    path.write_bytes(b"not a checkpoint")  # unreadable: trained again from the first task
    assert ckpt.saved_steps(path, 100) == 0


def test_a_crafted_pickle_in_place_of_a_checkpoint_is_refused_and_runs_nothing(data_dir, saved, tmp_path):
    cfg, path = saved
    marker = tmp_path / "ran"
    path.write_bytes(pickle.dumps({"format": 1, "method": Payload(marker)}))
    with pytest.raises(ckpt.CheckpointError, match=f"{path}.*not a plasticlab checkpoint.*delete"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False)
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
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False)
    assert not marker.exists()


def test_a_truncated_checkpoint_is_an_error_naming_the_file_and_the_remedy(data_dir, saved):
    cfg, path = saved
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ckpt.CheckpointError, match=f"{path} is truncated.*delete {path}"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False)


def test_a_corrupted_payload_fails_its_checksum(data_dir, saved):
    cfg, path = saved
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="corrupt"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, checkpoint=path, measure=False)


def test_the_fingerprint_is_checked_before_the_payload_is_read(data_dir, saved, monkeypatch):
    cfg, path = saved
    other = resolve_config({**SMALL, "method": "l2_init", "lr": 1e-4})

    def no_unpickling(*args, **kwargs):
        raise AssertionError("the payload was read")

    monkeypatch.setattr(ckpt.torch, "load", no_unpickling)
    with pytest.raises(ckpt.CheckpointError, match="belongs to another run"):
        train_ensemble(Members.from_config(other, [0]), data_dir=data_dir, checkpoint=path, measure=False)


def test_a_method_state_from_before_the_step_chain_restores_without_its_gradient_helper():
    # earlier versions kept a penalty's gradient helper (PenaltyGradient/QuadraticGradient, its
    # θ − target buffer rewritten every step) in the method's state; such a checkpoint resumes
    from plasticlab.methods import METHODS, MethodContext
    from plasticlab.nets import build_network
    from plasticlab.optim import make_optimizer
    from plasticlab.run_config import stack_hyperparameters

    def l2_init():
        net = build_network("mlp", 2, (784,), 10, width=0.1)
        hp = stack_hyperparameters(METHODS["l2_init"].hyperparameters, [{"strength": 1e-2}] * 2,
                                   "cpu", "l2_init")
        return METHODS["l2_init"](net, make_optimizer("adam", net.parameters(), 1e-3), hp,
                                  MethodContext([0, 1], torch.device("cpu")))

    state = l2_init().state_dict()
    helper = {"__kind__": "object", "type": "QuadraticGradient",
              "attrs": {"differences": {"__kind__": "list", "items": [torch.zeros(2, 3)]},
                        "decay_in_optimizer": False}}
    state["keys"].append("gradient")
    state["values"].append(helper)
    fresh = l2_init()
    fresh.load_state_dict(state)
    assert not hasattr(fresh, "gradient")
    state["values"][-1] = dict(helper, type="SomethingElse")  # anything else is still refused
    with pytest.raises(TypeError, match="SomethingElse"):
        l2_init().load_state_dict(state)
