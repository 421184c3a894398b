"""Deep Fourier features (issue 47): ψ(z) = [sin z, cos z] in every hidden layer, widths shrunk to
the plain network's parameter count, against a literal float64 network; member k = seed k alone;
the CLI; the drop-in activation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plasticlab.cli import main
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS, boundary_oracle
from plasticlab.methods.deep_fourier import DeepFourier
from plasticlab.nets import build_network, concat_relu_scale, layer_plan, plan_parameter_count
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members
from plasticlab.step import Step
from test_field_methods import TINY_MNIST

TINY_MLP = {"arch": "mlp", "input_shape": (6,), "num_outputs": 3, "width": 0.04, "extra_layers": 0}
TINY_CNN = {"arch": "cnn", "input_shape": (2, 16, 16), "num_outputs": 3, "width": 0.25, "extra_layers": 0}


def dff_net(plain, members=2):
    cls = METHODS["deep_fourier"]
    return build_network(members=members, generators=[torch_generator(s, "init") for s in range(members)],
                         **plain, **cls.architecture({}, plain)).to(torch.float64)


def literal_forward(net, x, k):
    """Member k's logits from its weights, written out: z = affine(h); h = [sin z, cos z]."""
    h = x[k]
    for block in net.blocks[:-1]:
        w, b = block.affine.weight[k], block.affine.bias[k]
        if w.dim() == 4:
            z = F.conv2d(h, w, b)
            h = torch.cat([torch.sin(z), torch.cos(z)], dim=1)
            h = F.max_pool2d(h, 2) if block.pool else h
            h = h.flatten(1) if block.flatten else h
        else:
            z = h @ w.T + b
            h = torch.cat([torch.sin(z), torch.cos(z)], dim=1)
    last = net.blocks[-1].affine
    return h @ last.weight[k].T + last.bias[k]


@pytest.mark.parametrize("plain", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_every_hidden_activation_is_sin_and_cos_of_the_pre_activation(plain):
    net = dff_net(plain)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, *plain["input_shape"], generator=g, dtype=torch.float64)
    logits, features = net(x, return_features=True)
    for k in range(2):
        torch.testing.assert_close(logits[k], literal_forward(net, x, k))
    z = net.blocks[0].pre_activation(x)
    torch.testing.assert_close(features[0], torch.cat([torch.sin(z), torch.cos(z)], dim=2))


@pytest.mark.parametrize("arch,shape,outputs", [("mlp", (784,), 10), ("cnn", (3, 32, 32), 10),
                                                ("cnn", (3, 32, 32), 100)])
def test_widths_shrink_to_the_plain_parameter_count_as_concat_relus_do(arch, shape, outputs):
    plain = {"arch": arch, "input_shape": shape, "num_outputs": outputs, "width": 1.0, "extra_layers": 0}
    overrides = METHODS["deep_fourier"].architecture({}, plain)
    assert overrides["hidden_scale"] == concat_relu_scale(arch, shape, outputs)  # both double the features
    count = lambda s: plan_parameter_count(layer_plan(arch, shape, outputs, activation="deep_fourier",  # noqa: E731
                                                      hidden_scale=s))
    target = plan_parameter_count(layer_plan(arch, shape, outputs))
    assert count(overrides["hidden_scale"]) >= target > count(overrides["hidden_scale"] - 0.01)


def test_the_mlp_has_91_units_per_layer_and_each_next_layer_reads_twice_as_many():
    net = build_network("mlp", 1, (784,), 10, **METHODS["deep_fourier"].architecture(
        {}, {"arch": "mlp", "input_shape": (784,), "num_outputs": 10, "width": 1.0, "extra_layers": 0}))
    assert [b.affine.out_features for b in net.hidden_blocks] == [91, 91]
    assert [b.affine.in_features for b in net.blocks[1:]] == [182, 182]
    assert net.parameter_count() >= build_network("mlp", 1, (784,), 10).parameter_count()


def test_the_hand_written_relu_backward_does_not_apply_and_autograd_trains_it():
    net = dff_net(TINY_MLP)
    cls = METHODS["deep_fourier"]
    from plasticlab.methods import MethodContext
    opt = Adam(list(net.parameters()), lr=1e-3)
    method = cls(net, opt, {}, MethodContext([0, 1], torch.device("cpu")))
    assert Step(net, method, opt).backprop == "autograd"
    with pytest.raises(ValueError, match="backprop='manual' needs a plain ReLU MLP"):
        Step(net, method, opt, backprop="manual")


@pytest.mark.parametrize("problem,settings", [
    ("permuted_mnist", TINY_MNIST),
    ("random_label_cifar", {"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 3,
                            "problem_params": {"examples": 32}}),
], ids=["mlp", "cnn"])
def test_member_k_equals_seed_k_alone(data_dir, problem, settings):
    cfg = resolve_config({**settings, "method": "deep_fourier"})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir, measure=False)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy


def test_two_task_smoke_run_and_sweep_plan_from_the_cli(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "permuted_mnist", "--method", "deep_fourier", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--no-progress",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "out")]) == 0
    assert main(["sweep", "--preset", "field-deep_fourier-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "deep_fourier" in capsys.readouterr().out


def test_it_is_listed_takes_no_parameters_and_is_no_boundary_oracle(capsys):
    assert main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("deep_fourier "))
    assert "boundary oracle" not in line and not boundary_oracle("deep_fourier")
    with pytest.raises(ValueError, match="unknown parameter"):
        resolve_config({"problem": "permuted_mnist", "method": "deep_fourier", "params": {"scale": 2}})


def test_the_drop_in_activation_computes_what_the_engine_network_does():
    net = dff_net(TINY_MLP, members=1)
    model = nn.Sequential(nn.Linear(6, net.blocks[0].affine.out_features), DeepFourier(),
                          nn.Linear(*net.blocks[1].affine.weight.shape[:0:-1]), DeepFourier(),
                          nn.Linear(*net.blocks[2].affine.weight.shape[:0:-1])).to(torch.float64)
    with torch.no_grad():
        for layer, block in zip(model[::2], net.blocks, strict=True):
            layer.weight.copy_(block.affine.weight[0])
            layer.bias.copy_(block.affine.bias[0])
    x = torch.randn(1, 7, 6, dtype=torch.float64)
    torch.testing.assert_close(model(x[0]), net(x)[0])
    conv = DeepFourier()(torch.zeros(2, 3, 4, 4))
    assert conv.shape == (2, 6, 4, 4) and bool((conv[:, 3:] == 1).all()) and bool((conv[:, :3] == 0).all())
