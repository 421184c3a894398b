"""The switches that run Continual Backprop and ReDo as the L2 Init authors' code does (SPEC §9,
docs/methods-reference-modes.md): AdamGnT against its formula written out literally, Kaiming
replacement draws, ReDo's start-of-step schedule against a literal copy of the authors' loop,
untouched optimizer state, member independence and exact resume."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import plasticlab.methods
import test_cbp
from conftest import count_host_syncs
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import MethodContext
from plasticlab.methods.cbp import ContinualBackprop
from plasticlab.methods.redo import ReDo
from plasticlab.nets import build_network
from plasticlab.nets.layers import EnsembleConv2d, EnsembleLinear
from plasticlab.nets.network import Block, EnsembleNet
from plasticlab.optim import SGD, Adam
from plasticlab.optim.adam_gnt import AdamGnT
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8

# --- helpers -----------------------------------------------------------------------------------


def mlp(K: int, seeds=None) -> EnsembleNet:
    """test_cbp's hand-sized MLP with two hidden layers: 6 → 10 → 10 → 3."""
    return test_cbp.mlp(K, sizes=(6, 10, 10, 3), seeds=seeds)


def convnet(K: int) -> EnsembleNet:
    """conv(2→4, 3×3) → ReLU → flatten → Linear(100→3), on 2×7×7 inputs."""
    blocks = [Block(EnsembleConv2d(K, 2, 4, 3, kernel="loop"), activation="relu", flatten=True),
              Block(EnsembleLinear(K, 4 * 5 * 5, 3))]
    net = EnsembleNet(blocks, K)
    net.initialize([torch_generator(s, "init") for s in range(K)])
    return net


def make_cbp(net, optimizer, seeds=None, **hp) -> ContinualBackprop:
    params = {"replacement_rate": 0.1, "maturity": 0, "decay": 0.9, "utility": "adaptable_contribution",
              "adam_variant": "standard", "replacement_init": "network"}
    params.update(hp)
    K = net.members
    for key in ("replacement_rate", "maturity", "decay"):  # [K] tensors, as the engine passes them
        params[key] = torch.tensor([params[key]] * K, dtype=torch.float32)
    context = MethodContext(list(seeds or range(K)), torch.device("cpu"))
    return ContinualBackprop(net, optimizer, params, context)


def make_redo(net, optimizer, *, period, threshold, **hp) -> ReDo:
    K = net.members
    params = {"period": period, "threshold": torch.full((K,), float(threshold)), "reinit": "initial",
              "schedule": "reference", "reset_optimizer": False, "layer_order": "per_layer"}
    params.update(hp)
    return ReDo(net, optimizer, params, MethodContext(list(range(K)), torch.device("cpu")))


def train_step(net, optimizer, x, y):
    """The engine's autograd step: forward with features, Σₖ mean CE, backward, update."""
    logits, feats = net(x, return_features=True)
    optimizer.zero_grad()
    K, B = y.shape
    F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(K, B).mean(1).sum().backward()
    optimizer.step()
    return [f.detach() for f in feats]


SHORT = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 30,
         "problem_params": {"examples_per_task": 480}}

# --- AdamGnT ---------------------------------------------------------------------------------------


class LiteralAdamGnT:
    """SPEC §9's AdamGnT written out per element in float64: its own θ, m, v and step count t."""

    def __init__(self, params, lr):
        self.lr = lr
        self.theta = [p.detach().double().clone() for p in params]
        self.m = [torch.zeros_like(t) for t in self.theta]
        self.v = [torch.zeros_like(t) for t in self.theta]
        self.t = [torch.zeros_like(t) for t in self.theta]

    def step(self, grads):
        for theta, m, v, t, g in zip(self.theta, self.m, self.v, self.t, grads, strict=True):
            g = g.double()
            t += 1
            m.copy_(BETA1 * m + (1 - BETA1) * g)
            v.copy_(BETA2 * v + (1 - BETA2) * g * g)
            theta -= self.lr * (1 - BETA2 ** t) * m / (v.sqrt() + EPS)

    def restart(self, i, mask):
        for state in (self.m[i], self.v[i], self.t[i]):
            state.masked_fill_(mask.expand_as(state), 0.0)


