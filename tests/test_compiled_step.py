"""The compiled training step (plasticlab.step.compiled) against the eager step it
compiles, and member k of a compiled ensemble against seed k compiled alone.

Tolerances: compilation fuses and reorders floating-point work, so the compiled step is the
eager step up to rounding. After one step Adam's moments agree to rounding (rtol 1e-5, atol 1e-9
where the task gradient and λθ cancel). Adam's normalisation can turn a rounding difference in a
near-zero gradient into a step difference of order α, so the parameters agree within 1e-4
(α/10), after one step and after a short run, and each task's online accuracy within two
examples. Member k of a compiled ensemble is seed k compiled alone to the bit on the CPU, as
for the eager step."""

from __future__ import annotations

import pytest
import torch

from plasticlab import fast
from plasticlab.engine import EnsembleTraining, train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.run_config import Members
from plasticlab.step import compiled as compiled_step

# an older torch trains eagerly (test_a_torch_older_than_the_compiled_steps_…, run on this one)
pytestmark = pytest.mark.skipif(torch.__version__ < compiled_step.COMPILE_TORCH,
                                reason=f"the compiled step needs torch >= {compiled_step.COMPILE_TORCH}")

TASKS, STEPS, BATCH = 2, 30, 16


@pytest.fixture
def capture_only(monkeypatch):
    """The step captured whole as inductor would take it, then run by torch's eager kernels
    (``aot_eager``): what a method's capture computes, without inductor's C++ code generation —
    seconds a graph instead of tens. Inductor's code is checked on the grid's methods (the
    other tests); these check each other method's capture."""
    monkeypatch.setattr(compiled_step, "CPU_BACKEND", "aot_eager")
# members of every method the compiled step computes, in one ensemble, with their own step sizes
# and parameters
METHODS = ["baseline", "l2", "l2_init", "l1_init", "huber_init"]
LRS = [1e-3, 3e-3, 1e-3, 1e-3, 2e-3]
PARAMS = [{}, {"strength": 1e-3}, {"strength": 1e-2}, {"strength": 1e-4},
          {"strength": 1e-2, "delta": 1e-3}]
ALL = list(range(len(METHODS)))


def _config(optimizer: str = "adam", method: str = "l2_init"):
    return resolve_config({"problem": "permuted_mnist", "method": method, "optimizer": optimizer,
                           "params": {"strength": 1e-2}, "tasks": TASKS,
                           "steps_per_task": STEPS, "batch_size": BATCH, "width": 0.25})


def _training(data_dir, members, compile, optimizer="adam", **kwargs) -> EnsembleTraining:
    members = Members.from_config(_config(optimizer), members, [PARAMS[k] for k in members],
                                  [LRS[k] for k in members], [METHODS[k] for k in members])
    return EnsembleTraining(members, data_dir=data_dir, compile=compile, **kwargs)


def _run(training: EnsembleTraining) -> EnsembleTraining:
    for task in range(training.next_task, TASKS):
        training.run_task(task)
    return training


def _member(training: EnsembleTraining, k: int) -> list[torch.Tensor]:
    return [p.detach()[k].clone() for p in training.net.parameters()]


def _assert_member_k_is_seed_k_elsewhere(together: EnsembleTraining, shuffled: EnsembleTraining) -> None:
    # seeds 0, 1, 2 against the same seeds in the order 2, 0, 1, to the bit
    for k, j in ((2, 0), (0, 1), (1, 2)):
        for a, b in zip(_member(together, k), _member(shuffled, j), strict=True):
            assert torch.equal(a, b), f"seed {k} differs at place {j}"
        assert [acc[k] for acc in together.accuracies] == [acc[j] for acc in shuffled.accuracies]


