"""Plasticity injection (issue 47): y = h_θ(φ(x)) + h_θ′(φ(x)) − h_θ′₀(φ(x)) against a literal
float64 implementation (θ and θ′₀ frozen, θ′ and φ trained), repeated injections, the schedules,
member k = seed k alone, the CLI, errors, and the drop-in."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plasticlab.cli import main
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.measure import folded_permutation
from plasticlab.methods import METHODS, MethodContext, Needs, boundary_oracle
from plasticlab.methods.plasticity_injection import PlasticityInjection
from plasticlab.nets.init import draw_members
from plasticlab.run_config import Members
from plasticlab.step import Step
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, backward, inputs, tiny

NAME = "plasticity_injection"
TINY_CIFAR = {"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 3,
              "problem_params": {"examples": 32}}


def expected_draws(net, layers, seeds, draws=1):
    """θ′₀ of each member's ``draws``-th injection: its own stream, layer by layer."""
    generators = MethodContext(seeds, torch.device("cpu")).generators(NAME)
    out = None
    for _ in range(draws):
        out = [draw_members(net.init, tuple(b.affine.weight.shape[1:]), b.affine.fan_in, b.affine.fan_out,
                            generators, "cpu") for b in net.blocks[-layers:]]
    return [(w.double(), b.double()) for w, b in out]


def head(z, layers):
    """A literal fully connected ReLU head: layers = [(W, b), …]."""
    for i, (w, b) in enumerate(layers):
        z = z @ w.T + b
        if i < len(layers) - 1:
            z = torch.relu(z)
    return z


class Literal:
    """Member k's network after injections, tensor by tensor: the encoder and θ′ trained; the
    frozen heads, each with its sign, never."""

    def __init__(self, net, k, layers):
        blocks = list(net.blocks)
        self.encoder = [[b.affine.weight[k].detach().clone().requires_grad_(),
                         b.affine.bias[k].detach().clone().requires_grad_()] for b in blocks[:-layers]]
        self.trained = [[b.affine.weight[k].detach().clone().requires_grad_(),
                         b.affine.bias[k].detach().clone().requires_grad_()] for b in blocks[-layers:]]
        self.frozen: list[tuple[float, list]] = []

    def inject(self, fresh):
        self.frozen.append((1.0, [(w.detach().clone(), b.detach().clone()) for w, b in self.trained]))
        self.frozen.append((-1.0, [(w.clone(), b.clone()) for w, b in fresh]))
        self.trained = [[w.clone().requires_grad_(), b.clone().requires_grad_()] for w, b in fresh]

    def __call__(self, x):
        z = x
        for w, b in self.encoder:
            z = torch.relu(z @ w.T + b)
        out = head(z, self.trained)
        for sign, frozen in self.frozen:
            out = out + sign * head(z, frozen)
        return out

    def sgd_step(self, x, y, lr, scale):
        params = [p for layer in self.encoder + self.trained for p in layer]
        loss = F.cross_entropy(self(x), y, reduction="sum") * scale
        for p, g in zip(params, torch.autograd.grad(loss, params), strict=True):
            p.data -= lr * g


def labels(x, seed=1):
    return torch.randint(0, 3, x.shape[:2], generator=torch.Generator().manual_seed(seed))


def test_training_after_two_injections_follows_the_literal_definition():
    method, net, opt = tiny(NAME, {"layers": 2}, optimizer="sgd")
    literal = [Literal(net, k, 2) for k in range(2)]
    x = inputs(TINY_MLP)
    for injection in (1, 2):
        before = net(x).detach()
        method.on_task_end(None)
        fresh = expected_draws(net, 2, [0, 1], draws=injection)
        for k in range(2):
            literal[k].inject([(w[k], b[k]) for w, b in fresh])
            assert torch.equal(net.blocks[-1].affine.weight[k], fresh[1][0][k])  # θ′ = θ′₀, drawn
        torch.testing.assert_close(net(x).detach(), before)  # the function is unchanged
        for step in range(3):
            xs, y = inputs(TINY_MLP, seed=10 * injection + step), labels(x, seed=step)
            backward(net, xs, seed=step)
            opt.step()
            for k in range(2):  # the helper's loss is the mean over both members' examples
                literal[k].sgd_step(xs[k], y[k], 0.1, 1 / y.numel())
        for k in range(2):
            torch.testing.assert_close(net(x)[k].detach(), literal[k](x[k]).detach())
            encoder = net.blocks[0].affine.weight[k].detach()
            torch.testing.assert_close(encoder, literal[k].encoder[0][0].detach())
    assert len(method.frozen.heads) == 4 and method.injections == [2, 2]


