"""A seed's run does not depend on its ensemble (DESIGN, "Rules that follow from it"): member k of
the ensemble of seeds 0…7 equals seed k trained alone, bit for bit on CPU, over whole runs.
Why it could fail, and what keeps it from failing: docs/member-independence.md."""

from __future__ import annotations

import pytest
import torch

from plasticlab import engine
from plasticlab.experiments.config import resolve_config
from plasticlab.optim import SGD, Adam
from plasticlab.optim.fused_adam import MEMBER_ALIGNMENT_BYTES, member_aligned
from plasticlab.run_config import Members

torch.set_num_threads(1)

SEEDS, MEMBER = list(range(8)), 3
VECTORISED = torch.backends.cpu.get_cpu_capability() != "DEFAULT"

# --- the optimizers on their own --------------------------------------------------------------

# Member slabs of 10, 100 and 1,000 floats (the MLP's biases and output weights: none a multiple
# of the vector width) and one of 192 (768 bytes, a multiple of MEMBER_ALIGNMENT_BYTES: kept whole).
SHAPES = [(8, 10), (8, 100), (8, 10, 100), (8, 3, 64)]


def train_stacked(optimizer_cls, params: list[torch.Tensor], grads: list[list[torch.Tensor]],
                  resets=(), buffers: bool = False, lr=1e-3, **options) -> list[torch.Tensor]:
    """Step ``optimizer_cls`` over ``params`` (copies) with the given gradients per step, as new
    tensors or (``buffers``) written into the same ones, as the hand-written backward does;
    ``resets``: (step, parameter index, mask) restarts of Adam's state before that step;
    ``lr``: α, or one α_k per member. Returns the parameters, then Adam's moments (where the
    kernel's rounding shows first)."""
    params = [p.clone() for p in params]
    opt = optimizer_cls(params, lr=lr, **options)
    for step, gs in enumerate(grads):
        for when, index, mask in resets:
            if when == step:
                opt.reset(index, mask)
        for p, g in zip(params, gs, strict=True):
            if buffers and p.grad is not None:
                p.grad.copy_(g)
            else:
                p.grad = g.clone()
        opt.step()
    return params + getattr(opt, "exp_avg", []) + getattr(opt, "exp_avg_sq", [])


def random_problem(steps: int = 60, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=gen) for s in SHAPES]
    # Gradients of mixed scales, so the second moment's low bits matter.
    grads = [[torch.randn(s, generator=gen) * 10.0 ** float(torch.randint(-4, 0, (), generator=gen))
              for s in SHAPES] for _ in range(steps)]
    return params, grads


def member(tensors: list[torch.Tensor], k: int) -> list[torch.Tensor]:
    return [t[k:k + 1] for t in tensors]


# One step size per member (a step-size grid packed into one ensemble): member k has RATES[k].
RATES = [1e-3, 1e-2, 1e-4, 1e-3, 3e-3, 1e-2, 1e-4, 3e-4]


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2], ids=["adam", "adam-folded-decay"])
@pytest.mark.parametrize("restart", [False, True], ids=["", "restarted"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "simple-form"])
@pytest.mark.parametrize("buffers", [False, True], ids=["", "gradient-buffers"])
@pytest.mark.parametrize("member_lr", [False, True], ids=["", "member-lr"])
def test_adam_updates_a_member_exactly_as_in_an_ensemble_of_its_own(weight_decay, restart, fused,
                                                                     buffers, member_lr):
    params, grads = random_problem()
    # A restart of units 0 and 2 of the (8, 10, 100) tensor's rows, as CBP restarts them.
    mask = torch.zeros(8, 10, 1, dtype=torch.bool)
    mask[:, [0, 2]] = True
    resets = [(20, 2, mask)] if restart else []
    options = {"weight_decay": weight_decay, "fused": fused, "member_dim": True}
    together = train_stacked(Adam, params, grads, resets, buffers,
                             lr=RATES if member_lr else 1e-3, **options)
    for k in (0, 1, MEMBER, 7):
        alone = train_stacked(Adam, member(params, k), [member(gs, k) for gs in grads],
                              [(s, i, m[k:k + 1]) for s, i, m in resets], buffers,
                              lr=RATES[k] if member_lr else 1e-3, **options)
        for p, q in zip(member(together, k), alone, strict=True):
            assert torch.equal(p, q)


