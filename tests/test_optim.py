"""plasticlab.optim: Adam and SGD on stacked ``[K, ...]`` parameters behave like torch.optim."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from plasticlab.nets import Block, EnsembleLinear, EnsembleNet
from plasticlab.optim import SGD, Adam, make_optimizer
from plasticlab.optim.adam_gnt import AdamGnT

torch.set_num_threads(1)

IN, HIDDEN, OUT, BATCH, STEPS = 20, 16, 5, 8, 100
LR = {"adam": 1e-3, "sgd": 1e-2}
TORCH_OPT = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def reference_module(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def stacked_copy(modules: list[nn.Sequential]) -> EnsembleNet:
    """An ensemble whose member k holds exactly the weights of ``modules[k]``."""
    K = len(modules)
    net = EnsembleNet([Block(EnsembleLinear(K, IN, HIDDEN), activation="relu"),
                       Block(EnsembleLinear(K, HIDDEN, OUT))], K)
    with torch.no_grad():
        for k, m in enumerate(modules):
            for ens, ref in zip(net.affine_layers, (m[0], m[2]), strict=True):
                ens.weight[k].copy_(ref.weight)
                ens.bias[k].copy_(ref.bias)
    return net


def member_params(net: EnsembleNet, k: int) -> list[torch.Tensor]:
    return [p[k] for p in net.regularized_parameters()]


def module_params(m: nn.Sequential) -> list[torch.Tensor]:
    return [m[0].weight, m[0].bias, m[2].weight, m[2].bias]


def ensemble_loss(net: EnsembleNet, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sum over members of each member's mean cross-entropy (as the engine does)."""
    logits = net(x)
    K, B = y.shape
    losses = F.cross_entropy(logits.reshape(K * B, -1), y.reshape(-1), reduction="none")
    return losses.view(K, B).mean(1).sum()


def run_against_torch(name: str, K: int) -> float:
    """Train K reference modules with torch.optim and one ensemble with plasticlab.optim on the
    same batches; return the largest parameter difference seen over all steps."""
    refs = [reference_module(seed=100 + k) for k in range(K)]
    ref_opts = [TORCH_OPT[name](m.parameters(), lr=LR[name]) for m in refs]
    net = stacked_copy(refs)
    opt = make_optimizer(name, net.parameters(), LR[name])
    data = torch.Generator().manual_seed(7)
    worst = 0.0
    for k in range(K):
        for p, q in zip(member_params(net, k), module_params(refs[k]), strict=True):
            assert torch.equal(p, q)
    for _ in range(STEPS):
        x = torch.randn(K, BATCH, IN, generator=data)
        y = torch.randint(0, OUT, (K, BATCH), generator=data)
        for k in range(K):
            ref_opts[k].zero_grad()
            F.cross_entropy(refs[k](x[k]), y[k]).backward()
            ref_opts[k].step()
        opt.zero_grad()
        ensemble_loss(net, x, y).backward()
        opt.step()
        for k in range(K):
            for p, q in zip(member_params(net, k), module_params(refs[k]), strict=True):
                worst = max(worst, (p.detach() - q.detach()).abs().max().item())
    return worst


@pytest.mark.parametrize("name", ["adam", "sgd"])
@pytest.mark.parametrize("K", [1, 4])
def test_stacked_optimizer_matches_torch_optim_per_member_over_100_steps(name, K):
    assert run_against_torch(name, K) < 1e-6


def test_members_of_the_reference_comparison_really_differ():
    # guards the test above against comparing K copies of one network
    refs = [reference_module(seed=100 + k) for k in range(2)]
    assert not torch.equal(refs[0][0].weight, refs[1][0].weight)


# --- Adam.reset -----------------------------------------------------------------------------------


def synthetic_grads(gen: torch.Generator, shapes) -> list[torch.Tensor]:
    # |g| >= 0.5 so a first Adam step is lr·g/(|g|+eps) = lr·sign(g) to ~1e-8 relative
    out = []
    for s in shapes:
        g = torch.randn(s, generator=gen, dtype=torch.float64)
        out.append((g.sign() + (g.sign() == 0).double()) * (0.5 + g.abs()))
    return out