def _eager_and_compiled(build, atol=1e-4) -> tuple[EnsembleTraining, EnsembleTraining]:
    # build(seeds, compile): a training. Seeds 0, 1, 2 run eagerly and compiled: the compiled run
    # ends where the eager one ends, and member k is seed k in the order 2, 0, 1 (the same
    # compiled graph); returns (eager, compiled) for the test's own checks
    eager, compiled = _run(build([0, 1, 2], False)), _run(build([0, 1, 2], True))
    _assert_ends_where_the_eager_run_ends(eager, compiled, atol)
    _assert_member_k_is_seed_k_elsewhere(compiled, _run(build([2, 0, 1], True)))
    return eager, compiled


def _assert_a_resumed_run_ends_as_the_uninterrupted_one(build, uninterrupted, tmp_path) -> None:
    # build(): the training; checkpointed after its first task, resumed in another, run to the end
    first = build()
    first.run_task(0)
    first.save(tmp_path / "ckpt")
    resumed = build()
    assert resumed.resume(tmp_path / "ckpt")
    _run(resumed)
    for a, b in zip(uninterrupted.net.parameters(), resumed.net.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.accuracies == uninterrupted.accuracies


@pytest.mark.slow
def test_the_compiled_step_is_the_eager_step_up_to_rounding_and_resumes_exactly(data_dir, tmp_path):
    eager = _training(data_dir, ALL, compile=False, measure=False)
    compiled = _training(data_dir, ALL, compile=True, measure=False)
    assert eager.step.compiled is None and compiled.step.compiled is not None
    for training in (eager, compiled):
        training.problem.start_task(0)
    x, y = eager.problem.batch(0)
    logits, _ = eager.step.hand.step(x, y)
    eager.step.chain.transform_gradient()
    eager.step.chain.update()
    correct = torch.zeros(len(ALL))
    compiled.step.compiled(x, y, correct, 1)
    # the moments (0.1·g and 0.001·g² after one step) to rounding, absolute where the task
    # gradient and λθ cancel; the parameters within α/10:
    # Adam's first step is α·g/(|g| + ε), which a rounding difference moves where |g| ≈ ε
    for a, b in zip(eager.optimizer.exp_avg + eager.optimizer.exp_avg_sq,
                    compiled.optimizer.exp_avg + compiled.optimizer.exp_avg_sq, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-9)
    for a, b in zip(eager.net.parameters(), compiled.net.parameters(), strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=0, atol=1e-4)
    assert compiled.optimizer.step_counts == eager.optimizer.step_counts
    assert correct.tolist() == (logits.argmax(-1) == y).sum(1).float().tolist()
    # and whole runs, through the same compiled graph (in the same test: one compilation)
    eager = _run(_training(data_dir, ALL, compile=False))
    compiled = _run(_training(data_dir, ALL, compile=True))
    assert eager.result().extra["step"] == "eager"
    _assert_ends_where_the_eager_run_ends(eager, compiled)
    # a compiled run resumed from its checkpoint at a task end ends as the uninterrupted one
    _assert_a_resumed_run_ends_as_the_uninterrupted_one(
        lambda: _training(data_dir, ALL, compile=True), compiled, tmp_path)


def _assert_ends_where_the_eager_run_ends(eager, compiled, atol=1e-4) -> None:
    assert compiled.result().extra["step"] == "compiled"
    for a, b in zip(eager.net.parameters(), compiled.net.parameters(), strict=True):
        torch.testing.assert_close(b.detach(), a.detach(), rtol=0, atol=atol)
    two_examples = 2 / (STEPS * BATCH)
    for acc_e, acc_c in zip(eager.accuracies, compiled.accuracies, strict=True):
        assert acc_c == pytest.approx(acc_e, abs=two_examples)


@pytest.mark.slow
def test_member_k_of_a_compiled_ensemble_is_seed_k_compiled_alone_and_at_another_place(data_dir):
    together = _run(_training(data_dir, ALL, compile=True))
    # every method's member at another place (the same ensemble shape: no other compilation),
    # and L2 Init's alone (K = 1)
    order = [3, 0, 4, 1, 2]
    shuffled = _run(_training(data_dir, order, compile=True))
    alone = _run(_training(data_dir, [2], compile=True))
    assert alone.step.compiled is not None
    for k, elsewhere, j in [(k, shuffled, order.index(k)) for k in ALL] + [(2, alone, 0)]:
        for a, b in zip(_member(together, k), _member(elsewhere, j), strict=True):
            assert torch.equal(a, b), f"member {k} ({METHODS[k]}) differs at place {j}"
        assert [acc[k] for acc in together.accuracies] == [acc[j] for acc in elsewhere.accuracies]


def test_the_compiled_step_applies_only_where_it_computes_the_method(data_dir):
    config = resolve_config({"problem": "permuted_mnist", "method": "cbp", "tasks": 1,
                             "steps_per_task": 5, "width": 0.25})
    cbp = train_ensemble(Members.from_config(config, [0]), data_dir=data_dir, compile=True)
    assert cbp.extra["step"] == "eager"  # CBP's new units from host generators: eager
    assert cbp.extra["step_note"] == ("compile asked for; eager: fresh draws from the members' host "
                                      "generators (draws=philox draws on the device, and compiles)")
    resample = resolve_config({"problem": "permuted_mnist", "method": "l2_init_resample", "tasks": 1,
                               "steps_per_task": 5, "width": 0.25})  # its target drawn every step
    assert train_ensemble(Members.from_config(resample, [0]),
                          data_dir=data_dir, compile=True).extra["step"] == "eager"
    with fast.plain_forms():
        assert _training(data_dir, [2], compile=True).step.compiled is None
    # asked for autograd: compiled, with torch.func's gradient instead of the hand-written one
    autograd = _training(data_dir, [2], compile=True, backprop="autograd")
    assert autograd.step.compiled.gradients is not None
    # a convolutional network stays eager
    from plasticlab.nets import build_network
    assert compiled_step.traceable(autograd.net)
    assert not compiled_step.traceable(build_network("cnn", 1, (3, 32, 32), 10, width=0.25))


def test_a_torch_older_than_the_compiled_steps_trains_eagerly_and_says_so(data_dir, monkeypatch):
    from torch.torch_version import TorchVersion

    monkeypatch.setattr(torch, "__version__", TorchVersion("2.4.1+cu121"))
    result = train_ensemble(Members.from_config(_config(), [0]), data_dir=data_dir, compile=True)
    assert result.extra["step"] == "eager"
    assert result.extra["step_note"] == ("compile asked for; eager: torch 2.4.1+cu121 (the compiled "
                                         "step needs torch >= 2.6: an older dynamo cannot trace every "
                                         "form of it)")


def test_the_compiled_step_refuses_a_method_it_does_not_compute(data_dir):
    # Shrink & Perturb with its host generators' noise: not a hook a compiled step can capture
    config = resolve_config({"problem": "permuted_mnist", "method": "shrink_perturb", "tasks": 1,
                             "steps_per_task": 5, "width": 0.25})
    training = EnsembleTraining(Members.from_config(config, [0]), data_dir=data_dir)
    with pytest.raises(ValueError, match="does not compute method 'shrink_perturb'"):
        compiled_step.CompiledStep(training.net, training.step.chain, training.device)


def _shrink_perturb(data_dir, seeds, compile, optimizer="adam") -> EnsembleTraining:
    # σ large enough that a draw counted by the wrong step, or drawn twice, shows at once
    config = resolve_config({"problem": "permuted_mnist", "method": "shrink_perturb",
                             "optimizer": optimizer, "tasks": TASKS, "steps_per_task": STEPS,
                             "batch_size": BATCH, "width": 0.25,
                             "params": {"draws": "philox", "shrink": 0.99, "noise": 0.05}})
    return EnsembleTraining(Members.from_config(config, seeds), data_dir=data_dir, compile=compile)


@pytest.mark.slow
def test_shrink_and_perturb_with_philox_draws_is_captured_whole_and_its_members_are_independent(
        data_dir):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _shrink_perturb(data_dir, seeds, compile=compile))
    assert compiled.step.compiled.after is not None  # the perturbation inside the compiled step