def test_cbp_adam_variant_reference_follows_the_literal_adamgnt_formula_with_restarts():
    torch.manual_seed(0)
    K, lr, steps = 2, 1e-2, 300
    net = mlp(K, seeds=[3, 4])
    cbp = make_cbp(net, Adam(list(net.parameters()), lr=lr), seeds=[3, 4], adam_variant="reference",
                   replacement_rate=0.02, maturity=10)
    assert isinstance(cbp.optimizer, AdamGnT)
    assert [id(p) for p in cbp.optimizer.params] == [id(p) for p in net.parameters()]
    literal = LiteralAdamGnT(list(net.parameters()), lr)
    params = list(net.parameters())
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(1, steps + 1):
        x, y = torch.randn(K, 8, 6, generator=gen), torch.randint(0, 3, (K, 8), generator=gen)
        feats = train_step(net, cbp.optimizer, x, y)
        literal.step([p.grad for p in params])
        before = [p.detach().clone() for p in params]
        cbp.after_step(feats, x, step)
        # What CBP changed (fresh rows, zero columns, the next layer's bias), applied to the
        # literal θ; and the literal restart of every element of a replaced unit.
        for theta, p, b in zip(literal.theta, params, before, strict=True):
            theta += (p.detach() - b).double()
        for layer, stats in enumerate(cbp.core.stats):
            replaced = stats.age == 0  # [K, U]: replaced at this step
            literal.restart(2 * layer, replaced[:, :, None])  # incoming weights
            literal.restart(2 * layer + 1, replaced)  # bias
            literal.restart(2 * layer + 2, replaced[:, None, :])  # outgoing weights
        for theta, p in zip(literal.theta, params, strict=True):
            worst = max(worst, (theta - p.detach().double()).abs().max().item())
    assert all((r > 3).all() for r in cbp.replacements)  # restarts did happen, in both layers
    for t, counts in zip(literal.t, cbp.optimizer.element_steps, strict=True):
        if counts is not None:
            assert torch.equal(counts.double(), t)
    assert literal.t[0].min() < 50 and literal.t[0].max() == steps  # fresh and old elements
    assert worst < 2e-6, worst


def test_adamgnt_first_step_is_far_shorter_than_adams():
    # t = 1: m = (1−β₁)g, v = (1−β₂)g², step = α(1−β₂)(1−β₁)g / (√(1−β₂)|g| + ε).
    theta = torch.zeros(3, 5)
    g = torch.randn(3, 5)
    opt = AdamGnT([theta], lr=0.1)
    theta.grad = g
    opt.step()
    expected = -0.1 * (1 - BETA2) * (1 - BETA1) * g / (math.sqrt(1 - BETA2) * g.abs() + EPS)
    torch.testing.assert_close(theta, expected, rtol=1e-6, atol=0)


def test_adamgnt_member_k_of_a_stack_equals_member_k_alone_bit_for_bit_with_restarts():
    # Slabs of 7·5 = 35 elements: members fall at every offset of a vector loop.
    K, steps = 3, 200
    gen = torch.Generator().manual_seed(2)
    start = torch.randn(K, 7, 5, generator=gen)
    together = start.clone()
    alone = [start[k:k + 1].clone() for k in range(K)]
    opt = AdamGnT([together], lr=1e-2)
    opts = [AdamGnT([a], lr=1e-2) for a in alone]
    for t in range(steps):
        g = torch.randn(K, 7, 5, generator=gen)
        together.grad = g.clone()
        opt.step()
        for k in range(K):
            alone[k].grad = g[k:k + 1].clone()
            opts[k].step()
        if t % 37 == 5:  # restart a row pattern that differs per member
            rows = torch.rand(K, 7, 1, generator=gen) < 0.3
            opt.reset(0, rows)
            for k in range(K):
                opts[k].reset(0, rows[k:k + 1])
    for k in range(K):
        assert torch.equal(together[k:k + 1], alone[k])