def step_with(opt, params, grads):
    for p, g in zip(params, grads, strict=True):
        p.grad = g.to(p.dtype).clone()
    opt.step()


SHAPES = [(3, 6, 4), (3, 6)]


def fresh_params(dtype):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=gen, dtype=torch.float64).to(dtype) for s in SHAPES]


def close(a, b, dtype):
    """Equal up to the last bit or two (different but equivalent kernels may round differently)."""
    torch.testing.assert_close(a, b, rtol=2 * torch.finfo(dtype).eps, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_adam_reset_restarts_masked_elements_and_leaves_the_rest_untouched(dtype):
    lr = 1e-3
    with_reset = fresh_params(dtype)
    without = [p.clone() for p in with_reset]
    opt_r, opt_n = Adam(with_reset, lr=lr), Adam(without, lr=lr)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):
        g = synthetic_grads(gen, SHAPES)
        step_with(opt_r, with_reset, g)
        step_with(opt_n, without, g)
    assert all(torch.equal(a, b) for a, b in zip(with_reset, without, strict=True))

    # reset units 1 and 4 of member 0 and unit 2 of member 2: rows of the weight, entries of the bias
    unit_mask = torch.zeros(3, 6, dtype=torch.bool)
    unit_mask[0, 1] = unit_mask[0, 4] = unit_mask[2, 2] = True
    opt_r.reset(0, unit_mask.unsqueeze(-1))
    opt_r.reset(1, unit_mask)
    masks = [unit_mask.unsqueeze(-1).expand(SHAPES[0]), unit_mask]
    for i, mask in enumerate(masks):
        assert torch.all(opt_r.exp_avg[i][mask] == 0)
        assert torch.all(opt_r.exp_avg_sq[i][mask] == 0)
        assert torch.equal(opt_r.exp_avg[i][~mask], opt_n.exp_avg[i][~mask])

    # a fresh Adam started at the reset is what the masked elements must follow from now on
    restarted = [p.clone() for p in with_reset]
    opt_f = Adam(restarted, lr=lr)

    before = [p.clone() for p in with_reset]
    g = synthetic_grads(gen, SHAPES)
    step_with(opt_r, with_reset, g)
    step_with(opt_n, without, g)
    step_with(opt_f, restarted, g)
    for i, mask in enumerate(masks):
        delta = (with_reset[i] - before[i]).double()
        # first-step bias correction is right: the step is lr in the gradient's direction (to
        # the rounding of θ itself at float32)
        step_tol = lr * 1e-6 if dtype == torch.float64 else 1e-6
        torch.testing.assert_close(delta[mask], -lr * g[i][mask].sign(), rtol=0, atol=step_tol)
        close(with_reset[i][~mask], without[i][~mask], dtype)

    for _ in range(30):
        g = synthetic_grads(gen, SHAPES)
        step_with(opt_r, with_reset, g)
        step_with(opt_n, without, g)
        step_with(opt_f, restarted, g)
    for i, mask in enumerate(masks):
        close(with_reset[i][~mask], without[i][~mask], dtype)
        close(with_reset[i][mask], restarted[i][mask], dtype)


def test_adam_after_an_empty_reset_keeps_giving_the_same_numbers_for_1000_steps():
    # the per-element step counts a reset switches to must not drift from the shared count
    # (equal to rounding: the per-element path computes 1 − βᵗ as −expm1(t·ln β))
    gen = torch.Generator().manual_seed(2)
    a = [torch.randn(40, 40, generator=gen)]
    b = [a[0].clone()]
    opt_a, opt_b = Adam(a, lr=1e-3), Adam(b, lr=1e-3, fused=False)
    opt_a.reset(0, torch.zeros(40, 40, dtype=torch.bool))
    for _ in range(1000):
        g = torch.randn(40, 40, generator=gen)
        step_with(opt_a, a, [g])
        step_with(opt_b, b, [g])
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=1e-6)


