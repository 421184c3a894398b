"""TRAC (Muppidi, Zhang & Yang, NeurIPS 2024; issue 47) against a literal float64 implementation of
its rule — Adam written out, the erfi tuners with scipy's erfi, member by member — in both
forms of the base iterate; its erfi; the reference code's dead state; writes by a method; and in
the engine, the CLI and the presets."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import erfi as scipy_erfi

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.optim import MEMBER_LR_OPTIMIZERS, OPTIMIZERS, make_optimizer
from plasticlab.optim.trac import BETAS, SIGMA_START, TRAC, TRACWrapper, TuneState, erfi, tune_
from plasticlab.run_config import Members

LR = 0.05
TINY = {"problem": "permuted_mnist", "method": "baseline", "optimizer": "trac", "lr": 1e-2,
        "tasks": 2, "steps_per_task": 6, "problem_params": {"examples_per_task": 96}}


def test_erfi_equals_scipys_on_both_sides_of_the_switch_and_is_odd():
    x = np.concatenate([np.linspace(-26.0, 26.0, 2081), [0.0, 1e-12, 6.999999, 7.0, 7.000001]])
    ours = erfi(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ours, scipy_erfi(x), rtol=1e-13, atol=0)
    assert ours[x == 0.0][0] == 0.0
    assert erfi(torch.tensor([27.0], dtype=torch.float64)).isinf().all()  # beyond float64, as e^{x²}


def test_each_members_tuners_are_the_same_to_the_bit_in_any_ensemble():
    g = torch.Generator().manual_seed(4)
    members = 7
    tuners = TuneState(members, torch.device("cpu"))
    tuners.v.copy_(torch.rand(members, 6, generator=g, dtype=torch.float64) * 1e-4)
    tuners.sigma.copy_(torch.randn(members, 6, generator=g, dtype=torch.float64) * 3e-2)
    h = torch.randn(members, generator=g, dtype=torch.float64) * 1e-3
    together = [t.clone() for t in (tuners.s, tuners.v, tuners.sigma)]
    tune_(*together, h, tuners.betas, 1e-8, 1e-8)
    arguments = (together[2] / (math.sqrt(2) * together[1].sqrt() + 1e-8)).abs()
    assert (arguments < 7).any() and (arguments >= 7).any()  # both sides of erfi's switch
    for k in range(members):
        alone = [t[k:k + 1].clone() for t in (tuners.s, tuners.v, tuners.sigma)]
        tune_(*alone, h[k:k + 1], tuners.betas, 1e-8, 1e-8)
        assert all(torch.equal(a, t[k:k + 1]) for a, t in zip(alone, together, strict=True))


def quadratic_grads(params, centre):
    """g = θ − c: the gradient of ½‖θ − c‖², taken where the parameters are."""
    for p, c in zip(params, centre, strict=True):
        p.grad = (p.detach() - c).clone()


def literal_trac(start, centre, steps, iterate):
    """Member by member, from the module docstring, in float64 Python scalars where it matters:
    Adam (β 0.9, 0.999, ε 1e-8) on g = θ − c, then TRAC with scipy's erfi."""
    members = start[0].shape[0]
    out = []
    for k in range(members):
        theta = torch.cat([p[k].flatten() for p in start]).clone()
        c = torch.cat([q[k].flatten() for q in centre])
        ref = theta.clone()
        x = torch.zeros_like(theta)
        m, v2 = torch.zeros_like(theta), torch.zeros_like(theta)
        s, v, sigma = [0.0] * 6, [0.0] * 6, [SIGMA_START] * 6
        for t in range(1, steps + 1):
            g = theta - c
            m = 0.9 * m + 0.1 * g
            v2 = 0.999 * v2 + 0.001 * g * g
            u = -LR * (m / (1 - 0.9 ** t)) / (v2.sqrt() / math.sqrt(1 - 0.999 ** t) + 1e-8)
            if iterate == "recovered":
                x = (theta - ref) / (sum(s) + 1e-8)
            h = float((x * g).sum())
            x = x + u
            for j, beta in enumerate(BETAS):
                v[j] = beta ** 2 * v[j] + h * h
                sigma[j] = beta * sigma[j] - h
                s[j] = 1e-8 / scipy_erfi(1 / math.sqrt(2)) * scipy_erfi(
                    sigma[j] / (math.sqrt(2) * math.sqrt(v[j]) + 1e-8))
            theta = ref + max(sum(s), 0.0) * x
        out.append(theta)
    return out


