"""UPGD (SPEC §10) against a literal float64 implementation of its rule: the utility trace, the
global maximum per member, sigmoid scaling, both variants, the η ≤ 0 guard; and in the engine."""

from __future__ import annotations

import pytest
import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import apply_setting, resolve_config
from plasticlab.optim import OPTIMIZERS, NonprotectingUPGD, make_optimizer
from plasticlab.optim.upgd import UPGD
from plasticlab.run_config import Members

LR, BETA, SIGMA, DECAY = 0.05, 0.9, 0.1, 0.01


def stacked(seed=0, members=2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(members, 3, 4, generator=g, dtype=torch.float64),
            torch.randn(members, 3, generator=g, dtype=torch.float64)]


def literal_upgd(params, grads_per_step, protecting, generators):
    """Member by member, weight by weight, from SPEC §10."""
    members = params[0].shape[0]
    w = [[p[k].clone() for p in params] for k in range(members)]
    u = [[torch.zeros_like(p[k]) for p in params] for k in range(members)]
    for t, grads in enumerate(grads_per_step, start=1):
        for k in range(members):
            g = [gr[k] for gr in grads]
            for i in range(len(params)):
                u[k][i] = BETA * u[k][i] + (1 - BETA) * (-g[i] * w[k][i])
            eta = max(float(x.max()) for x in u[k])
            sizes = [x.numel() for x in w[k]]
            xi = torch.randn(sum(sizes), generator=generators[k], dtype=torch.float64).split(sizes)
            for i in range(len(params)):
                if eta > 0:
                    s = torch.sigmoid((u[k][i] / (1 - BETA ** t)) / eta)
                else:
                    s = torch.zeros_like(u[k][i])
                noise = SIGMA * xi[i].view_as(w[k][i])
                step = (g[i] + noise) * (1 - s) if protecting else g[i] + noise * (1 - s)
                w[k][i] = (1 - LR * DECAY) * w[k][i] - LR * step
    return [torch.stack([w[k][i] for k in range(members)]) for i in range(len(params))]


@pytest.mark.parametrize("cls,protecting", [(UPGD, True), (NonprotectingUPGD, False)])
def test_upgd_matches_the_literal_rule_with_a_global_max_per_member(cls, protecting):
    params = stacked()
    start = [p.clone() for p in params]
    g = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params] for _ in range(4)]
    opt = cls(params, lr=LR, beta=BETA, sigma=SIGMA, weight_decay=DECAY, member_dim=True,
              generators=[torch.Generator().manual_seed(10 + k) for k in range(2)])
    for g in grads:
        for p, gi in zip(params, g, strict=True):
            p.grad = gi.clone()
        opt.step()
    generators = [torch.Generator().manual_seed(10 + k) for k in range(2)]
    expected = literal_upgd(start, grads, protecting, generators)
    for p, e in zip(params, expected, strict=True):
        torch.testing.assert_close(p, e)


def test_upgd_max_is_per_member_not_over_the_ensemble():
    params = stacked()
    with torch.no_grad():
        params[1].mul_(0.01)  # small biases: each member's most useful weight is in the matrix
    grads = [-p.clone() for p in params]  # u = −g⊙w = w² > 0
    grads[0][1] *= 1000  # member 1's utilities are far larger; member 0 must not see them
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt = UPGD(params, lr=LR, beta=BETA, sigma=0.0, weight_decay=0.0, member_dim=True)
    before = [p.clone() for p in params]
    opt.step()
    # at t = 1 the top weight of member 0 has ū/(1−β) = u and η = (1−β)·u (η is not
    # bias-corrected): s = sigmoid(1/(1−β)), its step g·(1 − s)
    top = (before[0][0] ** 2).argmax()
    s = torch.sigmoid(torch.tensor(1 / (1 - BETA), dtype=torch.float64))
    expected = before[0][0].flatten()[top] - LR * grads[0][0].flatten()[top] * (1 - s)
    torch.testing.assert_close(params[0][0].flatten()[top], expected)