def _hooked(data_dir, method, params, seeds, compile, optimizer="adam", width=0.25) -> EnsembleTraining:
    config = resolve_config({"problem": "permuted_mnist", "method": method, "tasks": TASKS,
                             "steps_per_task": STEPS, "batch_size": BATCH, "width": width,
                             "params": params, "optimizer": optimizer,
                             "lr": 1e-2 if optimizer == "sgd" else 1e-3})
    return EnsembleTraining(Members.from_config(config, seeds), data_dir=data_dir, compile=compile)


# ReDo every 10 steps, τ high enough that units are recycled in a 60-step run, its fresh units
# from the members' host generators (the recycling steps are eager: any draws do)
REDO = {"period": 10, "threshold": 0.5}


@pytest.mark.slow
def test_redo_with_sgd_compiles_the_steps_between_its_recycles_and_takes_the_eager_step_on_them(
        data_dir):
    # with SGD: the compiled SGD update's test too (Adam's, eager steps between compiled ones
    # included, is every other test's). Member k is seed k as in any ensemble: the period is
    # the ensemble's, so every member takes the eager step at the same steps
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, "redo", REDO, seeds, compile=compile, optimizer="sgd"))
    step = compiled.step.compiled
    assert step.after is None and [step.computes(t) for t in (9, 10, 11, 20)] == [True, False, True, False]
    assert int(eager.step.chain.method.last_recycled.sum()) > 0  # the last recycle recycled units


