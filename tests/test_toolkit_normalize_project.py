"""Normalize-and-Project (issue 47): the projection against a literal float64 implementation on
the LayerNorm networks, member independence, the CLI, the drop-in and what it needs."""

from __future__ import annotations

import pytest
import torch

from plasticlab.cli import main
from plasticlab.dropin_field import NormalizeProject
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS, MethodContext
from plasticlab.nets import build_network
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST
from test_toolkit_spectral import trained_parameters

NAP = METHODS["normalize_project"]


def nap(arch=TINY_MLP, members=2, layer_norm=True):
    """(method, net, optimizer) on a tiny float64 network with NaP's architecture."""
    kind, shape, outputs, width = arch
    net = build_network(kind, members, shape, outputs, width=width, layer_norm=layer_norm,
                        generators=[torch_generator(s, "init") for s in range(members)]).to(torch.float64)
    opt = Adam(list(net.parameters()), lr=1e-2, fused=False)
    return NAP(net, opt, {}, MethodContext(list(range(members)), torch.device("cpu"))), net, opt


def perturb_(params, seed=3):
    """Move every parameter off its initial norm: a random scale and a random push each."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.mul_(0.5 + 2 * torch.rand((), generator=g, dtype=p.dtype))
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_each_weight_and_each_layer_norms_scale_and_offset_go_back_to_their_initial_norm(arch):
    method, net, _ = nap(arch)
    theta0 = {id(p): p.detach().clone() for p in net.parameters()}
    perturb_(net.parameters())
    before = {id(p): p.detach().clone() for p in net.parameters()}
    method.after_step([], None, 1)
    for k in range(2):
        for layer in net.affine_layers:  # W ← W·‖W⁰‖/‖W‖, every layer; biases untouched
            w, w0 = before[id(layer.weight)][k], theta0[id(layer.weight)][k]
            scale = torch.linalg.norm(w0.flatten()) / torch.linalg.norm(w.flatten())
            torch.testing.assert_close(layer.weight[k], w * scale)
            assert torch.equal(layer.bias[k], before[id(layer.bias)][k])
        for block in net.hidden_blocks:  # (γ, β) ← (γ, β)·‖(γ⁰, β⁰)‖/‖(γ, β)‖, jointly
            g, b = before[id(block.norm.weight)][k], before[id(block.norm.bias)][k]
            g0, b0 = theta0[id(block.norm.weight)][k], theta0[id(block.norm.bias)][k]
            scale = torch.sqrt((g0 ** 2).sum() + (b0 ** 2).sum()) / torch.sqrt((g ** 2).sum()
                                                                          + (b ** 2).sum())
            torch.testing.assert_close(block.norm.weight[k], g * scale)
            torch.testing.assert_close(block.norm.bias[k], b * scale)


def test_a_network_at_its_initial_norms_and_the_optimizer_state_are_left_as_they_are():
    method, net, opt = nap()
    theta0 = [p.detach().clone() for p in net.parameters()]
    for m in opt.exp_avg:
        m.fill_(0.5)
    method.after_step([], None, 1)
    assert all(torch.equal(p, t) for p, t in zip(net.parameters(), theta0, strict=True))
    assert all(bool((m == 0.5).all()) for m in opt.exp_avg)


def test_a_zero_weight_is_left_at_zero():
    method, net, _ = nap()
    with torch.no_grad():
        net.affine_layers[1].weight[0].zero_()
    method.after_step([], None, 1)
    assert not net.affine_layers[1].weight[0].any() and net.affine_layers[1].weight[1].any()


def test_its_network_has_a_layer_norm_before_every_hidden_activation_and_a_plain_one_is_refused():
    assert NAP.architecture({}, {}) == {"layer_norm": True}
    with pytest.raises(ValueError, match="needs a LayerNorm before every hidden activation"):
        nap(layer_norm=False)


# --- in the engine ----------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["permuted_mnist", "random_label_cifar"], ids=["mlp", "cnn"])
def test_member_k_of_eight_equals_seed_k_alone_to_the_bit(data_dir, problem):
    size = {"examples_per_task": 96} if problem == "permuted_mnist" else {"examples": 64}
    cfg = resolve_config({**TINY_MNIST, "problem": problem, "problem_params": size, "lr": 1e-2,
                          "method": "normalize_project"})
    together = trained_parameters(cfg, list(range(8)), data_dir)
    alone = trained_parameters(cfg, [5], data_dir)
    assert all(torch.equal(t[5], a[0]) for t, a in zip(together, alone, strict=True))


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "normalize_project"})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_two_tasks_from_the_cli(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "permuted_mnist", "--method", "normalize_project", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--no-progress",
                 "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 0
    assert main(["sweep", "--preset", "field-normalize_project-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "normalize_project" in capsys.readouterr().out


# --- the drop-in --------------------------------------------------------------------------------------

def test_the_drop_in_projects_a_plain_model_as_the_engine_projects_a_one_member_network():
    method, net, _ = nap(members=1)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(6, 4), nn.LayerNorm(4), nn.ReLU(), nn.Linear(4, 4), nn.LayerNorm(4),
                          nn.ReLU(), nn.Linear(4, 3)).double()
    ours = [p for block in net.blocks for m in (block.affine, block.norm) if m is not None
            for p in (m.weight, m.bias)]
    with torch.no_grad():
        for p, q in zip(model.parameters(), ours, strict=True):
            p.copy_(q[0])
        drop_in = NormalizeProject(model)
        perturb_(ours)
        for p, q in zip(model.parameters(), ours, strict=True):
            p.copy_(q[0])
    drop_in.step()
    method.after_step([], None, 1)
    for p, q in zip(model.parameters(), ours, strict=True):
        assert torch.equal(p, q[0])


def test_the_drop_in_needs_the_models_layer_norms():
    with pytest.raises(ValueError, match="no nn.LayerNorm"):
        NormalizeProject(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1)))
