"""plasticlab.regularizers (L2 Init and relatives, SPEC §1) and the penalty methods built on them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import add_gradient_transforms
from plasticlab.fast import plain_forms
from plasticlab.methods import METHODS, MethodContext
from plasticlab.nets import build_network
from plasticlab.optim import make_optimizer
from plasticlab.perturb import ShrinkPerturb
from plasticlab.regularizers import (
    EWC,
    L2,
    HuberInit,
    L1Init,
    L2Init,
    L2InitResample,
    WassersteinInit,
    regularized_parameters,
)
from plasticlab.rng import torch_generator
from plasticlab.run_config import stack_hyperparameters
from plasticlab.step.chain import Chain, decay_in_update

torch.set_num_threads(1)

LAM = 0.3
DELTA = 0.5


def small_mlp(dtype=torch.float64, seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(dtype)


def small_convnet(seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5), nn.ReLU(), nn.Linear(5, 2))


@torch.no_grad()
def perturb(params, seed=1, scale=0.7):
    # scale 0.7: many differences exceed Huber's δ = 0.5, many do not
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.add_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * scale)


def make(kind: str, params, strength, **kw):
    if kind == "l2":
        return L2(params, strength, **kw)
    if kind == "l2_init":
        return L2Init(params, strength, **kw)
    if kind == "l1_init":
        return L1Init(params, strength, **kw)
    if kind == "huber_init":
        return HuberInit(params, strength, kw.pop("delta", DELTA), **kw)
    raise AssertionError(kind)


def closed_form_value(kind, theta, theta0, lam, delta=DELTA):
    d = theta if kind == "l2" else theta - theta0
    if kind in ("l2", "l2_init"):
        return lam / 2 * d.square().sum()
    if kind == "l1_init":
        return lam * d.abs().sum()
    return lam * F.huber_loss(d, torch.zeros_like(d), delta=delta, reduction="sum")


def closed_form_grad(kind, theta, theta0, lam, delta=DELTA):
    d = theta if kind == "l2" else theta - theta0
    if kind in ("l2", "l2_init"):
        return lam * d
    if kind == "l1_init":
        return lam * d.sign()
    return lam * d.clamp(-delta, delta)


def autograd_grads(reg, params):
    for p in params:
        p.grad = None
    reg().backward()
    out = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out


def add_grad_grads(reg, params):
    for p in params:
        p.grad = None
    reg.add_grad_()
    out = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    return out


KINDS = ["l2", "l2_init", "l1_init", "huber_init"]


# --- value and gradient on a plain nn.Module ------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_autograd_gradient_equals_add_grad_and_the_closed_form(kind):
    model = small_mlp()
    params = list(model.parameters())
    theta0 = [p.detach().clone() for p in params]
    reg = make(kind, model, LAM)
    perturb(params)
    auto, added = autograd_grads(reg, params), add_grad_grads(reg, params)
    for p, p0, a, g in zip(params, theta0, auto, added, strict=True):
        torch.testing.assert_close(a, g, rtol=0, atol=1e-6)
        torch.testing.assert_close(g, closed_form_grad(kind, p.detach(), p0, LAM), rtol=0, atol=1e-12)
    expected = sum(closed_form_value(kind, p.detach(), p0, LAM) for p, p0 in zip(params, theta0, strict=True))
    torch.testing.assert_close(reg().detach(), expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_l2_init_gradient_is_lambda_times_theta_minus_theta0_to_rounding(dtype):
    model = small_mlp(dtype)
    params = list(model.parameters())
    theta0 = [p.detach().clone() for p in params]
    reg = L2Init(model, strength=LAM)
    perturb(params)
    for p, p0, g in zip(params, theta0, add_grad_grads(reg, params), strict=True):
        # add_grad_ computes λθ − λθ₀ (no temporary θ − θ₀): equal up to the rounding of λθ
        tol = 2 * torch.finfo(dtype).eps * LAM * float(p.detach().abs().max())
        torch.testing.assert_close(g, LAM * (p.detach() - p0), rtol=0, atol=tol)
    for p, p0, g in zip(params, theta0, autograd_grads(reg, params), strict=True):
        assert torch.equal(g, LAM * (p.detach() - p0))
    expected = LAM / 2 * sum((p.detach() - p0).square().sum() for p, p0 in zip(params, theta0, strict=True))
    torch.testing.assert_close(reg().detach(), expected)


def test_penalties_are_zero_at_initialisation_and_l2_is_not():
    model = small_mlp()
    for kind in ("l2_init", "l1_init", "huber_init"):
        assert make(kind, model, LAM)().item() == 0.0
    assert L2(model, LAM)().item() > 0


def test_add_grad_accumulates_onto_an_existing_gradient():
    model = small_mlp()
    params = list(model.parameters())
    reg = L2Init(model, LAM)
    perturb(params)
    existing = [torch.full_like(p, 2.0) for p in params]
    for p, e in zip(params, existing, strict=True):
        p.grad = e.clone()
    reg.add_grad_()
    for p, e, p0 in zip(params, existing, reg.initial, strict=True):
        torch.testing.assert_close(p.grad, e + LAM * (p.detach() - p0), rtol=0, atol=1e-15)


@pytest.mark.parametrize("kind", ["l2", "l2_init", "l1_init", "huber_init", "ewc", "wasserstein",
                                  "resample"])
def test_a_captured_penalty_adds_to_given_gradients_what_add_grad_adds_to_grad(kind):
    # add_grads_to_ is the compiled step's form (on the gradients it computes, not .grad): EWC's
    # after a consolidation, so β(Aθ − B) is not 0; Wasserstein Init's with the plain argsort
    # (the same order as its hint's, which float32 takes); the resampled target from a sampler
    # that replays its draw
    model = small_mlp(torch.float32)
    params = list(model.parameters())
    if kind == "ewc":
        reg = EWC(model, LAM)
        reg.consolidate([torch.rand_like(p) for p in params])
    elif kind == "wasserstein":
        reg = WassersteinInit(model, LAM)
    elif kind == "resample":
        draw = [torch.randn_like(p) for p in params]
        reg = L2InitResample(model, LAM, sampler=lambda: draw, on_device=[])
    else:
        reg = make(kind, params, LAM)
    perturb(params)
    assert reg.captured
    existing = [torch.full_like(p, 2.0) for p in params]
    # twice: Wasserstein Init's eager form sorts from its last order the second time
    for _ in range(2):
        for p, e in zip(params, existing, strict=True):
            p.grad = e.clone()
        reg.add_grad_()
        given = [e.clone() for e in existing]
        reg.add_grads_to_(given, [p.detach() for p in params])
        for p, g in zip(params, given, strict=True):
            assert torch.equal(g, p.grad)


def test_penalties_whose_targets_are_drawn_on_the_host_are_not_captured():
    model = small_mlp()
    assert not L2InitResample(model, LAM).captured


def test_theta0_is_a_detached_copy_that_training_does_not_move():
    model = small_mlp()
    reg = L2Init(model, LAM)
    snapshot = [t.clone() for t in reg.initial]
    perturb(list(model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(reg.initial, snapshot, strict=True))
    assert all(not t.requires_grad for t in reg.initial)


def test_l2_init_with_torch_sgd_is_the_spec_closed_form_step():
    torch.manual_seed(3)
    model = small_mlp(torch.float32)
    params = list(model.parameters())
    theta0 = [p.detach().clone() for p in params]
    reg = L2Init(model, strength=1e-2)
    perturb(params, scale=0.3)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    alpha, lam = 0.1, 1e-2

    task_loss = F.cross_entropy(model(x), y)
    grad_task = torch.autograd.grad(task_loss, params)
    theta = [p.detach().clone() for p in params]

    opt = torch.optim.SGD(model.parameters(), lr=alpha)
    opt.zero_grad()
    (F.cross_entropy(model(x), y) + reg()).backward()
    opt.step()
    for p, t, t0, g in zip(params, theta, theta0, grad_task, strict=True):
        expected = (1 - alpha * lam) * t + alpha * lam * t0 - alpha * g
        torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-6)


# --- ensembles: member_dim with a [K] strength -------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_member_k_gradient_and_value_equal_the_single_member_computation(kind):
    K = 3
    strength = torch.tensor([1e-2, 0.0, 0.7], dtype=torch.float64)
    gen = torch.Generator().manual_seed(4)
    stacked = [torch.randn(K, 5, 4, generator=gen, dtype=torch.float64).requires_grad_(),
               torch.randn(K, 5, generator=gen, dtype=torch.float64).requires_grad_()]
    extra = {"delta": torch.tensor([0.5, 1.0, 0.2], dtype=torch.float64)} if kind == "huber_init" else {}
    ens = make(kind, stacked, strength, member_dim=True, **extra)
    singles = []
    for k in range(K):
        member = [p[k].detach().clone().requires_grad_() for p in stacked]
        kw = {"delta": extra["delta"][k].item()} if extra else {}
        singles.append((member, make(kind, member, strength[k].item(), **kw)))
    perturb(stacked, seed=5)
    for k, (member, _) in enumerate(singles):
        with torch.no_grad():
            for m, p in zip(member, stacked, strict=True):
                m.copy_(p[k])

    values = ens.value()
    assert values.shape == (K,)
    ens_added, ens_auto = add_grad_grads(ens, stacked), autograd_grads(ens, stacked)
    for k, (member, single) in enumerate(singles):
        torch.testing.assert_close(values[k], single.value(), rtol=1e-12, atol=0)
        for g_add, g_auto, g_single in zip(ens_added, ens_auto, add_grad_grads(single, member), strict=True):
            torch.testing.assert_close(g_add[k], g_single, rtol=0, atol=1e-15)
            torch.testing.assert_close(g_auto[k], g_single, rtol=0, atol=1e-12)
    # the zero-strength member gets no pull at all
    assert all(torch.all(g[1] == 0) for g in ens_added)


def test_scalar_strength_with_member_dim_applies_to_every_member():
    stacked = [torch.randn(3, 4, dtype=torch.float64)]
    reg = L2(stacked, 0.5, member_dim=True)
    assert reg.strength.shape == (3,)
    torch.testing.assert_close(reg.value(), 0.25 * stacked[0].square().sum(1))


# --- what is regularized -------------------------------------------------------------------------


def test_l2_init_regularizes_biases_too():
    model = small_mlp()
    reg = L2Init(model, LAM)
    biases = [model[0].bias, model[2].bias]
    assert all(any(b is p for p in reg.params) for b in biases)
    perturb(list(model.parameters()))
    reg().backward()
    for b, b0 in ((model[0].bias, reg.initial[1]), (model[2].bias, reg.initial[3])):
        assert torch.equal(b.grad, LAM * (b.detach() - b0))
        assert b.grad.abs().sum() > 0


def test_layer_norm_parameters_are_not_regularized():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.ReLU(), nn.Linear(5, 3))
    params = regularized_parameters(model)
    ln = model[1]
    assert len(params) == 4
    assert all(p is not ln.weight and p is not ln.bias for p in params)
    reg = L2Init(model, LAM)
    perturb(list(model.parameters()))
    reg().backward()
    assert ln.weight.grad is None and ln.bias.grad is None
    assert model[0].weight.grad is not None


def test_ensemble_net_layer_norm_parameters_are_not_regularized():
    net = build_network("mlp", 2, (784,), 10, layer_norm=True)
    reg = L2Init(net, 1e-2, member_dim=True)
    norm_ids = {id(b.norm.weight) for b in net.hidden_blocks} | {id(b.norm.bias) for b in net.hidden_blocks}
    assert len(reg.params) == 6
    assert not norm_ids & {id(p) for p in reg.params}


def test_a_weight_tied_between_two_layers_is_penalised_once():
    embedding, output = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
    output.weight = embedding.weight
    model = nn.Sequential(embedding, output)
    reg = L2Init(model, strength=1.0)
    assert reg.params == [embedding.weight]
    with torch.no_grad():
        embedding.weight.add_(1.0)
    torch.testing.assert_close(reg(), torch.tensor(0.5 * 15))  # (λ/2)·Σ 1² over 15 entries, once


def test_frozen_parameters_are_not_regularized():
    model = small_mlp()
    model[0].weight.requires_grad_(False)
    assert all(p is not model[0].weight for p in regularized_parameters(model))


@pytest.mark.parametrize("factory", [lambda: small_mlp(torch.float32), small_convnet])
def test_drop_in_example_works_on_plain_modules(factory):
    model = factory()
    is_conv = isinstance(model[0], nn.Conv2d)
    x = torch.randn(8, 3, 8, 8) if is_conv else torch.randn(8, 6)
    y = torch.randint(0, 2, (8,))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    reg = L2Init(model, strength=1e-2)
    assert len(reg.params) == len(list(model.parameters()))
    assert reg().item() == 0.0
    for _ in range(3):
        opt.zero_grad()
        task_loss = F.cross_entropy(model(x), y)
        loss = task_loss + reg()
        loss.backward()
        opt.step()
    assert reg().item() > 0
    assert torch.isfinite(reg())


def test_explicit_parameter_list_is_accepted():
    model = small_mlp()
    reg = L2Init([model[0].weight], LAM)
    perturb(list(model.parameters()))
    reg().backward()
    assert model[0].weight.grad is not None and model[2].weight.grad is None


# --- L2 Init + Resample ------------------------------------------------------------------------------


def test_resample_targets_are_fresh_draws_from_the_modules_init_distribution():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(300, 200), nn.ReLU(), nn.Linear(200, 10))
    before = [p.detach().clone() for p in model.parameters()]
    reg = L2InitResample(model, strength=1e-2)
    drawn = []
    for _ in range(3):
        reg()
        drawn.append([t.clone() for t in reg.current])
    # each call draws a new target, and never touches the model itself
    for a, b in zip(drawn, drawn[1:], strict=False):
        assert all(not torch.equal(s, t) for s, t in zip(a, b, strict=True))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before, strict=True))
    for targets in drawn:
        w1, b1, w2, b2 = targets
        for t, fan_in in ((w1, 300), (b1, 300), (w2, 200), (b2, 200)):
            assert t.abs().max() <= 1 / math.sqrt(fan_in)
        bound = 1 / math.sqrt(300)
        assert abs(w1.std().item() - bound / math.sqrt(3)) < 0.05 * bound / math.sqrt(3)


def test_resample_gradient_pulls_toward_the_target_drawn_in_that_call():
    model = small_mlp()
    params = list(model.parameters())
    reg = L2InitResample(model, strength=LAM)
    torch.manual_seed(11)
    auto = autograd_grads(reg, params)
    target_auto = [t.clone() for t in reg.current]
    torch.manual_seed(11)
    added = add_grad_grads(reg, params)
    assert all(torch.equal(a, b) for a, b in zip(target_auto, reg.current, strict=True))
    for p, t, a, g in zip(params, target_auto, auto, added, strict=True):
        torch.testing.assert_close(a, g, rtol=0, atol=1e-12)
        torch.testing.assert_close(g, LAM * (p.detach() - t), rtol=0, atol=1e-15)


def test_resample_with_zero_strength_adds_no_gradient():
    model = small_mlp()
    params = list(model.parameters())
    reg = L2InitResample(model, strength=0.0)
    existing = [torch.randn_like(p) for p in params]
    for p, e in zip(params, existing, strict=True):
        p.grad = e.clone()
    reg.add_grad_()
    assert all(torch.equal(p.grad, e) for p, e in zip(params, existing, strict=True))
    assert reg().item() == 0.0


def test_resample_on_a_tensor_list_needs_a_sampler():
    params = [torch.zeros(3, 2, requires_grad=True)]
    with pytest.raises(ValueError, match="sampler"):
        L2InitResample(params, strength=1e-2)
    reg = L2InitResample(params, strength=1.0, sampler=lambda: [torch.ones(3, 2)])
    torch.testing.assert_close(reg(), torch.tensor(3.0))


def test_resample_sampler_returning_the_wrong_count_is_a_value_error():
    params = [torch.zeros(3, 2, requires_grad=True)]
    reg = L2InitResample(params, strength=1.0, sampler=lambda: [torch.ones(3, 2)] * 2)
    with pytest.raises(ValueError, match="sampler"):
        reg()


class _Scaled(nn.Module):
    """A Linear followed by a learned per-output scale of the module's own (no reset_parameters)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.fc(x) * self.scale