@pytest.mark.skipif(not VECTORISED, reason="CPU without vector kernels: no scalar tail to differ")
def test_the_fused_kernel_over_whole_stacked_tensors_would_make_members_depend_on_k():
    # Why member_dim exists, and proof that the comparison above can fail.
    params, grads = random_problem()
    together = train_stacked(Adam, params, grads, member_dim=False)
    alone = train_stacked(Adam, member(params, MEMBER), [member(gs, MEMBER) for gs in grads],
                          member_dim=False)
    assert not all(torch.equal(p, q) for p, q in zip(member(together, MEMBER), alone, strict=True))


@pytest.mark.parametrize("member_lr", [False, True], ids=["", "member-lr"])
def test_sgd_updates_a_member_exactly_as_in_an_ensemble_of_its_own(member_lr):
    params, grads = random_problem()
    together = train_stacked(SGD, params, grads, member_dim=True, lr=RATES if member_lr else 1e-3)
    for k in (1, MEMBER):
        alone = train_stacked(SGD, member(params, k), [member(gs, k) for gs in grads],
                              member_dim=True, lr=RATES[k] if member_lr else 1e-3)
        for p, q in zip(member(together, k), alone, strict=True):
            assert torch.equal(p, q)


def test_upgd_scales_each_member_exactly_as_in_an_ensemble_of_its_own():
    from plasticlab.optim.upgd import scaled_utility

    gen = torch.Generator().manual_seed(0)
    for _ in range(5):  # a whole-tensor sigmoid differs in a few elements of some draws
        # The MLP's hidden weights (slabs of 40,000 bytes: 64-byte aligned, not 128) and biases.
        utilities = [torch.randn(8, 100, 100, generator=gen) * 1e-3, torch.randn(8, 100, generator=gen)]
        together = scaled_utility(utilities, step=7, beta=0.9, member_dim=True)
        for k in SEEDS:
            alone = scaled_utility([u[k:k + 1].clone() for u in utilities], step=7, beta=0.9,
                                   member_dim=True)
            for s, t in zip(member(together, k), alone, strict=True):
                assert torch.equal(s, t), f"member {k}"


@pytest.mark.skipif(not VECTORISED, reason="CPU without vector kernels: no scalar tail to differ")
def test_a_sigmoid_over_a_whole_stacked_tensor_would_make_members_depend_on_k():
    # Why scaled_utility takes the sigmoid member by member.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 8, 100, generator=gen)
    whole = torch.stack([torch.sigmoid(draw)[MEMBER] for draw in x])
    alone = torch.stack([torch.sigmoid(draw[MEMBER].clone()) for draw in x])
    assert not torch.equal(whole, alone)


