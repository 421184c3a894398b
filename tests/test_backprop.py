"""The hand-written backward pass of the ensemble ReLU MLP against autograd (its simple form)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.fast import plain_forms
from plasticlab.nets import build_network
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members
from plasticlab.step.mlp_backprop import ManualBackprop, applies, supports

SMALL = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 30,
         "problem_params": {"examples_per_task": 480}}


def mlp(members: int, **kwargs):
    return build_network("mlp", members, (784,), 10,
                         generators=[torch_generator(s, "init") for s in range(members)], **kwargs)


def autograd_gradients(net, x, y):
    K, B = y.shape
    logits, features = net(x, return_features=True)
    F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(K, B).mean(1).sum().backward()
    return logits.detach(), [f.detach() for f in features], [p.grad.clone() for p in net.parameters()]


@pytest.mark.parametrize("extra_layers,width", [(0, 1.0), (2, 0.5)])
def test_manual_gradients_equal_autograd_gradients(extra_layers, width):
    torch.manual_seed(0)
    net = mlp(3, extra_layers=extra_layers, width=width)
    x, y = torch.rand(3, 16, 784), torch.randint(0, 10, (3, 16))
    logits, features, expected = autograd_gradients(net, x, y)
    for p in net.parameters():
        p.grad = None
    manual_logits, manual_features = ManualBackprop(net).step(x, y)
    assert torch.equal(manual_logits, logits)  # the same batched matmuls
    assert len(manual_features) == len(features) == 2 + extra_layers
    for a, b in zip(manual_features, features, strict=True):
        assert torch.equal(a, b)
    for p, g in zip(net.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-7)


def test_manual_gradients_are_written_into_the_same_buffers_every_step():
    net = mlp(2)
    backprop = ManualBackprop(net)
    x, y = torch.rand(2, 16, 784), torch.randint(0, 10, (2, 16))
    backprop.step(x, y)
    first = [p.grad for p in net.parameters()]
    backprop.step(torch.rand(2, 16, 784), y)
    assert all(p.grad is g for p, g in zip(net.parameters(), first, strict=True))


@pytest.mark.parametrize("method,params", [
    ("baseline", {}), ("l2_init", {"strength": 1e-2}),
    ("cbp", {"replacement_rate": 0.05, "maturity": 5}), ("redo", {"period": 10}),
])
def test_manual_and_autograd_training_agree(data_dir, method, params):
    cfg = resolve_config({**SMALL, "method": method, "params": params})
    manual = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, backprop="manual")
    autograd = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, backprop="autograd")
    assert manual.extra["backprop"] == "manual" and autograd.extra["backprop"] == "autograd"
    for a, b in zip(manual.members, autograd.members, strict=True):
        # 60 Adam steps apart only by rounding: at most one prediction in a task flips.
        assert a.task_online_accuracy == pytest.approx(b.task_online_accuracy, abs=1.5 / 480)
        assert a.task_metrics["weight_magnitude"] == pytest.approx(
            b.task_metrics["weight_magnitude"], rel=1e-4)


def test_auto_backprop_is_manual_for_the_mlp_and_autograd_for_other_networks(data_dir):
    def one_task(method):
        return Members.from_config(resolve_config({**SMALL, "tasks": 1, "method": method}), [0])

    mlp_run = train_ensemble(one_task("baseline"), data_dir=data_dir, measure=False)
    norm_run = train_ensemble(one_task("layer_norm"), data_dir=data_dir, measure=False)
    assert mlp_run.extra["backprop"] == "manual"
    assert norm_run.extra["backprop"] == "autograd"
    # the plain forms: autograd for every network
    with plain_forms():
        plain_run = train_ensemble(one_task("baseline"), data_dir=data_dir, measure=False)
    assert plain_run.extra["backprop"] == "autograd"


def test_manual_backprop_applies_to_the_relu_mlp_outside_the_plain_forms():
    net = mlp(1)
    assert applies(net) and supports(net)
    with plain_forms():
        assert not applies(net) and supports(net)
    assert applies(net) and not applies(mlp(1, layer_norm=True))


def test_manual_backprop_refuses_networks_it_cannot_train(data_dir):
    assert not supports(mlp(1, layer_norm=True))
    assert not supports(mlp(1, activation="concat_relu"))
    assert not supports(build_network("cnn", 1, (3, 32, 32), 10))
    with pytest.raises(ValueError, match="ReLU MLP"):
        ManualBackprop(mlp(1, layer_norm=True))
    cfg = resolve_config({**SMALL, "tasks": 1, "method": "layer_norm"})
    with pytest.raises(ValueError, match="backprop='manual' needs a plain ReLU MLP.*layer_norm"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, backprop="manual")
    with pytest.raises(ValueError, match="backprop must be"):
        train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, backprop="numeric")
