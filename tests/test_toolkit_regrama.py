"""ReGraMa (issue 47): the GraMa score against a literal float64 implementation, the reset it
shares with ReDo, per-member periods and draws, member independence in the engine (MLP and
CNN), no host round trip per step, the nn.Sequential drop-in, a CLI run and the domains."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import plasticlab.methods
from conftest import assert_host_reads_do_not_grow_with_steps
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods.regrama import ReGraMa, ReGraMaSequential
from plasticlab.nets.init import draw
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, backward, f32, inputs, tiny
from test_member_independence import train_keeping_network


def literal_scores(grad_in_weight):
    """GraMa of one member's hidden layer, unit by unit: mean |∂L/∂W_ij| over the unit's incoming
    weights, over the layer's mean of those, + 1e-9."""
    g = [float(grad_in_weight[i].abs().sum()) / grad_in_weight[i].numel()
         for i in range(grad_in_weight.shape[0])]
    mean = sum(g) / len(g)
    return [gi / (mean + 1e-9) for gi in g]


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_regrama_resets_exactly_the_units_whose_normalised_gradient_magnitude_is_at_most_tau(arch):
    tau = [0.6, 0.9]
    method, net, opt = tiny("regrama", {"threshold": tau, "period": 1}, arch=arch, seeds=[3, 8])
    for m in opt.exp_avg + opt.exp_avg_sq:
        m.fill_(1.0)
    opt.step_counts = [5] * len(opt.params)
    x = inputs(arch)
    backward(net, x)
    layers = net.affine_layers
    before = [(layer.weight.detach().clone(), layer.bias.detach().clone()) for layer in layers]
    grads = [layer.weight.grad.clone() for layer in layers[:-1]]
    method.after_step([], x, 1)
    for k, seed in enumerate([3, 8]):
        # the literal rule for member k: every hidden layer's incoming side, then outgoing zeros
        weights = [w[k].clone() for w, _ in before]
        biases = [b[k].clone() for _, b in before]
        resets = []
        for i, layer in enumerate(layers[:-1]):
            fresh_w, fresh_b = draw("torch_default", tuple(layer.weight.shape[1:]), layer.fan_in,
                                    layer.fan_out, torch_generator(seed, "method", "regrama", i))
            reset = [u for u, s in enumerate(literal_scores(grads[i][k])) if s <= f32(tau[k])]
            for u in reset:
                weights[i][u], biases[i][u] = fresh_w[u].double(), fresh_b[u].double()
            resets.append(reset)
            assert int(method.last_reset_per_layer[k, i]) == len(reset)
        for i, reset in enumerate(resets):
            units = len(biases[i])
            # the next layer reads unit u through its input channel u (a conv) or, after a
            # flatten, through the u-th block of its inputs
            reads = weights[i + 1].reshape(weights[i + 1].shape[0], units, -1)
            for u in reset:
                reads[:, u] = 0.0
        for layer, w, b in zip(layers, weights, biases, strict=True):
            assert torch.equal(layer.weight[k], w) and torch.equal(layer.bias[k], b), k
        # moments of a reset unit's incoming weights are zeroed, the others kept
        moments = opt.exp_avg[0][k].flatten(1)
        assert [bool((moments[u] == 0).all()) for u in range(moments.shape[0])] == \
            [u in resets[0] for u in range(moments.shape[0])]
    assert int(method.last_reset.sum()) > 0
    assert opt.step_counts == [5] * len(opt.params)  # ReDo's reset keeps the step counts


@pytest.mark.parametrize("fused", [True, False], ids=["fused-adam", "plain-adam"])
def test_regrama_scores_the_steps_gradient_which_the_update_leaves_in_grad(fused):
    # ReGraMa runs after the optimizer step: the update must not have changed .grad
    method, net, _ = tiny("regrama", {"threshold": 0.0, "period": 1})
    opt = Adam(list(net.parameters()), lr=1e-2, fused=fused, weight_decay=1e-3)
    backward(net, inputs(TINY_MLP))
    grads = [p.grad.clone() for p in net.parameters()]
    opt.step()
    assert all(torch.equal(p.grad, g) for p, g in zip(net.parameters(), grads, strict=True))


def test_regrama_with_tau_zero_resets_exactly_the_units_with_no_incoming_gradient():
    method, net, _ = tiny("regrama", {"threshold": 0.0, "period": 1})
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    layer = net.affine_layers[1]
    layer.weight.grad[1, 2] = 0.0  # member 1, unit 2 of the second hidden layer: no gradient
    layer.bias.grad[0, 3] = 0.0  # the bias is not scored
    counts = method.reset()
    assert counts.tolist() == [[0, 0], [0, 1]]


def test_regrama_resets_only_members_whose_period_is_due_and_only_they_draw():
    method, net, _ = tiny("regrama", {"threshold": 10.0, "period": [2, 3]})  # τ = 10: every unit
    x = inputs(TINY_MLP)
    backward(net, x)
    before = [p.detach().clone() for p in net.parameters()]
    method.after_step([], x, 1)  # nobody is due
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before, strict=True))
    method.after_step([], x, 2)  # member 0 only
    after = list(net.parameters())
    assert not torch.equal(after[0][0], before[0][0])
    assert all(torch.equal(a[1], b[1]) for a, b in zip(after, before, strict=True))
    fresh = torch_generator(1, "method", "regrama", 0)
    assert torch.equal(method.recycler.generators[0][1].get_state(), fresh.get_state())


