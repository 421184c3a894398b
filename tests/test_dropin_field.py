"""The drop-ins of the methods since the paper (plasticlab.dropin_field) on a plain nn.Sequential
equal the engine's methods on a one-member network holding the same weights (or a literal
implementation of the rule), step for step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from plasticlab import SNR, SWR, UPGD, HareTortoise, Parseval
from plasticlab.methods import METHODS, MethodContext
from plasticlab.nets import build_network
from plasticlab.optim import SGD
from plasticlab.optim import upgd as engine_upgd
from plasticlab.rng import torch_generator
from plasticlab.run_config import stack_hyperparameters

SEED = 5


def engine_method(name, params, seed=SEED, lr=0.1):
    """(method, K = 1 net 6 → 4 → 4 → 3, plasticlab SGD) in float64, as the engine builds them."""
    cls = METHODS[name]
    per_member = [{p.name: params.get(p.name, p.default) for p in cls.hyperparameters}]
    hp = stack_hyperparameters(cls.hyperparameters, per_member, "cpu", name)
    net = build_network("mlp", 1, (6,), 3, width=0.04,
                        generators=[torch_generator(seed, "init")]).to(torch.float64)
    opt = SGD(list(net.parameters()), lr=lr, member_dim=True)
    return cls(net, opt, hp, MethodContext([seed], torch.device("cpu"))), net, opt


def plain_copy(net) -> nn.Sequential:
    """An nn.Sequential of Linear/ReLU holding member 0's weights of an ensemble MLP."""
    layers = []
    for i, affine in enumerate(net.affine_layers):
        linear = nn.Linear(affine.weight.shape[2], affine.weight.shape[1]).to(torch.float64)
        with torch.no_grad():
            linear.weight.copy_(affine.weight[0])
            linear.bias.copy_(affine.bias[0])
        layers.append(linear)
        if i < len(net.affine_layers) - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def batch(step, size=4):
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(size, 6, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (size,), generator=g))


def lockstep(method, net, opt, model, plain_opt, dropin_step, steps: int):
    """Step the engine's method (one member) and the drop-in on the same batches, each after its
    optimizer's step; check after every step that the two networks are equal; yield the step."""
    for step in range(1, steps + 1):
        x, y = batch(step)
        ensemble_backward(net, x, y)
        copy_grads(net, model)
        opt.step()
        method.after_step([], x.unsqueeze(0), step)
        plain_opt.step()
        dropin_step()
        assert_same(net, model)
        yield step


def ensemble_backward(net, x, y):
    """Gradients of the engine's loss (Σₖ mean CE) in the net's .grad; returns its features."""
    for p in net.parameters():
        p.grad = None
    logits, features = net(x.unsqueeze(0), return_features=True)
    nn.functional.cross_entropy(logits[0], y).backward()
    return features


def copy_grads(net, model):
    """The ensemble's member-0 gradients into the plain model (the two see the same gradient)."""
    for p, q in zip(net.parameters(), model.parameters(), strict=True):
        q.grad = p.grad[0].clone()


def assert_same(net, model):
    for p, q in zip(net.parameters(), model.parameters(), strict=True):
        assert torch.equal(p[0], q), (p[0] - q).abs().max()


# --- Parseval ------------------------------------------------------------------------------------

def test_parseval_dropin_is_the_methods_penalty_and_its_gradient_the_methods_closed_form():
    method, net, _ = engine_method("parseval", {"strength": 0.3, "scale": 2.0})
    model = plain_copy(net)
    reg = Parseval(model, strength=0.3, scale=2.0)
    value = reg()
    torch.testing.assert_close(value, method.penalty()[0], rtol=1e-6, atol=0)  # λ held as float32
    value.backward()
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    method.add_penalty_grad()
    hidden = [m for m in model if isinstance(m, nn.Linear)][:-1]
    for layer, block in zip(hidden, net.hidden_blocks, strict=True):
        torch.testing.assert_close(layer.weight.grad, block.affine.weight.grad[0], rtol=1e-6, atol=1e-12)
    assert model[-1].weight.grad is None and all(m.bias.grad is None for m in hidden)