@pytest.mark.slow
@pytest.mark.parametrize("method", ["regrama", "swr"])
def test_a_hook_on_a_period_every_member_shares_takes_the_eager_step_on_its_steps(
        data_dir, capture_only, method):
    # ReGraMa and SWR score this step's gradient in .grad: the eager step leaves it there on
    # the steps they act after (every 10th, τ high enough that they reset); one period for all
    # members, so member k takes the same forms as alone. Periods that differ stay eager.
    params = {"period": 10, "threshold": 0.5}
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, method, params, seeds, compile=compile))
    step = compiled.step.compiled
    assert step.after is None and [step.computes(t) for t in (9, 10, 11, 20)] == [True, False, True, False]
    last = "last_reset" if method == "regrama" else "last_reinitialized"
    assert int(getattr(eager.method, last).sum()) > 0  # its last act reset something
    apart = _per_member(data_dir, method, [{"period": p} for p in (10, 7, 10)], [0, 1, 2], compile=True)
    assert apart.step.compiled is None


# CBP replacing units in every layer within the run: mature after 5 steps, 5 % of them a step
CBP = {"draws": "philox", "maturity": 5, "replacement_rate": 0.05}


@pytest.mark.slow
def test_continual_backprop_with_philox_draws_is_captured_whole_as_masks(data_dir, capture_only, tmp_path):
    # its capture here; inductor's code for it on CUDA (tests/test_cuda.py, benchmarks/gpu.sh)
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, "cbp", CBP, seeds, compile=compile))
    assert compiled.step.compiled.after is not None  # generate-and-test inside the compiled step
    replaced = [r.tolist() for r in compiled.method.replacements]
    assert replaced == [r.tolist() for r in eager.method.replacements] and min(map(min, replaced)) > 0
    # and a compiled run resumed from its checkpoint ends as the uninterrupted one
    _assert_a_resumed_run_ends_as_the_uninterrupted_one(
        lambda: _hooked(data_dir, "cbp", CBP, [0, 1, 2], compile=True), compiled, tmp_path)


