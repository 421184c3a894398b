"""ReDo (SPEC §2.2): dormant scores, recycling, optimizer moments, period, per-member τ,
ensemble member independence, the nn.Sequential drop-in, and no host syncs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import plasticlab.methods
from conftest import count_host_syncs
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import MethodContext
from plasticlab.methods.redo import ReDo, ReDoSequential
from plasticlab.nets import build_network
from plasticlab.nets.init import draw
from plasticlab.nets.units import dormancy_scores, dormant_mask, unit_activity
from plasticlab.optim import SGD, Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

# --- helpers -----------------------------------------------------------------------------------


@torch.no_grad()
def lively(layers):
    """Hidden weights ×0.1 and biases = 1: every pre-activation is then ≈ 1 > 0, so in these
    tiny nets no unit is silent by accident and the only dormant units are those a test kills."""
    for layer in layers:
        layer.weight.mul_(0.1)
        layer.bias.fill_(1.0)


def mlp(members=1, seeds=None):
    """Toy MLP: 6 → 4 → 4 → 3 (width 0.04 of 100), ReLU."""
    seeds = seeds or list(range(members))
    net = build_network("mlp", members, (6,), 3, width=0.04,
                        generators=[torch_generator(s, "init") for s in seeds])
    lively(b.affine for b in net.hidden_blocks)
    return net


def cnn(members=1):
    """Toy CNN on 3×20×20: conv5 (4 ch) → pool → conv5 (4 ch) → pool → flatten 4·2·2 → 25 → 25 → 2."""
    net = build_network("cnn", members, (3, 20, 20), 2, width=0.25,
                        generators=[torch_generator(s, "init") for s in range(members)])
    lively(b.affine for b in net.hidden_blocks)
    return net


def make_redo(net, optimizer=None, *, seeds=None, period=1, threshold=0.0, reinit="fresh"):
    K = net.members
    seeds = seeds or list(range(K))
    tau = torch.as_tensor(threshold, dtype=torch.float32).expand(K).clone()
    optimizer = optimizer or SGD(list(net.parameters()), lr=0.1)
    return ReDo(net, optimizer, {"period": period, "threshold": tau, "reinit": reinit},
                MethodContext(seeds, torch.device("cpu")))


@torch.no_grad()
def kill_unit(layer, member, unit):
    """Make a unit's ReLU output 0 for every input: zero incoming weights, negative bias."""
    layer.weight[member, unit] = 0.0
    layer.bias[member, unit] = -1.0


def snapshot(net):
    return {name: p.detach().clone() for name, p in net.named_parameters()}


def fresh_draw(seed, layer_index, layer):
    """What ReDo must draw for `layer` of member `seed`: its own stream, whole layer."""
    g = torch_generator(seed, "method", "redo", layer_index)
    return draw("torch_default", tuple(layer.weight.shape[1:]), layer.fan_in, layer.fan_out, g)


# --- the dormant score ---------------------------------------------------------------------------


def test_score_is_mean_abs_activity_divided_by_the_layer_mean():
    # Two inputs, four units: E|h| = [2, 0, 2, 0.5], layer mean 1.125.
    h = torch.tensor([[[1.0, 0.0, 2.0, 0.5], [3.0, 0.0, 2.0, 0.5]]])
    activity = unit_activity(h)
    torch.testing.assert_close(activity, torch.tensor([[2.0, 0.0, 2.0, 0.5]]))
    torch.testing.assert_close(dormancy_scores(activity), torch.tensor([[2.0, 0.0, 2.0, 0.5]]) / 1.125)
    # Scale-free: τ is a fraction of the typical unit, whatever the activation scale.
    torch.testing.assert_close(dormancy_scores(7.0 * activity), dormancy_scores(activity))


def test_tau_zero_marks_only_exactly_silent_linear_units_and_tau_half_adds_the_quiet_one():
    h = torch.tensor([[[1.0, 0.0, 2.0, 0.5], [3.0, 0.0, 2.0, 0.5]]])
    a = unit_activity(h)  # scores 1.78, 0, 1.78, 0.44
    assert dormant_mask(a, 0.0).tolist() == [[False, True, False, False]]
    assert dormant_mask(a, 0.5).tolist() == [[False, True, False, True]]
    # A unit active on a single input of the batch is not dormant at τ = 0.
    h2 = torch.tensor([[[1.0, 0.0], [1.0, 1e-6]]])
    assert dormant_mask(unit_activity(h2), 0.0).tolist() == [[False, False]]