def test_parseval_dropin_on_a_conv_model_uses_out_by_in_kh_kw_matrices_and_skips_the_output_layer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 5),
                          nn.ReLU(), nn.Linear(5, 2))
    lam, s = 0.1, 1.5
    expected = 0.0
    for w in (model[0].weight, model[3].weight):
        m = w.detach().reshape(w.shape[0], -1)
        expected += ((m @ m.T - s * torch.eye(m.shape[0])) ** 2).sum()
    torch.testing.assert_close(Parseval(model, lam, s)().detach(), lam * expected)
    with pytest.raises(ValueError, match="hidden layer"):
        Parseval(nn.Sequential(nn.Linear(3, 2)), 0.1)


# --- SWR -----------------------------------------------------------------------------------------

def test_swr_dropin_equals_the_method_on_a_one_member_network():
    method, net, opt = engine_method("swr", {"period": 2, "threshold": 0.5})
    model = plain_copy(net)
    plain_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    swr = SWR(model, period=2, threshold=0.5, seed=SEED)
    reinitialized = 0
    for step in lockstep(method, net, opt, model, plain_opt, swr.step, steps=6):
        if step % 2 == 0:
            assert swr.last_reinitialized == int(method.last_reinitialized[0])
            reinitialized += swr.last_reinitialized
    assert reinitialized > 0


def test_swr_dropin_refuses_a_due_step_without_gradients():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    swr = SWR(model, period=1, threshold=0.1)
    with pytest.raises(RuntimeError, match="after optimizer.step"):
        swr.step()


# --- SNR -----------------------------------------------------------------------------------------

SNR_HP = {"percentile": 0.75, "growth": 2.0, "max_threshold": 40, "initial_threshold": 8,
          "adapt_period": 3}


def test_snr_dropin_equals_the_method_on_a_one_member_network():
    method, net, opt = engine_method("snr", SNR_HP)
    with torch.no_grad():  # two silent units in each hidden layer, so resets happen
        for block in net.hidden_blocks:
            block.affine.bias[0, :2] = -50.0
    model = plain_copy(net)
    plain_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snr = SNR(model, plain_opt, seed=SEED, **SNR_HP)
    resets = 0
    for step in range(1, 13):
        x, y = batch(step)
        features = ensemble_backward(net, x, y)
        copy_grads(net, model)
        model(x)  # the training forward pass the hooks watch
        with torch.no_grad():
            model(torch.zeros(9, 6, dtype=torch.float64))  # an evaluation pass: ignored
        opt.step()
        method.after_step(features, x.unsqueeze(0), step)
        plain_opt.step()
        snr.step()
        assert_same(net, model)
        assert snr.last_reset == int(method.last_reset[0])
        resets += snr.last_reset
        for mine, theirs in ((snr.ages, method.ages), (snr.thresholds, method.thresholds),
                             (snr.histograms, method.histograms)):
            assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
    assert resets > 0


def test_snr_dropin_zeroes_torch_adams_moments_of_reset_units_and_keeps_its_step_count():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    with torch.no_grad():
        model[0].bias.fill_(50.0)  # every unit fires …
        model[0].bias[1] = -50.0  # … but unit 1
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    snr = SNR(model, adam, initial_threshold=8, max_threshold=40)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    for _ in range(2):  # age 4, then 8 = τ: reset after the second step
        adam.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        adam.step()
        snr.step()
    assert snr.last_reset == 1
    w_in, b_in, w_out = model[0].weight, model[0].bias, model[2].weight
    assert b_in[1] == 0 and not w_out[:, 1].any()
    for p, where in ((w_in, (1,)), (b_in, (1,)), (w_out, (slice(None), 1))):
        state = adam.state[p]
        assert not state["exp_avg_sq"][where].any() and not state["exp_avg"][where].any()
        assert state["exp_avg_sq"].any()  # the other units' moments are kept
        assert int(state["step"]) == 2
    with pytest.raises(RuntimeError, match="no training forward pass"):
        snr.step()


