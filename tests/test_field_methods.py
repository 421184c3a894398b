"""The methods since the paper (SPEC §10), each against an independent, literal implementation
of its rule on a tiny float64 network, with hand-checked edge cases."""

from __future__ import annotations

import math

import pytest
import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS, MethodContext
from plasticlab.methods.fire import fire_weight, newton_schulz
from plasticlab.methods.parseval import parseval_penalty
from plasticlab.methods.swr import low_utility
from plasticlab.nets import build_network
from plasticlab.nets.init import draw
from plasticlab.optim import SGD, Adam
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members, stack_hyperparameters

TINY_MLP = ("mlp", (6,), 3, 0.04)  # 6 → 4 → 4 → 3
TINY_CNN = ("cnn", (2, 16, 16), 3, 0.25)  # conv 4ch 5×5 → pool → conv 4ch → pool → 25 → 25 → 3
TINY_MNIST = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 6,
              "problem_params": {"examples_per_task": 96}}


def f32(value: float) -> float:
    """``value`` as the engine holds a per-member hyper-parameter (a float32 tensor)."""
    return float(torch.tensor(value, dtype=torch.float32))


def tiny(name, params=None, members=2, arch=TINY_MLP, optimizer="adam", seeds=None):
    """(method, net, optimizer) on a tiny float64 network; ``params`` may hold per-member lists."""
    cls = METHODS[name]
    params = dict(params or {})
    per_member = [{p.name: (params[p.name][k] if isinstance(params.get(p.name), list)
                            else params.get(p.name, p.default)) for p in cls.hyperparameters}
                  for k in range(members)]
    hp = stack_hyperparameters(cls.hyperparameters, per_member, "cpu", name)
    kind, shape, outputs, width = arch
    seeds = list(range(members)) if seeds is None else seeds
    net = build_network(kind, members, shape, outputs, width=width,
                        generators=[torch_generator(s, "init") for s in seeds]).to(torch.float64)
    params_list = list(net.parameters())
    opt = Adam(params_list, lr=1e-2, fused=False) if optimizer == "adam" else SGD(params_list, lr=1e-1)
    return cls(net, opt, hp, MethodContext(seeds, torch.device("cpu"))), net, opt