def test_conv_unit_score_averages_over_batch_and_space():
    # [K=1, B=2, C=3, 2, 2]: channel 0 all ones, channel 1 all zero, channel 2 one pixel of 2.
    h = torch.zeros(1, 2, 3, 2, 2)
    h[:, :, 0] = 1.0
    h[0, 1, 2, 0, 0] = 2.0  # mean over 2·4 positions = 0.25
    a = unit_activity(h)
    torch.testing.assert_close(a, torch.tensor([[1.0, 0.0, 0.25]]))
    # Layer mean 1.25/3 → scores 2.4, 0, 0.6.
    torch.testing.assert_close(dormancy_scores(a), torch.tensor([[2.4, 0.0, 0.6]]))
    assert dormant_mask(a, 0.0).tolist() == [[False, True, False]]
    assert dormant_mask(a, 0.6).tolist() == [[False, True, True]]


def test_a_completely_silent_layer_is_all_dormant_at_tau_zero():
    assert dormant_mask(torch.zeros(1, 3), 0.0).all()


def test_a_unit_killed_through_its_weights_is_found_dormant_in_a_real_forward():
    net = mlp()
    kill_unit(net.blocks[0].affine, 0, 2)
    _, feats = net(torch.randn(1, 64, 6), return_features=True)
    assert dormant_mask(unit_activity(feats[0]), 0.0).tolist() == [[False, False, True, False]]
    assert not dormant_mask(unit_activity(feats[1]), 0.0).any()


# --- recycling -----------------------------------------------------------------------------------


def test_recycling_redraws_incoming_resets_bias_zeroes_outgoing_and_leaves_the_rest():
    net = mlp(members=2, seeds=[11, 12])
    kill_unit(net.blocks[0].affine, 0, 1)  # member 0 only
    redo = make_redo(net, seeds=[11, 12])
    before = snapshot(net)
    redo.after_step([], torch.randn(2, 64, 6), step=1)

    assert redo.last_recycled_per_layer.tolist() == [[1, 0], [0, 0]]
    assert redo.last_recycled.tolist() == [1, 0]
    w0, b0 = net.blocks[0].affine.weight, net.blocks[0].affine.bias
    w_new, b_new = fresh_draw(11, 0, net.blocks[0].affine)
    assert torch.equal(w0[0, 1], w_new[1]) and torch.equal(b0[0, 1], b_new[1])
    assert torch.equal(net.blocks[1].affine.weight[0, :, 1], torch.zeros(4))

    # Everything else bit-for-bit as before, member 1 and the output layer entirely.
    changed = {"blocks.0.affine.weight": (0, 1), "blocks.0.affine.bias": (0, 1)}
    for name, p in net.named_parameters():
        expected = before[name].clone()
        if name in changed:
            expected[changed[name]] = p[changed[name]]
        if name == "blocks.1.affine.weight":
            expected[0, :, 1] = 0.0
        assert torch.equal(p, expected), name


def test_reinit_initial_restores_theta0_of_the_dormant_unit():
    net = mlp()
    theta0 = snapshot(net)
    redo = make_redo(net, reinit="initial")  # θ₀ taken here
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.5)  # "training" moved every weight
    kill_unit(net.blocks[1].affine, 0, 3)
    moved = snapshot(net)
    redo.after_step([], torch.randn(1, 64, 6), step=1)
    w1, b1 = net.blocks[1].affine.weight, net.blocks[1].affine.bias
    assert torch.equal(w1[0, 3], theta0["blocks.1.affine.weight"][0, 3])
    assert torch.equal(b1[0, 3], theta0["blocks.1.affine.bias"][0, 3])
    assert torch.equal(net.blocks[2].affine.weight[0, :, 3], torch.zeros(3))
    # Other units keep their trained values.
    keep = torch.ones(4, dtype=torch.bool)
    keep[3] = False
    assert torch.equal(w1[0, keep], moved["blocks.1.affine.weight"][0, keep])
    assert torch.equal(net.blocks[0].affine.weight, moved["blocks.0.affine.weight"])