@pytest.mark.parametrize("build", [lambda m: L2InitResample(m, strength=1e-2),
                                   lambda m: ShrinkPerturb(m, shrink=1.0, noise=1.0)])
def test_a_parameter_without_an_init_to_draw_from_is_refused_not_drawn_as_its_theta0(build):
    # Before: the private copy's `scale` came back unchanged at every "draw", so Shrink &
    # Perturb added σ·θ₀ to it each step and Resample pulled it to θ₀.
    with pytest.raises(ValueError, match=r"no init distribution to draw scale from: its module has "
                                         r"no reset_parameters\(\)"):
        build(_Scaled())
    model = _Scaled()
    model.scale.requires_grad_(False)  # frozen: not regularized, not perturbed, nothing to draw
    build(model)


def test_shrink_perturb_of_nothing_is_a_value_error():
    with pytest.raises(ValueError, match="no parameters to shrink and perturb"):
        ShrinkPerturb(nn.Sequential(nn.Flatten()), shrink=0.9, noise=0.1)


# --- argument checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_negative_strength_is_a_value_error(kind):
    with pytest.raises(ValueError, match="strength"):
        make(kind, small_mlp(), -1e-3)
    with pytest.raises(ValueError, match="strength"):
        make(kind, [torch.zeros(3, 2)], torch.tensor([1e-2, -1e-2, 0.0]), member_dim=True)


