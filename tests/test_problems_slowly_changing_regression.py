"""The slowly-changing regression problem (plasticlab.problems.slowly_changing_regression): the target
network and the bits each task holds against a literal float64 reading of Dohare et al.'s code;
the squared-error loss and the online squared error in the engine's plain path (the fast paths
say they do not apply); a run from the CLI and a sweep; member independence."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from plasticlab.cli import main
from plasticlab.engine import EnsembleTraining, train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.store import ResultStore
from plasticlab.problems import SlowlyChangingRegression
from plasticlab.run_config import Members
from plasticlab.step import Step, compiled, mlp_backprop

SMALL = {"tasks": 40, "steps_per_task": 50}


def test_defaults_are_dohare_et_als_settings():
    cls = SlowlyChangingRegression
    assert cls.defaults == {"tasks": 300, "steps_per_task": 10_000, "batch_size": 1}  # T = 10,000
    assert cls.resolve_parameters({}) == {"input_bits": 20, "flipping_bits": 15, "flip": "one",
                                          "target_units": 100, "beta": 0.7}
    assert (cls.arch, cls.input_shape, cls.num_outputs) == ("shallow_mlp", (20,), 1)
    assert cls.loss == "squared_error"
    assert not cls.has_test_sets and cls.online_measure() == "online_squared_error"


def _literal_target(w, b, v, c, beta, x) -> np.ndarray:
    """FixLTUNet.predict, one unit and one example at a time in float64: S_i = (m − Σ_j W_ij + b_i)/2,
    τ_i = β(m + 1) − S_i, h_i = 1 if Σ_j W_ij x_j + b_i > τ_i else 0, y = Σ_i v_i h_i + c."""
    units, m = w.shape
    out = np.empty(len(x))
    for n, bits in enumerate(x.astype(np.float64)):
        y = float(c)
        for i in range(units):
            s = (m - float(w[i].sum()) + float(b[i])) / 2
            tau = beta * (m + 1) - s
            if float(w[i] @ bits) + float(b[i]) > tau:
                y += float(v[i])
        out[n] = y
    return out


def test_the_target_is_a_fixed_network_of_plus_minus_one_weights_and_ltus_as_the_code_computes_it():
    p = SlowlyChangingRegression([3, 4], **SMALL)
    for k in range(2):
        w, b, v, c, tau = p.targets[k]
        assert w.shape == (100, 20) and b.shape == v.shape == tau.shape == (100,)
        for values in (w, b, v, np.array([c])):
            assert set(np.unique(values).tolist()) <= {-1, 1}
        data = p.member_task(k, p.seeds[k], 0)
        x = data.x.numpy()[:40]
        assert np.array_equal(data.y.numpy()[:40], _literal_target(w, b, v, c, 0.7, x))
        assert torch.equal(data.y, data.y.round())  # whole numbers, no noise
    assert not np.array_equal(p.targets[0][0], p.targets[1][0])  # each seed its own target network


def test_the_first_f_bits_stay_fixed_within_a_task_and_one_of_them_flips_at_each_boundary():
    p = SlowlyChangingRegression([7], **SMALL)
    slow = []
    for task in range(SMALL["tasks"]):
        data = p.member_task(0, 7, task)
        x = data.x.numpy()
        assert x.shape == (50, 20) and data.size == 50  # T = steps × batch examples
        assert set(np.unique(x).tolist()) <= {0, 1}
        assert (x[:, :15] == x[0, :15]).all()  # the flipping bits: constant through the task
        slow.append(x[0, :15])
        # the other bits: fresh for each example
        assert 0.2 < x[:, 15:].mean() < 0.8 and len({r.tobytes() for r in x[:, 15:]}) > 5
    changed = [int((a != b).sum()) for a, b in zip(slow, slow[1:], strict=False)]
    assert changed == [1] * (SMALL["tasks"] - 1)
    flipped = {int(np.flatnonzero(a != b)[0]) for a, b in zip(slow, slow[1:], strict=False)}
    assert len(flipped) > 5  # the bit to flip is drawn each time


def test_redraw_draws_all_flipping_bits_afresh_at_each_boundary():
    p = SlowlyChangingRegression([7], flip="redraw", **SMALL)
    slow = [p.member_task(0, 7, t).x.numpy()[0, :15] for t in range(SMALL["tasks"])]
    changed = [int((a != b).sum()) for a, b in zip(slow, slow[1:], strict=False)]
    assert max(changed) > 3 and 4 < np.mean(changed) < 11  # 7.5 bits differ on average


def test_input_and_flipping_bits_are_parameters_and_f_beyond_m_is_a_value_error():
    p = SlowlyChangingRegression([0], input_bits=8, flipping_bits=3, target_units=12, **SMALL)
    assert p.input_shape == (8,) and p.member_task(0, 0, 0).x.shape == (50, 8)
    assert p.targets[0][0].shape == (12, 8)
    with pytest.raises(ValueError, match="flipping_bits"):
        SlowlyChangingRegression([0], input_bits=8, flipping_bits=9)


def _config(method: str = "baseline", **run):
    return resolve_config({"problem": "slowly_changing_regression", "method": method, "optimizer": "sgd",
                           "lr": 0.01, "init": "kaiming_uniform", "tasks": 2, "steps_per_task": 30, **run})


def test_the_online_squared_error_is_the_mean_error_before_each_sgd_step_on_the_squared_loss():
    training = EnsembleTraining(Members.from_config(_config(), [2]))
    theta = [p.detach().double().clone()[0] for p in training.net.parameters()]  # W1, b1, W2, b2
    errors = training.run_task(0)
    problem = training.problem
    hand = []
    for step in range(30):  # the learner of lop/algos/bp.py, literally, in float64
        x, y = (t[0, 0].double() for t in problem.batch(step))
        w1, b1, w2, b2 = (t.requires_grad_() for t in theta)
        y_hat = (w2 @ torch.relu(w1 @ x + b1) + b2)[0]
        loss = (y_hat - y) ** 2
        hand.append(float(loss.detach()))
        grads = torch.autograd.grad(loss, [w1, b1, w2, b2])
        theta = [(t - 0.01 * g).detach() for t, g in zip((w1, b1, w2, b2), grads, strict=True)]
    assert errors[0] == pytest.approx(np.mean(hand), rel=1e-5)
    for mine, literal in zip(training.net.parameters(), theta, strict=True):
        assert torch.allclose(mine[0].double(), literal, atol=1e-5)


def test_the_cross_entropy_fast_paths_say_they_do_not_apply_to_the_squared_error():
    training = EnsembleTraining(Members.from_config(_config(), [0]), compile=True)
    assert mlp_backprop.supports(training.net)  # a plain ReLU MLP
    assert not mlp_backprop.applies(training.net, "squared_error")
    # compiled, the squared error's gradient is torch.func's through the network (where this
    # torch takes the compiled step: test_compiled_step.py)
    if torch.__version__ >= compiled.COMPILE_TORCH:
        assert (training.step.backprop, training.step.form) == ("autograd", "compiled")
        assert training.step.compiled.gradients is not None
    with pytest.raises(ValueError, match="cross-entropy"):
        Step(training.net, training.method, training.optimizer, backprop="manual", loss="squared_error")
    with pytest.raises(ValueError, match="unknown task loss"):
        Step(training.net, training.method, training.optimizer, loss="hinge")


@pytest.mark.slow
@pytest.mark.skipif(torch.__version__ < compiled.COMPILE_TORCH,
                    reason=f"the compiled step needs torch >= {compiled.COMPILE_TORCH}")
def test_a_compiled_run_of_the_squared_error_ends_where_the_eager_run_ends():
    eager = train_ensemble(Members.from_config(_config(), [0, 1]))
    compiled_run = train_ensemble(Members.from_config(_config(), [0, 1]), compile=True)
    assert compiled_run.extra["step"] == "compiled"
    for a, b in zip(eager.members, compiled_run.members, strict=True):
        assert b.task_online_accuracy == pytest.approx(a.task_online_accuracy, rel=1e-4)
    swapped = train_ensemble(Members.from_config(_config(), [1, 0]), compile=True)
    for k in (0, 1):  # member k is seed k at another place, to the bit
        assert swapped.members[1 - k].task_online_accuracy == compiled_run.members[k].task_online_accuracy


def test_member_k_of_an_ensemble_is_seed_k_alone():
    config = _config("l2_init")
    together, alone = (EnsembleTraining(Members.from_config(config, seeds), measure=False)
                       for seeds in ([5, 6, 7], [6]))
    for task in range(2):
        assert together.run_task(task)[1] == alone.run_task(task)[0]  # the online squared error
    for p, q in zip(together.net.parameters(), alone.net.parameters(), strict=True):
        assert torch.equal(p[1], q[0])
    result = together.result().members[1]
    assert result.task_online_accuracy == [] and len(result.task_online_squared_error) == 2


def test_forgetting_and_ewc_are_refused_as_they_need_what_a_regression_lacks(tmp_path):
    with pytest.raises(ValueError, match="no held-out test sets"):
        train_ensemble(Members.from_config(_config(), [0]), forgetting=True)
    with pytest.raises(ValueError, match="at least 2 outputs"):
        train_ensemble(Members.from_config(_config("ewc", params={"fisher_data": "train"}), [0]))


def test_a_run_from_the_cli_prints_and_records_the_online_squared_error(tmp_path, capsys):
    args = ["run", "--problem", "slowly_changing_regression", "--method", "baseline", "--optimizer", "sgd",
            "--lr", "0.01", "--tasks", "2", "--steps-per-task", "20", "--seeds", "0-1", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert "online squared error, mean ± 95% CI" in capsys.readouterr().out
    assert main([*args, "--out", str(tmp_path / "b"), "--json"]) == 0
    for r in json.loads(capsys.readouterr().out)["runs"]:
        assert "task_online_accuracy" not in r and len(r["task_online_squared_error"]) == 2
        assert r["total_online_squared_error"] == pytest.approx(np.mean(r["task_online_squared_error"]))


def test_a_sweep_records_the_online_squared_error_and_the_report_reads_it(tmp_path):
    from plasticlab.report.data import load_results

    sweep = tmp_path / "sweep.toml"
    sweep.write_text('name = "scr"\nproblem = "slowly_changing_regression"\n'
                     'methods = ["baseline", "l2_init"]\n'
                     'optimizer = "sgd"\nlr = 0.01\nseeds = "0-1"\ntasks = 2\nsteps_per_task = 20\n')
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--workers", "1", "--executor", "inline",
                 "--no-progress"]) == 0
    with ResultStore(out) as store:
        runs = store.runs(status="finished")
        assert len(runs) == 4
        for run in runs:
            assert "total_online_accuracy" not in run["summary"]
            metrics = store.task_metrics(run["run_id"])
            assert "online_accuracy" not in metrics and len(metrics["online_squared_error"]) == 2
            assert run["summary"]["total_online_squared_error"] == pytest.approx(
                np.mean(metrics["online_squared_error"]))
    results = load_results(out)
    assert {c.method for c in results.configs} == {"baseline", "l2_init"}
    assert all(c.measure.metric == "online_squared_error" for c in results.configs)
    assert not any("regression" in w for w in results.warnings)


def test_the_preset_runs_baseline_l2_init_and_full_reset_as_dohare_et_al_trained():
    from plasticlab.experiments.presets import get_preset
    from plasticlab.experiments.sweep import expand

    runs = expand(get_preset("field-slowly_changing_regression"))
    assert {r.config.method for r in runs} == {"baseline", "l2_init", "full_reset"}
    assert {(r.config.optimizer, r.config.lr, r.config.init, r.config.batch_size) for r in runs} == {
        ("sgd", 0.01, "kaiming_uniform", 1)}
