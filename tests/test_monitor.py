"""plasticlab.Monitor: what it measures (against plasticlab.metrics), that it never changes
training (bit-identical gradients and parameters), its hooks' lifetime, the history table,
the warnings, the trainability probe, the mirrors and the example."""

from __future__ import annotations

import argparse
import csv
import gc
import importlib.util
import math
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import plasticlab
from conftest import REPO, needs_package, run_script
from plasticlab import metrics
from plasticlab.monitor import (
    Monitor,
    PlasticityWarning,
    Thresholds,
    TrainabilityProbe,
    find_activation_modules,
)
from plasticlab.nets.units import dormant_mask, unit_activity

# --- helpers -----------------------------------------------------------------------------------


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def cnn(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 5, 3), nn.ReLU(),
                         nn.Flatten(), nn.Linear(5 * 2 * 2, 3))


def hooks(model):
    return sum(len(m._forward_hooks) for m in model.modules())


def quiet(**kwargs):
    """Monitor keyword arguments without warnings (tests of other things)."""
    return {"thresholds": None, **kwargs}


def train_steps(model, monitor, steps, seed=1, batch=8):
    """``steps`` Adam steps on random data; the gradients and parameters after each."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    trace = []
    for _ in range(steps):
        device = next(model.parameters()).device
        x = torch.randn(batch, *model.input_shape, generator=g).to(device)
        y = torch.randint(3, (batch,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if monitor is not None:
            monitor.step()
        trace.append(([p.grad.clone() for p in model.parameters()],
                      [p.detach().clone() for p in model.parameters()]))
    return trace


# --- what it measures --------------------------------------------------------------------------

def test_activation_modules_are_found_and_named_layers_accepted():
    model = mlp()
    assert find_activation_modules(model) == ["1", "3"]
    with Monitor(model, torch.randn(5, 6), **quiet()) as mon:
        assert mon.layer_names == ["1", "3"]
    with Monitor(model, torch.randn(5, 6), layers=["2", model[3]], **quiet()) as mon:
        assert mon.layer_names == ["2", "3"]
    with pytest.raises(ValueError, match="no module named 'fc9'"):
        Monitor(model, torch.randn(5, 6), layers=["fc9"])
    with pytest.raises(ValueError, match="no activation modules"):
        Monitor(nn.Sequential(nn.Linear(6, 3)), torch.randn(5, 6))
    assert hooks(model) == 0


def test_feature_measurements_equal_the_metrics_functions():
    model = mlp()
    probe = torch.randn(40, 6)
    with torch.no_grad():  # kill three units of the first layer: negative bias, tiny weights
        model[0].weight[:3] *= 1e-3
        model[0].bias[:3] = -10.0
        h1 = model[1](model[0](probe))
        h2 = model[3](model[2](h1))
    with Monitor(model, probe, **quiet()) as mon:
        row = mon.measure()
    for name, h in (("1", h1), ("3", h2)):
        f = h[None]
        sv = metrics.singular_values(metrics.feature_matrix(f))
        assert row[f"srank/{name}"] == int(metrics.srank(sv)[0])
        assert row[f"effective_rank/{name}"] == pytest.approx(float(metrics.effective_rank(sv)[0]))
        assert row[f"dead_fraction/{name}"] == pytest.approx(float(metrics.dead_units(f).double().mean()))
        dormant = dormant_mask(unit_activity(f), metrics.DORMANT_THRESHOLD)
        assert row[f"dormant_fraction/{name}"] == pytest.approx(float(dormant.double().mean()))
    assert row["dead_fraction/1"] >= 3 / 8
    dead, _ = metrics.dead_fraction([h1[None], h2[None]])
    assert row["dead_fraction"] == pytest.approx(float(dead[0]))  # Σ dead / Σ units
    assert row["step"] == 0 and isinstance(row["srank/1"], int)


def test_conv_features_count_channels_and_rank_positions_as_rows():
    model = cnn()
    model.input_shape = (2, 10, 10)
    probe = torch.randn(7, 2, 10, 10)
    with torch.no_grad():
        h = model[1](model[0](probe))  # [7, 4, 8, 8]
        model[0].bias[0] = -100.0  # channel 0 dead everywhere
        h = model[1](model[0](probe))
    with Monitor(model, probe, **quiet()) as mon:
        row = mon.measure()
    f = h[None]
    sv = metrics.singular_values(metrics.feature_matrix(f))  # [1, 7·8·8, 4]
    assert row["srank/1"] == int(metrics.srank(sv)[0])
    assert row["dead_fraction/1"] == pytest.approx(float(metrics.dead_units(f).double().mean()))
    assert row["dead_fraction/1"] >= 0.25
    assert set(mon.history.layers("srank")) == {"1", "4"}


def test_sequence_features_take_units_from_unit_dim():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 2))
    probe = torch.randn(3, 5, 4)  # [n, T, d]
    with Monitor(model, probe, unit_dim=-1, **quiet()) as mon:
        row = mon.measure()
    with torch.no_grad():
        h = model[1](model[0](probe))  # [3, 5, 6]
    f = h.reshape(1, 15, 6)  # every position of every input a row, the 6 features the units
    sv = metrics.singular_values(f)
    assert row["srank/1"] == int(metrics.srank(sv)[0])
    assert row["effective_rank/1"] == pytest.approx(float(metrics.effective_rank(sv)[0]))


class SharedActivation(nn.Module):
    """One nn.ReLU used after both hidden layers, and an in-place skip connection after it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2, self.out = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 3)
        self.act = nn.ReLU()
        self.input_shape = (6,)

    def forward(self, x):
        h = self.act(self.fc1(x))
        g = self.act(self.fc2(h))
        g -= 1000.0  # in place, after the hook saw g
        return self.out(g)


