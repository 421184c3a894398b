"""C-CHAIN (Tang et al., ICML 2025; issue 47) against a literal float64 implementation of its
definition — the churn on the batch of two updates ago against the network of one update ago,
λ from the running means of |L| and L_C — on tiny networks; the drop-in; and in the engine, the
CLI and the presets."""

from __future__ import annotations

import math

import pytest
import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS
from plasticlab.methods.c_chain import CChain, RelativeScale, churn
from plasticlab.nets import build_network
from plasticlab.run_config import Members
from test_field_methods import TINY_CNN, TINY_MLP, TINY_MNIST, inputs, tiny

F64 = torch.float64


def literal_churn(z, z_ref, divergence):
    """One member's churn, entry by entry: mean (z − z⁻)², or the mean over the batch of
    Σ_c p⁻_c (log p⁻_c − log p_c) with p = e^z / Σ e^z."""
    batch, classes = z.shape
    if divergence == "mse":
        squares = [(z[b, c] - z_ref[b, c]) ** 2 for b in range(batch) for c in range(classes)]
        return sum(squares) / (batch * classes)
    total = 0.0
    for b in range(batch):
        p_ref = z_ref[b].exp() / z_ref[b].exp().sum()
        log_p = z[b] - z[b].exp().sum().log()
        total = total + sum(p_ref[c] * (p_ref[c].log() - log_p[c]) for c in range(classes))
    return total / batch


def literal_mlp(weights, x):
    """The ReLU MLP of one member: h ← relu(h Wᵀ + b) per hidden layer, then h Wᵀ + b."""
    h = x
    for i in range(0, len(weights) - 2, 2):
        h = torch.relu(h @ weights[i].T + weights[i + 1])
    return h @ weights[-2].T + weights[-1]


@pytest.mark.parametrize("divergence", ["mse", "kl"])
def test_churn_is_the_literal_mean_divergence_per_member(divergence):
    g = torch.Generator().manual_seed(0)
    z, z_ref = torch.randn(2, 4, 3, generator=g, dtype=F64), torch.randn(2, 4, 3, generator=g, dtype=F64)
    expected = torch.stack([literal_churn(z[k], z_ref[k], divergence) for k in range(2)])
    torch.testing.assert_close(churn(z, z_ref, divergence), expected)
    assert churn(z, z.clone(), divergence).abs().max() < 1e-15  # no change, no churn


def test_churn_leaves_out_the_outputs_a_growing_head_has_not_opened():
    g = torch.Generator().manual_seed(1)
    z, z_ref = torch.randn(1, 3, 4, generator=g, dtype=F64), torch.randn(1, 3, 4, generator=g, dtype=F64)
    closed_now, closed_before = z.clone(), z_ref.clone()
    closed_now[..., 3] = -math.inf
    closed_before[..., 2:] = -math.inf  # the head grew since: output 2 opened
    z.requires_grad_(True)
    for d in ("mse", "kl"):
        value = churn(closed_now.requires_grad_(True), closed_before, d)
        assert torch.isfinite(value).all()
        (grad,) = torch.autograd.grad(value.sum(), closed_now)
        assert torch.isfinite(grad).all()
    mse = churn(closed_now, closed_before, "mse")
    torch.testing.assert_close(mse, ((z[..., :2] - z_ref[..., :2]) ** 2).mean().reshape(1).detach())
    with pytest.raises(ValueError, match="divergence"):
        churn(z, z_ref, "l1")


def run_updates(method, net, batches, after_each):
    """Updates 1, 2, … as the engine's step runs the method's links: the task loss observed,
    the gradient transform, an update (a fixed random nudge), the post-step hook with the
    update's batch. ``after_each(n, added)`` sees what the transform added at update n."""
    params = list(net.parameters())
    g = torch.Generator().manual_seed(7)
    for n, x in enumerate(batches, start=1):
        for p in params:
            p.grad = torch.zeros_like(p)
        method.observe_task_loss(torch.full((net.members,), 2.0, dtype=F64))
        method.add_penalty_grad()
        after_each(n, [p.grad.clone() for p in params])
        with torch.no_grad():
            for p in params:
                p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        method.after_step([], x, n)


