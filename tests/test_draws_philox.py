"""Draws with Philox on the device (``draws = "philox"``, issue 44): Shrink & Perturb's noise ε
and L2 Init + Resample's target φₜ (:mod:`plasticlab.methods.init_draws`) are the literal init
draw of each layer's Philox stream at their step, as are ReDo's, CBP's and SNR's new units',
and UPGD's noise ξ the normal draw of each tensor's stream at its update; member k is seed k
alone to the bit, nothing goes to the host per step, and the default keeps the recorded runs'
ids. (The methods' stop and resume between two steps to the bit: tests/test_checkpoint.py,
which runs every method's every form; UPGD's: here.)"""

from __future__ import annotations

import math

import pytest
import torch

from plasticlab import philox
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.nets import build_network
from plasticlab.run_config import Members
from test_toolkit_spectral import trained_parameters

TINY = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 6, "lr": 1e-2,
        "problem_params": {"examples_per_task": 96}, "method": "shrink_perturb",
        "params": {"draws": "philox", "shrink": 0.9, "noise": 0.5}}
RESAMPLE = {**TINY, "method": "l2_init_resample", "params": {"draws": "philox", "strength": 1.0}}
UPGD = {**TINY, "method": "baseline", "params": {}, "optimizer": "upgd",
        "optimizer_params": {"draws": "philox", "sigma": 0.5}}
# every third step, the units scoring at most half the layer's mean are recycled
REDO = {**TINY, "method": "redo", "params": {"draws": "philox", "period": 3, "threshold": 0.5}}
# a fifth of the mature units replaced every step
CBP = {**TINY, "method": "cbp", "params": {"draws": "philox", "replacement_rate": 0.2, "maturity": 1}}
# a unit silent for 16 examples (one batch) is reset
SNR = {**TINY, "method": "snr", "params": {"draws": "philox", "initial_threshold": 16,
                                           "max_threshold": 16}}
# a fresh draw at each task end: of every layer, or of the output layer
FULL_RESET = {**TINY, "method": "full_reset", "params": {"draws": "philox", "reinit": "fresh"}}
HEAD_RESET = {**TINY, "method": "head_reset", "params": {"draws": "philox", "reinit": "fresh"}}
METHODS = pytest.mark.parametrize(
    "tiny", [TINY, RESAMPLE, UPGD, REDO, CBP, SNR, FULL_RESET, HEAD_RESET],
    ids=["shrink_perturb", "l2_init_resample", "upgd", "redo", "cbp", "snr", "full_reset", "head_reset"])


@pytest.mark.parametrize("scheme", ["torch_default", "kaiming_uniform", "kaiming_normal", "xavier_normal"])
def test_a_draw_is_each_layers_philox_stream_at_that_step_times_the_schemes_bound(scheme):
    net = build_network("mlp", 2, (12,), 3, init=scheme)
    keys = net.philox_init_keys([7, 8], "method/shrink_perturb")
    drawn = net.sample_init_philox(keys, 41)
    for i, layer in enumerate(net.affine_layers):
        weight_keys = philox.member_keys([7, 8], f"method/shrink_perturb/{i}/weight")
        bias_keys = philox.member_keys([7, 8], f"method/shrink_perturb/{i}/bias")
        fan_in, fan_out = layer.fan_in, layer.fan_out
        shape = tuple(layer.weight.shape[1:])
        if scheme.endswith("normal"):
            std = math.sqrt(2.0 / (fan_in + (fan_out if scheme.startswith("xavier") else 0)))
            weight, bias = philox.normal(weight_keys, 41, shape) * std, torch.zeros(2, shape[0])
        else:
            bound = 1 / math.sqrt(fan_in) if scheme == "torch_default" else math.sqrt(6.0 / fan_in)
            weight = philox.uniform(weight_keys, 41, shape, low=-1.0, high=1.0) * bound
            bias = (philox.uniform(bias_keys, 41, shape[:1], low=-1.0, high=1.0) * bound
                    if scheme == "torch_default" else torch.zeros(2, shape[0]))
        assert torch.equal(drawn[2 * i], weight) and torch.equal(drawn[2 * i + 1], bias)
    assert not torch.equal(net.sample_init_philox(keys, 42)[0], drawn[0])


EVERY = [TINY, RESAMPLE, UPGD, REDO, CBP, SNR, FULL_RESET, HEAD_RESET]
# on the CNN, the draws that differ there: a conv layer's init draw, conv units renewed
CNN = [TINY, REDO, CBP, SNR]


@pytest.mark.parametrize("problem, tiny", [("permuted_mnist", t) for t in EVERY]
                         + [("random_label_cifar", t) for t in CNN],
                         ids=[f"{t['method']}-mlp" for t in EVERY] + [f"{t['method']}-cnn" for t in CNN])