@pytest.mark.parametrize("delta", [0.0, -0.5])
def test_huber_delta_must_be_positive(delta):
    with pytest.raises(ValueError, match="delta"):
        HuberInit(small_mlp(), 1e-2, delta=delta)


def test_vector_strength_without_member_dim_is_a_value_error():
    with pytest.raises(ValueError, match="member_dim"):
        L2Init(small_mlp(), torch.tensor([1e-2, 1e-3]))


def test_nothing_to_regularize_is_a_value_error_saying_why():
    with pytest.raises(ValueError, match="no parameters to regularize: ReLU has no trainable weight"):
        L2Init(nn.ReLU(), 1e-2)
    frozen = nn.Linear(3, 2).requires_grad_(False)
    with pytest.raises(ValueError, match=r"frozen ones, requires_grad=False, are left out"):
        L2Init(frozen, 1e-2)
    with pytest.raises(ValueError, match="the list of tensors given is empty"):
        L2Init([], 1e-2)


# --- the penalty methods on an ensemble ---------------------------------------------------------------

K = 3
STRENGTHS = [1e-2, 1e-3, 0.5]
DELTAS = [1.0, 0.5, 0.05]


def make_method(name: str):
    cls = METHODS[name]
    per_member = []
    for k in range(K):
        values = {"strength": STRENGTHS[k], "delta": DELTAS[k]}
        per_member.append({p.name: values.get(p.name, p.default) for p in cls.hyperparameters})
    hp = stack_hyperparameters(cls.hyperparameters, per_member, torch.device("cpu"), name)
    net = build_network("mlp", K, (784,), 10, generators=[torch_generator(s, "init") for s in range(K)])
    opt = make_optimizer("adam", net.parameters(), 1e-3)
    method = cls(net, opt, hp, MethodContext(seeds=list(range(K)), device=torch.device("cpu")))
    return method, net