def test_conv_to_linear_zeroes_the_channels_flattened_block_and_conv_to_conv_the_input_channel():
    net = cnn()
    conv0, conv1, fc0 = (net.blocks[i].affine for i in range(3))
    kill_unit(conv0, 0, 1)  # its outgoing weights: conv1's input channel 1
    kill_unit(conv1, 0, 2)  # its outgoing weights: fc0 columns 2·4 … 2·4+3 (2×2 positions)
    before = snapshot(net)
    redo = make_redo(net)
    redo.after_step([], torch.randn(1, 32, 3, 20, 20), step=1)

    assert redo.last_recycled_per_layer.tolist() == [[1, 1, 0, 0]]
    w_new, b_new = fresh_draw(0, 1, conv1)
    # conv1 unit 2 is redrawn, except where it reads recycled conv0 unit 1: outgoing zeros win,
    # so a recycled unit never feeds the next layer at the moment it is recycled.
    expected = w_new[2].clone()
    expected[1] = 0.0
    assert torch.equal(conv1.weight[0, 2], expected) and torch.equal(conv1.bias[0, 2], b_new[2])
    assert torch.equal(conv1.weight[0, :, 1], torch.zeros(4, 5, 5))  # outgoing of conv0 unit 1
    assert torch.equal(fc0.weight[0, :, 8:12], torch.zeros(25, 4))
    cols = torch.ones(16, dtype=torch.bool)
    cols[8:12] = False
    assert torch.equal(fc0.weight[0][:, cols], before["blocks.2.affine.weight"][0][:, cols])
    rows, other = [0, 1, 3], [0, 2, 3]  # conv1's other units, on its other input channels
    assert torch.equal(conv1.weight[0, rows][:, other], before["blocks.1.affine.weight"][0, rows][:, other])


def test_the_output_layer_is_never_recycled():
    net = cnn()
    before = snapshot(net)
    redo = make_redo(net, threshold=10.0)  # every hidden unit is "dormant"
    assert len(redo.recycler.layers) == len(net.blocks) - 1
    redo.after_step([], torch.randn(1, 8, 3, 20, 20), step=1)
    assert redo.last_recycled_per_layer.tolist() == [[4, 4, 25, 25]]
    out = net.blocks[-1].affine
    assert torch.equal(out.bias, before["blocks.4.affine.bias"])  # its units are not redrawn
    assert torch.equal(out.weight, torch.zeros_like(out.weight))  # only its inputs went silent


# --- optimizer moments -------------------------------------------------------------------------------


def test_adam_moments_of_touched_weights_are_zeroed_and_the_rest_and_step_counts_kept():
    torch.manual_seed(0)
    net = mlp()
    opt = Adam(list(net.parameters()), lr=1e-3)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(1, 16, 6)).square().sum().backward()
        opt.step()
    kill_unit(net.blocks[0].affine, 0, 0)
    m_before = [m.clone() for m in opt.exp_avg]
    v_before = [v.clone() for v in opt.exp_avg_sq]
    counts = list(opt.step_counts)
    make_redo(net, opt).after_step([], torch.randn(1, 64, 6), step=1)

    # params: [w0, b0, w1, b1, w2, b2]; touched: w0 row 0, b0[0], w1 column 0.
    touched = [torch.zeros_like(m, dtype=torch.bool) for m in opt.exp_avg]
    touched[0][0, 0] = True
    touched[1][0, 0] = True
    touched[2][0, :, 0] = True
    for i in range(len(opt.params)):
        for now, before in ((opt.exp_avg[i], m_before[i]), (opt.exp_avg_sq[i], v_before[i])):
            assert (now[touched[i]] == 0).all()
            assert torch.equal(now[~touched[i]], before[~touched[i]])
            assert (before[touched[i]] != 0).all()  # there was something to zero
    assert opt.step_counts == counts
    assert all(s is None for s in opt.element_steps)  # moments only: no per-element restart


# --- when and for whom -------------------------------------------------------------------------------