def test_member_k_is_seed_k_alone_to_the_bit(data_dir, problem, tiny):
    size = {"examples_per_task": 96} if problem == "permuted_mnist" else {"examples": 64}
    cfg = resolve_config({**tiny, "problem": problem, "problem_params": size})
    together = trained_parameters(cfg, [0, 1, 2], data_dir)
    alone = trained_parameters(cfg, [2], data_dir)
    assert all(torch.equal(t[2], a[0]) for t, a in zip(together, alone, strict=True))


@METHODS
def test_the_draws_are_philoxs_not_the_generators_and_repeat(data_dir, tiny):
    cfg = resolve_config(tiny)
    first, again = (trained_parameters(cfg, [0], data_dir) for _ in range(2))
    where = "optimizer_params" if "optimizer_params" in tiny else "params"
    host = trained_parameters(resolve_config({**tiny, where: {**tiny[where], "draws": "generator"}}),
                              [0], data_dir)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], host[0])


@METHODS
def test_no_host_round_trip_per_step(data_dir, monkeypatch, tiny):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**tiny, "tasks": 1})
    train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


def test_resamples_target_at_step_t_is_the_philox_init_draw_at_t(data_dir):
    from plasticlab.engine import EnsembleTraining

    training = EnsembleTraining(Members.from_config(resolve_config(RESAMPLE), [3, 4]),
                                data_dir=data_dir, measure=False)
    training.run_task(0)  # 6 steps: the last target φ₅ was drawn for step 5 (5 updates before it)
    keys = training.net.philox_init_keys([3, 4], "method/l2_init_resample")
    expected = training.net.sample_init_philox(keys, 5)
    assert all(torch.equal(a, b) for a, b in
               zip(training.method.regularizer.targets(), expected, strict=True))


@pytest.mark.parametrize("method, params", [("shrink_perturb", {"shrink": 0.9999, "noise": 0.01}),
                                            ("l2_init_resample", {"strength": 0.01}),
                                            ("redo", {"period": 6250, "threshold": 0.1}),
                                            ("cbp", {"replacement_rate": 1e-5}),
                                            ("snr", {"percentile": 0.9})])
def test_the_default_draws_leave_a_runs_configuration_and_id_as_they_were(method, params):
    """``draws`` came after these methods' runs were recorded: at its default it is no part of a
    run's configuration (``Param.implicit_default``), so their ids, results and checkpoints still
    match; set, it is recorded."""
    from plasticlab.experiments.store import ResultStore

    config = resolve_config({"problem": "permuted_mnist", "method": method, "params": params})
    assert "draws" not in config.params and params.items() <= config.params.items()
    as_before = {**config.to_dict(), "params": dict(reversed(config.params.items()))}
    assert ResultStore.run_id(config.to_dict(), 3) == ResultStore.run_id(as_before, 3)
    philox_config = resolve_config({**config.to_dict(), "params": {**config.params, "draws": "philox"}})
    assert philox_config.params["draws"] == "philox"
    assert ResultStore.run_id(philox_config.to_dict(), 3) != ResultStore.run_id(config.to_dict(), 3)


def test_upgds_noise_at_update_t_is_each_tensors_philox_normal_stream_times_sigma():
    from plasticlab.optim import UPGD

    params = [torch.zeros(2, 3, 4), torch.zeros(2, 3)]
    upgd = UPGD(params, lr=0.1, sigma=0.25, draws="philox", seeds=[5, 6])
    upgd.step_count = 7
    for i, xi in enumerate(upgd.noise(params)):
        keys = philox.member_keys([5, 6], f"optimizer/upgd/{i}")
        assert torch.equal(xi, philox.normal(keys, 7, params[i].shape[1:]) * 0.25)
    # a tensor without a gradient this step is skipped; the others keep their own streams
    assert torch.equal(upgd.noise(params[1:], active=[1])[0], upgd.noise(params)[1])
    with pytest.raises(ValueError, match="one seed per member"):
        UPGD(params, lr=0.1, draws="philox", seeds=[5])


@pytest.mark.parametrize("tiny", [UPGD, FULL_RESET], ids=["upgd", "full_reset"])
def test_philox_draws_resume_from_a_checkpoint_to_the_bit(data_dir, tmp_path, tiny):
    # UPGD's counter is its update count; a reset's, the task ends before it
    from plasticlab.engine import EnsembleTraining

    def training():
        return EnsembleTraining(Members.from_config(resolve_config(tiny), [0, 1]), data_dir=data_dir)

    whole = training()
    for task in range(2):
        whole.run_task(task)
    first = training()
    first.run_task(0)
    first.save(tmp_path / "ckpt")
    first.close()
    resumed = training()
    assert resumed.resume(tmp_path / "ckpt")
    resumed.run_task(1)
    assert all(torch.equal(a, b) for a, b in zip(whole.net.parameters(), resumed.net.parameters(),
                                                  strict=True))
    assert resumed.accuracies == whole.accuracies


