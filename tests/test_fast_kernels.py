"""plasticlab.fast: every fast path against its plain form (``plasticlab.fast.plain_forms``) —
forward values and gradients, to the bit where the fast path says so, else to a stated tolerance.
The quadratic penalty's paths against theirs: tests/test_regularizers.py; the MLP's hand-written
backward: tests/test_backprop.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from plasticlab import fast
from plasticlab.fast import plain_forms
from plasticlab.measure import folded_permutation, held_out_accuracy
from plasticlab.nets import (
    EnsembleConv2d,
    EnsembleLinear,
    build_network,
    ensemble_conv,
    linear_backward,
    max_pool,
    pool_before_relu,
)
from plasticlab.nets import max_pool_corners as fast_max_pool
from plasticlab.problems import PermutedMNIST, RandomLabelCIFAR, task_examples
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members

torch.set_num_threads(1)


def both_forms(fn):
    """``fn()`` as the code runs by default (the fast paths) and inside ``plain_forms()``."""
    fast_result = fn()
    with plain_forms():
        plain_result = fn()
    return fast_result, plain_result


def value_and_grads(module, x, grad_y):
    """The module's output on ``x`` and the gradients of ⟨output, grad_y⟩ for x and every parameter."""
    x = x.clone().requires_grad_()
    module.zero_grad(set_to_none=True)
    y = module(x)
    y.backward(grad_y)
    return [y.detach(), x.grad] + [p.grad for p in module.parameters()]


def randomized(layer, gen, scale=0.1):
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return layer


# --- the switch ---------------------------------------------------------------------------------

def test_plain_forms_turns_every_fast_path_off_and_restores_the_switch():
    x = torch.zeros(2, 3, 4, 4)
    assert fast.enabled() and linear_backward.applies(x) and fast_max_pool.applies(x)
    with plain_forms():
        assert not fast.enabled()
        assert not linear_backward.applies(x) and not fast_max_pool.applies(x)
        assert ensemble_conv.kernel_for("loop", x) is None
        assert not pool_before_relu.applies("relu", True) and not task_examples.applies()
        with plain_forms():
            pass
        assert not fast.enabled()  # a nested block leaves the outer one in force
    assert fast.enabled()
    with pytest.raises(RuntimeError), plain_forms():
        raise RuntimeError
    assert fast.enabled()


# --- the layers' kernels ------------------------------------------------------------------------

@pytest.mark.parametrize("K,B,fan_in,fan_out", [(3, 16, 784, 100), (2, 5, 100, 10), (8, 16, 100, 100)])
def test_ensemble_linear_backward_equals_autograd_through_baddbmm(K, B, fan_in, fan_out):
    gen = torch.Generator().manual_seed(K)
    layer = randomized(EnsembleLinear(K, fan_in, fan_out), gen)
    x, grad_y = torch.randn(K, B, fan_in, generator=gen), torch.randn(K, B, fan_out, generator=gen)
    (y, gx, gw, gb), (y0, gx0, gw0, gb0) = both_forms(lambda: value_and_grads(layer, x, grad_y))
    # the same forward and the same products for ∂L/∂x and ∂L/∂b; ∂L/∂W = δᵀx against autograd's
    # (xᵀδ)ᵀ may differ in the last bit
    assert torch.equal(y, y0) and torch.equal(gx, gx0) and torch.equal(gb, gb0)
    torch.testing.assert_close(gw, gw0, rtol=1e-6, atol=1e-6)


def test_the_conv_kernel_is_the_one_named_and_auto_is_the_loop_on_the_cpu():
    x = torch.zeros(1, 1, 1, 4, 4)
    assert ensemble_conv.kernel_for("auto", x) is ensemble_conv.loop
    assert ensemble_conv.kernel_for("loop", x) is ensemble_conv.loop
    assert ensemble_conv.kernel_for("grouped", x) is ensemble_conv.grouped


