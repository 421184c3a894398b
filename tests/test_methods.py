"""Shrink & Perturb, Concat ReLU, Layer Norm, EWC, L2 Init + EWC; and every method on every
problem under Adam and SGD."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import add_gradient_transforms
from plasticlab import EWC, ShrinkPerturb
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.fisher import diagonal_fisher
from plasticlab.methods import METHODS, Method, MethodContext, boundary_oracle, method_title
from plasticlab.nets import build_network, concat_relu_scale, layer_plan, plan_parameter_count
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members, stack_hyperparameters

TINY_MNIST = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 25,
              "problem_params": {"examples_per_task": 400}}


def make_method(name, params=None, members=3, arch=("mlp", (784,), 10)):
    cls = METHODS[name]
    hp = stack_hyperparameters(cls.hyperparameters,
                                [dict({p.name: p.default for p in cls.hyperparameters}, **(params or {}))]
                                * members, "cpu", name)
    plain = {"arch": arch[0], "input_shape": arch[1], "num_outputs": arch[2], "width": 1.0,
             "extra_layers": 0}
    net = build_network(members=members, generators=[torch_generator(s, "init") for s in range(members)],
                        **plain, **cls.architecture(hp, plain))
    opt = Adam(list(net.parameters()), lr=1e-3)
    return cls(net, opt, hp, MethodContext(list(range(members)), torch.device("cpu"))), net


# --- Shrink & Perturb ------------------------------------------------------------------------

def test_every_method_has_a_title_of_its_own_and_a_name_none_has_is_shown_as_it_is():
    # reports, claims and the field's table name a method by its title ("L2 Init"), not its key
    titles = {name: method_title(name) for name in METHODS}
    assert all(title and title == title.strip() and title != name for name, title in titles.items())
    assert len(set(titles.values())) == len(titles)
    assert (method_title("l2_init"), method_title("shrink_perturb")) == ("L2 Init", "Shrink & Perturb")
    assert method_title("a_method_of_another_version") == "a_method_of_another_version"


def test_shrink_perturb_with_p_1_and_sigma_0_is_the_baseline_exactly(data_dir):
    sp = train_ensemble(Members.from_config(resolve_config({**TINY_MNIST, "method": "shrink_perturb",
                                        "params": {"shrink": 1.0, "noise": 0.0}}), [2]),
                        data_dir=data_dir)
    base = train_ensemble(Members.from_config(resolve_config({**TINY_MNIST, "method": "baseline"}), [2]),
                          data_dir=data_dir)
    assert sp.members[0].task_online_accuracy == base.members[0].task_online_accuracy


def test_shrink_perturb_step_is_p_theta_plus_sigma_times_a_fresh_init_draw():
    method, net = make_method("shrink_perturb", {"shrink": 0.9, "noise": 0.5}, members=2)
    before = [p.detach().clone() for p in net.regularized_parameters()]
    expected_noise = net.sample_init(MethodContext([0, 1], torch.device("cpu")).generators("shrink_perturb"))
    method.after_step([], None, 1)
    for p, b, eps in zip(net.regularized_parameters(), before, expected_noise, strict=True):
        torch.testing.assert_close(p.detach(), 0.9 * b + 0.5 * eps)


def test_shrink_perturb_noise_is_drawn_from_the_layers_init_distribution():
    method, net = make_method("shrink_perturb", {"shrink": 0.0, "noise": 1.0}, members=2)
    method.after_step([], None, 1)
    w = net.blocks[0].affine.weight
    bound = 1 / 784 ** 0.5
    assert w.abs().max() <= bound
    assert w.std().item() == pytest.approx(bound / 3 ** 0.5, rel=0.02)


def test_shrink_perturb_drop_in_on_a_plain_module():
    model = nn.Sequential(nn.Linear(50, 20), nn.ReLU(), nn.Linear(20, 3))
    before = model[0].weight.detach().clone()
    ShrinkPerturb(model, shrink=0.5, noise=0.0).step()
    torch.testing.assert_close(model[0].weight.detach(), 0.5 * before)
    ShrinkPerturb(model, shrink=0.0, noise=1.0).step()
    assert model[0].weight.abs().max() <= 1 / 50 ** 0.5
    with pytest.raises(ValueError, match="shrink"):
        ShrinkPerturb(model, shrink=1.5, noise=0.0)
    # the values as written, not as float32 rounds them (0.1 → 0.10000000149011612)
    with pytest.raises(ValueError, match=r"got shrink 0.9, noise -0.1$"):
        ShrinkPerturb(model, shrink=0.9, noise=-0.1)


# --- Concat ReLU, Layer Norm -----------------------------------------------------------------

@pytest.mark.parametrize("arch,shape,outputs,removed", [
    ("mlp", (784,), 10, 0.09), ("cnn", (3, 32, 32), 10, 0.27), ("cnn", (3, 32, 32), 2, 0.27),
    ("cnn", (3, 32, 32), 100, 0.31),
])
def test_concat_relu_shrinks_by_the_papers_fractions(arch, shape, outputs, removed):
    scale = concat_relu_scale(arch, shape, outputs)
    assert 1 - scale == pytest.approx(removed)
    plain = plan_parameter_count(layer_plan(arch, shape, outputs))
    crelu = lambda s: plan_parameter_count(layer_plan(arch, shape, outputs, activation="concat_relu",  # noqa: E731
                                                      hidden_scale=s))
    assert crelu(scale) >= plain > crelu(scale - 0.01)


def test_concat_relu_network_has_at_least_the_plain_parameter_count_and_doubles_fan_in():
    method, net = make_method("concat_relu", members=1)
    assert net.parameter_count() >= build_network("mlp", 1, (784,), 10).parameter_count()
    assert net.blocks[0].affine.out_features == 91
    assert net.blocks[1].affine.in_features == 182


def test_layer_norm_sits_before_each_hidden_activation_and_is_not_regularized():
    method, net = make_method("layer_norm", members=2, arch=("cnn", (3, 32, 32), 10))
    norms = [b.norm for b in net.hidden_blocks]
    assert all(n is not None for n in norms) and net.blocks[-1].norm is None
    assert norms[0].normalized_shape == (16, 28, 28)  # over C, H, W of the conv output
    norm_params = {id(p) for n in norms for p in n.parameters()}
    assert not norm_params & {id(p) for p in net.regularized_parameters()}


# --- EWC ---------------------------------------------------------------------------------------

def test_ewc_penalty_is_zero_before_the_first_task_end():
    method, net = make_method("ewc", members=2)
    assert torch.equal(method.penalty(), torch.zeros(2))


def test_ewc_sum_anchor_gradient_equals_the_sum_over_tasks_of_fisher_weighted_anchors():
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    ewc = EWC(model, strength=2.0, anchor="sum")
    anchors, fishers = [], []
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        f = [torch.rand_like(p) for p in model.parameters()]
        anchors.append([p.detach().clone() for p in model.parameters()])
        fishers.append(f)
        ewc.consolidate(f)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    explicit = sum(0.5 * 2.0 * (f * (p - a) ** 2).sum()
                   for fs, anc in zip(fishers, anchors, strict=True)
                   for p, f, a in zip(model.parameters(), fs, anc, strict=True))
    torch.testing.assert_close(ewc(), explicit, rtol=1e-4, atol=1e-5)
    grads = torch.autograd.grad(explicit, list(model.parameters()))
    ewc.add_grad_()
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


def test_diagonal_fisher_is_the_mean_squared_per_example_score_with_model_sampled_labels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 3))
    x = torch.randn(7, 5)
    gen = torch_generator(0, "fisher")
    fisher = diagonal_fisher(lambda xb: model(xb[0])[None], list(model.parameters()), x[None], [gen])
    gen = torch_generator(0, "fisher")  # same labels, drawn independently here
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for n in range(7):
        logp = torch.log_softmax(model(x[n:n + 1])[0], -1)
        u = torch.rand((), generator=gen)
        y = int((logp.exp().cumsum(-1) < u).sum().clamp(max=2))
        for e, g in zip(expected, torch.autograd.grad(logp[y], list(model.parameters())), strict=True):
            e += g * g / 7
    for f, e in zip(fisher, expected, strict=True):
        torch.testing.assert_close(f, e)


def test_l2_init_ewc_adds_both_penalties_gradients():
    method, net = make_method("l2_init_ewc", {"strength": 1e-2, "ewc_strength": 3.0}, members=2)
    l2_only, _ = make_method("l2_init", {"strength": 1e-2}, members=2)
    with torch.no_grad():
        for p, q in zip(net.parameters(), l2_only.net.parameters(), strict=True):
            p.add_(0.1)
            q.add_(0.1)
    method.ewc.consolidate([torch.ones_like(p) for p in method.ewc.params])
    with torch.no_grad():
        for p, q in zip(net.parameters(), l2_only.net.parameters(), strict=True):
            p.add_(0.1)
            q.add_(0.1)
    assert method.penalties() == [method.l2_init, method.ewc]  # λ(θ − θ₀) first, then EWC's
    add_gradient_transforms(method)
    l2_only.regularizer.add_grad_()
    w, w2 = net.blocks[0].affine.weight, l2_only.net.blocks[0].affine.weight
    torch.testing.assert_close(w.grad, w2.grad + 3.0 * 0.1 * torch.ones_like(w))


BOUNDARY_ORACLES = {"ewc", "l2_init_ewc", "full_reset", "head_reset", "fire",  # SPEC §1, §10
                    "dash", "plasticity_injection"}  # issue 47


def test_only_the_boundary_oracles_use_the_task_end_signal_and_are_marked():
    from plasticlab.methods import boundary_oracle
    from plasticlab.methods.base import Method

    users = {name for name, cls in METHODS.items() if cls.on_task_end is not Method.on_task_end}
    assert users <= BOUNDARY_ORACLES
    # every oracle is registered, and exactly the oracles are marked as privileged
    assert BOUNDARY_ORACLES <= set(METHODS)
    assert {name for name in METHODS if boundary_oracle(name)} == users


# --- every method × every problem × both optimizers ---------------------------------------------

PROBLEM_SETTINGS = {
    "permuted_mnist": ("data_dir", {"tasks": 2, "steps_per_task": 3,
                                    "problem_params": {"examples_per_task": 64}}),
    "random_label_mnist": ("data_dir", {"tasks": 2, "steps_per_task": 3,
                                        "problem_params": {"examples": 64}}),
    "random_label_cifar": ("data_dir", {"tasks": 2, "steps_per_task": 3,
                                        "problem_params": {"examples": 64}}),
    "five_plus_one_cifar": ("cifar100_dir", {"tasks": 2, "steps_per_task": 3, "batch_size": 10}),
    "continual_imagenet": ("imagenet_dir", {"tasks": 2, "steps_per_task": 3, "batch_size": 20}),
}
FAST_PARAMS = {"ewc": {"fisher_samples": 4}, "l2_init_ewc": {"fisher_samples": 4},
               "cbp": {"replacement_rate": 0.5, "maturity": 1}, "redo": {"period": 2},
               "dash": {"samples": 16}}  # G on 16 examples, not the whole task (half a CNN case)


@pytest.mark.parametrize("optimizer,lr", [("adam", 1e-3), ("sgd", 1e-2)])
@pytest.mark.parametrize("problem", list(PROBLEM_SETTINGS))
def test_every_method_runs_two_short_tasks_on_every_problem(request, problem, optimizer, lr):
    fixture, settings = PROBLEM_SETTINGS[problem]
    data = request.getfixturevalue(fixture)
    for method in METHODS:
        cfg = resolve_config({"problem": problem, "method": method, "optimizer": optimizer, "lr": lr,
                              "params": FAST_PARAMS.get(method, {}), **settings})
        result = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data, measure=False)
        accs = result.members[1].task_online_accuracy
        assert len(accs) == 2 and all(0 <= a <= 1 for a in accs), method


@pytest.mark.parametrize("method,params", [
    ("shrink_perturb", {"shrink": 0.999, "noise": 1e-2}), ("concat_relu", {}), ("layer_norm", {}),
    ("ewc", {"ewc_strength": 10.0, "fisher_samples": 8}),
    ("l2_init_ewc", {"strength": 1e-2, "ewc_strength": 10.0, "fisher_samples": 8}),
])
def test_member_k_equals_seed_k_alone_for_the_baselines(data_dir, method, params):
    cfg = resolve_config({**TINY_MNIST, "method": method, "params": params})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2, 3]), data_dir=data_dir)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir)
    assert together.members[2].task_online_accuracy == pytest.approx(
        alone.members[0].task_online_accuracy, abs=1e-5)


HOOKS = {"before_step": "before_step", "after_step": "after_step", "task_end": "on_task_end",
         "gradient_hook": "add_penalty_grad", "penalties": "penalties",
         "task_loss": "observe_task_loss", "some_steps": "acts_after"}


def _declarations(cls) -> list:
    """The method's declared needs at its defaults and at every choice of each parameter."""
    defaults = cls.default_params()
    settings = [defaults] + [dict(defaults, **{p.name: c}) for p in cls.hyperparameters
                             for c in (p.choices or ())]
    return [cls.needs(params) for params in settings]


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_declares_exactly_the_links_it_adds_to_the_step(name):
    # the step's forms read only the declaration: a hook the method overrides but does not
    # declare would never run, a declared one it does not override would cost for nothing
    cls = METHODS[name]
    declared = _declarations(cls)
    for flag, hook in HOOKS.items():
        overrides = getattr(cls, hook) is not getattr(Method, hook)
        assert any(getattr(n, flag) for n in declared) == overrides, (name, flag)
    if any(n.features for n in declared):
        assert all(n.after_step for n in declared if n.features), name  # features go to after_step
    assert boundary_oracle(name) == any(n.task_end for n in declared)