def test_a_shared_activation_is_one_layer_per_call_and_measured_before_later_in_place_ops():
    model = SharedActivation()
    with Monitor(model, torch.randn(20, 6), **quiet()) as mon:
        row = mon.measure()
    assert mon.history.layers("srank") == ["act", "act#1"]
    assert row["dead_fraction/act#1"] < 1.0  # the features, not the tensor after `g -= 1000`


def test_weight_magnitude_drift_and_grad_norm():
    model = mlp()
    mon = Monitor(model, torch.randn(5, 6), **quiet())
    row = mon.measure()
    params = list(model.parameters())
    assert row["weight_drift"] == 0.0 and math.isnan(row["grad_norm"])
    assert row["weight_magnitude"] == pytest.approx(
        float(torch.cat([p.detach().abs().flatten() for p in params]).double().mean()))
    assert row["weight_magnitude/2"] == pytest.approx(
        float(torch.cat([model[2].weight.abs().flatten(), model[2].bias.abs()]).detach().double().mean()))
    theta0 = torch.cat([p.detach().flatten() for p in params]).double()
    with torch.no_grad():
        model[2].weight.add_(0.5)
    model(torch.randn(4, 6)).sum().backward()
    row = mon.measure()
    moved = 0.5 * math.sqrt(model[2].weight.numel())
    assert row["weight_drift"] == pytest.approx(moved / float(theta0.norm()))
    w0 = torch.cat([(model[2].weight - 0.5).flatten(), model[2].bias]).detach().double()
    assert row["weight_drift/2"] == pytest.approx(moved / float(w0.norm()))
    assert row["weight_drift/0"] == 0.0
    grads = torch.cat([p.grad.flatten() for p in params]).double()
    assert row["grad_norm"] == pytest.approx(float(grads.norm()))
    assert row["grad_norm/4"] == pytest.approx(
        float(torch.cat([model[4].weight.grad.flatten(), model[4].bias.grad]).double().norm()))
    mon.close()


def test_a_weight_tied_between_two_layers_counts_once_in_the_models_totals():
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
    model[4].weight = model[2].weight  # tied: one parameter in two modules
    params = list(model.parameters())  # each once, as the model's totals must count it
    theta0 = torch.cat([p.detach().flatten() for p in params]).double()
    with Monitor(model, torch.randn(5, 5), **quiet()) as mon:
        row = mon.measure()
        assert row["weight_magnitude"] == pytest.approx(float(theta0.abs().mean()))
        with torch.no_grad():
            model[2].weight.add_(0.5)
        row = mon.measure()
    assert row["weight_drift"] == pytest.approx(0.5 * 6 / float(theta0.norm()))