@pytest.mark.parametrize("kernel", ["loop", "grouped"])
def test_ensemble_conv_kernels_equal_one_conv2d_per_member(kernel):
    gen = torch.Generator().manual_seed(6)
    layer = randomized(EnsembleConv2d(4, 3, 16, 5, kernel=kernel), gen)
    x, grad_y = torch.randn(4, 6, 3, 20, 20, generator=gen), torch.randn(4, 6, 16, 16, 16, generator=gen)
    fast_out, plain_out = both_forms(lambda: value_and_grads(layer, x, grad_y))
    for a, b in zip(fast_out, plain_out, strict=True):
        if kernel == "loop":  # the same per-member convolutions, forward and backward
            assert torch.equal(a, b)
        else:  # one grouped convolution: another algorithm, the same function up to rounding
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ties", [False, True])
def test_max_pool_from_window_corners_equals_f_max_pool2d(ties):
    gen = torch.Generator().manual_seed(7)
    h = torch.relu(torch.randn(3, 4, 6, 28, 28, generator=gen))
    if ties:
        h = h.round()
    grad_y = torch.randn(3, 4, 6, 14, 14, generator=gen)

    def pooled():
        x = h.clone().requires_grad_()
        y = max_pool(x)
        y.backward(grad_y)
        return y.detach(), x.grad

    (y, g), (y0, g0) = both_forms(pooled)
    assert torch.equal(y, y0) and torch.equal(g, g0)
    assert torch.equal(y0, F.max_pool2d(h.flatten(0, 1), 2).view(3, 4, 6, 14, 14))