@pytest.mark.parametrize("divergence", ["mse", "kl"])
def test_the_added_gradient_is_lambda_times_the_literal_churn_gradient_on_the_batch_of_two_updates_ago(
        divergence):
    lam = [2.0, 0.5]
    method, net, _ = tiny("c_chain", {"divergence": divergence, "initial_strength": lam, "warmup": 100})
    batches = [inputs(TINY_MLP, seed=s) for s in range(4)]
    before = {}  # before[n]: each member's weights θ_{n−1}, from which update n steps

    def check(n, added):
        if n <= 2:  # no reference yet: nothing added
            assert not any(a.any() for a in added)
        else:  # update n from θ_{n−1}: B_ref = batch of update n − 2, θ⁻ = θ_{n−2}
            for k in range(2):
                now = [p[k].detach().clone().requires_grad_(True) for p in net.parameters()]
                x_ref = batches[n - 3][k]
                reference = literal_mlp(before[n - 1][k], x_ref)
                value = lam[k] * literal_churn(literal_mlp(now, x_ref), reference, divergence)
                expected = torch.autograd.grad(value, now)
                for a, e in zip(added, expected, strict=True):
                    torch.testing.assert_close(a[k], e)
        before[n] = [[p[k].detach().clone() for p in net.parameters()] for k in range(2)]

    run_updates(method, net, batches, check)
    assert len(before) == 4


def test_on_the_cnn_each_members_term_is_its_own_churn_gradient():
    lam = [3.0, 0.25]
    method, net, _ = tiny("c_chain", {"initial_strength": lam, "warmup": 100}, arch=TINY_CNN)
    batches = [inputs(TINY_CNN, seed=s) for s in range(3)]
    kind, shape, outputs, width = TINY_CNN
    before = {}  # before[n]: θ_{n−1}, from which update n steps

    def check(n, added):
        before[n] = [p.detach().clone() for p in net.parameters()]
        if n < 3:
            return
        for k in range(2):
            alone = build_network(kind, 1, shape, outputs, width=width).to(F64)
            with torch.no_grad():
                for q, p in zip(alone.parameters(), before[2], strict=True):  # θ⁻ = θ_1
                    q.copy_(p[k:k + 1])
                reference = alone(batches[0][k:k + 1])
                for q, p in zip(alone.parameters(), net.parameters(), strict=True):
                    q.copy_(p[k:k + 1])
            value = lam[k] * churn(alone(batches[0][k:k + 1]), reference, "mse").sum()
            expected = torch.autograd.grad(value, list(alone.parameters()))
            for a, e in zip(added, expected, strict=True):
                torch.testing.assert_close(a[k:k + 1], e)

    run_updates(method, net, batches, check)


def test_lambda_follows_the_literal_rule_of_running_means_window_and_warmup_per_member():
    relative, windows, warmups, initial = [0.1, 0.01], [3, 5], [2, 4], [7.0, 9.0]
    scale = RelativeScale(torch.tensor(relative, dtype=F64), windows, warmups, torch.tensor(initial))
    g = torch.Generator().manual_seed(3)
    losses = torch.randn(12, 2, generator=g, dtype=F64)  # |L| is what counts
    churns = torch.rand(12, 2, generator=g, dtype=F64) * 1e-3
    lam = list(initial)
    for n in range(12):
        update = n + 1
        scale.record(losses[n], churns[n], update)
        for k in range(2):
            if update >= warmups[k]:
                last = range(max(0, n + 1 - windows[k]), n + 1)
                mean_loss = sum(abs(float(losses[i, k])) for i in last) / len(last)
                mean_churn = sum(float(churns[i, k]) for i in last) / len(last)
                lam[k] = relative[k] * mean_loss / (mean_churn + 1e-8)
            assert float(scale.strength[k]) == pytest.approx(lam[k], rel=1e-12)