@pytest.mark.parametrize("cls", [UPGD, NonprotectingUPGD])
def test_upgd_protects_nothing_when_no_weight_has_positive_utility(cls):
    params = stacked()
    for p in params:
        p.grad = p.clone()  # u = −w² ≤ 0 everywhere: η ≤ 0
    before = [p.clone() for p in params]
    gens = [torch.Generator().manual_seed(3 + k) for k in range(2)]
    opt = cls(params, lr=LR, beta=BETA, sigma=SIGMA, weight_decay=DECAY, member_dim=True, generators=gens)
    opt.step()
    ref = [torch.Generator().manual_seed(3 + k) for k in range(2)]
    for k in range(2):
        sizes = [p[k].numel() for p in params]
        xi = torch.randn(sum(sizes), generator=ref[k], dtype=torch.float64).split(sizes)
        for p, b, x in zip(params, before, xi, strict=True):
            # s = 0: both variants take the full perturbed gradient step, and nothing is NaN
            expected = (1 - LR * DECAY) * b[k] - LR * (b[k] + SIGMA * x.view_as(b[k]))
            torch.testing.assert_close(p[k], expected)


def test_upgd_reset_restarts_the_utility_trace_of_the_masked_elements():
    params = stacked()
    for p in params:
        p.grad = -p.clone()
    opt = UPGD(params, lr=LR, member_dim=True)
    opt.step()
    mask = torch.zeros(2, 3, 1, dtype=torch.bool)
    mask[1, 2] = True
    opt.reset(0, mask)
    assert not opt.utility[0][1, 2].any() and opt.utility[0][0].all() and opt.utility[0][1, :2].all()


def test_upgd_is_registered_and_its_settings_are_run_parameters_of_their_own():
    assert {"upgd", "upgd_nonprotecting"} <= set(OPTIMIZERS)
    raw = {"problem": "permuted_mnist", "method": "baseline", "optimizer": "upgd"}
    apply_setting(raw, "sigma", "0.5")
    config = resolve_config(raw)
    assert config.optimizer_params == {"beta": 0.9999, "sigma": 0.5, "weight_decay": 0.01}
    assert config.to_dict()["optimizer_params"]["sigma"] == 0.5
    adam = resolve_config({"problem": "permuted_mnist", "method": "baseline"})
    assert "optimizer_params" not in adam.to_dict()  # Adam's configs keep their stored form
    with pytest.raises(ValueError, match="unknown parameter 'sigma'.*valid"):
        apply_setting({"problem": "permuted_mnist", "method": "baseline", "optimizer": "adam"},
                      "sigma", "0.5")
    with pytest.raises(ValueError, match="beta"):
        make_optimizer("upgd", [torch.zeros(1, 2)], 1e-2, beta=1.5)


def test_upgd_member_k_equals_seed_k_alone(data_dir):
    cfg = resolve_config({"problem": "permuted_mnist", "method": "baseline", "optimizer": "upgd",
                          "lr": 1e-2, "tasks": 2, "steps_per_task": 6,
                          "problem_params": {"examples_per_task": 96}})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir, measure=False)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy


def test_nonprotecting_upgd_scales_only_the_noise_so_without_noise_it_is_sgd_with_decoupled_decay():
    params = stacked()
    plain = [p.clone() for p in params]
    g = torch.Generator().manual_seed(4)
    opt = NonprotectingUPGD(params, lr=LR, beta=BETA, sigma=0.0, weight_decay=DECAY, member_dim=True)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params]
        for p, q, gr in zip(params, plain, grads, strict=True):
            p.grad = gr.clone()
            q.mul_(1 - LR * DECAY).add_(gr, alpha=-LR)  # whatever the utilities say
        opt.step()
    for p, q in zip(params, plain, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_nonprotecting_upgd_without_noise_or_decay_trains_exactly_as_sgd_in_the_engine(data_dir):
    # Its online accuracy at the reference α 1e-3 is plain SGD's at α 1e-3 (docs/methods.md):
    # the utility scaling never touches the gradient step.
    base = {"problem": "permuted_mnist", "method": "baseline", "lr": 1e-3, "tasks": 2,
            "steps_per_task": 6, "problem_params": {"examples_per_task": 96}}
    sgd = train_ensemble(Members.from_config(resolve_config({**base, "optimizer": "sgd"}), [0, 1]),
                         data_dir=data_dir, measure=False)
    nonprotecting = resolve_config({**base, "optimizer": "upgd_nonprotecting", "optimizer_params":
                                    {"beta": 0.9, "sigma": 0.0, "weight_decay": 0.0}})
    upgd = train_ensemble(Members.from_config(nonprotecting, [0, 1]), data_dir=data_dir, measure=False)
    assert [m.task_online_accuracy for m in upgd.members] == [m.task_online_accuracy for m in sgd.members]