def test_step_measures_every_n_steps_and_returns_none_between():
    model = mlp()
    model.input_shape = (6,)
    mon = Monitor(model, torch.randn(10, 6), every=3, **quiet())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    results = []
    for _ in range(7):
        model(torch.randn(4, 6)).sum().backward()
        opt.step()
        results.append(mon.step())
    assert [r is not None for r in results] == [False, False, True, False, False, True, False]
    assert [row["step"] for row in mon.history] == [3, 6] and mon.steps == 7
    mon.close()


def test_probe_may_be_a_tuple_or_a_dict_and_is_replaceable():
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = nn.Linear(6, 4), nn.ReLU()

        def forward(self, a, b):
            return self.act(self.fc(a + b))

    model = TwoInputs()
    a, b = torch.randn(9, 6), torch.randn(9, 6)
    with Monitor(model, (a, b), **quiet()) as mon:
        first = mon.measure()
        mon.set_probe({"a": a, "b": torch.zeros(9, 6)})
        second = mon.measure()
    with torch.no_grad():
        h = model.act(model.fc(a))[None]
    sv = metrics.singular_values(h)
    assert second["effective_rank/act"] == pytest.approx(float(metrics.effective_rank(sv)[0]))
    assert first["effective_rank/act"] != second["effective_rank/act"]


def test_non_finite_features_give_nan_ranks_not_an_error():
    model = mlp()
    with torch.no_grad():
        model[0].weight[0, 0] = float("inf")
    with Monitor(model, torch.randn(5, 6), **quiet()) as mon:
        row = mon.measure()
    assert math.isnan(row["srank/1"]) and math.isnan(row["effective_rank/1"])


# --- no effect on training ---------------------------------------------------------------------

