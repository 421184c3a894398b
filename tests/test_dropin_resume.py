"""A training loop that uses a drop-in, stopped and resumed from ``torch.save``d state, ends
bit for bit where the uninterrupted loop does — and would not without the drop-in's state."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import plasticlab
from plasticlab.methods.cbp import ContinualBackpropSequential
from plasticlab.methods.redo import ReDoSequential
from plasticlab.optim import Adam as PlasticlabAdam

STEPS, STOP, TASK = 24, 13, 8  # the loop stops after step 13, mid-task, and resumes


def model_of(init_seed: int, layer_norm: bool = False) -> nn.Sequential:
    torch.manual_seed(init_seed)
    norm = [nn.LayerNorm(16)] if layer_norm else []
    return nn.Sequential(nn.Linear(6, 16), *norm, nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s examples: fixed inputs, labels permuted anew each task."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 6, generator=g) * 2
    labels = torch.randperm(4, generator=torch.Generator().manual_seed(step // TASK))
    return x, labels[(x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()]


@dataclass
class Case:
    """How a loop uses one drop-in: build it, its loss term, what it does after the optimizer's
    step and at a task's end; ``stateful``: whether it has state a resume needs."""

    build: Callable
    stateful: bool
    loss: Callable = lambda d: 0.0
    after: Callable = lambda d, step, x: None
    task_end: Callable = lambda d, model, step: None
    optimizer: Callable = lambda model: torch.optim.Adam(model.parameters(), lr=1e-2)
    layer_norm: bool = False


def _consolidate(ewc, model, step):
    x, y = batch(step)
    ewc.consolidate_model(model, x, y)


def _upgd(model):
    return plasticlab.UPGD(model.parameters(), lr=1e-2, beta=0.9, sigma=0.1,
                           generator=torch.Generator().manual_seed(5))


CASES = {
    "L2Init": Case(lambda m, o: plasticlab.L2Init(m, 1e-1), True, loss=lambda d: d()),
    "L1Init": Case(lambda m, o: plasticlab.L1Init(m, 1e-2), True, loss=lambda d: d()),
    "HuberInit": Case(lambda m, o: plasticlab.HuberInit(m, 1e-1, delta=0.05), True, loss=lambda d: d()),
    "WassersteinInit": Case(lambda m, o: plasticlab.WassersteinInit(m, 1e-1), True, loss=lambda d: d()),
    "L2": Case(lambda m, o: plasticlab.L2(m, 1e-2), False, loss=lambda d: d()),
    "L2InitResample": Case(lambda m, o: plasticlab.L2InitResample(m, 1e-1), False, loss=lambda d: d()),
    "EWC": Case(lambda m, o: plasticlab.EWC(m, 10.0), True, loss=lambda d: d(),
                task_end=_consolidate),
    "EWC sum": Case(lambda m, o: plasticlab.EWC(m, 10.0, anchor="sum"), True, loss=lambda d: d(),
                    task_end=_consolidate),
    "ShrinkPerturb": Case(lambda m, o: plasticlab.ShrinkPerturb(m, 0.99, 1e-2), False,
                          after=lambda d, s, x: d.step()),
    "Parseval": Case(lambda m, o: plasticlab.Parseval(m, 1e-2), False, loss=lambda d: d()),
    "Spectral": Case(lambda m, o: plasticlab.Spectral(m, 1e-2, seed=3), True, loss=lambda d: d()),
    "WeightClip": Case(lambda m, o: plasticlab.WeightClip(m, 1.0), False, after=lambda d, s, x: d.step()),
    "NormalizeProject": Case(lambda m, o: plasticlab.NormalizeProject(m), True,
                             after=lambda d, s, x: d.step(), layer_norm=True),
    "SWR": Case(lambda m, o: plasticlab.SWR(m, period=3, threshold=0.5, seed=2), True,
                after=lambda d, s, x: d.step()),
    "SNR": Case(lambda m, o: plasticlab.SNR(m, o, max_threshold=24, initial_threshold=8,
                                            adapt_period=5, seed=2), True,
                after=lambda d, s, x: d.step(),  # a step size at which units fall silent
                optimizer=lambda model: torch.optim.Adam(model.parameters(), lr=1e-1)),
    "HareTortoise": Case(lambda m, o: plasticlab.HareTortoise(m, momentum=0.9, reset_period=5), True,
                         after=lambda d, s, x: d.step()),
    "UPGD": Case(lambda m, o: o, True, optimizer=_upgd),
    "ContinualBackpropSequential": Case(
        lambda m, o: ContinualBackpropSequential(m, o, replacement_rate=0.2, maturity=2, seed=2), True,
        after=lambda d, s, x: d.step(),
        optimizer=lambda model: PlasticlabAdam(model.parameters(), lr=1e-2)),
    "ReDoSequential": Case(lambda m, o: ReDoSequential(m, o, threshold=0.3, seed=2), True,
                           after=lambda d, s, x: d.recycle(x) if s % 3 == 0 else None),
    "ReDoSequential initial": Case(lambda m, o: ReDoSequential(m, o, threshold=0.3, reinit="initial"),
                                   True, after=lambda d, s, x: d.recycle(x) if s % 3 == 0 else None),
}