def method_target(name, method, theta0, i):
    if name == "l2":
        return torch.zeros_like(theta0[i])
    if name == "l2_init_resample":
        return method.regularizer.current[i]
    return theta0[i]


def expected_member_grad(name, d, k):
    lam = STRENGTHS[k]
    if name in ("l2", "l2_init", "l2_init_resample"):
        return lam * d
    if name == "l1_init":
        return lam * d.sign()
    return lam * d.clamp(-DELTAS[k], DELTAS[k])


@pytest.mark.parametrize("name", ["l2", "l2_init", "l1_init", "huber_init", "l2_init_resample"])
def test_penalty_method_adds_its_regularizer_gradient_per_member(name):
    method, net = make_method(name)
    params = net.regularized_parameters()
    theta0 = [p.detach().clone() for p in params]
    perturb(params, seed=9, scale=0.1)
    existing = [torch.randn_like(p) for p in params]
    for p, e in zip(params, existing, strict=True):
        p.grad = e.clone()
    add_gradient_transforms(method)
    # autograd of the regularizer's value at the same target (value() does not redraw)
    auto = torch.autograd.grad(method.regularizer.value().sum(), params)
    for i, (p, e) in enumerate(zip(params, existing, strict=True)):
        torch.testing.assert_close(p.grad, e + auto[i], rtol=0, atol=1e-6)
        d = p.detach() - method_target(name, method, theta0, i)
        for k in range(K):
            torch.testing.assert_close(p.grad[k], e[k] + expected_member_grad(name, d[k], k),
                                       rtol=0, atol=1e-6)
    penalty = method.penalty()
    assert penalty.shape == (K,)
    kind = "l2_init" if name == "l2_init_resample" else name
    for k in range(K):
        expected = sum(closed_form_value(kind, p.detach()[k], method_target(name, method, theta0, i)[k],
                                         STRENGTHS[k], DELTAS[k]) for i, p in enumerate(params))
        torch.testing.assert_close(penalty[k], expected, rtol=1e-5, atol=0)