@pytest.mark.slow
def test_weight_clipping_is_captured_whole(data_dir, capture_only):
    # κ small enough that the clip binds within the run
    eager = _run(_hooked(data_dir, "weight_clip", {"kappa": 1.05}, [0, 1], compile=False))
    compiled = _run(_hooked(data_dir, "weight_clip", {"kappa": 1.05}, [0, 1], compile=True))
    assert compiled.step.compiled.after is not None  # the clip inside the compiled step
    bound = 1.05 / 784 ** 0.5  # the first layer's κ·s_ℓ, s_ℓ = 1/√fan_in
    first = compiled.net.affine_layers[0].weight
    assert float(first.detach().abs().max()) == pytest.approx(bound)  # it binds, and holds
    _assert_ends_where_the_eager_run_ends(eager, compiled)
    swapped = _run(_hooked(data_dir, "weight_clip", {"kappa": 1.05}, [1, 0], compile=True))
    for k in (0, 1):
        for a, b in zip(_member(compiled, k), _member(swapped, 1 - k), strict=True):
            assert torch.equal(a, b), f"seed {k} differs at place {1 - k}"


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [
    # EWC: β·F(θ − θ*) inside the compiled step, F and θ* consolidated in place at the task end
    # (β large enough that its pull shows in the second task). The paper's width: at width 0.25
    # EWC's Fisher is not member-independent even eagerly (docs/member-independence.md).
    ("ewc", {"ewc_strength": 1e4}),
    # full reset: the parameters and Adam's state restarted in place between compiled steps
    ("full_reset", {}),
])
def test_a_method_told_where_tasks_end_takes_the_compiled_step_within_each_task(
        data_dir, capture_only, method, params):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, method, params, seeds, compile=compile, width=1.0))


def _per_member(data_dir, method, params, seeds, compile) -> EnsembleTraining:
    # each seed with its own parameters (params[seed]), in one ensemble
    config = resolve_config({"problem": "permuted_mnist", "method": method, "tasks": TASKS,
                             "steps_per_task": STEPS, "batch_size": BATCH, "width": 0.25})
    members = Members.from_config(config, seeds, [params[k] for k in seeds])
    return EnsembleTraining(members, data_dir=data_dir, compile=compile)


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [
    # Normalize-and-Project: every weight and LayerNorm pair back to its initial norm, every step
    ("normalize_project", [{}, {}, {}]),
    # Hare & Tortoise: the EMA every step, the hare reset on each member's own period (5, 7, 11:
    # several resets each in a 60-step run), which the compiled step decides on the device
    ("hare_tortoise", [{"reset_period": 5, "momentum": 0.9}, {"reset_period": 7, "momentum": 0.8},
                       {"reset_period": 11, "momentum": 0.9}]),
    # SNR with Philox draws: thresholds low enough that silent units are reset within the run,
    # adapted on each member's own period (10, 7, 13 steps)
    ("snr", [{"draws": "philox", "initial_threshold": 64, "max_threshold": 256, "adapt_period": p}
             for p in (10, 7, 13)]),
])
def test_a_post_step_hook_on_every_step_is_captured_whole(data_dir, capture_only, method, params):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _per_member(data_dir, method, params, seeds, compile=compile))
    assert compiled.step.compiled.after is not None  # the hook inside the compiled step
    if method == "snr":  # units were reset, thresholds adapted, as in the eager run
        torch.testing.assert_close(compiled.method.thresholds, eager.method.thresholds)
        assert any(bool((t != 64).any()) for t in eager.method.thresholds)
        assert int(sum(h.sum() for h in eager.method.histograms)) > 0


@pytest.mark.slow
@pytest.mark.parametrize("method,params", [
    # Parseval's 4λ(WWᵀ − sI)W (λ large enough to show in a 60-step run)
    ("parseval", [{"strength": 1e-1}] * 3),
    # spectral regularization: each member's own power-iteration rounds, its u kept in place
    ("spectral", [{"strength": 1e-1, "power_iterations": 1}, {"strength": 1e-1, "power_iterations": 3},
                  {"strength": 1e-2, "power_iterations": 2}]),
])
def test_a_gradient_transform_of_the_methods_own_is_captured_whole(data_dir, capture_only, method, params):
    eager = _run(_per_member(data_dir, method, params, [0, 1, 2], compile=False))
    compiled = _run(_per_member(data_dir, method, params, [0, 1, 2], compile=True))
    assert compiled.step.compiled.transform is not None  # the transform inside the compiled step
    _assert_ends_where_the_eager_run_ends(eager, compiled)
    if method == "spectral":
        for u_eager, u_compiled in zip(eager.method.u, compiled.method.u, strict=True):
            torch.testing.assert_close(u_compiled, u_eager, rtol=0, atol=1e-4)
    shuffled = _run(_per_member(data_dir, method, params, [2, 0, 1], compile=True))
    _assert_member_k_is_seed_k_elsewhere(compiled, shuffled)