@pytest.mark.parametrize("iterate", ["kept", "recovered"])
def test_trac_matches_the_literal_rule_member_by_member(iterate):
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(2, 3, 4, generator=g, dtype=torch.float64),
              torch.randn(2, 3, generator=g, dtype=torch.float64)]
    centre = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in params]
    start = [p.clone() for p in params]
    opt = TRAC(params, lr=LR, iterate=iterate)
    for _ in range(40):
        quadratic_grads(params, centre)
        opt.step()
    expected = literal_trac(start, centre, 40, iterate)
    for k in range(2):
        torch.testing.assert_close(torch.cat([p[k].flatten() for p in params]), expected[k],
                                   rtol=1e-9, atol=1e-12)
    assert (opt.scale() > 1e-6).all()  # the tuners have moved S far from s_init


def test_recovered_iterate_stays_at_theta_ref_forever_once_its_scale_is_not_positive():
    # The reference code's form: with S ≤ 0 the run plays θ_ref, so (θ − θ_ref)/(S + ε) = 0 and
    # h = 0 from then on — σ only decays and S never turns positive again. The kept iterate
    # goes on accumulating the base's updates, h ≠ 0, and the run leaves θ_ref again.
    runs = {}
    for iterate in ("recovered", "kept"):
        param = torch.zeros(1, 5, dtype=torch.float64)
        opt = TRAC([param], lr=LR, iterate=iterate)
        param.grad = torch.ones_like(param)
        opt.step()  # Adam steps along −1
        param.grad = -torch.ones_like(param)  # now the gradient points along the displacement
        opt.step()
        assert float(opt.scale()[0]) == 0.0 and torch.equal(param, torch.zeros_like(param))
        for _ in range(200):
            param.grad = torch.ones_like(param)  # consistently downhill along −1 again
            opt.step()
        runs[iterate] = param.clone()
    assert torch.equal(runs["recovered"], torch.zeros(1, 5, dtype=torch.float64))
    assert (runs["kept"] < -1e-3).all()


def test_a_write_between_steps_is_kept_and_without_one_theta_ref_does_not_move():
    g = torch.Generator().manual_seed(1)
    param = torch.randn(2, 6, generator=g, dtype=torch.float64)
    centre = torch.randn(2, 6, generator=g, dtype=torch.float64)
    opt = TRAC([param], lr=LR)
    for _ in range(5):
        quadratic_grads([param], [centre])
        opt.step()
    reference = opt.core.reference[0].clone()
    quadratic_grads([param], [centre])
    opt.step()
    assert torch.equal(opt.core.reference[0], reference)  # nothing written: to the bit
    written = param.clone()
    with torch.no_grad():
        param[1, 2] = 7.0  # a method resets one entry of member 1
    quadratic_grads([param], [centre])
    opt.step()
    moved = opt.core.reference[0] - reference
    # θ_ref moved by what was written at that entry, and nowhere else
    assert float(moved[1, 2]) == pytest.approx(7.0 - float(written[1, 2]), rel=1e-12)
    moved[1, 2] = 0.0
    assert not moved.any()
    assert abs(float(param[1, 2]) - 7.0) < 0.5  # the run goes on from the written value


def test_trac_state_dict_resumes_exactly_and_a_fresh_one_restarts_it():
    g = torch.Generator().manual_seed(2)
    centre = [torch.randn(3, 4, 2, generator=g)]
    first = [torch.randn(3, 4, 2, generator=g)]
    second = [first[0].clone()]
    a, b = TRAC(first, lr=LR), TRAC(second, lr=LR)
    fresh = b.state_dict()
    for _ in range(4):
        quadratic_grads(first, centre)
        a.step()
    b.load_state_dict(a.state_dict())
    second[0].copy_(first[0])
    for _ in range(4):
        for params, opt in ((first, a), (second, b)):
            quadratic_grads(params, centre)
            opt.step()
    assert torch.equal(first[0], second[0])
    b.load_state_dict(fresh)  # as full_reset restarts an optimizer
    assert b.core.reference is None and float(b.scale().sum()) == 0.0