def test_adamgnt_state_dict_round_trip_continues_identically():
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(2, 4, 3, generator=gen), torch.zeros(2, 4, 3)
    opt = AdamGnT([a], lr=1e-2)
    grads = [torch.randn(2, 4, 3, generator=gen) for _ in range(20)]
    for g in grads[:10]:
        a.grad = g
        opt.step()
    opt.reset(0, torch.tensor([True, False])[:, None, None])
    b.copy_(a)
    copy = AdamGnT([b], lr=1.0)
    copy.load_state_dict(opt.state_dict())
    for g in grads[10:]:
        a.grad, b.grad = g.clone(), g.clone()
        opt.step()
        copy.step()
    assert torch.equal(a, b)


def test_adamgnt_refuses_a_non_positive_step_size():
    with pytest.raises(ValueError, match="lr must be > 0"):
        AdamGnT([torch.zeros(2)], lr=0.0)


# --- CBP's switches -----------------------------------------------------------------------------


def test_standard_keeps_the_adam_it_is_handed_and_reference_with_sgd_changes_nothing():
    net = mlp(1)
    adam = Adam(list(net.parameters()), lr=1e-3)
    assert make_cbp(net, adam).optimizer is adam
    assert make_cbp(net, adam).notes() == {}
    sgd = SGD(list(net.parameters()), lr=1e-2)
    cbp = make_cbp(net, sgd, adam_variant="reference")
    assert cbp.optimizer is sgd and cbp.core.optimizer is sgd
    assert "no effect with SGD" in cbp.notes()["adam_variant"]


def test_reference_refuses_an_adam_that_has_already_stepped():
    net = mlp(1)
    adam = Adam(list(net.parameters()), lr=1e-3)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    adam.step()
    with pytest.raises(ValueError, match="already taken steps"):
        make_cbp(net, adam, adam_variant="reference")


@pytest.mark.parametrize("method,key", [("cbp", "adam_variant"), ("cbp", "replacement_init"),
                                        ("redo", "schedule"), ("redo", "layer_order")])
def test_an_unknown_choice_is_an_error_listing_the_valid_ones(method, key):
    with pytest.raises(ValueError, match=f"{key} must be one of .*, .*got 'nonsense'"):
        resolve_config({"problem": "permuted_mnist", "method": method, "params": {key: "nonsense"}})


def _new_rows(cbp, net, x, steps):
    """Run CBP's after-step ``steps`` times on ``x``; every replaced unit's fresh incoming weights."""
    rows, w = [], net.blocks[0].affine.weight
    for t in range(steps):
        cbp.after_step(net(x, return_features=True)[1], x, t + 1)
        replaced = cbp.core.stats[0].age == 0
        rows.append(w[replaced].detach().clone())
        assert (net.blocks[0].affine.bias[replaced] == 0).all()
    return torch.cat(rows)


def test_kaiming_replacement_draws_linear_rows_from_the_relu_bound_with_the_members_generator():
    seeds = [5, 6]
    net = mlp(2, seeds=seeds)
    cbp = make_cbp(net, Adam(list(net.parameters()), lr=1e-3), seeds=seeds, replacement_init="kaiming",
                   replacement_rate=0.3, maturity=0)
    x = torch.randn(2, 8, 6)
    rows = _new_rows(cbp, net, x, 10)
    fan_in = 6
    assert len(rows) == 2 * 10 * 3
    assert rows.abs().max() <= math.sqrt(6 / fan_in)
    assert rows.abs().max() > 1 / math.sqrt(fan_in)  # beyond what the default init can draw
    # The first replacement of member 1: the first rows of its own stream for layer 0.
    net2 = mlp(2, seeds=seeds)
    cbp2 = make_cbp(net2, Adam(list(net2.parameters()), lr=1e-3), seeds=seeds, replacement_init="kaiming",
                    replacement_rate=0.3, maturity=0)
    cbp2.after_step(net2(x, return_features=True)[1], x, 1)
    replaced = (cbp2.core.stats[0].age[1] == 0).nonzero().flatten()
    g = torch_generator(seeds[1], "method", "cbp", 0)
    drawn = (torch.rand((3, fan_in), generator=g) * 2 - 1) * math.sqrt(6 / fan_in)
    got = net2.blocks[0].affine.weight[1, replaced].detach()
    assert sorted(got.flatten().tolist()) == pytest.approx(sorted(drawn.flatten().tolist()), abs=0)


