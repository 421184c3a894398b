"""The Hessian's top eigenvalue by power iteration on Hessian-vector products: quadratics whose
Hessian is known, a small network against its explicit Hessian, members on their own blocks."""

from __future__ import annotations

import types

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.measure.hessian import top_eigenvalue
from plasticlab.measure.optional import TaskEndMeasurements, task_loss
from plasticlab.monitor import HessianProbe
from plasticlab.nets import build_network


def gens(*seeds):
    return [torch.Generator().manual_seed(s) for s in seeds]


def test_a_quadratic_gives_each_member_the_eigenvalue_of_largest_magnitude_of_its_own_block():
    # L = Σₖ ½ θₖᵀ diag(aₖ) θₖ: member k's Hessian is diag(aₖ). Member 1's largest in
    # magnitude is negative: power iteration finds it, sign included.
    a = torch.tensor([[5.0, 1.0, 0.5, 0.1], [2.0, -7.0, 3.0, 1.0]], dtype=torch.float64)
    theta = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    value = top_eigenvalue(lambda: 0.5 * (a * theta ** 2).sum(), [theta], gens(0, 1), iterations=100,
                           tolerance=1e-10)
    assert value.tolist() == [pytest.approx(5.0), pytest.approx(-7.0)]
    assert theta.grad is None  # nothing written into .grad


def test_a_member_stops_at_its_own_convergence_and_does_not_depend_on_the_others():
    a = torch.tensor([[3.0, 2.9, 0.1], [9.0, 1.0, 1.0]], dtype=torch.float64)
    theta = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    together = top_eigenvalue(lambda: 0.5 * (a * theta ** 2).sum(), [theta], gens(4, 5))
    alone = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    first = top_eigenvalue(lambda: 0.5 * (a[:1] * alone ** 2).sum(), [alone], gens(4))
    assert together[0].item() == first.item()
    assert together[1].item() == pytest.approx(9.0, rel=1e-4)


def test_a_small_networks_value_is_the_largest_eigenvalue_of_its_explicit_hessian():
    net = build_network("mlp", 1, (3,), 3, width=0.03, generators=gens(0))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(1, 12, 3, generator=g), torch.randint(3, (1, 12), generator=g)
    params = list(net.parameters())
    value = top_eigenvalue(lambda: task_loss(net, x, y), params, gens(2), iterations=500, tolerance=1e-9)
    shapes = [p.shape for p in params]
    flat = torch.cat([p.detach().flatten() for p in params]).double()

    def loss_of(v):
        chunks, i = [], 0
        for s in shapes:
            n = int(torch.tensor(s).prod())
            chunks.append(v[i:i + n].view(s).float())
            i += n
        return torch.func.functional_call(net, dict(zip([n for n, _ in net.named_parameters()],
                                                        chunks, strict=True)), (x,))

    def loss(v):
        return nn.functional.cross_entropy(loss_of(v)[0], y[0])

    eig = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat))
    top = eig[eig.abs().argmax()].item()
    assert value.item() == pytest.approx(top, rel=1e-3)


def test_the_engines_hessian_is_member_k_alone():
    seeds = [0, 1]
    nets = build_network("mlp", 2, (3,), 3, width=0.03, generators=gens(*seeds))
    one = build_network("mlp", 1, (3,), 3, width=0.03, generators=gens(1))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(2, 12, 3, generator=g), torch.randint(3, (2, 12), generator=g)
    both = TaskEndMeasurements(nets, types.SimpleNamespace(seeds=seeds), ["hessian"], 12)
    alone = TaskEndMeasurements(one, types.SimpleNamespace(seeds=[1]), ["hessian"], 12)
    a = both.from_network(x, y, 0, None)["hessian_top_eigenvalue"]
    b = alone.from_network(x[1:], y[1:], 0, None)["hessian_top_eigenvalue"]
    assert a[1].item() == pytest.approx(b.item(), rel=1e-6)


def test_the_monitors_hessian_probe_measures_a_quadratic_model():
    # model(x) = w · x with L = ½ (w · x)² summed: H = Σ x xᵀ, for x = (2, 0) and (0, 1): diag(4, 1).
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Identity())
    x = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    probe = HessianProbe(lambda out, t: 0.5 * (out - t).square().sum(), torch.zeros(2, 1), every=1,
                         iterations=100, tolerance=1e-10)
    monitor = plasticlab.Monitor(model, x, every=5, layers=["1"], hessian=probe, thresholds=None)
    row = monitor.step()
    assert set(row) == {"step", "hessian_top_eigenvalue"}
    assert row["hessian_top_eigenvalue"] == pytest.approx(4.0, rel=1e-6)
    with pytest.raises(ValueError, match="HessianProbe"):
        plasticlab.Monitor(model, x, measurements=["hessian"])