def test_the_drop_in_wrapper_computes_the_engines_rule_on_a_plain_model():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    stacked = [p.detach().clone().unsqueeze(0) for p in model.parameters()]
    wrapper = TRACWrapper(torch.optim.Adam(model.parameters(), lr=LR))
    engine = TRAC(stacked, lr=LR)
    x, y = torch.randn(8, 5), torch.randint(0, 2, (8,))
    for _ in range(15):
        wrapper.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        for p, q in zip(stacked, model.parameters(), strict=True):
            p.grad = q.grad.unsqueeze(0).clone()
        wrapper.step()
        engine.step()
        for p, q in zip(stacked, model.parameters(), strict=True):
            q.data.copy_(p[0])  # the same point for both, so only the rules are compared
    assert wrapper.scale() == pytest.approx(float(engine.scale()[0]), rel=1e-4)
    with pytest.raises(ValueError, match="s_init > 0"):
        TRACWrapper(torch.optim.Adam(model.parameters()), s_init=0.0)


def test_trac_member_k_equals_seed_k_alone_and_a_step_size_grid_runs_in_one_ensemble(data_dir):
    cfg = resolve_config(TINY)
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir, measure=False)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy
    grid = train_ensemble(Members.from_config(cfg, [0, 2], lr=[1e-3, 1e-2]), data_dir=data_dir,
                          measure=False)
    assert grid.members[1].task_online_accuracy == alone.members[0].task_online_accuracy


def test_no_host_round_trip_per_step(data_dir, monkeypatch):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY, "tasks": 1})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_trac_is_registered_with_checked_settings():
    assert "trac" in OPTIMIZERS and "trac" in MEMBER_LR_OPTIMIZERS
    config = resolve_config({**TINY, "optimizer_params": {"iterate": "recovered"}})
    assert config.optimizer_params == {"s_init": 1e-8, "eps": 1e-8, "iterate": "recovered"}
    for bad, needle in (({"s_init": 0}, "s_init must be a finite number > 0"),
                        ({"eps": -1e-8}, "eps must be a finite number > 0"),
                        ({"iterate": "paper"}, "iterate must be one of kept, recovered")):
        with pytest.raises(ValueError, match=needle):
            resolve_config({**TINY, "optimizer_params": bad})
    with pytest.raises(ValueError, match="s_init > 0"):
        make_optimizer("trac", [torch.zeros(1, 2)], 1e-3, s_init=-1.0)


def test_two_tasks_from_the_cli_and_the_field_preset_plans(data_dir, tmp_path, capsys):
    from plasticlab.cli import main
    from plasticlab.experiments.presets import FIELD_OPTIMIZERS, PRESETS, field_comparison

    assert main(["run", "--problem", "permuted_mnist", "--method", "baseline", "--optimizer", "trac",
                 "--tasks", "2", "--steps-per-task", "20", "--set", "examples_per_task=160",
                 "--no-progress", "--data-dir", str(data_dir), "--out", str(tmp_path / "run")]) == 0
    assert "trac" in capsys.readouterr().out
    assert main(["list"]) == 0 and "iterate = 'kept'" in capsys.readouterr().out
    assert main(["sweep", "--preset", "field-trac-permuted_mnist", "--dry-run",
                 "--out", str(tmp_path / "sweep")]) == 0
    assert "baseline trac" in capsys.readouterr().out
    assert {"field-trac-permuted_mnist", "field-trac-random_label_mnist"} <= set(PRESETS)
    # the committed field studies are unchanged: TRAC is no variant of theirs
    assert "trac" not in FIELD_OPTIMIZERS
    assert all(v.get("optimizer") != "trac" for v in field_comparison("permuted_mnist")["variants"])
