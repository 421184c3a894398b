"""Wasserstein regularization toward θ₀ (issue 47): the penalty and its gradient against a literal
float64 implementation and autograd through a sort, its relation to L2 Init, member
independence, the CLI, the drop-in and the domain."""

from __future__ import annotations

import pytest
import torch

from plasticlab.cli import main
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.regularizers import L2Init, WassersteinInit
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, f32, tiny
from test_toolkit_spectral import trained_parameters

LAMBDAS = [1e-2, 3e-1]


def perturb_(params, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def literal_target(theta, theta0):
    """Each entry's target: the initial value of the rank the entry holds now."""
    target = torch.empty_like(theta)
    target[theta.argsort(stable=True)] = theta0.sort().values
    return target


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_penalty_and_gradient_are_the_literal_sorted_pull_toward_theta0(arch):
    method, net, _ = tiny("wasserstein_init", {"strength": LAMBDAS}, arch=arch)
    theta0 = [p.detach().clone() for p in net.parameters()]
    perturb_(net.parameters())
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    for reg in method.penalties():
        reg.add_grad_()
    for k, lam in enumerate(map(f32, LAMBDAS)):
        value = 0.0
        for p, p0 in zip(net.parameters(), theta0, strict=True):  # every weight and bias tensor
            theta, initial = p[k].detach().flatten(), p0[k].flatten()
            value += 0.5 * lam * ((theta.sort().values - initial.sort().values) ** 2).sum()
            expected = lam * (theta - literal_target(theta, initial))
            torch.testing.assert_close(p.grad[k].flatten(), expected)
        torch.testing.assert_close(method.penalty()[k], value)


def test_the_gradient_is_autograds_through_the_sort():
    params = [torch.randn(4, 5, dtype=torch.float64), torch.randn(7, dtype=torch.float64)]
    reg = WassersteinInit(params, strength=0.3)
    moved = [(p + 0.5 * torch.randn_like(p)).requires_grad_() for p in params]
    reg.params = moved  # the regularizer's θ₀ stays the first draw
    for p in moved:
        p.grad = torch.zeros_like(p)
    reg.add_grad_()
    penalty = sum(0.15 * ((m.flatten().sort().values - p.flatten().sort().values) ** 2).sum()
                  for m, p in zip(moved, params, strict=True))
    for m, expected in zip(moved, torch.autograd.grad(penalty, moved), strict=True):
        torch.testing.assert_close(m.grad, expected)
    torch.testing.assert_close(reg(), penalty.detach())


def test_it_is_l2_init_while_no_ranks_swap_at_most_l2_init_otherwise_and_blind_to_permutations():
    theta0 = torch.randn(50, dtype=torch.float64)
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(theta0.clone())
    wasserstein, l2_init = WassersteinInit(model, 1.0), L2Init(model, 1.0)
    with torch.no_grad():
        model.w.mul_(1.3).add_(0.1)  # an increasing map keeps every rank
    torch.testing.assert_close(wasserstein(), l2_init())
    with torch.no_grad():
        model.w.add_(torch.randn(50, dtype=torch.float64))
    assert float(wasserstein().detach()) < float(l2_init().detach())
    with torch.no_grad():  # θ₀'s values in another order: the same distribution costs nothing
        model.w.copy_(theta0[torch.randperm(50)])
    model.w.grad = torch.zeros_like(model.w)
    wasserstein.add_grad_()
    assert float(wasserstein().detach()) == 0.0 and not model.w.grad.any() and float(l2_init().detach()) > 0


# --- in the engine ----------------------------------------------------------------------------------

def test_member_k_equals_seed_k_alone_with_each_members_own_lambda(data_dir):
    cfg = resolve_config({**TINY_MNIST, "lr": 1e-2, "method": "wasserstein_init", "params": {}})
    grid = [{"strength": 1.0}, {"strength": 1e-2}]
    together = train_ensemble(Members.from_config(cfg, [0, 1], params=grid), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [1], params=grid[1:]), data_dir=data_dir, measure=False)
    assert together.members[1].task_online_accuracy == alone.members[0].task_online_accuracy


