"""The engine on a CUDA device: every method trains there as it does on the CPU, the ensemble's
CUDA-only kernels (grouped convolution, native pooling) agree with the CPU forms, and a task
makes the host wait for the device a fixed number of times, however many steps it has.

Runs wherever ``torch.cuda.is_available()``; CI has no GPU, so these are skipped there (the CPU
forms are pinned down by the rest of the suite). Marked ``cuda``, like every test that needs a
CUDA device: ``pytest -m cuda`` runs them all (``docs/reproduction/gpu.sh``,
``benchmarks/gpu.sh``). Each method draws its random numbers on the
host (:mod:`plasticlab.rng`), so a CUDA run follows the same trajectory as the CPU run up to
floating-point rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS
from plasticlab.nets import build_network
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

pytestmark = pytest.mark.cuda

MLP = {"problem": "permuted_mnist", "tasks": 2, "steps_per_task": 30,
       "problem_params": {"examples_per_task": 480}}
CNN = {"problem": "random_label_cifar", "tasks": 2, "steps_per_task": 15,
       "problem_params": {"examples": 240}}
# Short runs exercise each method's own mechanism (replacement, recycling, perturbation, the
# Fisher estimate) within 60 steps.
PARAMS = {"l2": {"strength": 1e-3}, "huber_init": {"strength": 1e-2, "delta": 0.01},
          "shrink_perturb": {"shrink": 0.99, "noise": 1e-2},
          "cbp": {"replacement_rate": 0.05, "maturity": 5}, "redo": {"period": 10, "threshold": 0.1},
          "ewc": {"fisher_samples": 8}, "l2_init_ewc": {"fisher_samples": 8}}
# Methods whose discrete choices (which unit to replace, which is dormant) can flip on a
# rounding difference: one flipped choice changes a few predictions of a task.
DISCRETE = {"cbp", "redo"}
SEEDS = [0, 1, 2]


def _run(setup: dict, method: str, device: str, data_dir, **kwargs):
    config = resolve_config({**setup, "method": method, "params": PARAMS.get(method, {})})
    return train_ensemble(Members.from_config(config, SEEDS), data_dir=data_dir, device=device, **kwargs)


def _assert_same_run(cpu, cuda, method: str, examples_per_task: int):
    # Float32 rounding differs between the CPU and the GPU kernels; the trajectories may drift
    # by a few predictions per task, never more.
    predictions = 8 if method in DISCRETE else 3
    for a, b in zip(cpu.members, cuda.members, strict=True):
        assert b.task_online_accuracy == pytest.approx(a.task_online_accuracy,
                                                       abs=predictions / examples_per_task)
        for name, values in a.task_metrics.items():
            np.testing.assert_allclose(np.asarray(b.task_metrics[name], dtype=float),
                                       np.asarray(values, dtype=float), rtol=0.05, atol=0.02,
                                       err_msg=name)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_trains_the_mlp_on_cuda_as_on_the_cpu(data_dir, method):
    cpu = _run(MLP, method, "cpu", data_dir)
    cuda = _run(MLP, method, "cuda", data_dir)
    assert cuda.device == "cuda" and cpu.extra["backprop"] == cuda.extra["backprop"]
    _assert_same_run(cpu, cuda, method, MLP["steps_per_task"] * 16)


@pytest.mark.parametrize("method", ["baseline", "l2_init", "cbp", "redo", "concat_relu", "layer_norm"])
def test_each_method_trains_the_cnn_on_cuda_as_on_the_cpu(cifar10_dir, method):
    # On CUDA the K convolutions run as one grouped convolution (the CPU loops over members).
    # cuDNN may use TF32 for convolutions, hence the same loose bounds as discrete choices.
    cpu = _run(CNN, method, "cpu", cifar10_dir)
    cuda = _run(CNN, method, "cuda", cifar10_dir)
    for a, b in zip(cpu.members, cuda.members, strict=True):
        assert b.task_online_accuracy == pytest.approx(a.task_online_accuracy,
                                                       abs=8 / (CNN["steps_per_task"] * 16))


def test_the_hand_written_backward_on_cuda_equals_autograd_there(data_dir):
    manual = _run(MLP, "l2_init", "cuda", data_dir, backprop="manual")
    autograd = _run(MLP, "l2_init", "cuda", data_dir, backprop="autograd")
    _assert_same_run(autograd, manual, "l2_init", MLP["steps_per_task"] * 16)


def test_member_k_on_cuda_equals_seed_k_run_alone_there(data_dir):
    config = resolve_config({**MLP, "method": "l2_init"})
    together = train_ensemble(Members.from_config(config, [0, 1, 2, 3, 4, 5]),
                              data_dir=data_dir, device="cuda")
    alone = train_ensemble(Members.from_config(config, [4]), data_dir=data_dir, device="cuda")
    # Batched kernels may block the sums differently for another K: rounding, not drift.
    assert together.members[4].task_online_accuracy == pytest.approx(
        alone.members[0].task_online_accuracy, abs=2 / (MLP["steps_per_task"] * 16))


@pytest.mark.parametrize("arch,shape", [("mlp", (784,)), ("cnn", (3, 32, 32))])
def test_the_networks_gradients_on_cuda_equal_the_cpus(arch, shape):
    # The CUDA network uses the grouped convolution and PyTorch's pooling kernel; the CPU one
    # the per-member loop and the corner-based pooling.
    net = build_network(arch, 5, shape, 10, generators=[torch_generator(s, "init") for s in range(5)])
    gpu = build_network(arch, 5, shape, 10,
                        generators=[torch_generator(s, "init") for s in range(5)]).cuda()
    x = torch.randn(5, 16, *shape, dtype=torch.float32)
    y = torch.randint(0, 10, (5, 16))
    # TF32 off: the comparison is of the two forms, in full float32.
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        for model, inputs, labels in ((net, x, y), (gpu, x.cuda(), y.cuda())):
            logits = model(inputs)
            torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten()).backward()
    for (name, p), q in zip(net.named_parameters(), gpu.parameters(), strict=True):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("method", ["l2_init", "cbp", "redo", "shrink_perturb", "ewc"])
def test_a_task_waits_for_the_device_as_often_with_60_steps_as_with_20(data_dir, method):
    # CUDA's sync-debug mode warns at every operation that makes the host wait for the device.
    # Inside a task there must be none per step, nor per ReDo recycle: the count per run is the
    # same for 20 and 60 steps per task (the task starts' copies and the task-end read-backs).
    import warnings

    counts = []
    for steps in (20, 20, 60):  # the first run is a warm-up: one-time set-up may wait once
        config = resolve_config({**MLP, "steps_per_task": steps, "method": method,
                                 "params": PARAMS.get(method, {})})
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                train_ensemble(Members.from_config(config, SEEDS),
                               data_dir=data_dir, device="cuda", measure=False)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
    assert counts[1] >= 1, "the task-end read-back must be seen: is sync-debug mode working?"
    assert counts[1] == counts[2], counts


def test_preparing_the_next_task_in_the_background_on_cuda_changes_no_number(data_dir):
    config = resolve_config({**MLP, "tasks": 3, "method": "l2_init"})
    ahead = train_ensemble(Members.from_config(config, SEEDS),
                           data_dir=data_dir, device="cuda")  # prefetch applies
    plain = train_ensemble(Members.from_config(config, SEEDS),
                           data_dir=data_dir, device="cuda", prefetch=False)
    for a, b in zip(ahead.members, plain.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


@pytest.mark.parametrize("method, params", [
    ("l2_init", {}),
    # the perturbation and its Philox draw inside the replayed graph
    ("shrink_perturb", {"draws": "philox", "shrink": 0.999, "noise": 0.01}),
    # generate-and-test as masks, Adam's restarted elements with their own counts, in the graph
    ("cbp", {"draws": "philox", "maturity": 5, "replacement_rate": 0.05}),
    # frozen heads in slots, and Adam's restarted head, both new at the task end: static too
    ("plasticity_injection", {})])
def test_the_compiled_step_on_cuda_replays_a_cuda_graph_and_trains_as_the_eager_step(
        data_dir, method, params):
    # --compile on CUDA: mode="reduce-overhead". A mutated input that is not static would make
    # inductor skip the CUDA graph (counted in its "cudagraph_skips"); none may.
    from torch._dynamo.utils import counters

    counters.clear()
    config = resolve_config({**MLP, "method": method, "params": params})
    eager = train_ensemble(Members.from_config(config, SEEDS), data_dir=data_dir, device="cuda")
    compiled = train_ensemble(Members.from_config(config, SEEDS),
                              data_dir=data_dir, device="cuda", compile=True)
    assert compiled.extra["step"] == "compiled"
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    _assert_same_run(eager, compiled, method, MLP["steps_per_task"] * 16)


def test_feature_ranks_on_cuda_take_the_gram_matrix_and_match_the_cpus_svd():
    from plasticlab import metrics

    g = torch.Generator().manual_seed(3)
    phi = torch.randn(8, 512, 100, generator=g)
    phi[2] = torch.randn(512, 4, generator=g) @ torch.randn(4, 100, generator=g)
    assert metrics.gram_applies(phi.cuda())
    on_cuda, on_cpu = metrics.singular_values(phi.cuda()).cpu(), metrics.singular_values(phi)
    torch.testing.assert_close(on_cuda, on_cpu, rtol=1e-5, atol=1e-5 * on_cpu.max().item())
    assert metrics.srank(on_cuda).tolist() == metrics.srank(on_cpu).tolist()