def test_regrama_without_a_gradient_says_when_to_call_it():
    method, _, _ = tiny("regrama")
    with pytest.raises(ValueError, match="after loss.backward"):
        method.reset()


def test_regrama_sequential_drop_in_resets_a_unit_without_gradient_from_the_seeds_stream():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)).double()
    # plasticlab's Adam (torch.optim's first step imports torch's compiler: seconds of a test)
    optimizer = Adam(list(model.parameters()), lr=1e-2)
    x, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    for p in model.parameters():  # every unit learns but unit 2 of the first hidden layer
        p.grad = torch.ones_like(p)
    model[0].weight.grad[2] = 0.0
    regrama = ReGraMaSequential(model, optimizer, threshold=0.0, seed=5)
    assert regrama.scores()[0][2] == 0.0
    before = model[0].weight.detach().clone()
    moment = optimizer.exp_avg[0]
    kept = moment[[0, 1, 3]].clone()
    assert regrama.reset() == [1, 0]
    fresh_w, _ = draw("torch_default", (4, 6), 6, 4, torch_generator(5, "method", "regrama", 0))
    assert torch.equal(model[0].weight[2], fresh_w[2].double())
    assert torch.equal(model[0].weight[[0, 1, 3]], before[[0, 1, 3]])
    assert not model[2].weight[:, 2].any()
    assert not moment[2].any() and torch.equal(moment[[0, 1, 3]], kept) and kept.any()


class RecordingReGraMa(ReGraMa):
    resets: list = []

    def reset(self, members=None):
        counts = super().reset(members)
        RecordingReGraMa.resets.append(counts.clone())
        return counts


@pytest.mark.parametrize("run,data", [
    ({**TINY_MNIST, "steps_per_task": 12}, "data_dir"),
    ({"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 6,
      "problem_params": {"examples": 160}}, "cifar10_dir"),
], ids=["mlp", "cnn"])
def test_member_k_of_a_regrama_ensemble_is_seed_k_alone_bit_for_bit(monkeypatch, request, run, data):
    monkeypatch.setitem(plasticlab.methods.METHODS, "regrama", RecordingReGraMa)
    RecordingReGraMa.resets = []
    data_dir = request.getfixturevalue(data)
    cfg = resolve_config({**run, "method": "regrama", "lr": 1e-2,
                          "params": {"period": 3, "threshold": 0.5}})
    grid = [{"period": 3, "threshold": 0.5}, {"period": 4, "threshold": 0.8}, {"period": 3, "threshold": 0.5}]
    together, net_together = train_keeping_network(monkeypatch, cfg, [0, 1, 2], data_dir, "autograd")
    assert any(bool(c.any()) for c in RecordingReGraMa.resets)  # it did reset units
    alone, net_alone = train_keeping_network(monkeypatch, cfg, [2], data_dir, "autograd")
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy
    for p, q in zip(net_together.parameters(), net_alone.parameters(), strict=True):
        assert torch.equal(p[2], q[0])
    mixed = train_ensemble(Members.from_config(cfg, [0, 1, 2], params=grid), data_dir=data_dir,
                           measure=False)
    single = train_ensemble(Members.from_config(cfg, [1], params=grid[1:2]), data_dir=data_dir,
                            measure=False)
    assert mixed.members[1].task_online_accuracy == single.members[0].task_online_accuracy


def test_regrama_resumed_from_a_checkpoint_mid_run_ends_bit_identical(data_dir, tmp_path):
    from test_checkpoint import Crash, crash_after

    # period 7 over 12-step tasks: resets on both sides of the task-0 checkpoint, each
    # member's reset streams carried across it
    cfg = resolve_config({**TINY_MNIST, "tasks": 3, "steps_per_task": 12, "method": "regrama",
                          "lr": 1e-2, "params": {"period": 7, "threshold": 0.5}})
    whole = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False,
                       checkpoint=path, on_task_end=crash_after(0))
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False,
                             checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy


def test_regrama_makes_no_host_round_trip_per_step(data_dir, monkeypatch):
    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "regrama",
                          "params": {"period": 3, "threshold": 0.5}})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_regrama_runs_two_tasks_from_the_cli(data_dir, tmp_path, capsys):
    from plasticlab.cli import main

    assert main(["run", "--problem", "permuted_mnist", "--method", "regrama", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--set", "period=10",
                 "--no-progress", "--data-dir", str(data_dir), "--out", str(tmp_path / "r")]) == 0
    assert "results in" in capsys.readouterr().out


@pytest.mark.parametrize("params,needle", [
    ({"threshold": -0.1}, "threshold must be a finite number >= 0"),
    ({"period": 0}, "period must be an integer >= 1"),
    ({"reinit": "zeros"}, "reinit must be one of fresh, initial"),
])
def test_regrama_parameters_have_domains(params, needle):
    with pytest.raises(ValueError, match=needle):
        resolve_config({"problem": "permuted_mnist", "method": "regrama", "params": params})