def test_adam_reset_twice_restarts_the_second_mask_as_a_first_step_too():
    lr = 1e-3
    params = fresh_params(torch.float64)
    opt = Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(3)
    for _ in range(5):
        step_with(opt, params, synthetic_grads(gen, SHAPES))
    first = torch.zeros(SHAPES[1], dtype=torch.bool)
    first[0, 0] = True
    opt.reset(1, first)
    for _ in range(5):
        step_with(opt, params, synthetic_grads(gen, SHAPES))
    second = torch.zeros(SHAPES[1], dtype=torch.bool)
    second[1, 3] = True
    opt.reset(1, second)
    before = params[1].clone()
    g = synthetic_grads(gen, SHAPES)
    step_with(opt, params, g)
    delta = params[1] - before
    torch.testing.assert_close(delta[second], -lr * g[1][second].sign(), rtol=0, atol=lr * 1e-6)
    # the first-reset element is on its 6th step since its reset: not a sign step in general
    assert not torch.allclose(delta[first].abs(), torch.tensor([lr], dtype=torch.float64),
                              rtol=0, atol=lr * 1e-6)


@pytest.mark.parametrize("reset_first", [False, True])
def test_adam_state_dict_round_trip_continues_identically(reset_first):
    params = fresh_params(torch.float32)
    opt = Adam(params, lr=1e-3)
    gen = torch.Generator().manual_seed(5)
    for _ in range(10):
        step_with(opt, params, synthetic_grads(gen, SHAPES))
    if reset_first:
        mask = torch.zeros(SHAPES[1], dtype=torch.bool)
        mask[1, 2] = True
        opt.reset(1, mask)
    state = opt.state_dict()
    copies = [p.clone() for p in params]
    opt2 = Adam(copies, lr=0.5)
    opt2.load_state_dict(state)
    assert opt2.lr == 1e-3
    for _ in range(10):
        g = synthetic_grads(gen, SHAPES)
        step_with(opt, params, g)
        step_with(opt2, copies, g)
    assert all(torch.equal(a, b) for a, b in zip(params, copies, strict=True))


def test_adam_state_dict_is_a_snapshot_not_a_view():
    params = fresh_params(torch.float32)
    opt = Adam(params, lr=1e-3)
    gen = torch.Generator().manual_seed(6)
    step_with(opt, params, synthetic_grads(gen, SHAPES))
    state = opt.state_dict()
    saved = [m.clone() for m in state["exp_avg"]]
    step_with(opt, params, synthetic_grads(gen, SHAPES))
    assert all(torch.equal(a, b) for a, b in zip(state["exp_avg"], saved, strict=True))


def test_sgd_state_dict_round_trip_and_reset_is_a_no_op():
    params = fresh_params(torch.float32)
    opt = SGD(params, lr=1e-2)
    opt.reset(1, torch.ones(SHAPES[1], dtype=torch.bool))
    other = SGD([p.clone() for p in params], lr=0.3)
    other.load_state_dict(opt.state_dict())
    assert other.lr == 1e-2


def test_adam_matches_torch_when_a_parameter_has_no_gradient_on_some_steps():
    # torch.optim.Adam skips such a tensor entirely, its step count (bias correction) included
    ours = fresh_params(torch.float64)
    theirs = [p.clone().requires_grad_() for p in ours]
    opt, ref = Adam(ours, lr=1e-3), torch.optim.Adam(theirs, lr=1e-3)
    gen = torch.Generator().manual_seed(4)
    for t in range(12):
        grads = synthetic_grads(gen, SHAPES)
        if t % 3:
            grads[1] = None
        for p, q, g in zip(ours, theirs, grads, strict=True):
            p.grad = None if g is None else g.clone()
            q.grad = None if g is None else g.clone()
        opt.step()
        ref.step()
    for p, q in zip(ours, theirs, strict=True):
        torch.testing.assert_close(p, q.detach(), rtol=0, atol=1e-12)