def test_nothing_happens_on_steps_that_are_not_multiples_of_the_period():
    net = mlp()
    kill_unit(net.blocks[0].affine, 0, 1)
    redo = make_redo(net, period=5)
    before = snapshot(net)
    x = torch.randn(1, 64, 6)
    for step in (1, 2, 3, 4, 6, 7, 9):
        redo.after_step([], x, step)
    assert all(torch.equal(p, before[n]) for n, p in net.named_parameters())
    assert redo.last_recycled.tolist() == [0]
    redo.after_step([], x, 10)
    assert redo.last_recycled.tolist() == [1]
    assert not torch.equal(net.blocks[0].affine.weight, before["blocks.0.affine.weight"])


def test_per_member_thresholds_recycle_different_units_in_one_ensemble():
    net = mlp(members=2, seeds=[5, 5])  # two identical members
    redo = make_redo(net, seeds=[5, 5], threshold=[0.0, 0.5])
    before = snapshot(net)
    # Same activity for both members: scores 1.78, 0, 1.78, 0.44 in layer 0, all 1 in layer 1.
    a0 = torch.tensor([[2.0, 0.0, 2.0, 0.5]] * 2)
    counts = redo.recycle([a0, torch.ones(2, 4)])
    assert counts.tolist() == [[1, 0], [2, 0]]
    b = net.blocks[0].affine.bias
    changed = b != before["blocks.0.affine.bias"]
    assert changed.tolist() == [[False, True, False, False], [False, True, False, True]]
    # Same seed → same draw for unit 1 in both members.
    assert torch.equal(b[0, 1], b[1, 1])


# --- the engine ----------------------------------------------------------------------------------------

TOTAL = {"recycled": None}


class CountingReDo(ReDo):
    """ReDo that also sums its recycle counts (on the device) so a test can see it acted."""

    def recycle(self, activity, step=None):
        counts = super().recycle(activity, step)
        TOTAL["recycled"] = counts.sum() if TOTAL["recycled"] is None else TOTAL["recycled"] + counts.sum()
        return counts


@pytest.mark.parametrize("optimizer,lr", [("adam", 1e-3), ("sgd", 1e-2)])
def test_member_k_of_a_redo_ensemble_equals_seed_k_run_alone(data_dir, monkeypatch, optimizer, lr):
    monkeypatch.setitem(plasticlab.methods.METHODS, "redo", CountingReDo)
    TOTAL["recycled"] = None
    cfg = resolve_config({"problem": "permuted_mnist", "method": "redo", "tasks": 2,
                          "steps_per_task": 30, "problem_params": {"examples_per_task": 480},
                          "optimizer": optimizer, "lr": lr,
                          "params": {"period": 10, "threshold": 0.1}})
    seeds = [0, 1, 2, 3]
    together = train_ensemble(Members.from_config(cfg, seeds), data_dir=data_dir)
    assert TOTAL["recycled"] > 0  # the comparison below is not vacuous
    for k in seeds:
        alone = train_ensemble(Members.from_config(cfg, [k]), data_dir=data_dir)
        assert together.members[k].task_online_accuracy == pytest.approx(
            alone.members[0].task_online_accuracy, abs=1e-5)


def test_member_independence_holds_for_the_cnn_on_random_label_cifar(data_dir, monkeypatch):
    monkeypatch.setitem(plasticlab.methods.METHODS, "redo", CountingReDo)
    TOTAL["recycled"] = None
    cfg = resolve_config({"problem": "random_label_cifar", "method": "redo", "tasks": 2,
                          "steps_per_task": 10, "problem_params": {"examples": 160},
                          "params": {"period": 10, "threshold": 0.1}})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2, 3]), data_dir=data_dir)
    assert TOTAL["recycled"] > 0
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir)
    assert together.members[2].task_online_accuracy == pytest.approx(
        alone.members[0].task_online_accuracy, abs=1e-5)


def test_after_step_makes_no_host_synchronisation(monkeypatch):
    net = mlp(members=3)
    kill_unit(net.blocks[0].affine, 1, 0)
    redo = make_redo(net, Adam(list(net.parameters()), lr=1e-3), period=10, threshold=[0.0, 0.1, 0.2])
    calls = count_host_syncs(monkeypatch)
    x = torch.randn(3, 16, 6)
    for step in range(1, 51):  # five recycle steps
        redo.after_step([], x, step)
    monkeypatch.undo()
    assert calls["n"] == 0
    assert torch.count_nonzero(net.blocks[0].affine.weight[1, 0]) == 6  # it did recycle


