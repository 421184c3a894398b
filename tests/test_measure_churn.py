"""Churn across a task: the change of the logits on a fixed reference batch from the network
that starts the task to the one that ends it — known changes, the engine against the networks
themselves, a resume between two steps, and the Monitor since its probe was set."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.engine import EnsembleTraining, TaskInFlight
from plasticlab.experiments.config import resolve_config
from plasticlab.measure.churn import churn, prediction_churn
from plasticlab.nets import build_network
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

SMALL = {"problem": "permuted_mnist", "method": "baseline", "tasks": 2, "steps_per_task": 5,
         "problem_params": {"examples_per_task": 320}}


def test_churn_is_the_mean_absolute_logit_change_and_prediction_churn_the_changed_argmaxes():
    before = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    after = torch.tensor([[[1.5, 0.5], [2.0, 1.0]]])  # changes 0.5, 0.5, 2, 0; argmax of x₂ flips
    assert churn(before, after).tolist() == [0.75]
    assert prediction_churn(before, after).tolist() == [0.5]
    assert churn(before, before).tolist() == [0.0]
    masked = torch.tensor([[[1.0, float("-inf")], [0.0, float("-inf")]]])  # a growing head's output
    assert churn(masked, masked + 0.5).tolist() == [0.5]
    assert math.isnan(prediction_churn(before[..., :1], after[..., :1]).item())  # one output: no class


def test_the_engines_churn_compares_the_networks_that_start_and_end_the_task(data_dir):
    cfg = resolve_config(SMALL)
    training = EnsembleTraining(Members.from_config(cfg, [0, 1]), data_dir=data_dir,
                                measure_samples=32, measurements=["churn"])
    try:
        training.run_task(0)
        x = training.problem.sample_inputs(32, "churn")  # the task's reference batch
        start = build_network("mlp", 2, (784,), 10,
                              generators=[torch_generator(s, "init") for s in (0, 1)])
        with torch.no_grad():
            before, after = start(x), training.net(x)
        got = training.task_measures[0]
        for k in range(2):
            assert got[k]["churn"] == pytest.approx(churn(before, after)[k].item(), rel=1e-6)
            assert got[k]["prediction_churn"] == prediction_churn(before, after)[k].item()
    finally:
        training.close()


def test_a_checkpoint_between_two_steps_keeps_the_tasks_reference():
    flight = TaskInFlight(3, 2, torch.zeros(2), [], None, reference=torch.ones(2, 4, 10))
    back = TaskInFlight.from_state(flight.to_state(), torch.device("cpu"))
    assert torch.equal(back.reference, flight.reference)
    state = TaskInFlight(3, 2, torch.zeros(2), [], None).to_state()  # no churn asked for
    assert "reference" not in state and TaskInFlight.from_state(state, torch.device("cpu")).reference is None


def test_the_monitors_churn_is_the_change_since_the_probe_was_set():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    monitor = plasticlab.Monitor(model, x, measurements=["churn"], thresholds=None)
    start = model(x).detach()
    assert monitor.measure()["churn"] == 0.0
    with torch.no_grad():
        model[2].bias += torch.tensor([0.25, -0.75])
    assert monitor.measure()["churn"] == pytest.approx(0.5)
    monitor.set_probe(x)  # a task change: the reference is the model now
    assert monitor.measure()["churn"] == 0.0
    assert monitor.measure()["prediction_churn"] == 0.0
    assert (model(x) - start).abs().mean().item() == pytest.approx(0.5)