def test_optimizers_skip_parameters_without_gradient():
    for name in ("adam", "sgd"):
        params = fresh_params(torch.float32)
        before = [p.clone() for p in params]
        opt = make_optimizer(name, params, LR[name])
        params[0].grad = torch.ones_like(params[0])
        opt.step()
        assert not torch.equal(params[0], before[0])
        assert torch.equal(params[1], before[1])


# --- argument checks --------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Adam, SGD])
@pytest.mark.parametrize("lr", [0.0, -1e-3])
def test_non_positive_learning_rate_is_a_value_error(cls, lr):
    with pytest.raises(ValueError, match="lr"):
        cls([torch.zeros(2, 3)], lr=lr)


@pytest.mark.parametrize("lr", [0.0, -1.0])
def test_make_optimizer_rejects_non_positive_learning_rate(lr):
    with pytest.raises(ValueError):
        make_optimizer("adam", [torch.zeros(2, 3)], lr)


def test_unknown_optimizer_name_lists_the_valid_names():
    with pytest.raises(ValueError) as err:
        make_optimizer("nope", [torch.zeros(2, 3)], 1e-3)
    message = str(err.value)
    assert "nope" in message and "adam" in message and "sgd" in message


def test_make_optimizer_builds_the_named_class():
    assert isinstance(make_optimizer("adam", [torch.zeros(1, 2)], 1e-3), Adam)
    assert isinstance(make_optimizer("sgd", [torch.zeros(1, 2)], 1e-2), SGD)