def test_the_drop_in_runs_the_engines_rule_on_a_plain_model():
    settings = {"relative_scale": 0.05, "divergence": "kl", "window": 3, "warmup": 2, "initial_strength": 4.0}
    method, net, _ = tiny("c_chain", settings, members=1)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 3)).to(F64)
    with torch.no_grad():
        for q, p in zip(model.parameters(), net.parameters(), strict=True):
            q.copy_(p[0])
    chain = CChain(model, **settings)
    g = torch.Generator().manual_seed(5)
    for n in range(1, 8):
        x, y = torch.randn(1, 5, 6, generator=g, dtype=F64), torch.randint(0, 3, (1, 5), generator=g)
        # the engine's links, by hand
        for p in net.parameters():
            p.grad = None
        loss = torch.nn.functional.cross_entropy(net(x)[0], y[0])
        loss.backward()
        method.observe_task_loss(loss.detach().reshape(1))
        method.add_penalty_grad()
        with torch.no_grad():
            for p in net.parameters():
                p.sub_(0.1 * p.grad)
        method.after_step([], x, n)
        # the drop-in in a plain loop
        model.zero_grad()
        task = torch.nn.functional.cross_entropy(model(x[0]), y[0])
        (task + chain(task)).backward()
        with torch.no_grad():
            for q in model.parameters():
                q.sub_(0.1 * q.grad)
        chain.step(x[0])
        for q, p in zip(model.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(q, p[0].detach())
        assert chain.strength() == pytest.approx(float(method.scale.strength[0]), rel=1e-12)
    assert chain.strength() != 4.0  # λ adapted after the warmup
    with pytest.raises(ValueError, match="window >= 1"):
        CChain(model, window=0)


@pytest.mark.parametrize("problem,extra", [("permuted_mnist", {}),
                                           ("random_label_cifar", {"problem_params": {"examples": 32}})],
                         ids=["mlp", "cnn"])
def test_member_k_equals_seed_k_alone(data_dir, problem, extra):
    params = {"divergence": "kl", "warmup": 3, "window": 4, "relative_scale": [1e-2, 1e-1, 1e-3]}
    cfg = resolve_config({**TINY_MNIST, "problem": problem, "method": "c_chain", **extra,
                          "params": {k: v for k, v in params.items() if k != "relative_scale"}})
    grid = [{"relative_scale": r} for r in params["relative_scale"]]
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2], params=grid), data_dir=data_dir)
    alone = train_ensemble(Members.from_config(cfg, [2], params=grid[2:]), data_dir=data_dir)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy
    strength = "c_chain_strength"
    assert together.members[2].task_metrics[strength] == alone.members[0].task_metrics[strength]


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": "c_chain",
                          "params": {"warmup": 2, "window": 5}})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


@pytest.mark.parametrize("params,needle", [
    ({"relative_scale": -1.0}, "relative_scale must be a finite number >= 0"),
    ({"window": 0}, "window must be an integer >= 1"),
    ({"warmup": -1}, "warmup must be an integer >= 0"),
    ({"initial_strength": float("nan")}, "initial_strength must be a finite number >= 0"),
    ({"divergence": "l1"}, "divergence must be one of mse, kl"),
])
def test_the_settings_have_domains(params, needle):
    with pytest.raises(ValueError, match=needle):
        resolve_config({"problem": "permuted_mnist", "method": "c_chain", "params": params})


def test_kl_needs_two_outputs():
    with pytest.raises(ValueError, match="at least 2 outputs.*divergence=mse"):
        tiny("c_chain", {"divergence": "kl"}, arch=("mlp", (6,), 1, 0.04))


def test_two_tasks_from_the_cli_the_list_and_the_field_preset(data_dir, tmp_path, capsys):
    from plasticlab.cli import main
    from plasticlab.experiments.presets import PRESETS, TOOLKIT_METHODS, field_grids

    assert main(["run", "--problem", "permuted_mnist", "--method", "c_chain", "--tasks", "2",
                 "--steps-per-task", "20", "--set", "examples_per_task=160", "--no-progress",
                 "--data-dir", str(data_dir), "--out", str(tmp_path / "run")]) == 0
    assert "c_chain" in capsys.readouterr().out
    assert main(["list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("c_chain "))
    assert "boundary oracle" not in line and METHODS["c_chain"].description in line
    assert "c_chain" in TOOLKIT_METHODS and field_grids()["c_chain"] == {"relative_scale": [0.1, 0.01, 0.001]}
    assert "field-c_chain-permuted_mnist" in PRESETS
    assert main(["sweep", "--preset", "field-c_chain-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "c_chain" in capsys.readouterr().out
