"""A drop-in built before the model is moved (``model.to(device)``, as a Lightning trainer moves
a module built on the CPU) follows it: its θ₀ and every other tensor it holds go where the
parameters went. The drop-ins that act on units through views of the layers (CBP, ReDo, SNR)
cannot follow: they refuse to go on, saying what to do, instead of changing the old tensors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import plasticlab
from test_dropin_resume import CASES, TASK, batch, build, model_of, train

FOLLOWING = ["L2Init", "L1Init", "HuberInit", "WassersteinInit", "L2", "L2InitResample", "EWC",
             "EWC sum", "ShrinkPerturb", "Spectral", "WeightClip", "NormalizeProject", "HareTortoise"]
"""The drop-ins that hold tensors of their own beside the parameters (Parseval, SWR and UPGD
hold none that live on the device: Parseval none, SWR's threshold is moved at each use, UPGD's
state is torch.optim's, made at its first step)."""
UNIT_VIEWS = ["SNR", "ContinualBackpropSequential", "ReDoSequential", "ReDoSequential initial"]


def held_tensors(value, seen=None):
    """Every tensor a drop-in holds, walking its attributes, lists, dicts and modules."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, nn.Module):
        yield from (*value.parameters(), *value.buffers())
    elif isinstance(value, list | tuple):
        for v in value:
            yield from held_tensors(v, seen)
    elif isinstance(value, dict):
        for v in value.values():
            yield from held_tensors(v, seen)
    elif not isinstance(value, type) and hasattr(value, "__dict__") and not callable(value):
        for v in vars(value).values():
            yield from held_tensors(v, seen)


def dropin_tensors(dropin, model):
    """The tensors a drop-in holds besides the model's parameters."""
    params = {id(p) for p in model.parameters()}
    return [t for v in vars(dropin).values() for t in held_tensors(v) if id(t) not in params]


@pytest.mark.parametrize("name", FOLLOWING)
def test_every_tensor_a_drop_in_holds_follows_its_parameters(name):
    # Module._apply swaps a parameter's .data when moving it to CUDA; the CPU has no second
    # device to move to, so the move is the drop-in's own step, to the meta device: every
    # tensor it holds but the model's parameters must go (one left behind fails here).
    case = CASES[name]
    model, optimizer, dropin = build(case, init_seed=0)
    train(case, model, optimizer, dropin, range(9))  # EWC consolidated, buffers made
    assert dropin_tensors(dropin, model), "a drop-in that holds no tensor of its own needs no test here"
    dropin._follow(torch.device("meta"))
    assert [tuple(t.shape) for t in dropin_tensors(dropin, model) if t.device.type != "meta"] == []
    dropin._follow(torch.device("meta"))  # where they already are: nothing moves again


@pytest.mark.parametrize("name", UNIT_VIEWS)
def test_a_drop_in_on_views_of_the_layers_refuses_a_converted_model(name):
    case = CASES[name]
    model, optimizer, dropin = build(case, init_seed=0)
    train(case, model, optimizer, dropin, range(3))
    model.double()  # new tensors for the parameters, as model.to("cuda") gives them
    before = [p.clone() for p in model.parameters()]
    x = torch.randn(8, 6, dtype=torch.float64)
    who = name.split()[0]
    with pytest.raises(RuntimeError, match=f"{who}: the model's parameters were replaced after "
                                           fr"{who} was built .* build {who} after model.to\(device\)"):
        model(x).sum().backward()
        case.after(dropin, 3, x)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.cuda
@pytest.mark.parametrize("name", FOLLOWING)
def test_a_drop_in_built_before_model_cuda_trains_as_one_built_after(name):
    case = CASES[name]
    runs = []
    for built_before_the_move in (True, False):
        torch.manual_seed(7)  # L2InitResample's and ShrinkPerturb's draws: torch's generators
        model = model_of(0, case.layer_norm)
        if built_before_the_move:
            dropin = case.build(model, None)
            model.cuda()
        else:
            model.cuda()
            dropin = case.build(model, None)
        optimizer = case.optimizer(model)
        for step in range(12):
            x, y = (t.cuda() for t in batch(step))
            loss = F.cross_entropy(model(x), y) + case.loss(dropin)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            case.after(dropin, step, x)
            if (step + 1) % TASK == 0 and isinstance(dropin, plasticlab.EWC):
                dropin.consolidate_model(model, x, y)
        runs.append([p.detach().cpu() for p in model.parameters()])
    # up to rounding: a drop-in's first values (Spectral's u₀) are normalised on the device it
    # was built on, the CPU or the GPU; a θ₀ left behind or taken again would be far off
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b)


def test_a_penalty_gradient_after_model_double_is_taken_in_double():
    model = nn.Linear(3, 2)
    reg = plasticlab.L2Init(model, 0.5)
    model.zero_grad()
    reg.add_grad_()  # keeps a float32 buffer for θ − θ₀
    model.double()
    with torch.no_grad():
        model.weight.add_(0.1 / 3)  # θ − θ₀ now needs more bits than float32 has
    model.zero_grad()
    model.weight.grad = torch.zeros_like(model.weight)
    reg.add_grad_()
    expected = 0.5 * (model.weight.detach() - reg.initial[0].double())
    assert model.weight.grad.dtype == torch.float64
    torch.testing.assert_close(model.weight.grad, expected, rtol=0, atol=0)
