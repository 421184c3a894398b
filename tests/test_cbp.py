"""Continual Backprop (SPEC §2.1): which units are replaced and when, what they are reset to,
the optimizer state, the utility formulas, member independence, the nn.Sequential drop-in, and
no per-step host synchronisation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import plasticlab.methods
from conftest import count_host_syncs
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import MethodContext
from plasticlab.methods.cbp import ContinualBackprop, ContinualBackpropSequential, ReplacementSchedule
from plasticlab.nets.layers import EnsembleConv2d, EnsembleLinear
from plasticlab.nets.network import Block, EnsembleNet, build_network
from plasticlab.optim import SGD, Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

# --- helpers ----------------------------------------------------------------------------------

def mlp(K: int, sizes=(6, 10, 3), seeds=None) -> EnsembleNet:
    """A hand-sized MLP: Linear(6→10) → ReLU → … → Linear(→3)."""
    blocks = [Block(EnsembleLinear(K, a, b), activation="relu")
              for a, b in zip(sizes[:-2], sizes[1:-1], strict=True)]
    blocks.append(Block(EnsembleLinear(K, sizes[-2], sizes[-1])))
    net = EnsembleNet(blocks, K)
    net.initialize([torch_generator(s, "init") for s in (seeds or range(K))])
    return net


def convnet(K: int, conv_to_conv: bool = False) -> EnsembleNet:
    """conv(2→4, 3×3) → ReLU [→ conv(4→5, 3×3) → ReLU] → flatten → Linear(→3), on 2×7×7 inputs."""
    if conv_to_conv:
        blocks = [Block(EnsembleConv2d(K, 2, 4, 3, kernel="loop"), activation="relu"),
                  Block(EnsembleConv2d(K, 4, 5, 3, kernel="loop"), activation="relu", flatten=True),
                  Block(EnsembleLinear(K, 5 * 3 * 3, 3))]
    else:
        blocks = [Block(EnsembleConv2d(K, 2, 4, 3, kernel="loop"), activation="relu", flatten=True),
                  Block(EnsembleLinear(K, 4 * 5 * 5, 3))]
    net = EnsembleNet(blocks, K)
    net.initialize([torch_generator(s, "init") for s in range(K)])
    return net


def make_cbp(net, optimizer=None, seeds=None, **hp) -> ContinualBackprop:
    params = {"replacement_rate": 0.1, "maturity": 0, "decay": 0.9, "utility": "adaptable_contribution"}
    params.update(hp)
    K = net.members
    for key in ("replacement_rate", "maturity", "decay"):  # [K] tensors, as the engine passes them
        value = params[key]
        params[key] = torch.tensor(value if isinstance(value, list) else [value] * K, dtype=torch.float32)
    optimizer = optimizer or Adam(list(net.parameters()), lr=1e-3)
    context = MethodContext(list(seeds or range(K)), torch.device("cpu"))
    return ContinualBackprop(net, optimizer, params, context)


def features_of(net, x):
    with torch.no_grad():
        return net(x, return_features=True)[1]


def reference_counts(units: int, rate: float, maturity: int, steps: int) -> list[int]:
    """Replacements per step by brute force over per-unit ages (which units does not matter
    for how many: any eligible unit restarts at age 0)."""
    ages, acc, out = [0] * units, 0.0, []
    for _ in range(steps):
        ages = [a + 1 for a in ages]
        eligible = [i for i, a in enumerate(ages) if a > maturity]
        acc += rate * len(eligible)
        n = math.floor(acc + 1e-9)
        acc -= n
        for i in eligible[:n]:
            ages[i] = 0
        out.append(n)
    return out


def replacements_per_step(cbp, net, steps: int, x=None, layer: int = 0) -> list[list[int]]:
    x = torch.randn(net.members, 4, 6) if x is None else x
    out = []
    for t in range(steps):
        cbp.after_step(features_of(net, x), x, t + 1)
        out.append(cbp.core.last_replaced[layer].tolist())
        # The host's count of eligible units is the device's (age > m).
        for s, stats in zip(cbp.core.schedules, cbp.core.stats, strict=True):
            device_eligible = (stats.age > cbp.core.maturity).sum(1).numpy()
            np.testing.assert_array_equal(s.eligible, device_eligible)
    return out


# --- which units, and when ------------------------------------------------------------------

def test_no_replacement_before_maturity_then_r_times_eligible_per_step():
    net = mlp(1)
    cbp = make_cbp(net, replacement_rate=0.3, maturity=3)
    counts = [c[0] for c in replacements_per_step(cbp, net, 12)]
    # Steps 1–3: nobody is older than 3. Step 4: 10 eligible → 3; step 5: 7 → 2.1 → 2 (carry .1);
    # step 6: 5 → 1.5 + .1 → 1 (carry .6); step 7: 4 → 1.2 + .6 → 1 (carry .8); step 8: the 3
    # units replaced at step 4 are mature again (age 4 > 3): 6 → 1.8 + .8 → 2 …
    assert counts[:8] == [0, 0, 0, 3, 2, 1, 1, 2]
    assert counts == reference_counts(10, 0.3, 3, 12)


def test_fractional_replacements_accumulate_across_steps():
    net = mlp(1)
    every_step = replacements_per_step(make_cbp(net, replacement_rate=0.3, maturity=0), net, 6)
    assert [c[0] for c in every_step] == [3] * 6  # maturity 0: a new unit is eligible the step after
    every_other = replacements_per_step(make_cbp(net, replacement_rate=0.05, maturity=0), net, 8)
    assert [c[0] for c in every_other] == [0, 1] * 4  # 0.05 · 10 = 0.5 per step


def test_rates_are_read_as_the_decimals_written_not_their_float32_rounding():
    # The engine passes r as float32: 0.7 → 0.699999988…, and 10 · that floors to 6, not 7.
    net = mlp(1)
    assert [c[0] for c in replacements_per_step(make_cbp(net, replacement_rate=0.7, maturity=0), net, 3)] \
        == [7, 7, 7]


def test_rates_summing_to_an_integer_in_decimal_replace_on_time():
    # 0.1 added ten times is 0.9999999999999999 in binary; the unit is still due at step 10.
    s = ReplacementSchedule(units=1, rate=[0.1], maturity=[0])
    assert [int(s.advance()[0]) for _ in range(10)] == [0] * 9 + [1]


def test_per_member_rates_and_maturities_give_each_member_its_own_counts():
    rates, maturities = [0.3, 0.05, 0.0, 0.2], [3, 0, 0, 5]
    net = mlp(4)
    cbp = make_cbp(net, replacement_rate=rates, maturity=maturities)
    counts = np.array(replacements_per_step(cbp, net, 20))
    for k in range(4):
        assert counts[:, k].tolist() == reference_counts(10, rates[k], maturities[k], 20)
    assert len({tuple(counts[:, k]) for k in range(4)}) == 4


def test_the_lowest_utility_eligible_unit_is_replaced_and_young_units_are_spared():
    net = mlp(2, sizes=(6, 10, 3))
    out = net.blocks[1].affine.weight
    with torch.no_grad():
        out.fill_(1.0)
        out[0, :, 7] = 0.01  # member 0: unit 7 contributes least, then unit 2
        out[0, :, 2] = 0.1
        out[1, :, 4] = 0.01  # member 1: unit 4, then unit 9
        out[1, :, 9] = 0.1
        net.blocks[0].affine.weight.fill_(0.1)
        net.blocks[0].affine.bias.fill_(0.0)
    cbp = make_cbp(net, replacement_rate=0.12, maturity=1)  # 10 or 9 eligible: one unit per step
    stats = cbp.core.stats[0]
    x = torch.rand(2, 8, 6) * torch.linspace(0.5, 2, 8).view(1, 8, 1)  # positive inputs: every unit active
    cbp.after_step(features_of(net, x), x, 1)
    assert not (stats.age == 0).any()  # age 1 is not > maturity 1
    cbp.after_step(features_of(net, x), x, 2)
    assert (stats.age == 0).nonzero().tolist() == [[0, 7], [1, 4]]
    # Next step the replaced unit has the lowest utility (its outgoing weights are 0), but it is
    # young (age 1): the next-lowest mature unit goes.
    cbp.after_step(features_of(net, x), x, 3)
    assert (stats.age == 0).nonzero().tolist() == [[0, 2], [1, 9]]


# --- what a replaced unit is reset to -------------------------------------------------------

def test_replaced_unit_gets_a_fresh_draw_zero_bias_zero_outgoing_and_zero_statistics():
    K, seeds = 2, [11, 12]
    net = mlp(K, sizes=(6, 10, 3), seeds=seeds)
    cbp = make_cbp(net, seeds=seeds, replacement_rate=0.1, maturity=0, decay=0.9)
    inc, nxt = net.blocks[0].affine, net.blocks[1].affine
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    x = torch.randn(K, 5, 6)
    feats = features_of(net, x)
    cbp.after_step(feats, x, 1)
    stats = cbp.core.stats[0]
    for k in range(K):
        (u,) = (stats.age[k] == 0).nonzero()[0].tolist()
        # torch_default: U(−1/√fan_in, 1/√fan_in) from member k's own generator for layer 0.
        g = torch_generator(seeds[k], "method", "cbp", 0)
        expected_row = (torch.rand((1, 6), generator=g) * 2 - 1) * (1 / math.sqrt(6))
        torch.testing.assert_close(inc.weight[k, u], expected_row[0], rtol=0, atol=0)
        assert inc.bias[k, u] == 0
        assert (nxt.weight[k, :, u] == 0).all()
        assert stats.utility[k, u] == 0 and stats.mean_activation[k, u] == 0
        # At age 1, f̂ = f̄/(1−d) is this batch's mean activation: the next bias absorbs W[:, u]·f̂_u.
        f_hat = feats[0][k, :, u].mean()
        torch.testing.assert_close(nxt.bias[k], before["blocks.1.affine.bias"][k]
                                   + before["blocks.1.affine.weight"][k, :, u] * f_hat)
        others = torch.arange(10) != u
        assert torch.equal(inc.weight[k, others], before["blocks.0.affine.weight"][k, others])
        assert torch.equal(nxt.weight[k][:, others], before["blocks.1.affine.weight"][k][:, others])


def test_conv_to_linear_zeroes_the_units_block_of_flattened_positions_without_bias_correction():
    net = convnet(1)
    cbp = make_cbp(net, replacement_rate=0.25, maturity=0)  # 4 channels · 0.25 = one per step
    nxt = net.blocks[1].affine
    bias_before, weight_before = nxt.bias.detach().clone(), nxt.weight.detach().clone()
    x = torch.randn(1, 3, 2, 7, 7)
    cbp.after_step(features_of(net, x), x, 1)
    (c,) = (cbp.core.stats[0].age[0] == 0).nonzero()[0].tolist()
    block = slice(c * 25, (c + 1) * 25)  # flatten is channel-major: 5×5 positions per channel
    assert (nxt.weight[0, :, block] == 0).all()
    keep = torch.ones(100, dtype=torch.bool)
    keep[block] = False
    assert torch.equal(nxt.weight[0][:, keep], weight_before[0][:, keep])
    assert torch.equal(nxt.bias, bias_before)
    assert net.blocks[0].affine.bias[0, c] == 0


def test_conv_to_conv_zeroes_the_units_input_channel_of_the_next_conv():
    net = convnet(1, conv_to_conv=True)
    cbp = make_cbp(net, replacement_rate=0.25, maturity=0)
    nxt = net.blocks[1].affine
    before = nxt.weight.detach().clone()
    x = torch.randn(1, 3, 2, 7, 7)
    cbp.after_step(features_of(net, x), x, 1)
    (c,) = (cbp.core.stats[0].age[0] == 0).nonzero()[0].tolist()
    # Layer 1 replaced one of its own filters this step too: its whole row of nxt.weight, drawn
    # after layer 0 zeroed its input channel c (layers go in order, as in the public code).
    (c1,) = (cbp.core.stats[1].age[0] == 0).nonzero()[0].tolist()
    rows = [o for o in range(5) if o != c1]
    others = [i for i in range(4) if i != c]
    assert (nxt.weight[0][rows][:, c] == 0).all()
    assert (nxt.weight[0, c1] != 0).all()
    assert torch.equal(nxt.weight[0][rows][:, others], before[0][rows][:, others])


# --- the optimizer state ----------------------------------------------------------------------

def test_adam_restarts_touched_elements_and_leaves_the_rest_as_without_replacement():
    torch.manual_seed(0)
    net, twin = mlp(2), mlp(2)
    lr = 1e-2
    opt, opt_twin = Adam(list(net.parameters()), lr=lr), Adam(list(twin.parameters()), lr=lr)
    cbp = make_cbp(net, opt, replacement_rate=0.1, maturity=3)
    x, y = torch.randn(2, 8, 6), torch.randint(0, 3, (2, 8))
    for t in range(4):  # three plain steps, then a replacement at step 4
        grads = []
        for model, o in ((net, opt), (twin, opt_twin)):
            logits, feats = model(x, return_features=True)
            o.zero_grad()
            F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            o.step()
        cbp.after_step([f.detach() for f in feats], x, t + 1)
    mask = cbp.core.stats[0].age == 0
    assert mask.sum(1).tolist() == [1, 1]
    w_in, b_in, w_out = (net.blocks[0].affine.weight, net.blocks[0].affine.bias, net.blocks[1].affine.weight)
    touched = {id(w_in): mask[:, :, None].expand_as(w_in), id(b_in): mask,
               id(w_out): mask[:, None, :].expand_as(w_out)}
    for i, p in enumerate(opt.params):
        if id(p) in touched:
            m = touched[id(p)]
            assert (opt.exp_avg[i][m] == 0).all() and (opt.exp_avg_sq[i][m] == 0).all()
            assert (opt.element_steps[i][m] == 0).all() and (opt.element_steps[i][~m] == 4).all()
    # One more update with the same arbitrary gradient G on both nets: touched elements take a
    # first Adam step, lr·sign(G); every other element moves as in the twin.
    G = [torch.randn_like(p) for p in net.parameters()]
    old = [p.detach().clone() for p in net.parameters()]
    old_twin = [p.detach().clone() for p in twin.parameters()]
    for model, o in ((net, opt), (twin, opt_twin)):
        for p, g in zip(model.parameters(), G, strict=True):
            p.grad = g.clone()
        o.step()
    for p, q, p0, q0, g in zip(net.parameters(), twin.parameters(), old, old_twin, G, strict=True):
        step, step_twin = p.detach() - p0, q.detach() - q0
        m = touched.get(id(p), torch.zeros_like(p, dtype=torch.bool))
        torch.testing.assert_close(step[m], -lr * torch.sign(g[m]), rtol=1e-5, atol=1e-9)
        # (To float rounding: Adam may update a tensor with per-element counts by another kernel.)
        torch.testing.assert_close(step[~m], step_twin[~m], rtol=1e-5, atol=1e-10)


def test_plain_sgd_needs_no_state_and_replaces_all_the_same():
    net = mlp(1)
    cbp = make_cbp(net, SGD(list(net.parameters()), lr=0.1), replacement_rate=0.3, maturity=0)
    assert [c[0] for c in replacements_per_step(cbp, net, 3)] == [3, 3, 3]


# --- the utility ---------------------------------------------------------------------------------

def _independent_utilities(w_in, w_out, batches, d, kind, conv=None):
    """u after len(batches) steps, in float64 with explicit loops; conv=(spatial, out_is_conv)."""
    w_in, w_out = w_in.double(), w_out.double()
    U = w_in.shape[0]
    fbar, u = torch.zeros(U, dtype=torch.float64), torch.zeros(U, dtype=torch.float64)
    for age, h in enumerate(batches, start=1):
        h = h.double()
        for i in range(U):
            hi = h[:, i]  # [B] or [B, H, W]
            fbar[i] = d * fbar[i] + (1 - d) * hi.mean()
            f_hat = fbar[i] / (1 - d ** age)
            w_in_mag = w_in[i].abs().mean()
            if conv is None:
                w_out_mag = w_out[:, i].abs().mean()
            elif conv[1]:
                w_out_mag = w_out[:, i].abs().mean()
            else:
                w_out_mag = w_out[:, i * conv[0]:(i + 1) * conv[0]].abs().mean()
            if kind == "adaptable_contribution":
                y = w_out_mag * (hi - f_hat).abs().mean() / w_in_mag
            else:
                y = w_out_mag * hi.abs().mean()
            u[i] = d * u[i] + (1 - d) * y
    return u


def _first_layer_features_after_steps(cbp, net, batches):
    """Run CBP's after-step on each batch; return member 0's first-layer features of each."""
    feats = []
    for t, x in enumerate(batches):
        f = features_of(net, x)
        feats.append(f[0][0])
        cbp.after_step(f, x, t + 1)
    return feats


@pytest.mark.parametrize("kind", ["adaptable_contribution", "contribution"])
def test_utility_matches_an_independent_computation_for_linear_units(kind):
    net = mlp(1, sizes=(6, 10, 3))
    cbp = make_cbp(net, replacement_rate=0.0, decay=0.8, utility=kind)
    feats = _first_layer_features_after_steps(cbp, net, [torch.randn(1, 5, 6) for _ in range(3)])
    expected = _independent_utilities(net.blocks[0].affine.weight[0].detach(),
                                      net.blocks[1].affine.weight[0].detach(), feats, 0.8, kind)
    torch.testing.assert_close(cbp.core.stats[0].utility[0].double(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["adaptable_contribution", "contribution"])
@pytest.mark.parametrize("conv_to_conv", [False, True])
def test_utility_of_conv_units_averages_over_batch_and_space(kind, conv_to_conv):
    net = convnet(1, conv_to_conv)
    cbp = make_cbp(net, replacement_rate=0.0, decay=0.9, utility=kind)
    feats = _first_layer_features_after_steps(cbp, net, [torch.randn(1, 3, 2, 7, 7) for _ in range(2)])
    expected = _independent_utilities(net.blocks[0].affine.weight[0].detach(),
                                      net.blocks[1].affine.weight[0].detach(), feats, 0.9, kind,
                                      conv=(25, conv_to_conv))
    torch.testing.assert_close(cbp.core.stats[0].utility[0].double(), expected, rtol=1e-5, atol=1e-7)


# --- member independence ----------------------------------------------------------------------

def test_each_member_of_a_mixed_ensemble_evolves_as_if_alone():
    seeds, rates, maturities = [3, 4, 5], [0.2, 0.0, 0.05], [2, 0, 1]
    together = mlp(3, seeds=seeds)
    opt = Adam(list(together.parameters()), lr=1e-2)
    cbp = make_cbp(together, opt, seeds=seeds, replacement_rate=rates, maturity=maturities)
    alone = [mlp(1, seeds=[s]) for s in seeds]
    opts = [Adam(list(n.parameters()), lr=1e-2) for n in alone]
    cbps = [make_cbp(n, o, seeds=[s], replacement_rate=r, maturity=m)
            for n, o, s, r, m in zip(alone, opts, seeds, rates, maturities, strict=True)]
    gen = torch.Generator().manual_seed(0)
    for t in range(12):
        x, y = torch.randn(3, 8, 6, generator=gen), torch.randint(0, 3, (3, 8), generator=gen)
        for k, (net, o, c) in enumerate([(together, opt, cbp)] + list(zip(alone, opts, cbps, strict=True))):
            xs, ys = (x, y) if k == 0 else (x[k - 1:k], y[k - 1:k])
            logits, feats = net(xs, return_features=True)
            o.zero_grad()
            loss = F.cross_entropy(logits.flatten(0, 1), ys.flatten(), reduction="none")
            loss.view(len(xs), 8).mean(1).sum().backward()
            o.step()
            c.after_step([f.detach() for f in feats], xs, t + 1)
    assert cbp.replacements[0].tolist()[0] > 0 and cbp.replacements[0].tolist()[2] > 0
    for k, net in enumerate(alone):
        for p, q in zip(together.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(p[k], q[0], rtol=0, atol=1e-6)


class RecordingCBP(ContinualBackprop):
    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        RecordingCBP.instances.append(self)


@pytest.mark.parametrize("problem,extra,steps", [
    ("permuted_mnist", {"examples_per_task": 480}, 30),
    ("random_label_cifar", {"examples": 160}, 10),
])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_member_k_of_a_cbp_ensemble_equals_seed_k_run_alone(data_dir, monkeypatch, problem, extra, steps,
                                                            optimizer):
    monkeypatch.setitem(plasticlab.methods.METHODS, "cbp", RecordingCBP)
    RecordingCBP.instances = []
    cfg = resolve_config({"problem": problem, "method": "cbp", "tasks": 2, "steps_per_task": steps,
                          "problem_params": extra, "optimizer": optimizer,
                          "lr": 1e-3 if optimizer == "adam" else 1e-2,
                          "params": {"replacement_rate": 1e-2, "maturity": 5}})
    seeds = [0, 1, 2, 3]
    together = train_ensemble(Members.from_config(cfg, seeds), data_dir=data_dir)
    assert all((r > 0).all() for r in RecordingCBP.instances[0].replacements)  # it did replace units
    for k in (0, 3):
        alone = train_ensemble(Members.from_config(cfg, [seeds[k]]), data_dir=data_dir)
        assert together.members[k].task_online_accuracy == pytest.approx(
            alone.members[0].task_online_accuracy, abs=1e-5)


# --- the nn.Sequential drop-in -----------------------------------------------------------------

def _train_sequential(model, opt, cbp, x, y, steps):
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        cbp.step()


def test_dropin_on_an_mlp_trains_and_replaces_the_expected_number_of_units():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = Adam(model.parameters(), lr=1e-2)
    cbp = ContinualBackpropSequential(model, opt, replacement_rate=0.1, maturity=3, decay=0.99)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    with torch.no_grad():
        model(torch.randn(5, 6))  # an evaluation pass: not captured
    _train_sequential(model, opt, cbp, x, y, 20)
    expected = sum(reference_counts(10, 0.1, 3, 20))
    assert cbp.replacements == [expected, expected]
    assert torch.isfinite(F.cross_entropy(model(x), y))


def test_dropin_on_a_conv_net_replaces_channels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 4, 3), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 2 * 2, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = Adam(model.parameters(), lr=1e-2)
    cbp = ContinualBackpropSequential(model, opt, replacement_rate=0.25, maturity=2)
    x, y = torch.randn(8, 3, 10, 10), torch.randint(0, 2, (8,))
    _train_sequential(model, opt, cbp, x, y, 10)
    channels, units = sum(reference_counts(4, 0.25, 2, 10)), sum(reference_counts(8, 0.25, 2, 10))
    assert cbp.replacements == [channels, channels, units]


def test_dropin_equals_the_ensemble_method_on_the_same_network_and_data():
    seed = 7
    net = mlp(1, sizes=(6, 10, 10, 3), seeds=[seed])
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 3))
    with torch.no_grad():
        for layer, block in zip(model[::2], net.blocks, strict=True):
            layer.weight.copy_(block.affine.weight[0])
            layer.bias.copy_(block.affine.bias[0])
    opt_net, opt_model = Adam(list(net.parameters()), lr=1e-2), Adam(model.parameters(), lr=1e-2)
    cbp_net = make_cbp(net, opt_net, seeds=[seed], replacement_rate=0.2, maturity=2, decay=0.99)
    cbp_model = ContinualBackpropSequential(model, opt_model, replacement_rate=0.2, maturity=2, decay=0.99,
                                            seed=seed)
    gen = torch.Generator().manual_seed(1)
    for t in range(10):
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        logits, feats = net(x[None], return_features=True)
        opt_net.zero_grad()
        F.cross_entropy(logits[0], y).backward()
        opt_net.step()
        cbp_net.after_step([f.detach() for f in feats], x[None], t + 1)
        _train_sequential(model, opt_model, cbp_model, x, y, 1)
    assert cbp_model.replacements == [int(r[0]) for r in cbp_net.replacements]
    assert cbp_model.replacements[0] > 0
    for layer, block in zip(model[::2], net.blocks, strict=True):
        torch.testing.assert_close(layer.weight, block.affine.weight[0], rtol=0, atol=1e-6)
        torch.testing.assert_close(layer.bias, block.affine.bias[0], rtol=0, atol=1e-6)


def test_dropin_works_with_torch_sgd_without_momentum():
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cbp = ContinualBackpropSequential(model, opt, replacement_rate=0.1, maturity=0)
    _train_sequential(model, opt, cbp, torch.randn(16, 6), torch.randint(0, 3, (16,)), 5)
    assert cbp.replacements == [5]


def test_dropin_refuses_torch_adam_and_says_why():
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    with pytest.raises(TypeError, match="one step count per parameter tensor.*plasticlab.optim.Adam"):
        ContinualBackpropSequential(model, torch.optim.Adam(model.parameters(), lr=1e-3))
    with pytest.raises(TypeError, match="momentum"):
        ContinualBackpropSequential(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))


def test_dropin_refuses_batchnorm_naming_the_layer():
    model = nn.Sequential(nn.Linear(6, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, 3))
    with pytest.raises(ValueError, match="layer 1 \\(BatchNorm1d\\)"):
        ContinualBackpropSequential(model, Adam(model.parameters(), lr=1e-3))


def test_dropin_step_without_a_training_forward_pass_is_an_error():
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))
    cbp = ContinualBackpropSequential(model, Adam(model.parameters(), lr=1e-3))
    with pytest.raises(RuntimeError, match="no features captured"):
        cbp.step()


def test_bad_hyperparameters_are_refused():
    with pytest.raises(ValueError, match="replacement_rate"):
        make_cbp(mlp(1), replacement_rate=1.5)
    with pytest.raises(ValueError, match="decay"):
        make_cbp(mlp(1), decay=1.0)
    with pytest.raises(ValueError, match="utility"):
        make_cbp(mlp(1), utility="weight")


# --- no per-step host synchronisation ----------------------------------------------------------

def test_no_host_synchronisation_in_after_step(monkeypatch):
    net = build_network("mlp", 4, (784,), 10, generators=[torch_generator(s, "init") for s in range(4)])
    cbp = make_cbp(net, replacement_rate=[1e-2, 3e-2, 0.0, 1e-1], maturity=[5, 0, 5, 2], decay=0.99)
    x = torch.randn(4, 16, 784)
    feats = features_of(net, x)
    calls = count_host_syncs(monkeypatch)
    for t in range(50):
        cbp.after_step(feats, x, t + 1)
    monkeypatch.undo()
    assert calls["n"] == 0, calls
    assert (cbp.replacements[0][[0, 1, 3]] > 0).all()


@pytest.mark.cuda
def test_no_device_synchronisation_on_cuda():
    # CUDA's sync debug mode raises on any operation that makes the host wait for the device.
    generators = [torch_generator(s, "init") for s in range(4)]
    net = build_network("mlp", 4, (784,), 10, generators=generators).cuda()
    cbp = make_cbp(net, replacement_rate=[1e-2, 3e-2, 0.0, 1e-1], maturity=[5, 0, 5, 2], decay=0.99)
    x = torch.randn(4, 16, 784, device="cuda")
    feats = features_of(net, x)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for t in range(30):
            cbp.after_step(feats, x, t + 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert (cbp.replacements[0][[0, 1, 3]] > 0).all()


def test_the_method_is_named_and_parameterised_as_in_the_spec():
    assert ContinualBackprop.name == "cbp" and ContinualBackprop.needs({}).features
    hp = {p.name: p for p in ContinualBackprop.hyperparameters}
    assert {n: p.default for n, p in hp.items()} == {
        "replacement_rate": 1e-4, "maturity": 100, "decay": 0.99, "utility": "adaptable_contribution",
        "adam_variant": "standard", "replacement_init": "network", "draws": "generator"}
    assert [n for n, p in hp.items() if p.per_member] == ["replacement_rate", "maturity", "decay"]
    assert hp["utility"].choices == ("adaptable_contribution", "contribution")
    assert hp["adam_variant"].choices == ("standard", "reference")
    assert hp["replacement_init"].choices == ("network", "kaiming")
    assert hp["draws"].choices == ("generator", "philox") and hp["draws"].implicit_default