def test_upgds_default_draws_leave_a_runs_configuration_and_id_as_they_were():
    from plasticlab.experiments.store import ResultStore

    config = resolve_config({"problem": "permuted_mnist", "method": "baseline", "optimizer": "upgd"})
    assert "draws" not in config.optimizer_params
    as_before = {**config.to_dict(), "optimizer_params": dict(reversed(config.optimizer_params.items()))}
    assert ResultStore.run_id(config.to_dict(), 3) == ResultStore.run_id(as_before, 3)
    philox_config = resolve_config({**config.to_dict(), "optimizer_params": {"draws": "philox"}})
    assert ResultStore.run_id(philox_config.to_dict(), 3) != ResultStore.run_id(config.to_dict(), 3)


def test_a_redo_recycled_units_fresh_weights_are_its_layers_philox_init_draw_at_that_step(data_dir):
    from plasticlab.engine import EnsembleTraining
    from plasticlab.nets.init import draw_layers_philox

    training = EnsembleTraining(Members.from_config(resolve_config(REDO), [3, 4]), data_dir=data_dir)
    redo, net = training.method, training.net
    before = net.blocks[0].affine.weight.detach().clone()
    units = net.blocks[0].affine.weight.shape[1]
    dormant = torch.ones(2, units)
    dormant[:, 1] = 0.0  # unit 1 of layer 0 is dormant in both members; nothing else is
    rest = [torch.ones(2, b.affine.weight.shape[1]) for b in list(net.blocks)[1:-1]]
    assert redo.recycle([dormant, *rest], step=12).sum(dim=1).tolist() == [1, 1]
    keys = torch.stack([philox.member_keys([3, 4], f"method/redo/0/{part}") for part in ("weight", "bias")],
                       dim=1)
    layer = net.blocks[0].affine
    shape = [(tuple(layer.weight.shape[1:]), layer.fan_in, layer.fan_out)]
    weight, bias = draw_layers_philox(net.init, shape, keys, 12, "cpu")
    assert torch.equal(layer.weight[:, 1], weight[:, 1]) and torch.equal(layer.bias[:, 1], bias[:, 1])
    assert torch.equal(layer.weight[:, 0], before[:, 0])  # the others as they were
    with pytest.raises(ValueError, match="counts its draws by the step"):
        redo.recycle([dormant, *rest])


def test_a_cbp_new_units_weights_are_its_row_of_the_layers_philox_init_draw_at_that_step(data_dir):
    from plasticlab.engine import EnsembleTraining

    training = EnsembleTraining(Members.from_config(resolve_config(CBP), [3, 4]), data_dir=data_dir)
    training.run_task(0)  # 6 steps: units replaced after each, the last time after step 6
    core, net = training.method.core, training.net
    assert all(n > 0 for n in core.last_replaced[0])
    fresh = net.sample_init_philox(net.philox_init_keys([3, 4], "method/cbp"), 6)[0]  # layer 0's W
    new = core.stats[0].age == 0  # [K, U]: the units replaced after step 6
    weight = net.blocks[0].affine.weight
    assert torch.equal(weight[new], fresh[new])
    assert torch.equal(net.blocks[0].affine.bias[new], torch.zeros(int(new.sum())))


def test_snrs_fresh_weights_at_step_t_are_each_layers_philox_init_draw_at_t(data_dir):
    # what a reset unit takes its row of (reset_silent_units: tests/test_field_methods.py)
    from plasticlab.engine import EnsembleTraining

    training = EnsembleTraining(Members.from_config(resolve_config(SNR), [3, 4]), data_dir=data_dir)
    method, net = training.method, training.net
    drawn = net.sample_init_philox(net.philox_init_keys([3, 4], "method/snr"), 6)
    method.counter.fill_(6)
    for i in range(len(method.layers)):
        assert torch.equal(method.fresh(i), drawn[2 * i])


def test_a_fresh_reset_at_the_n_th_task_end_is_the_philox_init_draw_counted_n(data_dir):
    from plasticlab.engine import EnsembleTraining

    for tiny, rows in ((FULL_RESET, slice(None)), (HEAD_RESET, slice(-2, None))):
        training = EnsembleTraining(Members.from_config(resolve_config(tiny), [3, 4]), data_dir=data_dir)
        net = training.net
        keys = net.philox_init_keys([3, 4], f"method/{tiny['method']}")
        for task_end in range(2):
            training.run_task(task_end)
            drawn = net.sample_init_philox(keys, task_end)[rows]
            now = [t for layer in training.method.layers for t in (layer.weight, layer.bias)]
            assert all(torch.equal(a, b) for a, b in zip(now, drawn, strict=True))
