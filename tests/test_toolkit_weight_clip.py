"""Weight Clipping (issue 47): the rule against a literal float64 implementation, the init
bounds against the init draws, member independence, the CLI, the drop-in and the domains."""

from __future__ import annotations

import math

import pytest
import torch

from plasticlab.cli import main
from plasticlab.dropin_field import WeightClip
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods.weight_clip import init_bound
from plasticlab.nets.init import INIT_SCHEMES, draw
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, f32, tiny
from test_toolkit_spectral import trained_parameters

# --- the init bound s_ℓ ---------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_init_bound_is_the_uniform_bound_of_each_scheme_or_root3_sigma_of_a_normal_one(scheme):
    fan_in, fan_out = 400, 300
    weight, _ = draw(scheme, (fan_out, fan_in), fan_in, fan_out, torch.Generator().manual_seed(0))
    s = init_bound(scheme, fan_in, fan_out)
    if scheme.endswith("normal"):  # N(0, σ²): s = √3·σ, the uniform of the same variance
        assert float(weight.std()) * math.sqrt(3) == pytest.approx(s, rel=0.01)
    else:  # U(−s, s): every draw inside, the extremes near the bound (120,000 draws)
        assert float(weight.abs().max()) <= s and float(weight.abs().max()) > 0.999 * s


# --- the rule ---------------------------------------------------------------------------------------

def literal_clip(value, kappa, fan_in):
    """PyTorch's default init range is U(±1/√fan_in) for weights and biases: clip to κ times it."""
    bound = kappa / math.sqrt(fan_in)
    return value.clamp(-bound, bound)


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_every_weight_and_bias_output_layer_included_is_clipped_to_kappa_times_its_layers_bound(arch):
    kappas = [0.5, 1.5]
    method, net, _ = tiny("weight_clip", {"kappa": kappas}, arch=arch)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)  # well outside the init range
    before = [p.detach().clone() for p in net.parameters()]
    method.after_step([], None, 1)
    i = 0
    for layer in net.affine_layers:
        fan_in = math.prod(layer.weight.shape[2:])  # in · kh · kw
        for _ in (layer.weight, layer.bias):
            for k, kappa in enumerate(kappas):
                expected = literal_clip(before[i][k], f32(kappa), fan_in)
                torch.testing.assert_close(list(net.parameters())[i][k], expected, rtol=0, atol=1e-7)
            i += 1
    assert any((b.abs() > a.abs()).any() for a, b in zip(net.parameters(), before, strict=True))


def test_weights_inside_the_range_and_the_optimizer_state_are_left_as_they_are():
    method, net, opt = tiny("weight_clip", {"kappa": 1.0})
    theta0 = [p.detach().clone() for p in net.parameters()]  # |θ₀| ≤ 1/√fan_in
    for m in opt.exp_avg:
        m.fill_(0.5)
    method.after_step([], None, 1)
    assert all(torch.equal(p, t) for p, t in zip(net.parameters(), theta0, strict=True))
    assert all(bool((m == 0.5).all()) for m in opt.exp_avg)


# --- in the engine ----------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", ["permuted_mnist", "random_label_cifar"], ids=["mlp", "cnn"])
def test_member_k_of_eight_with_its_own_kappa_equals_seed_k_alone_to_the_bit(data_dir, problem):
    size = {"examples_per_task": 96} if problem == "permuted_mnist" else {"examples": 64}
    cfg = resolve_config({**TINY_MNIST, "problem": problem, "problem_params": size, "lr": 1e-2,
                          "method": "weight_clip"})
    grid = [{"kappa": 1.0 + k / 4} for k in range(8)]
    together = trained_parameters(cfg, list(range(8)), data_dir, grid)
    alone = trained_parameters(cfg, [5], data_dir, grid[5:6])
    assert all(torch.equal(t[5], a[0]) for t, a in zip(together, alone, strict=True))


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "weight_clip", "params": {"kappa": 1.0}})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_two_tasks_from_the_cli(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "permuted_mnist", "--method", "weight_clip", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--set", "kappa=1.5",
                 "--no-progress", "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 0
    assert main(["sweep", "--preset", "field-weight_clip-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "weight_clip" in capsys.readouterr().out


# --- the drop-in --------------------------------------------------------------------------------------

def test_the_drop_in_clips_a_plain_model_as_the_engine_clips_a_one_member_network():
    method, net, _ = tiny("weight_clip", {"kappa": 1.3}, members=1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 3)).double()
    with torch.no_grad():
        for p, q in zip(model.parameters(), net.parameters(), strict=True):
            q.mul_(3.0)
            p.copy_(q[0])
    WeightClip(model, kappa=f32(1.3)).step()
    method.after_step([], None, 1)
    for p, q in zip(model.parameters(), net.parameters(), strict=True):
        assert torch.equal(p, q[0])


# --- domains ------------------------------------------------------------------------------------------

def test_kappa_must_be_positive():
    with pytest.raises(ValueError, match="kappa must be a finite number > 0"):
        resolve_config({"problem": "permuted_mnist", "method": "weight_clip", "params": {"kappa": 0}})
    with pytest.raises(ValueError, match="kappa κ must be > 0"):
        WeightClip(torch.nn.Linear(2, 2), kappa=-1.0)
    with pytest.raises(ValueError, match="no nn.Linear or nn.Conv2d"):
        WeightClip(torch.nn.ReLU())