def test_pooling_before_relu_equals_relu_before_pooling():
    net = build_network("cnn", 2, (3, 32, 32), 10, generators=[torch_generator(s, "init") for s in (0, 1)])
    block = net.blocks[0]
    h = torch.randn(2, 5, 3, 32, 32, generator=torch.Generator().manual_seed(8))
    grad = torch.randn(2, 5, 16, 14, 14, generator=torch.Generator().manual_seed(9))

    def output():
        net.zero_grad(set_to_none=True)
        y = block.output(h)
        y.backward(grad)
        return [y.detach()] + [p.grad for p in block.parameters()]

    def plain_output():  # the plain form, with the same kernels as output() runs
        net.zero_grad(set_to_none=True)
        y = block(h)[1]
        y.backward(grad)
        return [y.detach()] + [p.grad for p in block.parameters()]

    assert pool_before_relu.applies(block.activation, block.pool)
    for a, b in zip(output(), plain_output(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("arch,shape,kwargs", [
    ("mlp", (784,), {}), ("mlp", (784,), {"layer_norm": True}), ("cnn", (3, 32, 32), {}),
    ("cnn", (3, 32, 32), {"activation": "concat_relu"}), ("cnn", (3, 32, 32), {"conv_kernel": "grouped"}),
])
def test_whole_networks_agree_with_their_plain_forms(arch, shape, kwargs):
    net = build_network(arch, 3, shape, 10, generators=[torch_generator(s, "init") for s in range(3)],
                        **kwargs)
    gen = torch.Generator().manual_seed(10)
    x, y = torch.rand(3, 8, *shape, generator=gen), torch.randint(0, 10, (3, 8), generator=gen)

    def step():
        net.zero_grad(set_to_none=True)
        logits = net(x)
        F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
        return [logits.detach()] + [p.grad for p in net.parameters()]

    for a, b in zip(*both_forms(step), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# --- a task's examples --------------------------------------------------------------------------

@pytest.mark.parametrize("problem_cls,fixture,params", [
    (PermutedMNIST, "mnist_dir", {"examples_per_task": 160}),  # per-member permutations
    (RandomLabelCIFAR, "cifar10_dir", {"examples": 96}),  # rows of one resident data set
])
def test_a_tasks_examples_gathered_fast_equal_the_plain_stack(request, problem_cls, fixture, params):
    data_dir = request.getfixturevalue(fixture)
    fast_problem = problem_cls([3, 8], tasks=2, steps_per_task=5, batch_size=16, data_dir=data_dir, **params)
    plain_problem = problem_cls([3, 8], tasks=2, steps_per_task=5, batch_size=16, data_dir=data_dir, **params)
    for task in (0, 1):
        fast_problem.start_task(task)
        with plain_forms():
            plain_problem.start_task(task)
        assert torch.equal(fast_problem._x, plain_problem._x)
        for step in (0, 4):
            for a, b in zip(fast_problem.batch(step), plain_problem.batch(step), strict=True):
                assert torch.equal(a, b)


# --- the next task prepared while this one trains -----------------------------------------------

@pytest.mark.parametrize("problem_cls,fixture,params", [
    (PermutedMNIST, "mnist_dir", {"examples_per_task": 160}),
    (RandomLabelCIFAR, "cifar10_dir", {"examples": 96}),
])
def test_preparing_the_next_task_leaves_the_current_one_untouched(request, problem_cls, fixture, params):
    data_dir = request.getfixturevalue(fixture)
    problem = problem_cls([3, 8], tasks=3, steps_per_task=5, batch_size=16, data_dir=data_dir, **params)
    fresh = problem_cls([3, 8], tasks=3, steps_per_task=5, batch_size=16, data_dir=data_dir, **params)
    problem.start_task(0)
    problem.start_task(1)  # task 0's examples are now the spare buffer
    before = [t.clone() for t in problem.batch(4)]
    prepared = problem.prepare_task(2, problem.spare_examples())
    assert all(torch.equal(a, b) for a, b in zip(problem.batch(4), before, strict=True))
    problem.start_task(2, prepared)
    fresh.start_task(2)
    for step in (0, 4):
        for a, b in zip(problem.batch(step), fresh.batch(step), strict=True):
            assert torch.equal(a, b)
    with pytest.raises(ValueError, match="task 2 was prepared, task 1 started"):
        problem.start_task(1, prepared)


@pytest.mark.parametrize("method,problem,fixture", [
    ("l2_init", "permuted_mnist", "mnist_dir"),
    ("ewc", "permuted_mnist", "mnist_dir"),  # reads the finished task at its end
    ("cbp", "random_label_cifar", "cifar10_dir"),
])
@pytest.mark.slow
def test_a_run_that_prepares_each_next_task_in_the_background_equals_one_that_does_not(
        request, tmp_path, method, problem, fixture):
    from plasticlab.engine import train_ensemble
    from plasticlab.experiments.config import resolve_config

    data_dir = request.getfixturevalue(fixture)
    # EWC's Fisher on 8 examples of the finished task, not the default 992 (how many is not what
    # is compared; the 992 were most of this test)
    config = resolve_config({"problem": problem, "method": method, "tasks": 4, "steps_per_task": 15,
                             "params": {"fisher_samples": 8} if method == "ewc" else {},
                             "problem_params": ({"examples_per_task": 160} if problem == "permuted_mnist"
                                                else {"examples": 96})})
    plain = train_ensemble(Members.from_config(config, [0, 1]), data_dir=data_dir, prefetch=False)
    ahead = train_ensemble(Members.from_config(config, [0, 1]), data_dir=data_dir, prefetch=True)
    for a, b in zip(plain.members, ahead.members, strict=True):
        assert a.task_online_accuracy == b.task_online_accuracy
        assert a.task_metrics == b.task_metrics


def test_the_background_preparation_applies_on_cuda_only_and_not_in_plain_forms():
    from plasticlab.problems import task_prefetch

    assert task_prefetch.applies(torch.device("cuda")) and not task_prefetch.applies(torch.device("cpu"))
    with plain_forms():
        assert not task_prefetch.applies(torch.device("cuda"))


# --- test accuracy with the permutation in the first layer --------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"layer_norm": True}, {"activation": "concat_relu"}])
def test_folded_permutation_accuracy_equals_the_permuted_test_set_through_the_network(data_dir, kwargs):
    seeds = [0, 6]
    problem = PermutedMNIST(seeds, tasks=2, data_dir=data_dir, examples_per_task=160)
    problem.start_task(1)
    net = build_network("mlp", 2, (784,), 10, generators=[torch_generator(s, "init") for s in seeds],
                        **kwargs)
    parts = [problem.member_test_subset(k, s, 1, None) for k, s in enumerate(seeds)]
    assert folded_permutation.applies(net, parts)
    folded, plain = both_forms(lambda: held_out_accuracy(net, problem, 1, chunk=3000))
    # the first layer's outputs agree up to rounding: at most one of 10,000 predictions may flip
    torch.testing.assert_close(folded, plain, rtol=0, atol=1.5 / 10000)