def test_the_upgd_cost_benchmark_times_the_same_scaled_utility_in_its_whole_tensor_form():
    # benchmarks/member_independence.py --upgd-cost compares scaled_utility with the form before
    # the fix; both must compute s, up to the rounding the fix is about.
    import importlib.util

    from conftest import REPO
    from plasticlab.optim.upgd import scaled_utility

    spec = importlib.util.spec_from_file_location("member_independence_benchmark",
                                                  REPO / "benchmarks" / "member_independence.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    gen = torch.Generator().manual_seed(0)
    utilities = [torch.randn(8, 100, 100, generator=gen), -torch.rand(8, 10, generator=gen)]
    utilities[0][2] = -utilities[0][2].abs()  # member 2: no positive utility, η ≤ 0, s = 0
    for s, t in zip(bench.whole_tensor_scaled_utility(utilities, 7, 0.9),
                    scaled_utility(utilities, 7, 0.9, member_dim=True), strict=True):
        torch.testing.assert_close(s, t, rtol=0, atol=1e-6)
        assert not t[2].any()
    assert bench.upgd_scale_cost(members=2, rounds=1, steps=1).keys() == {"whole", "per member", "UPGD step"}


def test_member_aligned_keeps_a_tensor_whole_only_when_every_slab_is_a_multiple_of_the_alignment():
    whole = torch.zeros(8, 3, MEMBER_ALIGNMENT_BYTES // 4)
    assert member_aligned(whole) == [whole]
    doubles = torch.zeros(8, 3, MEMBER_ALIGNMENT_BYTES // 8, dtype=torch.float64)
    assert member_aligned(doubles) == [doubles]
    split = member_aligned(torch.zeros(8, 10, 100))
    assert len(split) == 8 and all(t.shape == (10, 100) and t.is_contiguous() for t in split)


# --- whole runs through the engine -----------------------------------------------------------

# Whole runs: three tasks (two task ends), each long enough for what tore members apart before
# the fixes to show many times over (Adam's scalar tail changed a parameter from step 7-10 of
# the first task on, UPGD's sigmoid from the first task: docs/member-independence.md); 100
# steps a task (6 × 200 until 2026-11-29, 6 × 800 before). Each fix undone, these runs still
# part member 3 from seed 3 alone: Adam's member-aligned kernel (hand-written and autograd
# backward, Baseline and L2 Init), UPGD's member-by-member sigmoid, and the CNN's Adam.
MLP_RUN = {"problem": "permuted_mnist", "tasks": 3, "steps_per_task": 100,
           "problem_params": {"examples_per_task": 2000}}
# The CNN is ~10× slower per step: 2 tasks × 30 steps (its drift showed on the first task too).
CNN_RUN = {"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 30}
# The tests of mixed members (a step-size grid, penalty methods): two tasks of 75 steps.
MIXED_RUN = {**MLP_RUN, "tasks": 2, "steps_per_task": 75}


def train_keeping_network(monkeypatch, config, seeds, data_dir, backprop, member_lr=None):
    """Train through the engine; return the result and the network it trained."""
    built = []
    build = engine.build_network

    def build_and_keep(*args, **kwargs):
        built.append(build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(engine, "build_network", build_and_keep)
    result = engine.train_ensemble(Members.from_config(config, seeds, lr=member_lr),
                                   data_dir=data_dir, measure=False, threads=1,
                                   backprop=backprop)
    monkeypatch.setattr(engine, "build_network", build)
    return result, built[-1]


def assert_member_is_seed_alone(monkeypatch, data_dir, run, method, params, optimizer, backprop):
    config = resolve_config({**run, "method": method, "params": params, "optimizer": optimizer,
                             "lr": 1e-3 if optimizer == "adam" else 1e-2})
    together, net_together = train_keeping_network(monkeypatch, config, SEEDS, data_dir, backprop)
    alone, net_alone = train_keeping_network(monkeypatch, config, [MEMBER], data_dir, backprop)
    assert together.extra["backprop"] == alone.extra["backprop"] == backprop
    assert together.members[MEMBER].task_online_accuracy == alone.members[0].task_online_accuracy
    for (name, p), q in zip(net_together.named_parameters(), net_alone.parameters(), strict=True):
        assert torch.equal(p[MEMBER], q[0]), name


@pytest.mark.parametrize("method,params,optimizer,backprop", [
    pytest.param("baseline", {}, "adam", "manual", id="baseline-adam"),
    pytest.param("baseline", {}, "adam", "autograd", id="baseline-adam-autograd"),
    pytest.param("l2_init", {"strength": 1e-2}, "adam", "manual", id="l2_init-adam"),
    pytest.param("l1_init", {"strength": 1e-4}, "adam", "manual", id="l1_init-adam"),
    pytest.param("huber_init", {"strength": 1e-2, "delta": 0.01}, "adam", "manual", id="huber_init-adam"),
    pytest.param("l2_init", {"strength": 1e-2}, "sgd", "manual", id="l2_init-sgd"),
    pytest.param("l2_init", {"strength": 1e-2}, "upgd", "manual", id="l2_init-upgd",
                 marks=pytest.mark.slow),  # UPGD's step is ~4× Adam's
])
def test_mlp_member_3_of_seeds_0_to_7_is_seed_3_alone_bit_for_bit_over_3_tasks(
        monkeypatch, data_dir, method, params, optimizer, backprop):
    assert_member_is_seed_alone(monkeypatch, data_dir, MLP_RUN, method, params, optimizer, backprop)


def test_cnn_member_3_of_seeds_0_to_7_is_seed_3_alone_bit_for_bit_over_2_tasks(monkeypatch, cifar10_dir):
    assert_member_is_seed_alone(monkeypatch, cifar10_dir, CNN_RUN, "l2_init", {"strength": 1e-2},
                                "adam", "autograd")


@pytest.mark.parametrize("method,params,optimizer", [
    ("l2_init", {"strength": 1e-2}, "adam"),
    ("cbp", {"replacement_rate": 1e-2, "maturity": 20}, "adam"),
    ("l2", {"strength": 1e-3}, "sgd"),
], ids=["l2_init-adam", "cbp-adam", "l2-sgd"])
def test_a_step_size_grid_in_one_ensemble_gives_each_member_its_own_run(
        monkeypatch, data_dir, method, params, optimizer):
    # Seeds 0-7 with RATES[k] (×10 under SGD) in one ensemble; seed k alone with its own rate.
    run = MIXED_RUN
    rates = [r * (10 if optimizer == "sgd" else 1) for r in RATES]
    config = resolve_config({**run, "method": method, "params": params, "optimizer": optimizer,
                             "lr": rates[0]})
    together, net_together = train_keeping_network(monkeypatch, config, SEEDS, data_dir, "auto",
                                                   member_lr=rates)
    for k in (1, MEMBER):
        alone_config = resolve_config({**config.to_dict(), "lr": rates[k]})
        alone, net_alone = train_keeping_network(monkeypatch, alone_config, [k], data_dir, "auto")
        assert together.members[k].lr == rates[k]
        assert together.members[k].task_online_accuracy == alone.members[0].task_online_accuracy
        for (name, p), q in zip(net_together.named_parameters(), net_alone.parameters(), strict=True):
            assert torch.equal(p[k], q[0]), name


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_penalty_method_members_in_one_ensemble_each_give_their_own_run(
        monkeypatch, data_dir, optimizer):
    # One ensemble of five methods (methods.penalty_members), λ, δ and α varying too;
    # every member against its own method's run alone.
    members = [("baseline", {}, 1e-3), ("l2_init", {"strength": 1e-2}, 1e-3),
               ("l2", {"strength": 1e-3}, 1e-3), ("l2_init", {"strength": 1e-1}, 1e-4),
               ("baseline", {}, 1e-4), ("l2", {"strength": 1e-2}, 3e-3),
               ("l1_init", {"strength": 1e-4}, 1e-3), ("huber_init", {"strength": 1e-2, "delta": 0.01}, 1e-3)]
    scale = 10 if optimizer == "sgd" else 1
    run = MIXED_RUN
    config = resolve_config({**run, "method": members[0][0], "optimizer": optimizer,
                             "lr": members[0][2] * scale})
    seeds = list(range(len(members)))
    built = []
    build = engine.build_network
    monkeypatch.setattr(engine, "build_network", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    together = engine.train_ensemble(
        Members.from_config(config, seeds, [params for _, params, _ in members],
                            [lr * scale for *_, lr in members], [m for m, _, _ in members]),
        data_dir=data_dir, measure=False, threads=1)
    monkeypatch.setattr(engine, "build_network", build)
    net_together = built[-1]
    assert [m.method for m in together.members] == [m for m, _, _ in members]
    assert [m.params for m in together.members] == [params for _, params, _ in members]
    for k, (method, params, lr) in enumerate(members):
        alone_config = resolve_config({**run, "method": method, "params": params,
                                       "optimizer": optimizer, "lr": lr * scale})
        alone, net_alone = train_keeping_network(monkeypatch, alone_config, [k], data_dir, "auto")
        assert together.members[k].task_online_accuracy == alone.members[0].task_online_accuracy
        for (name, p), q in zip(net_together.named_parameters(), net_alone.parameters(), strict=True):
            assert torch.equal(p[k], q[0]), f"member {k} ({method}): {name}"


def test_the_manifest_statement_claims_bit_identity_only_where_this_file_tests_it():
    from plasticlab.member_independence import member_independence

    assert member_independence("cpu", threads=1, optimizer="adam", method="l2_init", arch="mlp")[
        "bit_identical"] is True
    assert member_independence("cpu", threads=1, optimizer="sgd")["bit_identical"] is True
    assert member_independence("cuda")["bit_identical"] is False
    assert member_independence("cpu", threads=1, method="fire", arch="cnn")["bit_identical"] is True
    assert member_independence("cpu", threads=2)["bit_identical"] is False
    assert member_independence("cpu", threads=1, optimizer="upgd")["bit_identical"] is True
    assert member_independence("cpu", threads=1, optimizer="upgd_nonprotecting")["bit_identical"] is True
    assert member_independence("cpu", threads=1, optimizer="lion")["bit_identical"] is None
    # EWC's one-example Fisher and FIRE's Newton-Schulz: checked at the paper's width only
    for method in ("ewc", "l2_init_ewc", "fire"):
        assert member_independence("cpu", method=method)["bit_identical"] is True
        assert member_independence("cpu", method=method, width=0.25)["bit_identical"] is False
    assert member_independence("cpu", method="l2_init", width=0.25)["bit_identical"] is True


def test_fire_on_a_conv_bank_gives_member_k_what_it_gives_seed_k_alone():
    from plasticlab.methods.fire import fire_weight

    bank = torch.randn(8, 16, 6, 5, 5, generator=torch.Generator().manual_seed(0))
    together = fire_weight(bank, 10)
    alone = fire_weight(bank[3:4].clone(), 10)
    assert torch.equal(together[3], alone[0])
