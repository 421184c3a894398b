"""plasticlab.foreach_penalty: ``loss + reg()`` for the quadratic penalties and L1 Init as one
autograd node of foreach kernels gives the plain form's gradient λ·ρ′(θ − target) and its value
up to rounding, and applies where its module docstring says only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import plasticlab
from plasticlab import fast


def model_of(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.LayerNorm(16), nn.ReLU(),
                         nn.Linear(16, 4))


def fixed_draws(model):
    g = torch.Generator().manual_seed(3)
    shapes = [p.shape for p in plasticlab.regularizers.regularized_parameters(model)]
    return lambda: [torch.randn(s, generator=g) for s in shapes]


ONE_NODE = {
    "L2": lambda m: plasticlab.L2(m, 1e-2),
    "L2Init": lambda m: plasticlab.L2Init(m, 1e-1),
    "WassersteinInit": lambda m: plasticlab.WassersteinInit(m, 1e-1),
    "L2InitResample": lambda m: plasticlab.L2InitResample(m, 1e-1, sampler=fixed_draws(m)),
    "L1Init": lambda m: plasticlab.L1Init(m, 1e-2),
}


def train(build, steps: int = 15) -> list[torch.Tensor]:
    model = model_of()
    reg = build(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 6, generator=g), torch.randint(4, (8,), generator=g)
        loss = F.cross_entropy(model(x), y) + reg()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list(ONE_NODE))
def test_the_fast_penalty_trains_as_the_plain_one_bit_for_bit(name):
    fast_run = train(ONE_NODE[name])
    with fast.plain_forms():
        plain_run = train(ONE_NODE[name])
    assert all(torch.equal(a, b) for a, b in zip(fast_run, plain_run, strict=True))


@pytest.mark.parametrize("name", list(ONE_NODE))
def test_the_fast_penalty_is_one_node_with_the_plain_value_up_to_rounding(name):
    model = model_of()
    reg = ONE_NODE[name](model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))  # away from θ₀
    if name == "L2InitResample":
        reg.resample()  # this step's φₜ, which both forms then read
    value = reg.value()
    assert type(value.grad_fn).__name__ == "_PenaltyBackward"
    with fast.plain_forms():
        plain = reg.value()
    assert type(plain.grad_fn).__name__ != "_PenaltyBackward"
    torch.testing.assert_close(value, plain, rtol=1e-6, atol=0)


def test_it_applies_only_where_it_says():
    model = model_of()
    assert type(plasticlab.HuberInit(model, 1e-2).value().grad_fn).__name__ != "_PenaltyBackward"
    stacked = [torch.randn(3, 4, 5, requires_grad=True)]
    member = plasticlab.L2Init(stacked, torch.full((3,), 1e-2), member_dim=True)
    assert member.value().shape == (3,)  # one per member: the plain form
    with torch.no_grad():
        assert plasticlab.L2Init(model, 1e-2)().grad_fn is None
    learnt = torch.tensor(1e-2, requires_grad=True)  # a λ of one's own to learn: the plain form's gradient
    plasticlab.L2Init(model, learnt)().backward()
    assert learnt.grad is not None
    frozen = model_of()
    frozen[0].requires_grad_(False)
    reg = plasticlab.L2Init([*frozen[0].parameters(), *frozen[2].parameters()], 1e-2)
    with torch.no_grad():
        frozen[2].weight.add_(1.0)
    reg().backward()
    assert frozen[0].weight.grad is None
    torch.testing.assert_close(frozen[2].weight.grad, torch.full_like(frozen[2].weight, 1e-2))


def test_targets_that_do_not_match_the_parameters_are_refused_as_by_the_plain_form():
    reg = plasticlab.L2InitResample(model_of(), 1e-1)  # no φₜ drawn yet: no targets
    with pytest.raises(ValueError, match="0 targets for 6 parameters"):
        reg.value()


@pytest.mark.parametrize("name", ["L2Init", "L1Init"])
def test_a_gradient_of_the_gradient_is_the_plain_forms(name):
    # a Hessian-vector product through the penalty (create_graph): λ·v for L2 Init, 0 for L1 Init
    def hvp():
        model = model_of()
        reg = ONE_NODE[name](model)
        params = plasticlab.regularizers.regularized_parameters(model)
        with torch.no_grad():
            for p in params:
                p.add_(0.1)
        grads = torch.autograd.grad(reg(), params, create_graph=True)
        product = sum((g * torch.ones_like(g)).sum() for g in grads)
        second = torch.autograd.grad(product, params, allow_unused=True, materialize_grads=True)
        return [s.detach() for s in second]

    fast_hvp = hvp()
    with fast.plain_forms():
        plain_hvp = hvp()
    assert all(torch.equal(a, b) for a, b in zip(fast_hvp, plain_hvp, strict=True))
    if name == "L2Init":
        assert all(torch.equal(a, torch.full_like(a, 1e-1)) for a in fast_hvp)