def test_snr_dropin_refuses_a_shared_relu_and_an_optimizer_missing_weights():
    relu = nn.ReLU()
    with pytest.raises(ValueError, match="one ReLU module"):
        SNR(nn.Sequential(nn.Linear(3, 4), relu, nn.Linear(4, 4), relu, nn.Linear(4, 2)))
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with pytest.raises(ValueError, match="SNR: a parameter of hidden layer 0"):
        SNR(model, torch.optim.Adam(model[0].parameters()))


# --- Hare & Tortoise -----------------------------------------------------------------------------

def test_hare_tortoise_dropin_equals_the_method_on_a_one_member_network():
    method, net, opt = engine_method("hare_tortoise", {"momentum": 0.8, "reset_period": 3})
    model = plain_copy(net)
    plain_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ht = HareTortoise(model, momentum=0.8, reset_period=3)
    for _ in lockstep(method, net, opt, model, plain_opt, ht.step, steps=7):
        for t, mine in zip(method.tortoise, ht.tortoise.parameters(), strict=True):
            torch.testing.assert_close(mine, t[0], rtol=1e-6, atol=1e-12)  # m held as float32
    assert all(not p.requires_grad for p in ht.tortoise.parameters())
    assert all(p.data_ptr() != q.data_ptr() for p, q in zip(model.parameters(), ht.tortoise.parameters(),
                                                             strict=True))


# --- UPGD ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("protecting", [True, False])
def test_upgd_dropin_is_a_torch_optimizer_equal_to_the_engines_upgd_with_the_same_stream(protecting):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3)).to(torch.float64)
    stacked = [p.detach().clone().unsqueeze(0) for p in model.parameters()]
    cls = engine_upgd.UPGD if protecting else engine_upgd.NonprotectingUPGD
    name = "upgd" if protecting else "upgd_nonprotecting"
    settings = {"lr": 0.05, "beta": 0.9, "sigma": 0.3, "weight_decay": 0.1}
    engine = cls(stacked, member_dim=True, generators=[torch_generator(SEED, "optimizer", name)], **settings)
    dropin = UPGD(model.parameters(), protecting=protecting,
                  generator=torch_generator(SEED, "optimizer", name), **settings)
    assert isinstance(dropin, torch.optim.Optimizer)
    for step in range(1, 5):
        x, y = (t.double() if t.is_floating_point() else t for t in batch(step))
        dropin.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        for s, p in zip(stacked, model.parameters(), strict=True):
            s.grad = p.grad.unsqueeze(0).clone()
        engine.step()
        dropin.step()
        for s, p in zip(stacked, model.parameters(), strict=True):
            assert torch.equal(s[0], p)


def test_upgd_dropin_takes_eta_over_every_group_and_each_groups_own_step_size():
    w1 = torch.tensor([1.0, 2.0], dtype=torch.float64)
    w2 = torch.tensor([3.0], dtype=torch.float64)
    opt = UPGD([{"params": [w1]}, {"params": [w2], "lr": 0.5}], lr=0.1, beta=0.0, sigma=0.0,
               weight_decay=0.0)
    g1, g2 = torch.tensor([-1.0, -1.0], dtype=torch.float64), torch.tensor([-2.0], dtype=torch.float64)
    w1.grad, w2.grad = g1.clone(), g2.clone()
    before1, before2 = w1.clone(), w2.clone()
    opt.step()
    # β = 0: ū = u = −g⊙w = [1, 2] and [6]; η = 6 over both groups
    s1 = torch.sigmoid(torch.tensor([1.0, 2.0], dtype=torch.float64) / 6)
    s2 = torch.sigmoid(torch.tensor([1.0], dtype=torch.float64))
    torch.testing.assert_close(w1, before1 - 0.1 * g1 * (1 - s1))
    torch.testing.assert_close(w2, before2 - 0.5 * g2 * (1 - s2))
    w1.grad = g1.clone()
    assert opt.step(lambda: torch.tensor(3.0)) == 3.0  # a closure's loss comes back, as torch's
    with pytest.raises(ValueError, match="beta"):
        UPGD([w1], beta=1.0)