def build(case: Case, init_seed: int):
    model = model_of(init_seed, case.layer_norm)
    optimizer = case.optimizer(model)
    return model, optimizer, case.build(model, optimizer)


def train(case: Case, model, optimizer, dropin, steps: range) -> None:
    for step in steps:
        x, y = batch(step)
        loss = F.cross_entropy(model(x), y) + case.loss(dropin)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        case.after(dropin, step, x)
        if (step + 1) % TASK == 0:
            case.task_end(dropin, model, step)


def saved(obj) -> object:
    """``obj`` through ``torch.save`` and ``torch.load(weights_only=True)``, as a file would be."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def resumed(case: Case, load_dropin: bool = True) -> nn.Module:
    """The loop run to STOP, its state saved, then a new model (of another init), optimizer
    and drop-in built, loaded and run to the end."""
    torch.manual_seed(11)
    model, optimizer, dropin = build(case, init_seed=0)
    train(case, model, optimizer, dropin, range(STOP))
    state = saved({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                   "dropin": dropin.state_dict(), "rng": torch.get_rng_state()})
    model, optimizer, dropin = build(case, init_seed=1)  # θ₀ of the wrong init until loaded
    model.load_state_dict(state["model"])
    if dropin is optimizer and not load_dropin:  # UPGD: torch.optim's state, not its generator's
        torch.optim.Optimizer.load_state_dict(optimizer, {k: v for k, v in state["optimizer"].items()
                                                          if k != "generator"})
    else:
        optimizer.load_state_dict(state["optimizer"])
    if load_dropin and dropin is not optimizer:
        dropin.load_state_dict(state["dropin"])
    torch.set_rng_state(state["rng"])
    train(case, model, optimizer, dropin, range(STOP, STEPS))
    return model


def straight(case: Case) -> nn.Module:
    torch.manual_seed(11)
    model, optimizer, dropin = build(case, init_seed=0)
    train(case, model, optimizer, dropin, range(STEPS))
    return model


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(),
                                                 strict=True))


@pytest.mark.parametrize("name", list(CASES))
def test_a_resumed_loop_ends_where_the_uninterrupted_one_does(name):
    case = CASES[name]
    assert same(resumed(case), straight(case))


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.stateful])
def test_without_the_drop_ins_state_the_resumed_loop_goes_elsewhere(name):
    case = CASES[name]
    assert not same(resumed(case, load_dropin=False), straight(case))


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if not c.stateful and n != "UPGD"])
def test_a_drop_in_whose_constructor_rebuilds_it_has_an_empty_state(name):
    case = CASES[name]
    _, _, dropin = build(case, init_seed=0)
    assert dropin.state_dict() == {}
    dropin.load_state_dict({})


def test_every_public_drop_in_has_a_state_dict_and_a_case_here():
    public = {name for name in plasticlab.__all__
              if isinstance(getattr(plasticlab, name), type)
              and name not in ("Regularizer", "Monitor")}
    assert public <= set(CASES), public - set(CASES)
    for name in public | {"ContinualBackpropSequential", "ReDoSequential"}:
        cls = getattr(plasticlab, name, None) or {"ContinualBackpropSequential": ContinualBackpropSequential,
                                                  "ReDoSequential": ReDoSequential}[name]
        assert callable(cls.state_dict) and callable(cls.load_state_dict)


def test_l2_init_state_from_another_model_is_refused_naming_the_entry_and_writes_nothing():
    reg = plasticlab.L2Init(model_of(0), 1e-2)
    other = plasticlab.L2Init(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)), 1e-2)
    before = [t.clone() for t in reg.initial]
    with pytest.raises(ValueError, match=r"L2Init.load_state_dict: initial holds 6 entries here; "
                                         r"the state holds 4 entries"):
        reg.load_state_dict(other.state_dict())
    wider = plasticlab.L2Init(model_of(0), 1e-2).state_dict()
    wider["initial"][-1] = torch.zeros(5)  # the last entry is wrong; the first ones are fine
    with pytest.raises(ValueError, match=r"initial\[5\] is shaped \(4,\) here; the state holds a "
                                         r"tensor shaped \(5,\)"):
        reg.load_state_dict(wider)
    assert all(torch.equal(a, b) for a, b in zip(reg.initial, before, strict=True))


def test_a_state_with_missing_or_unknown_keys_is_refused():
    ewc = plasticlab.EWC(model_of(0), 1.0)
    state = ewc.state_dict()
    state["tasks_done"] = state.pop("tasks")
    with pytest.raises(ValueError, match=r"missing \['tasks'\]; unknown \['tasks_done'\]"):
        ewc.load_state_dict(state)
    with pytest.raises(ValueError, match="was it saved by another drop-in"):
        plasticlab.L2(model_of(0), 1.0).load_state_dict(plasticlab.L2Init(model_of(0), 1.0).state_dict())


def test_a_count_does_not_load_from_a_flag_or_a_generator_from_a_tensor():
    swr = plasticlab.SWR(model_of(0), period=3)
    state = swr.state_dict()
    with pytest.raises(ValueError, match=r"steps is a int here; the state holds True"):
        swr.load_state_dict({**state, "steps": True})
    with pytest.raises(ValueError, match=r"generator is a random generator here; the state holds "
                                         r"a tensor shaped \(3,\)"):
        swr.load_state_dict({**state, "generator": torch.zeros(3, dtype=torch.uint8)})


def test_unit_resetting_drop_ins_refuse_a_state_of_other_hidden_layers():
    model = model_of(0)
    cbp = ContinualBackpropSequential(model, PlasticlabAdam(model.parameters(), lr=1e-3))
    wide = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4))
    other = ContinualBackpropSequential(wide, PlasticlabAdam(wide.parameters(), lr=1e-3))
    with pytest.raises(ValueError, match=r"hidden layers of \[32, 16\] units, this model's have \[16, 16\]"):
        cbp.load_state_dict(other.state_dict())


def test_upgd_with_a_generator_refuses_a_state_saved_without_one():
    model = model_of(0)
    with pytest.raises(ValueError, match="saved by a UPGD without a generator and this one has one"):
        _upgd(model).load_state_dict(plasticlab.UPGD(model.parameters()).state_dict())


def test_a_drop_ins_state_loads_into_the_dtype_of_its_own_tensors():
    reg = plasticlab.L2Init(model_of(0).double(), 1e-2)
    reg.load_state_dict(plasticlab.L2Init(model_of(1), 1e-2).state_dict())
    assert reg.initial[0].dtype == torch.float64
    assert torch.equal(reg.initial[0], model_of(1)[0].weight.double())


# --- the Monitor ---------------------------------------------------------------------------------

def monitored(init_seed: int):
    model = model_of(init_seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-1)
    probe = torch.randn(32, 6, generator=torch.Generator().manual_seed(9))
    monitor = plasticlab.Monitor(
        model, probe, every=2, measurements=("churn", "distance_to_init"),
        trainability=plasticlab.monitor.TrainabilityProbe(every=6, steps=2),
        thresholds=plasticlab.monitor.Thresholds(dead_fraction=0.05, srank_drop=0.05, warmup=0,
                                                 weight_drift=0.2))
    return model, optimizer, monitor


def watch(model, optimizer, monitor, steps: range) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", plasticlab.monitor.PlasticityWarning)  # kept in .alerts
        for step in steps:
            x, y = batch(step)
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step()


def monitor_resumed(load_monitor: bool = True):
    model, optimizer, monitor = monitored(0)
    watch(model, optimizer, monitor, range(STOP))
    state = saved({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                   "monitor": monitor.state_dict()})
    monitor.close()
    model, optimizer, monitor = monitored(1)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if load_monitor:
        monitor.load_state_dict(state["monitor"])
    watch(model, optimizer, monitor, range(STOP, STEPS))
    return monitor


def test_a_resumed_monitor_gives_the_history_and_alerts_of_the_uninterrupted_one():
    model, optimizer, monitor = monitored(0)
    watch(model, optimizer, monitor, range(STEPS))
    resumed_monitor = monitor_resumed()
    assert len(monitor.history) == STEPS // 2 and monitor.alerts
    assert resumed_monitor.history.state_dict() == monitor.history.state_dict()
    assert resumed_monitor.alerts == monitor.alerts
    assert resumed_monitor.state_dict()["checks"] == monitor.state_dict()["checks"]
    without = monitor_resumed(load_monitor=False)
    assert without.history[0]["step"] == 2  # numbered from 0 again, drift from the trained weights
    assert without.history.state_dict() != monitor.history.state_dict()[STOP // 2:]


def test_a_monitor_refuses_the_state_of_one_of_other_layers_or_measurements():
    model, _, monitor = monitored(0)
    other = plasticlab.Monitor(model, torch.randn(4, 6), layers=["1"], thresholds=None)
    with pytest.raises(ValueError, match=r"saved by a monitor of layers \['1'\], this one watches"):
        monitor.load_state_dict(other.state_dict())
    plain = plasticlab.Monitor(model, torch.randn(4, 6), thresholds=None)
    with pytest.raises(ValueError, match="without churn among its measurements"):
        monitor.load_state_dict(plain.state_dict())
    narrow = plasticlab.Monitor(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                                              nn.Linear(16, 3)), torch.randn(4, 6), thresholds=None)
    before = monitor.state_dict()
    with pytest.raises(ValueError, match=r"θ₀ is of parameters shaped .*\(3, 16\).* this model's are"):
        plain.load_state_dict(narrow.state_dict())
    assert torch.equal(monitor.state_dict()["baseline"]["initial"][0], before["baseline"]["initial"][0])