def test_kaiming_replacement_of_a_conv_channel_uses_fan_in_channels_times_kernel():
    net = convnet(1)
    cbp = make_cbp(net, Adam(list(net.parameters()), lr=1e-3), replacement_init="kaiming",
                   replacement_rate=0.5, maturity=0)
    x = torch.randn(1, 4, 2, 7, 7)
    rows = _new_rows(cbp, net, x, 20)  # [n, 2, 3, 3]
    fan_in = 2 * 3 * 3
    assert len(rows) == 40
    assert rows.abs().max() <= math.sqrt(6 / fan_in)
    assert rows.abs().max() > 1 / math.sqrt(fan_in)


def test_network_replacement_stays_within_the_default_bound():
    net = mlp(1)
    cbp = make_cbp(net, Adam(list(net.parameters()), lr=1e-3), replacement_rate=0.3, maturity=0)
    rows = _new_rows(cbp, net, torch.randn(1, 8, 6), 10)
    assert rows.abs().max() <= 1 / math.sqrt(6)


class RecordingCBP(ContinualBackprop):
    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingCBP.instances.append(self)


def test_the_engine_trains_with_adamgnt_under_adam_variant_reference(data_dir, monkeypatch):
    monkeypatch.setitem(plasticlab.methods.METHODS, "cbp", RecordingCBP)
    RecordingCBP.instances = []
    params = {"replacement_rate": 1e-2, "maturity": 5}
    reference = resolve_config({**SHORT, "method": "cbp", "params": {**params, "adam_variant": "reference"}})
    standard = resolve_config({**SHORT, "method": "cbp", "params": params})
    a = train_ensemble(Members.from_config(reference, [0]), data_dir=data_dir, measure=False)
    b = train_ensemble(Members.from_config(standard, [0]), data_dir=data_dir, measure=False)
    gnt, adam = (m.optimizer for m in RecordingCBP.instances)
    assert isinstance(gnt, AdamGnT) and gnt.step_counts == [60] * 6
    assert isinstance(adam, Adam)
    assert a.members[0].task_online_accuracy != b.members[0].task_online_accuracy


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_member_k_of_a_reference_cbp_ensemble_equals_seed_k_alone(data_dir, optimizer):
    cfg = resolve_config({**SHORT, "method": "cbp", "optimizer": optimizer,
                          "lr": 1e-3 if optimizer == "adam" else 1e-2,
                          "params": {"replacement_rate": 1e-2, "maturity": 5, "adam_variant": "reference",
                                     "replacement_init": "kaiming"}})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    for k in (0, 2):
        alone = train_ensemble(Members.from_config(cfg, [k]), data_dir=data_dir, measure=False)
        assert together.members[k].task_online_accuracy == alone.members[0].task_online_accuracy


# --- ReDo's switches ----------------------------------------------------------------------------


class AuthorsReDo:
    """The L2 Init authors' ReDo loop, written out literally for a plain MLP: at the start of a
    step whose count is a positive multiple of the period, score each hidden unit on the
    activations of the network's most recent forward pass, E|h| / mean E|h|, and for every
    unit with a score ≤ τ — layer by layer — copy its incoming row and bias from θ₀ and zero its
    column in the next layer; the optimizer is not touched."""

    def __init__(self, net, optimizer, period, tau):
        self.net, self.optimizer, self.period, self.tau = net, optimizer, period, tau
        self.layers = [b.affine for b in net.blocks]
        self.theta0 = [(layer.weight.detach().clone(), layer.bias.detach().clone()) for layer in self.layers]
        self.step_count, self.activations, self.recycled_at = 0, None, []

    @torch.no_grad()
    def recycle(self):
        for i, h in enumerate(self.activations):
            for k in range(h.shape[0]):
                expected = h[k].abs().mean(dim=0)
                scores = expected / expected.mean()
                for n in range(len(scores)):
                    if scores[n] <= self.tau:
                        self.layers[i].weight[k, n] = self.theta0[i][0][k, n]
                        self.layers[i].bias[k, n] = self.theta0[i][1][k, n]
                        self.layers[i + 1].weight[k, :, n] = 0.0
        self.recycled_at.append(self.step_count)

    def step(self, x, y):
        if self.step_count % self.period == 0 and self.step_count > 0:
            self.recycle()
        feats = train_step(self.net, self.optimizer, x, y)
        self.activations = feats  # kept from this forward pass
        self.step_count += 1