@pytest.mark.slow
def test_c_chain_is_captured_whole_from_its_first_step(data_dir, capture_only, tmp_path):
    # C-CHAIN: λ·∂L_C/∂θ through torch.func's gradient on the batch of two steps ago, λ adapting
    # to the step's task loss after a 5-update warmup over a 20-update window, and the batch kept
    # after the step — every step, the first two (no reference yet) with the term left out
    params = [{"warmup": 5, "window": w, "initial_strength": 1.0} for w in (20, 13, 20)]
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _per_member(data_dir, "c_chain", params, seeds, compile=compile))
    step = compiled.step.compiled
    assert step.transform is not None and step.after is not None
    assert compiled.method.scale.recorded == eager.method.scale.recorded == TASKS * STEPS - 2
    torch.testing.assert_close(compiled.method.scale.strength, eager.method.scale.strength, rtol=1e-3, atol=0)
    assert not torch.equal(eager.method.scale.strength, torch.ones(3, dtype=torch.float64))  # adapted
    # resumed from a checkpoint between the tasks: the buffers and λ's record come back
    _assert_a_resumed_run_ends_as_the_uninterrupted_one(
        lambda: _per_member(data_dir, "c_chain", params, [0, 1, 2], compile=True), compiled, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("method,params,atol", [
    # L2 Init + Resample with Philox: φₜ drawn inside the compiled step, counted by the step
    # its pre-step hook sets outside it
    ("l2_init_resample", {"draws": "philox", "strength": 1e-1}, 1e-4),
    # Wasserstein Init: each weight's target the initial value of its rank, sorted inside the
    # compiled step. A rounding difference that swaps two nearly equal weights' ranks swaps
    # their targets, so a few weights end apart by up to α (1e-3), not α/10
    ("wasserstein_init", {}, 1e-3),
])
def test_a_penalty_whose_target_moves_every_step_is_captured_whole(
        data_dir, capture_only, method, params, atol):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, method, params, seeds, compile=compile), atol)


@pytest.mark.slow
@pytest.mark.parametrize("params,capacity", [
    # a two-layer head injected at the task end: two frozen heads in two slots
    ({}, 2),
    # a one-layer head: the frozen sum folded into one map, rewritten at each injection
    ({"layers": 1}, 1),
    # every 10 steps, one period for every member: 12 frozen heads by the end, their slots
    # doubled from 2 to 16 (a graph each); the injecting steps take the eager step
    ({"schedule": "steps", "period": 10}, 16),
], ids=["task_end", "one_layer", "steps"])
def test_plasticity_injection_is_captured_whole_with_its_frozen_heads_in_slots(
        data_dir, capture_only, tmp_path, params, capacity):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, "plasticity_injection", params, seeds, compile=compile))
    frozen = compiled.method.frozen
    assert compiled.step.compiled is not None and frozen.capacity == capacity
    assert len(frozen.heads) == len(eager.method.frozen.heads) > 0
    for mine, theirs in zip(frozen.heads, eager.method.frozen.heads, strict=True):
        for (w, b), (w_eager, b_eager) in zip(mine, theirs, strict=True):
            torch.testing.assert_close(w, w_eager, rtol=0, atol=1e-4)
            torch.testing.assert_close(b, b_eager, rtol=0, atol=1e-4)
    if params.get("schedule") == "steps":  # resumed between the tasks: the slots rebuilt
        _assert_a_resumed_run_ends_as_the_uninterrupted_one(
            lambda: _hooked(data_dir, "plasticity_injection", params, [0, 1, 2], compile=True),
            compiled, tmp_path)
        periods = [{"schedule": "steps", "period": p} for p in (10, 7, 10)]
        apart = _per_member(data_dir, "plasticity_injection", periods, [0, 1, 2], compile=True)
        assert apart.step.compiled is None  # periods that differ: the eager step