class Regularized(nn.Module):
    """Dropout (draws from the global RNG in train mode) and BatchNorm (running statistics)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.3),
                                 nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
        self.input_shape = (6,)

    def forward(self, x):
        return self.net(x)


@pytest.mark.parametrize("make", [Regularized, lambda: cnn_with_shape()])
def test_monitoring_leaves_gradients_and_parameters_bit_identical(make):
    model = make()
    torch.manual_seed(123)  # dropout's draws
    plain = train_steps(model, None, 12)
    model = make()
    probe = torch.randn(32, *model.input_shape, generator=torch.Generator().manual_seed(5))
    mon = Monitor(model, probe, every=1, trainability=TrainabilityProbe(every=4, steps=3),
                  thresholds=Thresholds(dead_fraction=0.0, srank_drop=0.0, warmup=0, weight_drift=0.0))
    torch.manual_seed(123)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlasticityWarning)
        watched = train_steps(model, mon, 12)
    assert len(mon.history) == 12 and "trainability" in mon.history[3]
    for (g0, p0), (g1, p1) in zip(plain, watched, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(g0, g1, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(p0, p1, strict=True))
    mon.close()


def cnn_with_shape():
    model = cnn()
    model.input_shape = (2, 10, 10)
    return model


def test_the_probe_pass_restores_modes_and_leaves_buffers_and_rng_alone():
    model = Regularized()
    model.net[4].eval()  # a user's own per-module mode survives
    running = model.net[1].running_mean.clone()
    probe = torch.randn(16, 6)
    rng = torch.get_rng_state()
    with Monitor(model, probe, **quiet()) as mon:
        mon.measure()
    assert model.training and model.net[3].training and not model.net[4].training
    assert torch.equal(model.net[1].running_mean, running)
    assert torch.equal(torch.get_rng_state(), rng)


# --- hooks' lifetime ---------------------------------------------------------------------------

class Interrupt(Exception):
    pass


def test_hooks_live_for_the_probe_pass_and_are_removed_on_close_and_on_garbage_collection():
    model = mlp()
    seen = []

    def spy(module, inputs, output):  # a user's own hook, called after the monitor's
        seen.append(hooks(model))

    model[3].register_forward_hook(spy)
    mon = Monitor(model, torch.randn(5, 6), **quiet())
    model(torch.randn(4, 6))  # a training forward: the monitor's hooks are not there
    mon.measure()
    assert seen == [1, 3] and hooks(model) == 1
    mon.close()
    assert mon.closed and hooks(model) == 1
    mon.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        mon.measure()

    def interrupt(module, inputs, output):
        raise Interrupt

    model[4].register_forward_hook(interrupt)
    mon = Monitor(model, torch.randn(5, 6), **quiet())
    with pytest.raises(Interrupt):
        mon.measure()
    assert hooks(model) == 2 and model.training  # removed in the pass's own clean-up
    mon._handles.append(model[1].register_forward_hook(spy))  # as if a pass never finished
    del mon
    gc.collect()
    assert hooks(model) == 2


def test_a_monitored_model_can_be_pickled(tmp_path):
    model = mlp()
    with Monitor(model, torch.randn(5, 6), **quiet()) as mon:
        mon.measure()
        torch.save(model, tmp_path / "model.pt")
    assert isinstance(torch.load(tmp_path / "model.pt", weights_only=False), nn.Sequential)


# --- the history -------------------------------------------------------------------------------

def test_history_is_a_tidy_table_to_csv_and_pandas(tmp_path):
    pd = pytest.importorskip("pandas")
    model = mlp()
    model.input_shape = (6,)
    mon = Monitor(model, torch.randn(10, 6), every=2, **quiet())
    train_steps(model, mon, 4)
    mon.close()
    rows = mon.history.rows()
    assert {r["step"] for r in rows} == {2, 4}
    assert {"step": 2, "layer": "all", "metric": "dead_fraction",
            "value": mon.history[0]["dead_fraction"]} in rows
    assert {(r["layer"], r["metric"]) for r in rows} >= {
        ("1", "srank"), ("3", "srank"), ("0", "weight_drift"), ("all", "grad_norm")}
    df = mon.history.to_pandas()
    assert list(df.columns) == ["step", "layer", "metric", "value"] and len(df) == len(rows)
    wide = mon.history.to_pandas(wide=True)
    assert list(wide["step"]) == [2, 4] and "srank/3" in wide.columns
    path = mon.history.to_csv(tmp_path / "h.csv")
    with path.open() as fh:
        read = list(csv.DictReader(fh))
    assert len(read) == len(rows) and read[0].keys() == {"step", "layer", "metric", "value"}
    back = pd.read_csv(path)
    assert back.pivot_table(index="step", columns=["metric", "layer"], values="value").shape[0] == 2
    mon.history.to_csv(tmp_path / "w.csv", wide=True)
    assert pd.read_csv(tmp_path / "w.csv").shape[0] == 2
    steps, values = mon.history.series("srank", "1")
    assert steps == [2, 4] and all(isinstance(v, int) for v in values)


# --- warnings ----------------------------------------------------------------------------------

def test_dead_layer_warns_once_per_layer_with_the_fix():
    model = mlp()
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every unit of layer 1 dead
    mon = Monitor(model, torch.randn(10, 6), thresholds=Thresholds(srank_drop=None, weight_drift=None))
    with pytest.warns(PlasticityWarning, match=r"100 % of the units of layer '1' are dead") as caught:
        mon.measure()
    text = str(caught[0].message)
    assert "plasticlab.L2Init(model, strength=1e-2)" in text and "loss = loss + reg()" in text
    assert caught[0].filename == __file__  # points at the caller
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlasticityWarning)
        mon.measure()  # not again
    assert [(a.kind, a.layer) for a in mon.alerts] == [("dead", "1")]
    mon.close()


def test_srank_collapse_and_weight_drift_warn():
    model = mlp()
    probe = torch.randn(50, 6)
    t = Thresholds(dead_fraction=None, srank_drop=0.5, warmup=0, window=1, weight_drift=0.5)
    mon = Monitor(model, probe, thresholds=t)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlasticityWarning)
        mon.measure()
    with torch.no_grad():  # layer 3 sees rank-1 inputs: all rows of fc2 equal
        model[2].weight.copy_(model[2].weight[:1].expand_as(model[2].weight))
        model[2].bias.fill_(1.0)
        model[2].weight.mul_(10.0)  # and far from θ₀
    with pytest.warns(PlasticityWarning) as caught:
        mon.measure()
    kinds = {(a.kind, a.layer) for a in mon.alerts}
    assert ("srank", "3") in kinds and ("drift", "all") in kinds
    assert any("fell by" in str(w.message) and "since step 0" in str(w.message) for w in caught)
    mon.close()


def test_srank_warm_up_ignores_the_early_drop():
    model = mlp()
    mon = Monitor(model, torch.randn(50, 6), thresholds=Thresholds(dead_fraction=None, warmup=10,
                                                                    window=1, weight_drift=None))
    mon.measure()
    with torch.no_grad():
        model[2].weight.copy_(model[2].weight[:1].expand_as(model[2].weight))
        model[2].bias.fill_(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlasticityWarning)
        mon.measure()  # step 0 < warmup: the fall from the fresh network's rank does not count
    mon.close()


def test_no_thresholds_no_warnings():
    model = mlp()
    with torch.no_grad():
        model[0].bias.fill_(-100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlasticityWarning)
        with Monitor(model, torch.randn(10, 6), thresholds=None) as mon:
            mon.measure()
    assert mon.alerts == []


def test_l2_init_from_the_monitor_pulls_to_the_initial_weights():
    model = mlp()
    theta0 = [p.detach().clone() for p in model.parameters()]
    mon = Monitor(model, torch.randn(5, 6), **quiet())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    reg = mon.l2_init(0.1)
    assert isinstance(reg, plasticlab.L2Init)
    reg().backward()
    for p, p0 in zip(model.parameters(), theta0, strict=True):
        assert torch.allclose(p.grad, 0.1 * (p.detach() - p0))
    mon.close()


# --- the trainability probe -------------------------------------------------------------------

def test_trainability_probe_fits_a_copy_and_reports_the_loss_reduction():
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    probe, inputs = TrainabilityProbe(every=2, steps=30, lr=1e-2), torch.randn(20, 6)
    mon = Monitor(model, inputs, every=100, trainability=probe, **quiet())
    assert mon.step() is None
    row = mon.step()
    assert set(row) == {"step", "trainability", "trainability_loss_start", "trainability_loss_end"}
    assert row["trainability_loss_end"] < row["trainability_loss_start"]
    assert row["trainability"] == pytest.approx(
        (row["trainability_loss_start"] - row["trainability_loss_end"]) / row["trainability_loss_start"])
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    again = Monitor(model, inputs, trainability=probe, **quiet())
    again.steps = 1
    assert again.step()["trainability"] == pytest.approx(row["trainability"])  # same seed, same labels
    later = mon.measure(trainability=True)  # fresh labels each time
    assert later["trainability_loss_start"] != row["trainability_loss_start"]
    mon.close()
    again.close()


def test_a_dead_network_cannot_be_trained():
    model = mlp()
    with torch.no_grad():
        model[0].bias.fill_(-100.0)
        model[2].bias.fill_(-100.0)
    with Monitor(model, torch.randn(20, 6), trainability=2, **quiet()) as mon:
        dead = mon.measure(trainability=True)
    with Monitor(mlp(), torch.randn(20, 6), trainability=2, **quiet()) as mon:
        alive = mon.measure(trainability=True)
    assert dead["trainability"] < alive["trainability"]


@pytest.mark.cuda
def test_a_model_on_cuda_is_measured_there_and_training_is_unchanged():
    def run(monitored):
        model = Regularized().cuda()  # dropout draws from the CUDA generator
        mon = None
        if monitored:  # the probe stays on the host; the monitor moves it
            mon = Monitor(model, torch.randn(16, 6), every=2, trainability=3, **quiet())
        torch.manual_seed(7)
        return train_steps(model, mon, 6), mon

    plain, _ = run(False)
    watched, mon = run(True)
    assert [row["step"] for row in mon.history] == [2, 3, 4, 6]
    assert isinstance(mon.history[0]["srank/net.2"], int) and mon.history[1]["trainability"] > 0
    for (g0, p0), (g1, p1) in zip(plain, watched, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(g0 + p0, g1 + p1, strict=True))
    mon.close()


def test_trainability_regression_target_and_bad_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    probe = TrainabilityProbe(every=1, steps=20, lr=1e-2, target="regression")
    with Monitor(model, torch.randn(20, 6), trainability=probe, **quiet()) as mon:
        row = mon.step()
    assert 0 < row["trainability"] <= 1
    with Monitor(model, torch.randn(20, 6), trainability=1, **quiet()) as mon:
        with pytest.raises(ValueError, match="target='regression'"):
            mon.step()
    with pytest.raises(ValueError, match="target"):
        TrainabilityProbe(every=1, target="nope")
    with pytest.raises(TypeError, match="trainability must be"):
        Monitor(model, torch.randn(3, 6), trainability=True)
    with pytest.raises(ValueError, match="needs Monitor"):
        Monitor(model, torch.randn(3, 6), **quiet()).measure(trainability=True)


# --- mirrors -----------------------------------------------------------------------------------

@needs_package("tensorboard")
def test_tensorboard_mirror_writes_every_measurement(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = mlp()
    model.input_shape = (6,)
    mon = Monitor(model, torch.randn(10, 6), every=2, tensorboard=tmp_path / "tb", **quiet())
    train_steps(model, mon, 4)
    mon.close()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    srank = acc.Scalars("plasticity/srank/1")
    assert [e.step for e in srank] == [2, 4]
    assert [e.value for e in srank] == [row["srank/1"] for row in mon.history]
    assert "plasticity/dead_fraction" in acc.Tags()["scalars"]


@needs_package("wandb")
def test_wandb_mirror_logs_offline(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    model = mlp()
    model.input_shape = (6,)
    mon = Monitor(model, torch.randn(10, 6), every=2, wandb="plasticlab-test", **quiet())
    run = mon._mirrors[0].run  # a run of the monitor's own, finished by close()
    train_steps(model, mon, 2)
    assert run.summary["plasticity/srank/1"] == mon.history[0]["srank/1"]
    assert run.summary["plasticity/step"] == 2
    mon.close()
    assert Path(run.dir).parent.name.startswith("offline-run-")

    run = wandb.init(project="plasticlab-test", dir=tmp_path, mode="offline")  # the user's own run
    try:
        with Monitor(model, torch.randn(10, 6), wandb=True, **quiet()) as mon:
            assert mon._mirrors[0].run is run
            row = mon.measure()
        assert run.summary["plasticity/dead_fraction"] == row["dead_fraction"]
        run.log({"loss": 1.0})  # still open: the monitor does not finish a run it did not start
    finally:
        run.finish()
        wandb.teardown()  # wandb's process-wide settings (WANDB_DIR) must not outlive this test


def test_a_user_supplied_writer_gets_the_scalars_and_stays_open():
    class Writer:
        def __init__(self):
            self.scalars, self.flushed = [], 0

        def add_scalar(self, tag, value, step):
            self.scalars.append((tag, value, step))

        def flush(self):
            self.flushed += 1

    writer = Writer()
    model = mlp()
    with Monitor(model, torch.randn(10, 6), tensorboard=writer, **quiet()) as mon:
        row = mon.measure()
    assert ("plasticity/srank/1", row["srank/1"], 0) in writer.scalars and writer.flushed == 1


def test_a_missing_mirror_package_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def blocked(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name == "wandb":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
    with pytest.raises(RuntimeError, match=r"plasticlab\[tensorboard\]"):
        Monitor(mlp(), torch.randn(3, 6), tensorboard="somewhere")
    with pytest.raises(RuntimeError, match=r"plasticlab\[wandb\]"):
        Monitor(mlp(), torch.randn(3, 6), wandb="project")


def test_monitor_is_exported():
    assert plasticlab.Monitor is Monitor and "Monitor" in plasticlab.__all__


# --- the example -------------------------------------------------------------------------------

def test_example_saves_the_figure_and_prints_a_per_task_table(data_dir, tmp_path, monkeypatch, capsys):
    figure = tmp_path / "fig.png"
    out = run_script(REPO / "examples" / "monitor_any_model.py",
                     ["--data-dir", data_dir, "--tasks", "2", "--steps", "40", "--every", "10",
                      "--figure", figure, "--csv", tmp_path / "t"], monkeypatch, capsys)
    lines = out.strip().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("task"))
    assert [line.split()[0] for line in lines[header + 1:header + 3]] == ["0", "1"]
    assert figure.stat().st_size > 10_000
    assert (tmp_path / "t-baseline.csv").is_file() and (tmp_path / "t-l2_init.csv").is_file()


def test_example_overhead_mode_prints_both_timings(data_dir, capsys):
    path = REPO / "examples" / "monitor_any_model.py"
    spec = importlib.util.spec_from_file_location("monitor_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    args = argparse.Namespace(data_dir=data_dir, tasks=1, steps=30, every=10, repeats=1, strength=1e-2,
                              probe=64, trainability=0)
    example.overhead(args)
    out = capsys.readouterr().out
    assert out.startswith("threads ") and out.count("overhead") == 2 and "inside monitor.step()" in out