# --- the nn.Sequential drop-in ----------------------------------------------------------------------


def trained(model, optimizer, x):
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def test_drop_in_mlp_with_torch_adam_recycles_the_killed_unit_and_leaves_the_rest():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    lively([model[0], model[2]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 6)
    trained(model, opt, x)
    with torch.no_grad():
        model[0].weight[2] = 0.0
        model[0].bias[2] = -1.0
    redo = ReDoSequential(model, opt, threshold=0.0, reinit="fresh", seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in model.named_parameters()}

    assert redo.recycle(x) == [1, 0]
    g = torch_generator(0, "method", "redo", 0)
    w_new, b_new = draw("torch_default", (5, 6), 6, 5, g)
    assert torch.equal(model[0].weight[2], w_new[2]) and torch.equal(model[0].bias[2], b_new[2])
    assert torch.equal(model[2].weight[:, 2], torch.zeros(4))
    rows = [0, 1, 3, 4]
    assert torch.equal(model[0].weight[rows], before["0.weight"][rows])
    assert torch.equal(model[2].weight[:, rows], before["2.weight"][:, rows])
    assert torch.equal(model[4].weight, before["4.weight"])
    # Adam: moments of touched weights zero, others kept, step count kept.
    s0, s2 = opt.state[model[0].weight], opt.state[model[2].weight]
    assert (s0["exp_avg"][2] == 0).all() and (s0["exp_avg_sq"][2] == 0).all()
    assert (s2["exp_avg"][:, 2] == 0).all() and (opt.state[model[0].bias]["exp_avg"][2] == 0)
    assert torch.equal(s0["exp_avg"][rows], state["0.weight"]["exp_avg"][rows])
    assert torch.equal(s0["step"], state["0.weight"]["step"])
    assert model.training  # the caller's mode is restored
    trained(model, opt, x)  # and training goes on


def test_drop_in_conv_net_zeroes_the_channels_block_in_the_linear_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                          nn.Linear(4 * 3 * 3, 5), nn.ReLU(), nn.Linear(5, 2))
    lively([model[0], model[4]])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 3, 8, 8)
    trained(model, opt, x)
    with torch.no_grad():
        model[0].weight[1] = 0.0
        model[0].bias[1] = -1.0
    before = model[4].weight.detach().clone()
    redo = ReDoSequential(model, opt)
    assert [d.tolist() for d in redo.dormant(x)][0] == [False, True, False, False]
    assert redo.recycle(x)[0] == 1
    assert torch.equal(model[4].weight[:, 9:18], torch.zeros(5, 9))  # channel 1's 3×3 block
    assert torch.equal(model[4].weight[:, :9], before[:, :9])
    assert torch.equal(model[4].weight[:, 18:], before[:, 18:])
    assert (opt.state[model[4].weight]["exp_avg"][:, 9:18] == 0).all()


def test_drop_in_zeroes_sgd_momentum_buffers_of_touched_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    lively([model[0]])
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    x = torch.randn(32, 6)
    trained(model, opt, x)
    with torch.no_grad():
        model[0].weight[4] = 0.0
        model[0].bias[4] = -1.0
    buf = opt.state[model[2].weight]["momentum_buffer"]
    kept = buf[:, :4].clone()
    assert ReDoSequential(model, opt).recycle(x) == [1]
    assert (buf[:, 4] == 0).all() and torch.equal(buf[:, :4], kept)
    assert (opt.state[model[0].weight]["momentum_buffer"][4] == 0).all()


def test_drop_in_refuses_an_unsupported_layer_naming_it():
    model = nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 3))
    with pytest.raises(ValueError, match="BatchNorm1d"):
        ReDoSequential(model, torch.optim.Adam(model.parameters()))


def test_drop_in_refuses_an_optimizer_without_the_touched_weights_and_a_bad_reinit():
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    with pytest.raises(ValueError, match="not in the optimizer"):
        ReDoSequential(model, torch.optim.Adam(model[0].parameters()))
    with pytest.raises(ValueError, match="reinit"):
        ReDoSequential(model, None, reinit="random")