@pytest.mark.parametrize("sizes,activations,slots", [
    ([4, 2], [], [1, 1, 1]),  # a one-layer head: one folded map
    ([4, 5, 2], ["relu"], [2, 4, 8]),
    ([4, 5, 3, 2], ["relu", "relu"], [2, 4, 8]),  # a layer between: slot by slot
    ([4, 5, 3, 2], ["concat_relu", "relu"], [2, 4, 8]),  # an activation that doubles: per head
], ids=["1", "2", "3", "concat_relu"])
def test_the_frozen_heads_in_slots_sum_to_the_heads_one_by_one_and_are_not_checkpointed(
        sizes, activations, slots):
    from plasticlab.checkpoint import Excluded, capture
    from plasticlab.nets.injection import FrozenHeads
    from plasticlab.nets.layers import ACTIVATIONS

    torch.manual_seed(0)
    frozen = FrozenHeads(len(sizes) - 1, activations)
    fan_ins = [sizes[0], *(n * ACTIVATIONS[a][1] for n, a in zip(sizes[1:-1], activations, strict=True))]
    layers = [(torch.randn(3, out, fan_in), torch.randn(3, out))
              for fan_in, out in zip(fan_ins, sizes[1:], strict=True)]
    z = torch.randn(3, 6, sizes[0])
    for injection in range(3):  # 2, 4, 6 heads in 2, 4, 8 slots (a one-layer head: one map)
        frozen.inject(layers, [(w / 2, b / 2) for w, b in layers], torch.tensor([True, injection > 0, True]))
        frozen.stack()
        assert frozen.capacity == slots[injection]
        torch.testing.assert_close(frozen.captured(z), frozen(z), rtol=0, atol=1e-5)
    state = capture(frozen, Excluded(), "frozen")
    assert set(state["attrs"]) == {"layers", "activations", "heads", "version"}
    frozen.unstack()
    assert frozen.capacity == 0 and frozen.captured(z) is None


@pytest.mark.slow
@pytest.mark.parametrize("method", ["concat_relu", "layer_norm"])
def test_a_network_without_a_hand_written_backward_compiles_with_torch_funcs_gradient(
        data_dir, method, request):
    # autograd in the eager step, torch.func's gradient compiled (Deep Fourier's MLP takes
    # Concat ReLU's path through another activation); member k is seed k, Layer Norm's gains too
    # (through inductor: its member-dependent ∂W is what traced_linear mends; Concat ReLU's
    # capture alone)
    if method == "concat_relu":
        request.getfixturevalue("capture_only")
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, method, {}, seeds, compile=compile))
    assert eager.step.backprop == "autograd" and compiled.step.compiled.gradients is not None


@pytest.mark.slow
def test_run_and_sweep_take_the_compiled_step_when_asked(data_dir, tmp_path, capsys):
    import json

    from plasticlab.cli import main
    from plasticlab.experiments import ResultStore

    tiny = ["--problem", "permuted_mnist", "--tasks", "2", "--steps-per-task", "10",
            "--set", "examples_per_task=160", "--set", "width=0.25", "--no-progress",
            "--data-dir", str(data_dir), "--seeds", "0-1", "--json"]
    for flags, step in (([], "eager"), (["--compile"], "compiled")):
        out = tmp_path / step
        assert main(["run", *tiny, "--method", "l2_init", "--out", str(out), *flags]) == 0
        runs = json.loads(capsys.readouterr().out)["runs"]
        assert [r["step"] for r in runs] == [step, step]
        assert not any("step_note" in r for r in runs)  # compiled, or not asked for
        manifests = [r["manifest"] for r in ResultStore(out).runs(status="finished")]
        assert [m["step"] for m in manifests] == [step, step]
    sweep = tmp_path / "sweep.toml"
    # the runs' ensemble shape again (K = 2: their compiled step serves, no other compilation)
    sweep.write_text('problem = "permuted_mnist"\nmethods = ["l2_init", "cbp"]\nseeds = "0-1"\n'
                     'tasks = 1\nsteps_per_task = 5\nwidth = 0.25\n'
                     '[problem_params]\nexamples_per_task = 80\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--data-dir", str(data_dir),
                 "--executor", "inline", "--compile", "--no-progress"]) == 0
    steps = {r["config"]["method"]: r["manifest"]["step"]
             for r in ResultStore(tmp_path / "sw").runs(status="finished")}
    assert steps == {"l2_init": "compiled", "cbp": "eager"}