def test_fused_adam_kernel_matches_the_simple_loop_for_1000_steps():
    # The fast path (torch's fused kernel) against the readable per-tensor loop.
    gen = torch.Generator().manual_seed(4)
    a = [torch.randn(8, 100, 78, generator=gen), torch.randn(8, 100, generator=gen)]
    b = [p.clone() for p in a]
    fast, simple = Adam(a, lr=1e-3), Adam(b, lr=1e-3, fused=False)
    assert fast.fused
    for _ in range(1000):
        g = [torch.randn(p.shape, generator=gen) for p in a]
        step_with(fast, a, g)
        step_with(simple, b, g)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_the_fused_kernel_with_a_step_size_per_member_matches_the_plain_rule(weight_decay):
    # adam_update_ with α_k as a [K] tensor against the kernel's one call per distinct α
    gen = torch.Generator().manual_seed(5)
    rates = [1e-3, 3e-4, 1e-3, 1e-2]
    a = [torch.randn(4, 30, 7, generator=gen), torch.randn(4, 30, generator=gen)]
    b = [p.clone() for p in a]
    fast = Adam(a, lr=rates, member_dim=True, weight_decay=weight_decay)
    plain = Adam(b, lr=rates, member_dim=True, weight_decay=weight_decay, fused=False)
    for _ in range(300):
        g = [torch.randn(p.shape, generator=gen) for p in a]
        step_with(fast, a, g)
        step_with(plain, b, g)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_the_plain_adam_rule_is_torch_optim_adams_update():
    gen = torch.Generator().manual_seed(6)
    ours = [torch.randn(30, 7, generator=gen, dtype=torch.float64)]
    theirs = [ours[0].clone().requires_grad_()]
    mine = Adam(ours, lr=1e-2, weight_decay=1e-3, fused=False)
    torch_adam = torch.optim.Adam(theirs, lr=1e-2, weight_decay=1e-3, foreach=False)
    for _ in range(200):
        g = torch.randn(30, 7, generator=gen, dtype=torch.float64)
        step_with(mine, ours, [g])
        theirs[0].grad = g.clone()
        torch_adam.step()
    torch.testing.assert_close(ours[0], theirs[0].detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rates", [1e-2, [1e-2, 3e-3, 1e-2]])
def test_sgds_fused_multiply_add_is_the_plain_rule_up_to_rounding(rates):
    gen = torch.Generator().manual_seed(7)
    a = [torch.randn(3, 20, 5, generator=gen)]
    b = [a[0].clone()]
    fast, plain = SGD(a, lr=rates, member_dim=True), SGD(b, lr=rates, member_dim=True, fused=False)
    for _ in range(300):
        g = [torch.randn(3, 20, 5, generator=gen)]
        step_with(fast, a, g)
        step_with(plain, b, g)
    torch.testing.assert_close(a[0], b[0], rtol=1e-6, atol=1e-6)
    expected = b[0].clone()  # the rule itself, θ − α_k g, one more step
    g = torch.randn(3, 20, 5, generator=gen)
    alpha = torch.tensor([rates] * 3 if isinstance(rates, float) else rates).view(3, 1, 1)
    step_with(plain, b, [g])
    assert torch.equal(b[0], expected - alpha * g)


def _dense_count_adam_step(p, g, m, v, steps, lr, betas=(0.9, 0.999), eps=1e-8):
    """The simple form: Adam with one step count per element, bias-corrected per element."""
    b1, b2 = betas
    steps += 1
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    bc1 = -torch.expm1(steps * math.log(b1))
    bc2 = -torch.expm1(steps * math.log(b2))
    p -= lr * (m / bc1) / (v.sqrt() / bc2.sqrt() + eps)


def test_adam_factored_restart_counts_equal_dense_per_element_counts_under_row_column_and_dense_resets():
    # Continual Backprop restarts whole units: rows (incoming) and columns (outgoing) of a weight.
    # Adam keeps those counts factored; any mix of row, column and arbitrary masks must give the
    # per-element counts and updates of the simple dense form.
    gen = torch.Generator().manual_seed(7)
    K, U, n = 3, 5, 7
    p = torch.randn(K, U, n, generator=gen, dtype=torch.float64)
    ref = p.clone()
    opt = Adam([p], lr=1e-2)
    m, v = torch.zeros_like(ref), torch.zeros_like(ref)
    steps = torch.zeros_like(ref)
    for step in range(60):
        kind = step % 4
        if step > 3 and kind != 3:
            if kind == 0:  # rows: units' incoming weights
                mask = (torch.rand(K, U, 1, generator=gen) < 0.3).expand(K, U, n)
            elif kind == 1:  # columns: the previous layer's units' outgoing weights
                mask = (torch.rand(K, 1, n, generator=gen) < 0.3).expand(K, U, n)
            else:  # an arbitrary mask
                mask = torch.rand(K, U, n, generator=gen) < 0.1
            opt.reset(0, mask)
            dense = mask.expand_as(ref)
            m.masked_fill_(dense, 0)
            v.masked_fill_(dense, 0)
            steps.masked_fill_(dense, 0)
            assert torch.equal(opt.element_steps[0], steps)
        g = torch.randn(K, U, n, generator=gen, dtype=torch.float64)
        p.grad = g.clone()
        opt.step()
        _dense_count_adam_step(ref, g, m, v, steps, lr=1e-2)
        torch.testing.assert_close(p, ref, rtol=1e-12, atol=1e-14)
    assert len(opt.restart_counts[0]) == 3  # one count tensor per pattern, not per element
    assert [tuple(c.shape) for c in opt.restart_counts[0]] == [(K, U, 1), (K, 1, n), (K, U, n)]


@pytest.mark.parametrize("fused", [True, False])
def test_adam_weight_decay_matches_torch_optim_adam(fused):
    gen = torch.Generator().manual_seed(11)
    ours = [torch.randn(3, 20, 7, generator=gen, dtype=torch.float64)]
    ref = [ours[0].clone().requires_grad_()]
    opt, torch_opt = Adam(ours, lr=1e-2, weight_decay=0.1, fused=fused), torch.optim.Adam(
        ref, lr=1e-2, weight_decay=0.1)
    for _ in range(50):
        g = torch.randn(3, 20, 7, generator=gen, dtype=torch.float64)
        ours[0].grad, ref[0].grad = g.clone(), g.clone()
        opt.step()
        torch_opt.step()
    torch.testing.assert_close(ours[0], ref[0].detach(), rtol=1e-12, atol=1e-12)


# --- one step size per member ------------------------------------------------------------------

MEMBER_RATES = [1e-3, 1e-2, 1e-3, 1e-4, 3e-3]


def _member_lr_params(K: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(K, *shape, generator=g) for shape in [(7, 3), (16,), (5,)]]


def _member_lr_grads(K: int, steps: int = 6) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [[torch.randn(K, *shape, generator=g) for shape in [(7, 3), (16,), (5,)]]
            for _ in range(steps)]


def test_equal_step_sizes_are_one_shared_step_size():
    opt = Adam(_member_lr_params(3), lr=[1e-3, 1e-3, 1e-3], member_dim=True)
    assert opt.lr == 1e-3
    assert SGD(_member_lr_params(3), lr=[0.1] * 3).lr == 0.1


def test_per_member_step_sizes_need_stacked_members_and_positive_rates():
    with pytest.raises(ValueError, match="member_dim=True"):
        Adam(_member_lr_params(2), lr=[1e-3, 1e-2])
    with pytest.raises(ValueError, match="must be > 0"):
        SGD(_member_lr_params(2), lr=[1e-3, 0.0], member_dim=True)
    with pytest.raises(ValueError, match="one step size for all members"):
        AdamGnT(_member_lr_params(2), lr=[1e-3, 1e-2])


def test_per_member_step_sizes_survive_a_state_dict_round_trip():
    K = len(MEMBER_RATES)
    grads = _member_lr_grads(K)
    straight = _member_lr_params(K)
    opt = Adam(straight, lr=MEMBER_RATES, member_dim=True)
    for step in grads:
        for p, g in zip(straight, step, strict=True):
            p.grad = g.clone()
        opt.step()
    params = _member_lr_params(K)
    warm = Adam(params, lr=MEMBER_RATES, member_dim=True)
    for step in grads[:3]:
        for p, g in zip(params, step, strict=True):
            p.grad = g.clone()
        warm.step()
    opt = Adam(params, lr=1e-3, member_dim=True)
    opt.load_state_dict(warm.state_dict())
    assert opt.lr == MEMBER_RATES
    for step in grads[3:]:
        for p, g in zip(params, step, strict=True):
            p.grad = g.clone()
        opt.step()
    for a, b in zip(straight, params, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["adam", "adam_gnt", "upgd", "upgd_nonprotecting", "trac"])
def test_an_optimizer_whose_model_was_converted_after_it_was_built_says_to_build_it_after(name):
    # its state was made beside the parameters: model.double() (or .to("cuda")) after it leaves
    # that state behind; torch's fused kernel would fail on it with a dtype error naming neither
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    params = list(model.parameters())
    if name == "adam_gnt":
        optimizer = AdamGnT(params, lr=1e-3)
    else:
        generators = {"generators": [torch.Generator() for _ in range(4)]} if "upgd" in name else {}
        optimizer = make_optimizer(name, params, lr=1e-3, member_dim=name != "trac", **generators)
    model.double()
    model(torch.randn(5, 3, dtype=torch.float64)).sum().backward()
    with pytest.raises(RuntimeError, match=r"moved or converted after it was built \(they are now "
                                           r"torch\.float64 on cpu, its state torch\.float32 on cpu\); "
                                           r"build the optimizer after model\.to\(device\)"):
        optimizer.step()


def test_sgd_has_no_state_to_leave_behind_and_steps_after_a_conversion():
    model = nn.Linear(3, 2)
    optimizer = SGD(list(model.parameters()), lr=0.1)
    model.double()
    before = model.weight.detach().clone()
    model(torch.randn(5, 3, dtype=torch.float64)).sum().backward()
    optimizer.step()
    assert torch.equal(model.weight, before.add(model.weight.grad, alpha=-0.1))