class LoggingReDo(ReDo):
    """ReDo that notes the step count each time it recycles."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recycled_at, self._now = [], None

    def before_step(self, step):
        self._now = step
        super().before_step(step)

    def recycle(self, activity, step=None):
        self.recycled_at.append(self._now)
        return super().recycle(activity, step)


def test_reference_schedule_recycles_as_the_authors_loop_at_the_start_of_the_right_steps():
    K, period, steps = 2, 7, 42
    ours, theirs = mlp(K, seeds=[8, 9]), mlp(K, seeds=[8, 9])
    opt_ours, opt_theirs = Adam(list(ours.parameters()), lr=1e-2), Adam(list(theirs.parameters()), lr=1e-2)
    redo = LoggingReDo(ours, opt_ours, {"period": period, "threshold": torch.full((K,), 0.8),
                                        "reinit": "initial", "schedule": "reference",
                                        "reset_optimizer": False, "layer_order": "per_layer"},
                       MethodContext([0, 1], torch.device("cpu")))
    assert ReDo.needs(redo.hp).features and ReDo.needs(redo.hp).before_step
    authors = AuthorsReDo(theirs, opt_theirs, period, 0.8)
    gen = torch.Generator().manual_seed(4)
    for step in range(steps):  # the engine's order of calls
        x, y = torch.randn(K, 8, 6, generator=gen), torch.randint(0, 3, (K, 8), generator=gen)
        redo.before_step(step)
        feats = train_step(ours, opt_ours, x, y)
        redo.after_step(feats, x, step + 1)
        authors.step(x, y)
        for p, q in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(p, q), step
    assert redo.recycled_at == authors.recycled_at == [7, 14, 21, 28, 35]
    assert redo.kept_activity is not None  # step 42's activity, for a step 43 that never comes


def test_reference_schedule_differs_from_the_default_which_scores_a_fresh_forward_after_the_update():
    K, period = 1, 5
    nets = [mlp(K, seeds=[2]) for _ in range(2)]
    opts = [Adam(list(n.parameters()), lr=5e-2) for n in nets]
    redos = [make_redo(n, o, period=period, threshold=0.8, schedule=s)
             for n, o, s in zip(nets, opts, ("reference", "after_step"), strict=True)]
    gen = torch.Generator().manual_seed(5)
    for step in range(11):
        x, y = torch.randn(K, 8, 6, generator=gen), torch.randint(0, 3, (K, 8), generator=gen)
        for net, opt, redo in zip(nets, opts, redos, strict=True):
            redo.before_step(step)
            redo.after_step(train_step(net, opt, x, y), x, step + 1)
    assert any(not torch.equal(p, q) for p, q in zip(*(n.parameters() for n in nets), strict=True))


def test_reset_optimizer_false_leaves_every_adam_moment_as_it_was():
    torch.manual_seed(0)
    net = mlp(1)
    opt = Adam(list(net.parameters()), lr=1e-2)
    redo = make_redo(net, opt, period=1, threshold=10.0, schedule="after_step")  # every unit dormant
    x, y = torch.randn(1, 8, 6), torch.randint(0, 3, (1, 8))
    train_step(net, opt, x, y)
    moments = [t.clone() for t in opt.exp_avg + opt.exp_avg_sq]
    before = [p.detach().clone() for p in net.parameters()]
    redo.after_step([], x, 1)
    assert redo.last_recycled.tolist() == [20]
    assert all(torch.equal(a, b) for a, b in zip(opt.exp_avg + opt.exp_avg_sq, moments, strict=True))
    assert not torch.equal(net.blocks[1].affine.weight, before[2])
    # The default zeroes them.
    net = mlp(1)
    opt = Adam(list(net.parameters()), lr=1e-2)
    redo = make_redo(net, opt, period=1, threshold=10.0, schedule="after_step", reset_optimizer=True)
    train_step(net, opt, x, y)
    redo.after_step([], x, 1)
    assert all((m == 0).all() for m in opt.exp_avg[:5]) and (opt.exp_avg[5] != 0).all()


def test_per_layer_order_keeps_theta0_where_two_recycled_units_meet_and_incoming_first_zero():
    results = {}
    for order in ("incoming_first", "per_layer"):
        net = mlp(1)
        theta0 = net.blocks[1].affine.weight.detach().clone()
        redo = make_redo(net, SGD(list(net.parameters()), lr=0.1), period=1, threshold=0.0,
                         schedule="after_step", layer_order=order)
        activity = [torch.ones(1, 10), torch.ones(1, 10)]
        activity[0][0, 2] = 0.0  # unit 2 of layer 0 and unit 4 of layer 1 are dormant
        activity[1][0, 4] = 0.0
        redo.recycle(activity)
        w = net.blocks[1].affine.weight
        results[order] = w[0, 4, 2].item()
        assert (w[0, :4, 2] == 0).all() and (w[0, 5:, 2] == 0).all()  # the rest of column 2
        assert torch.equal(w[0, 4, :2], theta0[0, 4, :2])
    assert results["incoming_first"] == 0.0
    assert results["per_layer"] == theta0[0, 4, 2].item() != 0.0


def test_reference_schedule_needs_the_steps_features():
    net = mlp(1)
    redo = make_redo(net, SGD(list(net.parameters()), lr=0.1), period=2, threshold=0.0)
    redo.after_step([], torch.randn(1, 4, 6), 1)  # not a recycle step: nothing needed
    with pytest.raises(ValueError, match="needs its hidden features"):
        redo.after_step([], torch.randn(1, 4, 6), 2)


def test_reference_schedule_makes_no_host_synchronisation(monkeypatch):
    generators = [torch_generator(s, "init") for s in range(3)]
    net = build_network("mlp", 3, (6,), 3, width=0.1, generators=generators)
    opt = Adam(list(net.parameters()), lr=1e-2)
    redo = make_redo(net, opt, period=5, threshold=0.5)
    x = torch.randn(3, 16, 6)
    feats = net(x, return_features=True)[1]
    calls = count_host_syncs(monkeypatch)
    for step in range(50):
        redo.before_step(step)
        redo.after_step([f.detach() for f in feats], x, step + 1)
    monkeypatch.undo()
    assert calls["n"] == 0, calls
    assert redo.last_recycled.sum() > 0


class EngineLoggingReDo(LoggingReDo):
    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        EngineLoggingReDo.instances.append(self)


AUTHORS_REDO = {"period": 30, "threshold": 0.1, "schedule": "reference", "reset_optimizer": False,
                "reinit": "initial", "layer_order": "per_layer"}


def test_in_the_engine_a_task_long_period_recycles_at_each_next_tasks_first_step(data_dir, monkeypatch):
    monkeypatch.setitem(plasticlab.methods.METHODS, "redo", EngineLoggingReDo)
    EngineLoggingReDo.instances = []
    cfg = resolve_config({**SHORT, "tasks": 3, "method": "redo", "params": AUTHORS_REDO})
    train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, measure=False)
    (redo,) = EngineLoggingReDo.instances
    assert redo.recycled_at == [30, 60]  # not after the last step: no step follows it
    assert redo.last_recycled.sum() > 0


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_member_k_of_a_reference_redo_ensemble_equals_seed_k_alone(data_dir, optimizer):
    cfg = resolve_config({**SHORT, "method": "redo", "optimizer": optimizer,
                          "lr": 1e-3 if optimizer == "adam" else 1e-2,
                          "params": {**AUTHORS_REDO, "period": 10}})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    for k in (0, 2):
        alone = train_ensemble(Members.from_config(cfg, [k]), data_dir=data_dir, measure=False)
        assert together.members[k].task_online_accuracy == alone.members[0].task_online_accuracy


# --- exact resume ---------------------------------------------------------------------------------


class Crash(Exception):
    pass


def _crash_after_first_task(task, accuracies):
    if task == 0:
        raise Crash


@pytest.mark.parametrize("method,params", [
    ("cbp", {"replacement_rate": 5e-2, "maturity": 5, "adam_variant": "reference",
             "replacement_init": "kaiming"}),
    ("redo", AUTHORS_REDO),  # the activity kept at task 0's last step is in the checkpoint
])
def test_a_reference_mode_resumed_from_its_checkpoint_ends_as_the_whole_run(data_dir, tmp_path, method,
                                                                           params):
    cfg = resolve_config({**SHORT, "tasks": 3, "method": method, "params": params})
    whole = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0, 1]),
                       data_dir=data_dir, checkpoint=path, on_task_end=_crash_after_first_task)
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path)
    for a, b in zip(whole.members, resumed.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


@pytest.mark.parametrize("method,explicit", [
    ("cbp", {"adam_variant": "standard", "replacement_init": "network"}),
    ("redo", {"schedule": "after_step", "reset_optimizer": True, "layer_order": "incoming_first"}),
])
def test_the_defaults_are_the_behaviour_before_the_switches(data_dir, method, explicit):
    params = ({"replacement_rate": 1e-2, "maturity": 5} if method == "cbp"
              else {"period": 10, "threshold": 0.1})
    plain = resolve_config({**SHORT, "method": method, "params": params})
    spelt = resolve_config({**SHORT, "method": method, "params": {**params, **explicit}})
    assert {k: plain.params[k] for k in explicit} == explicit
    a = train_ensemble(Members.from_config(plain, [0]), data_dir=data_dir, measure=False)
    b = train_ensemble(Members.from_config(spelt, [0]), data_dir=data_dir, measure=False)
    assert a.members[0].task_online_accuracy == b.members[0].task_online_accuracy


def test_the_sequential_dropin_takes_adamgnt_and_kaiming_draws():
    from torch import nn

    from plasticlab.methods.cbp import ContinualBackpropSequential

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = AdamGnT(model.parameters(), lr=1e-2)
    cbp = ContinualBackpropSequential(model, opt, replacement_rate=0.2, maturity=2, init="kaiming_uniform")
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    for _ in range(10):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cbp.step()
    assert cbp.replacements[0] > 0
    steps = opt.element_steps[0]
    assert steps is not None and steps.min() < 10 and steps.max() == 10
    assert torch.isfinite(F.cross_entropy(model(x), y))


@pytest.mark.cuda
def test_reference_modes_make_no_device_synchronisation_on_cuda():
    def cuda_mlp():
        generators = [torch_generator(s, "init") for s in range(3)]
        return build_network("mlp", 3, (784,), 10, generators=generators).cuda()

    net, net2 = cuda_mlp(), cuda_mlp()
    cbp = make_cbp(net, Adam(list(net.parameters()), lr=1e-3), adam_variant="reference",
                   replacement_init="kaiming", replacement_rate=0.05, maturity=2)
    opt2 = Adam(list(net2.parameters()), lr=1e-3)
    hp = {**AUTHORS_REDO, "period": 5, "threshold": torch.full((3,), 0.5, device="cuda")}
    redo = ReDo(net2, opt2, hp, MethodContext([0, 1, 2], torch.device("cuda")))
    x, y = torch.randn(3, 16, 784, device="cuda"), torch.randint(0, 10, (3, 16), device="cuda")

    def no_sync(call, *args):
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return call(*args)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    for step in range(1, 30):
        for model, opt in ((net, cbp.optimizer), (net2, opt2)):
            logits, feats = model(x, return_features=True)
            opt.zero_grad()
            F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
            if opt is cbp.optimizer:
                no_sync(opt.step)  # AdamGnT
                no_sync(cbp.after_step, [f.detach() for f in feats], x, step)
            else:
                opt.step()
                no_sync(redo.after_step, [f.detach() for f in feats], x, step)
                no_sync(redo.before_step, step)
    assert all((r > 0).all() for r in cbp.replacements)
    assert redo.last_recycled.sum().item() > 0