def test_a_one_layer_head_folds_into_one_map_and_under_sgd_changes_nothing():
    # h_θ + h_θ′ − h_θ′₀ of a linear head is the linear map θ + θ′ − θ′₀, and ∂L/∂θ′ is ∂L/∂(that
    # map): without optimizer state, injection leaves the training as it was
    method, net, opt = tiny(NAME, {"layers": 1, "schedule": "steps", "period": 2}, optimizer="sgd")
    _, plain, plain_opt = tiny("baseline", optimizer="sgd")
    for step in range(1, 7):
        x = inputs(TINY_MLP, seed=step)
        for n, o in ((net, opt), (plain, plain_opt)):
            backward(n, x, seed=step)
            o.step()
        method.after_step([], x, step)
        torch.testing.assert_close(net(x).detach(), plain(x).detach())
    assert len(method.frozen.heads) == 1 and method.injections == [3, 3]


def test_the_injected_head_restarts_its_optimizer_state_as_a_new_parameter():
    method, net, opt = tiny(NAME, {"layers": 2})
    for step in range(3):
        backward(net, inputs(TINY_MLP, seed=step), seed=step)
        opt.step()
    encoder_moment = opt.exp_avg[0].clone()
    method.on_task_end(None)
    assert torch.equal(opt.exp_avg[0], encoder_moment)  # the encoder's state goes on
    w = net.blocks[-1].affine.weight
    index = [i for i, p in enumerate(opt.params) if p is w][0]
    assert not opt.exp_avg[index].any() and not opt.exp_avg_sq[index].any()
    before = w.detach().clone()
    backward(net, inputs(TINY_MLP, seed=9), seed=9)
    g = w.grad.clone()
    opt.step()  # a first Adam step: m̂ = g, v̂ = g², Δ = −α g/(|g| + ε)
    torch.testing.assert_close(w.detach(), before - 1e-2 * g / (g.abs() + opt.eps))


def test_members_inject_on_their_own_periods_and_draw_only_then():
    method, net, _ = tiny(NAME, {"schedule": "steps", "period": [2, 3]})
    assert type(method).needs(method.hp) == Needs(after_step=True)
    for step in range(1, 4):
        method.after_step([], None, step)
    assert method.injections == [1, 1]
    first = expected_draws(net, 2, [0, 1], draws=1)
    torch.testing.assert_close(net.blocks[-1].affine.weight.detach(), first[1][0])
    # member 1's entries of the head frozen at step 2 (member 0's injection) are zero
    assert len(method.frozen.heads) == 4 and not method.frozen.heads[0][0][0][1].any()


def test_member_k_equals_seed_k_alone_with_its_own_period(data_dir):
    cfg = resolve_config({**TINY_MNIST, "method": NAME, "params": {"schedule": "steps"}})
    grid = [{"schedule": "steps", "period": 4}, {"schedule": "steps", "period": 5}]
    together = train_ensemble(Members.from_config(cfg, [0, 1], params=grid), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [1], params=grid[1:]), data_dir=data_dir, measure=False)
    assert together.members[1].task_online_accuracy == alone.members[0].task_online_accuracy