def test_resample_method_draws_a_new_target_from_the_init_distribution_each_step():
    method, net = make_method("l2_init_resample")
    params = net.regularized_parameters()
    for p in params:
        p.grad = torch.zeros_like(p)
    add_gradient_transforms(method)
    first = [t.clone() for t in method.regularizer.current]
    add_gradient_transforms(method)
    second = method.regularizer.current
    assert all(not torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], params[0].detach())
    for layer, w, b in zip(net.affine_layers, second[0::2], second[1::2], strict=True):
        bound = 1 / math.sqrt(layer.fan_in)
        assert w.abs().max() <= bound and b.abs().max() <= bound


def test_baseline_method_adds_nothing():
    method, net = make_method("baseline")
    params = list(net.parameters())
    perturb(params, seed=9, scale=0.1)
    existing = [torch.randn_like(p) for p in params]
    for p, e in zip(params, existing, strict=True):
        p.grad = e.clone()
    method.add_penalty_grad()
    assert all(torch.equal(p.grad, e) for p, e in zip(params, existing, strict=True))
    assert method.penalty() is None


# --- the decay λθ folded into Adam's own pass ---------------------------------------------------

def quadratic_method(name: str, strengths, optimizer: str = "adam", fused: bool = True, **net_kwargs):
    cls = METHODS[name]
    hp = stack_hyperparameters(cls.hyperparameters, [{"strength": s} for s in strengths],
                                torch.device("cpu"), name)
    net = build_network("mlp", len(strengths), (784,), 10,
                        generators=[torch_generator(s, "init") for s in range(len(strengths))],
                        **net_kwargs)
    opt = make_optimizer(optimizer, net.parameters(), 1e-3)
    if optimizer == "adam":
        opt.fused = opt.fused and fused
    method = cls(net, opt, hp, MethodContext(seeds=list(range(len(strengths))),
                                             device=torch.device("cpu")))
    return method, net, opt