FORMS_BEGIN, FORMS_END = "<!-- compiled-forms: tests/test_compiled_step.py -->", "<!-- /compiled-forms -->"


def _forms(data_dir) -> list[tuple[str, dict, str | None]]:
    # every registered method at its defaults, and those drawing with Philox, on the paper's MLP
    # with Adam: (method, params, what keeps it eager or None)
    from plasticlab.methods import METHODS

    forms = [(name, {}) for name in sorted(METHODS)] + [(name, {"draws": "philox"})
                                                         for name in ("cbp", "l2_init_resample",
                                                                      "shrink_perturb", "snr")]
    out = []
    for name, params in forms:
        config = resolve_config({"problem": "permuted_mnist", "method": name, "params": params,
                                 "tasks": 1, "steps_per_task": 2, "width": 0.25})
        training = EnsembleTraining(Members.from_config(config, [0]), data_dir=data_dir,
                                    measure=False)
        out.append((name, params, compiled_step.why_eager(training.net, training.step.hand,
                                                          training.step.chain)))
    return out


def test_docs_say_which_methods_steps_compile_and_what_keeps_the_others_eager(data_dir):
    # compiled, or eager for the reason compiled.why_eager gives. The table in
    # docs/performance.md is this one; a method added or changed shows here.
    from conftest import REPO

    rows = []
    for name, params, why in _forms(data_dir):
        form = f"`{name}`" + "".join(f" `{k}={v}`" for k, v in params.items())
        rows.append(f"| {form} | {'compiled' if why is None else 'eager: ' + why} |")
    table = "\n".join(["| method | `--compile` |", "|---|---|", *rows])
    page = (REPO / "docs" / "performance.md").read_text()
    block = page.split(FORMS_BEGIN)[1].split(FORMS_END)[0].strip()
    assert block == table, "docs/performance.md's table should read:\n" + table


# the methods whose compiled step a test above runs against its eager step
COMPILED_ABOVE = {"baseline", "l2", "l2_init", "l1_init", "huber_init", "shrink_perturb", "redo",
                  "regrama", "swr", "cbp", "weight_clip", "ewc", "full_reset", "normalize_project",
                  "hare_tortoise", "snr", "parseval", "spectral", "c_chain", "l2_init_resample",
                  "wasserstein_init", "concat_relu", "layer_norm", "plasticity_injection"}
# the others, run here (FIRE and L2 Init + EWC at the paper's width: at 0.25 their task ends
# are not member-independent even eagerly, docs/member-independence.md)
COMPILED_HERE = {"deep_fourier": 0.25, "dash": 0.25, "head_reset": 0.25, "fire": 1.0, "l2_init_ewc": 1.0}


def test_every_form_that_compiles_is_run_against_its_eager_step_by_some_test(data_dir):
    compiled = {name for name, _, why in _forms(data_dir) if why is None}
    assert compiled == COMPILED_ABOVE | set(COMPILED_HERE)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(COMPILED_HERE))
def test_the_other_forms_compile_whole_and_end_where_their_eager_runs_end(data_dir, capture_only, method):
    eager, compiled = _eager_and_compiled(
        lambda seeds, compile: _hooked(data_dir, method, {}, seeds, compile=compile,
                                       width=COMPILED_HERE[method]))
    assert compiled.step.compiled is not None