@pytest.mark.parametrize("settings", [TINY_MNIST, TINY_CIFAR], ids=["mlp", "cnn"])
def test_member_k_equals_seed_k_alone_at_task_ends(data_dir, settings):
    cfg = resolve_config({**settings, "tasks": 3, "method": NAME})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy
    # test accuracy (MNIST's) through the network's own forward, frozen heads included
    test = [r.task_metrics.get("task_test_accuracy") for r in (together.members[2], alone.members[0])]
    assert test[0] == test[1] and (test[0] is not None) == (settings is TINY_MNIST)


def test_the_frozen_heads_are_checkpointed_with_the_method():
    method, net, _ = tiny(NAME, {"layers": 2})
    method.on_task_end(None)
    method.on_task_end(None)
    state, net_state = method.state_dict(), net.state_dict()
    fresh, fresh_net, _ = tiny(NAME, {"layers": 2})
    fresh_net.load_state_dict(net_state)
    fresh.load_state_dict(state)
    x = inputs(TINY_MLP)
    assert fresh_net.head_offset is fresh.frozen and torch.equal(fresh_net(x), net(x))
    fresh.on_task_end(None)
    method.on_task_end(None)
    assert torch.equal(fresh_net(x), net(x))  # the streams went on from where they were


def test_the_network_is_trained_by_autograd_and_evaluated_through_its_own_forward():
    method, net, opt = tiny(NAME)
    assert Step(net, method, opt).backprop == "autograd"
    parts = [type("Part", (), {"perm": torch.arange(6), "x": None})()] * 2
    assert not folded_permutation.applies(net, parts)


@pytest.mark.parametrize("arch,layers,last", [(TINY_MLP, 4, 3), (TINY_CNN, 4, 3)], ids=["mlp", "cnn"])
def test_a_head_deeper_than_the_fully_connected_layers_is_refused(arch, layers, last):
    with pytest.raises(ValueError, match=f"layers={layers} needs the last {layers} layers to be fully "
                                         f"connected without LayerNorm; this network's last {last} are"):
        tiny(NAME, {"layers": layers}, arch=arch)


@pytest.mark.parametrize("params,needle", [
    ({"layers": 0}, "layers must be an integer >= 1"), ({"period": 0}, "period must be an integer >= 1"),
    ({"schedule": "sometimes"}, "schedule must be one of task_end, steps"),
])
def test_bad_settings_are_errors_naming_the_domain(params, needle):
    with pytest.raises(ValueError, match=needle):
        resolve_config({"problem": "permuted_mnist", "method": NAME, "params": params})


def test_it_is_a_listed_boundary_oracle_and_runs_and_plans_from_the_cli(data_dir, tmp_path, capsys):
    assert boundary_oracle(NAME) and METHODS[NAME].needs({"schedule": "task_end"}) == Needs(task_end=True)
    assert main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith(NAME + " "))
    assert "boundary oracle" in line
    assert main(["run", "--problem", "permuted_mnist", "--method", NAME, "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--no-progress",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "out")]) == 0
    assert main(["sweep", "--preset", f"field-{NAME}-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": NAME,
                          "params": {"schedule": "steps", "period": 100}})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


# --- the drop-in ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make_head", [lambda: nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)),
                                       lambda: nn.Linear(4, 3)], ids=["mlp_head", "linear_head"])
def test_the_drop_in_keeps_the_function_and_trains_only_the_fresh_head(make_head):
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(6, 4), nn.ReLU())
    model = nn.Sequential(encoder, make_head()).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    model[1] = injected = PlasticityInjection(model[1], optimizer)
    params = list(injected.head.parameters())
    for _ in range(2):
        before = model(x).detach()
        injected.inject()
        torch.testing.assert_close(model(x).detach(), before)
    assert [p for p in injected.head.parameters()] == params and not any(p in optimizer.state for p in params)
    assert len(injected.frozen) == (1 if isinstance(injected.head, nn.Linear) else 4)
    frozen = [t.clone() for _, state in injected.frozen for t in state.values()]
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    after = [t for _, state in injected.frozen for t in state.values()]
    assert all(torch.equal(a, b) for a, b in zip(frozen, after, strict=True))
    assert not any(t.requires_grad for _, s in injected.frozen for t in s.values())