@pytest.mark.parametrize("problem", ["permuted_mnist", "random_label_cifar"], ids=["mlp", "cnn"])
def test_member_k_of_eight_equals_seed_k_alone_to_the_bit(data_dir, problem):
    size = {"examples_per_task": 96} if problem == "permuted_mnist" else {"examples": 64}
    cfg = resolve_config({**TINY_MNIST, "problem": problem, "problem_params": size, "lr": 1e-2,
                          "method": "wasserstein_init", "params": {"strength": 1.0}})
    together = trained_parameters(cfg, list(range(8)), data_dir)
    alone = trained_parameters(cfg, [5], data_dir)
    assert all(torch.equal(t[5], a[0]) for t, a in zip(together, alone, strict=True))


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "wasserstein_init"})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_two_tasks_from_the_cli(data_dir, tmp_path, capsys):
    assert main(["run", "--problem", "permuted_mnist", "--method", "wasserstein_init", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--set", "strength=1e-2",
                 "--no-progress", "--data-dir", str(data_dir), "--out", str(tmp_path)]) == 0
    assert main(["sweep", "--preset", "field-wasserstein_init-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "wasserstein_init" in capsys.readouterr().out


# --- the fast path: each step's sort starts from the last step's order (plasticlab.rank_order) ----


def test_the_order_sorted_from_any_hint_is_the_plain_stable_argsort():
    from plasticlab import fast
    from plasticlab.rank_order import applies, stable_order_from_hint

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2000, generator=g)
    x[0, :300] = 0.5                                   # ties: ranked by position
    x[1, 10:20], x[1, 20:30] = -0.0, 0.0               # −0.0 equals +0.0
    x[2, 5], x[2, 7], x[2, 9], x[2, 11] = float("nan"), -float("nan"), float("inf"), -float("inf")
    x[3] = x[3].round(decimals=1)                      # many ties of many values
    plain = x.argsort(dim=-1, stable=True)
    last = (x + 1e-3 * torch.randn(x.shape, generator=g)).argsort(dim=-1)
    for hint in (torch.stack([torch.randperm(2000, generator=g) for _ in range(4)]), last, plain):
        assert applies(x, hint) and torch.equal(stable_order_from_hint(x, hint), plain)
    assert not applies(x.double(), plain) and not applies(x, None)
    with fast.plain_forms():
        assert not applies(x, plain)


@pytest.mark.parametrize("problem", ["permuted_mnist", "random_label_cifar"], ids=["mlp", "cnn"])
def test_training_with_the_hinted_sort_equals_the_plain_sorts_to_the_bit(data_dir, problem, monkeypatch):
    from plasticlab import rank_order

    size = {"examples_per_task": 96} if problem == "permuted_mnist" else {"examples": 64}
    cfg = resolve_config({**TINY_MNIST, "problem": problem, "problem_params": size, "lr": 1e-2,
                          "method": "wasserstein_init", "params": {"strength": 1.0}})
    hinted = trained_parameters(cfg, [0, 1], data_dir)
    used = []
    monkeypatch.setattr(rank_order, "applies", lambda flat, hint: used.append(hint is not None) and False)
    plain = trained_parameters(cfg, [0, 1], data_dir)
    assert any(used), "the runs had a last order from their second step on: the first run sorted from it"
    assert all(torch.equal(h, p) for h, p in zip(hinted, plain, strict=True))


# --- the drop-in --------------------------------------------------------------------------------------

def test_the_drop_ins_gradient_is_the_engines_on_a_one_member_network():
    method, net, _ = tiny("wasserstein_init", {"strength": 0.3}, members=1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 3)).double()
    with torch.no_grad():
        for p, q in zip(model.parameters(), net.parameters(), strict=True):
            p.copy_(q[0])
    reg = WassersteinInit(model, strength=f32(0.3))
    perturb_(net.parameters())
    with torch.no_grad():
        for p, q in zip(model.parameters(), net.parameters(), strict=True):
            p.copy_(q[0])
    reg().backward()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    method.penalties()[0].add_grad_()
    for p, q in zip(model.parameters(), net.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad[0])


def test_lambda_must_be_non_negative():
    with pytest.raises(ValueError, match="strength must be a finite number >= 0"):
        resolve_config({"problem": "permuted_mnist", "method": "wasserstein_init",
                        "params": {"strength": -1}})
    with pytest.raises(ValueError, match="strength must be >= 0"):
        WassersteinInit(torch.nn.Linear(2, 2), strength=-1.0)