@pytest.mark.parametrize("fused", [True, False])
def test_l2s_decay_in_the_update_gives_the_parameters_of_the_decay_added_before_it_to_the_bit(fused):
    in_update, net_a, opt_a = quadratic_method("l2", [0.05] * 3, fused=fused)
    added, net_b, opt_b = quadratic_method("l2", [0.05] * 3, fused=fused)
    unpenalized, net_c, opt_c = quadratic_method("baseline", [0.0] * 3, fused=fused)
    chain_a = Chain(in_update, opt_a)
    with plain_forms():  # g + λθ into .grad, then Adam
        chain_b = Chain(added, opt_b)
    chain_c = Chain(unpenalized, opt_c)
    assert chain_a.decay == pytest.approx(0.05) and not chain_a.penalties
    assert chain_b.decay == 0.0 and chain_b.penalties == [added.regularizer]
    assert opt_a.weight_decay == 0.0  # the optimizer's own setting is left as it is
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        grads = [torch.randn(p.shape, generator=gen) * 1e-2 for p in net_a.parameters()]
        for chain, net in ((chain_a, net_a), (chain_b, net_b), (chain_c, net_c)):
            for p, g in zip(net.parameters(), grads, strict=True):
                p.grad = g.clone()
            chain.transform_gradient()
            chain.update()
    for a, b in zip(net_a.parameters(), net_b.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(net_a.blocks[0].affine.weight, net_c.blocks[0].affine.weight)


def test_the_decay_goes_to_the_update_only_where_the_numbers_stay_the_same():
    def in_update(*args, **kwargs):
        method, _, opt = quadratic_method(*args, **kwargs)
        return decay_in_update(method.penalties(), opt) is not None

    assert in_update("l2", [1e-2, 1e-2])
    assert not in_update("l2_init", [1e-2, 1e-2])  # a target: the difference comes first
    assert not in_update("l2", [1e-2, 1e-3])  # λ differs per member
    assert not in_update("l2", [1e-2], optimizer="sgd")
    # LayerNorm gains are in the optimizer but not in the penalty
    assert not in_update("l2", [1e-2], layer_norm=True)
    _, net, _ = quadratic_method("l2", [1e-2])
    opt = make_optimizer("adam", net.parameters(), 1e-3)
    opt.weight_decay = 1e-4  # an optimizer with a decay of its own takes no other
    assert decay_in_update([L2(net, 1e-2, member_dim=True)], opt) is None
    # off the CPU (where the identity is untested, and on CUDA did not hold) the decay stays apart
    reg = L2(net, 1e-2, member_dim=True)
    reg.params = [p.to("meta") for p in reg.params]  # (a device that is not the CPU)
    assert decay_in_update([reg], make_optimizer("adam", reg.params, 1e-3)) is None
    with plain_forms():  # the plain form: never
        assert decay_in_update([L2(net, 1e-2, member_dim=True)],
                               make_optimizer("adam", net.parameters(), 1e-3)) is None


def test_a_checkpoint_that_kept_the_decay_as_adams_own_weight_decay_resumes_with_it_once():
    method, _, opt = quadratic_method("l2", [0.05] * 2)
    chain = Chain(method, opt)
    # an earlier version kept λ (as the penalty holds it) as Adam's own weight decay
    opt.load_state_dict({**opt.state_dict(), "weight_decay": chain.decay})
    chain.resumed()
    assert opt.weight_decay == 0.0 and chain.decay == pytest.approx(0.05)


@pytest.mark.parametrize("name", ["l2", "l2_init", "l1_init"])
def test_the_kept_difference_adds_what_a_fresh_difference_adds_to_the_bit(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    reg = {"l2": L2, "l2_init": L2Init, "l1_init": L1Init}[name](model, strength=0.3)
    for step in range(3):  # the kept buffers serve again at every step
        perturb(list(model.parameters()), seed=4 + step, scale=0.5)
        grads = [torch.randn_like(p) for p in model.parameters()]
        for p, g in zip(model.parameters(), grads, strict=True):
            p.grad = g.clone()
        reg.add_grad_()
        for p, g, t in zip(model.parameters(), grads, reg.targets(), strict=True):
            d = p.detach() if t is None else p.detach() - t  # a fresh temporary
            assert torch.equal(p.grad, torch.addcmul(g, reg.strength, reg.rho_grad(d)))
            torch.testing.assert_close(p.grad, g + 0.3 * reg.rho_grad(d))  # as written


def test_l2_inits_gradient_is_exactly_zero_where_a_weight_is_at_its_initial_value():
    # A weight on an always-blank pixel gets no task gradient: it must get no penalty gradient
    # either while it sits at θ₀ — Adam would turn any residue into a step of order α.
    method, net, opt = quadratic_method("l2_init", [1e-2, 3e-2])
    params = list(net.regularized_parameters())
    with torch.no_grad():
        params[0][:, :, 5:].add_(0.25)  # moved; the rest still at θ₀
    for p in params:
        p.grad = torch.zeros_like(p)
    Chain(method, opt).transform_gradient()
    assert bool((params[0].grad[:, :, :5] == 0).all())
    assert bool((params[0].grad[:, :, 5:] != 0).all())
    assert all(bool((p.grad == 0).all()) for p in params[1:])
    before = [p.detach().clone() for p in params]
    opt.step()
    assert torch.equal(params[0][:, :, :5], before[0][:, :, :5])
    assert all(torch.equal(p, b) for p, b in zip(params[1:], before[1:], strict=True))