def inputs(arch, members=2, batch=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(members, batch, *arch[1], generator=g, dtype=torch.float64)


def backward(net, x, seed=1):
    """Fill ``.grad`` with the gradient of a random-label cross-entropy on ``x``."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, x.shape[:2], generator=g)
    for p in net.parameters():
        p.grad = None
    logits = net(x)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()


# --- Parseval ------------------------------------------------------------------------------------

def literal_parseval(weights_of_member, lam, s):
    total = 0.0
    for w in weights_of_member:
        m = w.reshape(w.shape[0], -1)
        total = total + ((m @ m.T - s * torch.eye(m.shape[0], dtype=m.dtype)) ** 2).sum()
    return lam * total


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_parseval_penalty_is_lambda_sum_of_squared_gram_residuals_of_hidden_weights(arch):
    method, net, _ = tiny("parseval", {"strength": [1e-2, 3e-1], "scale": [1.0, 2.0]}, arch=arch)
    hidden = [b.affine.weight for b in net.hidden_blocks]
    expected = [literal_parseval([w[k] for w in hidden], lam, s)
                for k, (lam, s) in enumerate([(f32(1e-2), 1.0), (f32(3e-1), 2.0)])]
    torch.testing.assert_close(method.penalty(), torch.stack(expected))


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_parseval_gradient_equals_autograd_of_the_penalty(arch):
    method, net, _ = tiny("parseval", {"strength": [1e-2, 3e-1], "scale": [1.0, 2.0]}, arch=arch)
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    method.add_penalty_grad()
    hidden = [b.affine.weight for b in net.hidden_blocks]
    autograd = torch.autograd.grad(parseval_penalty(hidden, method.strength, method.scale).sum(), hidden)
    for w, expected in zip(hidden, autograd, strict=True):
        torch.testing.assert_close(w.grad, expected)
    # never the output layer, never a bias
    assert not net.blocks[-1].affine.weight.grad.any()
    assert not any(b.affine.bias.grad.any() for b in net.blocks)


def test_parseval_penalty_and_gradient_vanish_on_scaled_orthogonal_weights():
    method, net, _ = tiny("parseval", {"strength": 1.0, "scale": 2.0})
    with torch.no_grad():
        for block in net.hidden_blocks:
            w = block.affine.weight
            q, _ = torch.linalg.qr(torch.randn(w.shape[0], w.shape[2], w.shape[1], dtype=w.dtype))
            w.copy_(math.sqrt(2.0) * q.transpose(1, 2))  # rows orthogonal, norm √2: W Wᵀ = 2I
    for p in net.parameters():
        p.grad = torch.zeros_like(p)
    method.add_penalty_grad()
    torch.testing.assert_close(method.penalty(), torch.zeros(2, dtype=torch.float64))
    assert all(b.affine.weight.grad.abs().max() < 1e-12 for b in net.hidden_blocks)


# --- SWR -----------------------------------------------------------------------------------------

def test_swr_threshold_rule_reinitializes_low_utility_weights_from_init_and_biases_to_zero():
    rho = [1e-1, 5e-1]
    method, net, _ = tiny("swr", {"threshold": rho, "period": 1})
    x = inputs(TINY_MLP)
    backward(net, x)
    before = [p.detach().clone() for p in net.parameters()]
    grads = [p.grad.clone() for p in net.parameters()]
    method.after_step([], x, 1)
    # the literal rule, member by member, tensor by tensor, with the member's own draws
    for k in range(2):
        gen = torch_generator(k, "method", "swr")
        i = 0
        for layer in net.affine_layers:
            fresh_w, _ = draw("torch_default", tuple(layer.weight.shape[1:]), layer.fan_in,
                              layer.fan_out, gen)
            for fresh in (fresh_w.double(), torch.zeros(layer.bias.shape[1:], dtype=torch.float64)):
                w, g = before[i][k], grads[i][k]
                u = (g * w).abs()
                reinit = u <= f32(rho[k]) * u.mean()
                expected = torch.where(reinit, fresh, w)
                torch.testing.assert_close(list(net.parameters())[i][k], expected)
                i += 1


def test_swr_with_rho_zero_reinitializes_exactly_the_zero_utility_entries_biases_included():
    method, net, _ = tiny("swr", {"threshold": 0.0, "period": 1})
    layer = net.affine_layers[0]
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    with torch.no_grad():
        layer.weight.grad[0, 1, 2] = 0.0  # zero gradient: utility 0
        layer.weight[1, 3, 0] = 0.0  # zero weight: utility 0
        layer.bias[0, 2] = 0.7
        layer.bias.grad[0, 2] = 0.0
    before_w, before_b = layer.weight.detach().clone(), layer.bias.detach().clone()
    counts = method.reinitialize([True, True])
    changed = layer.weight != before_w
    assert changed.sum() == 2 and changed[0, 1, 2] and changed[1, 3, 0]  # both redrawn
    assert layer.bias[0, 2] == 0.0 and (layer.bias != before_b).sum() == 1
    assert counts.tolist() == [2, 1]


def test_swr_mask_is_per_member_mean_and_inclusive():
    w = torch.tensor([[[1.0, 2.0, 3.0]], [[1.0, 1.0, 1.0]]], dtype=torch.float64)
    g = torch.ones_like(w)
    mask = low_utility(w, g, torch.tensor([1.0, 1.0]))
    # member 0: mean 2 → entries 1, 2 (≤, inclusive); member 1: all equal the mean
    assert mask.tolist() == [[[True, True, False]], [[True, True, True]]]


def test_swr_acts_only_for_members_whose_period_is_due_and_draws_only_for_them():
    method, net, _ = tiny("swr", {"threshold": 1.0, "period": [2, 3]})
    x = inputs(TINY_MLP)
    backward(net, x)
    before = [p.detach().clone() for p in net.parameters()]
    method.after_step([], x, 2)
    after = list(net.parameters())
    assert any((a[0] != b[0]).any() for a, b in zip(after, before, strict=True))
    assert all(torch.equal(a[1], b[1]) for a, b in zip(after, before, strict=True))
    # member 1's generator has not moved: its first draw is still the stream's first
    fresh = torch_generator(1, "method", "swr")
    assert torch.equal(method.generators[1].get_state(), fresh.get_state())


# --- Hare & Tortoise -----------------------------------------------------------------------------

def test_hare_tortoise_tortoise_is_the_ema_of_the_hare_after_every_step():
    method, net, opt = tiny("hare_tortoise", {"momentum": [0.9, 0.5], "reset_period": 1000})
    x = inputs(TINY_MLP)
    tortoise = [p.detach().clone() for p in net.parameters()]
    for step in (1, 2, 3):
        backward(net, x, seed=step)
        opt.step()
        method.after_step([], x, step)
        for i, hare in enumerate(net.parameters()):
            m = torch.tensor([f32(0.9), 0.5], dtype=torch.float64).view(-1, *[1] * (hare.dim() - 1))
            tortoise[i] = m * tortoise[i] + (1 - m) * hare.detach()
            torch.testing.assert_close(method.tortoise[i], tortoise[i])


def test_hare_tortoise_reset_copies_the_tortoise_into_the_hare_and_the_next_step_leaves_it_alone():
    method, net, opt = tiny("hare_tortoise", {"momentum": 0.9, "reset_period": [2, 5]})
    x = inputs(TINY_MLP)
    for step in (1, 2):
        backward(net, x, seed=step)
        opt.step()
        method.after_step([], x, step)
    hare, tortoise = list(net.parameters()), method.tortoise
    for h, t in zip(hare, tortoise, strict=True):
        assert torch.equal(h[0], t[0])  # member 0: reset at step 2
        assert not torch.equal(h[1], t[1])  # member 1: not yet
        assert h.data_ptr() != t.data_ptr()  # a copy, never shared storage
    saved = [t.clone() for t in tortoise]
    moments = [m.clone() for m in opt.exp_avg]
    backward(net, x, seed=3)
    opt.step()  # the hare moves; the tortoise does not
    assert all(torch.equal(t, s) for t, s in zip(tortoise, saved, strict=True))
    assert not torch.equal(hare[0][0], tortoise[0][0])
    # the optimizer's state was not reset by the copy: the moments kept their history
    assert all(m.abs().sum() > 0 for m in moments)


def test_hare_tortoise_measures_the_tortoises_test_accuracy_at_each_task_end(data_dir):
    def run(momentum, reset_period, measure=True):
        cfg = resolve_config({**TINY_MNIST, "lr": 1e-2, "method": "hare_tortoise",
                              "params": {"momentum": momentum, "reset_period": reset_period}})
        return train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=measure).members

    # m = 0: the tortoise is the hare after every step
    for member in run(0.0, 1000):
        assert len(member.task_metrics["tortoise_test_accuracy"]) == TINY_MNIST["tasks"]
        assert member.task_metrics["tortoise_test_accuracy"] == member.task_metrics["task_test_accuracy"]
    # m = 1: the tortoise stays θ₀ — the hare of a run reset to it after every step
    frozen, at_theta0 = run(1.0, 1000), run(1.0, 1)
    for f, z in zip(frozen, at_theta0, strict=True):
        assert f.task_metrics["tortoise_test_accuracy"] == z.task_metrics["task_test_accuracy"]
        assert f.task_metrics["tortoise_test_accuracy"] != f.task_metrics["task_test_accuracy"]
    # measuring the tortoise in the hare's place leaves the hare's training as it was
    unmeasured = run(1.0, 1000, measure=False)
    assert [m.task_online_accuracy for m in frozen] == [m.task_online_accuracy for m in unmeasured]


# --- full reset, head reset ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["full_reset", "head_reset"])
def test_boundary_reset_restores_theta0_and_a_fresh_optimizer(name):
    method, net, opt = tiny(name)
    theta0 = [p.detach().clone() for p in net.parameters()]
    x = inputs(TINY_MLP)
    for step in (1, 2):
        backward(net, x, seed=step)
        opt.step()
    trained = [p.detach().clone() for p in net.parameters()]
    method.on_task_end(None)
    reset = {id(p) for p in net.affine_layers[-1].parameters()} if name == "head_reset" else None
    for p, p0, pt in zip(net.parameters(), theta0, trained, strict=True):
        expected = p0 if reset is None or id(p) in reset else pt
        assert torch.equal(p, expected)
    assert opt.step_counts == [0] * len(opt.params)
    assert all(not m.any() and not v.any() for m, v in zip(opt.exp_avg, opt.exp_avg_sq, strict=True))


def test_full_reset_fresh_draws_from_the_members_own_stream_and_can_keep_the_optimizer():
    method, net, opt = tiny("full_reset", {"reinit": "fresh", "reset_optimizer": False}, seeds=[4, 7])
    x = inputs(TINY_MLP)
    backward(net, x)
    opt.step()
    moments = [m.clone() for m in opt.exp_avg]
    method.on_task_end(None)
    for k, seed in enumerate([4, 7]):
        gen = torch_generator(seed, "method", "full_reset")
        for layer in net.affine_layers:
            w, b = draw("torch_default", tuple(layer.weight.shape[1:]), layer.fan_in, layer.fan_out, gen)
            assert torch.equal(layer.weight[k], w.double()) and torch.equal(layer.bias[k], b.double())
    assert opt.step_counts == [1] * len(opt.params)
    assert all(torch.equal(m, s) for m, s in zip(opt.exp_avg, moments, strict=True))


# --- FIRE ----------------------------------------------------------------------------------------

def literal_newton_schulz(w, iters):
    x = w / torch.linalg.matrix_norm(w)
    transposed = x.shape[0] < x.shape[1]
    if transposed:
        x = x.T
    for _ in range(iters):
        x = 1.5 * x - 0.5 * x @ x.T @ x
    return x.T if transposed else x


@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (5, 5)])
def test_newton_schulz_converges_to_the_polar_factor_on_well_conditioned_matrices(shape):
    g = torch.Generator().manual_seed(3)
    n = min(shape)
    u, _ = torch.linalg.qr(torch.randn(shape[0], n, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(shape[1], n, generator=g, dtype=torch.float64))
    w = u @ torch.diag(torch.linspace(1.0, 2.0, n, dtype=torch.float64)) @ v.T
    torch.testing.assert_close(newton_schulz(w[None], 12)[0], u @ v.T, atol=1e-9, rtol=0)
    torch.testing.assert_close(newton_schulz(w[None], 7)[0], literal_newton_schulz(w, 7))


def test_fire_linear_weight_is_scaled_newton_schulz_and_member_iterations_are_their_own():
    g = torch.Generator().manual_seed(5)
    w = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
    out = fire_weight(w, torch.tensor([10, 0]))
    torch.testing.assert_close(out[0], math.sqrt(3 / 8) * literal_newton_schulz(w[0], 10))
    torch.testing.assert_close(out[1], math.sqrt(3 / 8) * w[1] / torch.linalg.matrix_norm(w[1]))


def test_fire_conv_treats_each_spatial_slice_separately_scaled_by_the_kernel_area():
    g = torch.Generator().manual_seed(6)
    w = torch.randn(2, 4, 3, 2, 3, generator=g, dtype=torch.float64)  # [K, out, in, kh, kw]
    out = fire_weight(w, 10)
    for k in range(2):
        for i in range(2):
            for j in range(3):
                expected = math.sqrt(4 / 3) / 6 * literal_newton_schulz(w[k, :, :, i, j], 10)
                torch.testing.assert_close(out[k, :, :, i, j], expected)


@pytest.mark.parametrize("arch", [TINY_MLP, TINY_CNN], ids=["mlp", "cnn"])
def test_fire_at_task_end_replaces_every_weight_keeps_biases_and_restarts_the_optimizer(arch):
    method, net, opt = tiny("fire", arch=arch)
    x = inputs(arch)
    backward(net, x)
    opt.step()
    weights = [layer.weight.detach().clone() for layer in net.affine_layers]
    biases = [layer.bias.detach().clone() for layer in net.affine_layers]
    method.on_task_end(None)
    for layer, w, b in zip(net.affine_layers, weights, biases, strict=True):
        torch.testing.assert_close(layer.weight, fire_weight(w, 10))
        assert torch.equal(layer.bias, b)
    assert opt.step_counts == [0] * len(opt.params) and not any(m.any() for m in opt.exp_avg)


# --- every new method in the engine ---------------------------------------------------------------

NEW_METHODS = {"snr": {"initial_threshold": 32, "adapt_period": 4}, "parseval": {"strength": 1e-3},
               "swr": {"period": 3, "threshold": 1e-1},
               "hare_tortoise": {"momentum": 0.9, "reset_period": 4}, "full_reset": {},
               "head_reset": {"reinit": "fresh"}, "fire": {"iters": 5}}


@pytest.mark.parametrize("name", list(NEW_METHODS))
def test_member_k_equals_seed_k_alone(data_dir, name):
    cfg = resolve_config({**TINY_MNIST, "method": name, "params": NEW_METHODS[name]})
    together = train_ensemble(Members.from_config(cfg, [0, 1, 2]), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [2]), data_dir=data_dir, measure=False)
    assert together.members[2].task_online_accuracy == alone.members[0].task_online_accuracy


def test_a_per_member_grid_runs_in_one_ensemble_as_its_members_alone(data_dir):
    cfg = resolve_config({**TINY_MNIST, "method": "swr", "params": {}})
    grid = [{"period": 2, "threshold": 0.5}, {"period": 3, "threshold": 1e-1}]
    together = train_ensemble(Members.from_config(cfg, [0, 1], params=grid), data_dir=data_dir, measure=False)
    alone = train_ensemble(Members.from_config(cfg, [1], params=grid[1:]), data_dir=data_dir, measure=False)
    assert together.members[1].task_online_accuracy == alone.members[0].task_online_accuracy


@pytest.mark.parametrize("name", list(NEW_METHODS))
def test_no_host_round_trip_per_step(data_dir, monkeypatch, name):
    from conftest import assert_host_reads_do_not_grow_with_steps

    cfg = resolve_config({**TINY_MNIST, "tasks": 1, "method": name, "params": NEW_METHODS[name]})
    short = train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, measure=False)
    assert short.members[0].task_online_accuracy
    assert_host_reads_do_not_grow_with_steps(Members.from_config(cfg, [0, 1]), data_dir, monkeypatch)


# --- SNR -----------------------------------------------------------------------------------------

class LiteralSNR:
    """SPEC §10's SNR for one member and layer, unit by unit, with Python numbers."""

    def __init__(self, units, batch, p, kappa, tau_max, tau_init):
        self.B, self.p, self.kappa, self.tau_max = batch, p, kappa, tau_max
        self.age = [0] * units
        self.tau = [max(float(tau_init), batch)] * units
        self.hist = [{} for _ in range(units)]

    def record(self, i):
        if self.age[i] <= self.tau_max:
            self.hist[i][self.age[i]] = self.hist[i].get(self.age[i], 0) + 1

    def step(self, fired):
        for i, f in enumerate(fired):
            if f:
                self.record(i)
                self.age[i] = 0
            else:
                self.age[i] += self.B
        reset = []
        for i in range(len(fired)):
            if self.age[i] >= self.tau[i]:
                self.record(i)
                self.age[i] = 0
                reset.append(i)
        return reset

    def adapt(self):
        for i, h in enumerate(self.hist):
            ages = sorted(a for a in h if a > 0)
            total = sum(h[a] for a in ages)
            q, running = math.inf, 0
            for a in ages:
                running += h[a]
                if running >= self.p * total:
                    q = a
                    break
            tau = q if q < self.tau[i] else self.kappa * self.tau[i]
            self.tau[i] = min(max(tau, self.B), self.tau_max)
            h.clear()


def test_snr_follows_the_literal_rule_ages_histograms_thresholds_and_resets():
    B, steps = 4, 40
    hp = {"percentile": 0.75, "growth": 2.0, "max_threshold": [40, 24], "initial_threshold": [12, 2],
          "adapt_period": [5, 7]}
    method, net, opt = tiny("snr", hp, seeds=[3, 8])
    for m in opt.exp_avg + opt.exp_avg_sq:
        m.fill_(1.0)
    opt.step_counts = [5] * len(opt.params)
    layers = method.layers
    literal = [[LiteralSNR(layer.units, B, f32(0.75), 2.0, hp["max_threshold"][k], hp["initial_threshold"][k])
                for layer in layers] for k in range(2)]
    expected = [p.detach().clone() for p in net.parameters()]
    gens = [[torch_generator(s, "method", "snr", i) for i in range(len(layers))] for s in (3, 8)]
    g = torch.Generator().manual_seed(11)
    x = torch.zeros(2, B, 6, dtype=torch.float64)
    for step in range(1, steps + 1):
        # sparse firing: each unit fires on an example with probability 0.15
        features = [torch.relu(torch.rand(2, B, layer.units, generator=g, dtype=torch.float64) - 0.85)
                    for layer in layers]
        method.after_step(features, x, step)
        for k in range(2):
            resets = []
            for i, layer in enumerate(layers):
                fired = (features[i][k] > 0).any(dim=0).tolist()
                resets.append(literal[k][i].step(fired))
                w, _ = draw("torch_default", tuple(layer.in_weight.shape[1:]), layer.fan_in, layer.fan_out,
                            gens[k][i])
                for u in resets[i]:
                    expected[2 * i][k, u] = w[u].double()
                    expected[2 * i + 1][k, u] = 0.0
            for i, reset in enumerate(resets):  # outgoing zeros after every incoming side
                for u in reset:
                    expected[2 * i + 2][k, :, u] = 0.0
            for i in range(len(layers)):
                if step % hp["adapt_period"][k] == 0:
                    literal[k][i].adapt()
                assert method.ages[i][k].tolist() == literal[k][i].age, (step, k, i)
                assert method.thresholds[i][k].tolist() == literal[k][i].tau, (step, k, i)
                hist = method.histograms[i][k]
                for u, h in enumerate(literal[k][i].hist):
                    assert {a * B: int(c) for a, c in enumerate(hist[u].tolist()) if c} == h
        for p, e in zip(net.parameters(), expected, strict=True):
            assert torch.equal(p, e), step
    # moments of reset units' weights were zeroed, step counts kept
    assert opt.step_counts == [5] * len(opt.params)
    zeroed = (opt.exp_avg[0] == 0).all(dim=2)
    redrawn = (net.affine_layers[0].bias == 0)
    assert torch.equal(zeroed, redrawn) and redrawn.any()


def test_snr_percentile_leaves_out_bin_zero_and_takes_the_smallest_age_reaching_p():
    from plasticlab.methods.snr import percentile_age

    B = 16
    hist = torch.zeros(1, 3, 5, dtype=torch.int32)
    hist[0, 0] = torch.tensor([50, 1, 98, 1, 0])  # bin 0 ignored: ages B:1, 2B:98, 3B:1
    hist[0, 1] = torch.tensor([7, 0, 0, 0, 0])  # only consecutive firings: nothing recorded
    hist[0, 2] = torch.tensor([0, 0, 0, 0, 4])
    q = percentile_age(hist, torch.tensor([0.99], dtype=torch.float32), B)  # as the engine holds p
    assert q.tolist() == [[2 * B, math.inf, 4 * B]]
    assert percentile_age(hist, torch.tensor([0.995]), B)[0, 0] == 3 * B


def test_snr_threshold_grows_by_kappa_when_the_percentile_is_not_below_it_and_is_clipped():
    from plasticlab.methods.snr import adapted_threshold

    tau = torch.tensor([[100.0, 100.0, 100.0, 3.0]])
    q = torch.tensor([[50.0, 100.0, math.inf, math.inf]])
    new = adapted_threshold(tau, q, torch.tensor([2.0]), 16, torch.tensor([150]))
    # q < τ → q; q = τ → κτ = 200 clipped to τ_max 150; nothing recorded → κτ; κτ = 6 < B → B
    assert new.tolist() == [[50.0, 150.0, 150.0, 16.0]]


def test_snr_does_not_record_ages_above_tau_max():
    from plasticlab.methods.snr import record_ages

    hist = torch.zeros(2, 2, 4, dtype=torch.int32)
    ages = torch.tensor([[8, 12], [8, 12]])
    record_ages(hist, ages, torch.ones(2, 2, dtype=torch.bool), 4, torch.tensor([8, 12]))
    assert hist[0].tolist() == [[0, 0, 1, 0], [0, 0, 0, 0]]
    assert hist[1].tolist() == [[0, 0, 1, 0], [0, 0, 0, 1]]


def test_snr_on_the_cnn_treats_a_channel_as_a_unit_firing_anywhere():
    method, net, _ = tiny("snr", {"initial_threshold": 8}, arch=TINY_CNN)
    x = inputs(TINY_CNN)
    _, feats = net(x, return_features=True)
    silent = [torch.zeros_like(f) for f in feats]
    silent[0][0, 2, 1, 3, 4] = 1.0  # member 0, channel 1 fires at one position of one example
    method.after_step(silent, x, 1)
    assert method.ages[0][0].tolist() == [5, 0, 5, 5]
    method.after_step(silent, x, 2)  # ages reach τ = 8 → reset (channel 1 fired again: age 0)
    assert method.last_reset.tolist() == [3 + 4 + 25 + 25, 4 + 4 + 25 + 25]  # all but one unit
    assert not net.affine_layers[0].bias[0, [0, 2, 3]].any()


# --- marking the boundary oracles ----------------------------------------------------------------

def test_plasticlab_list_and_the_report_mark_the_boundary_oracles(capsys):
    from plasticlab.cli import main
    from plasticlab.report.build import marked_label, oracle_note

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for name in METHODS:
        line = next(x for x in lines if x.strip().split(" ")[0] == name)
        assert ("boundary oracle" in line) == (name in {"ewc", "l2_init_ewc", "full_reset", "head_reset",
                                                        "fire", "dash", "plasticity_injection"}), name
    assert any("privileged task-boundary information" in x for x in lines)
    assert marked_label("fire", "fire") == "fire †" and marked_label("l2_init", "l2_init") == "l2_init"
    assert "privileged" in oracle_note(["l2_init", "head_reset"]) and oracle_note(["l2_init"]) == ""


@pytest.mark.parametrize("method,params,needle", [
    ("snr", {"percentile": 1.5}, "percentile must be a finite number >= 0 and <= 1"),
    ("swr", {"period": 0}, "period must be an integer >= 1"),
    ("hare_tortoise", {"momentum": -1}, "momentum must be a finite number >= 0 and <= 1"),
    ("parseval", {"scale": 0}, "scale must be a finite number > 0"),
    ("fire", {"iters": 0}, "iters must be an integer >= 1"),
])
def test_the_field_methods_parameters_have_domains(method, params, needle):
    from plasticlab.experiments.config import resolve_config

    with pytest.raises(ValueError, match=needle):
        resolve_config({"problem": "permuted_mnist", "method": method, "params": params})
