"""The benchmark's peer (benchmarks/peer_ensemble.py) is a correct ensemble: member k of its
torch.func ensemble trains exactly as a plain nn.Sequential with torch.optim.Adam and the L2 Init
penalty, so speed ratios against it compare like with like."""

from __future__ import annotations

import importlib.util

import torch
import torch.nn.functional as F

from conftest import REPO
from plasticlab import L2Init


def _peer_module():
    spec = importlib.util.spec_from_file_location("peer_ensemble", REPO / "benchmarks" / "peer_ensemble.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_member_of_the_peer_trains_as_a_plain_loop():
    peer = _peer_module()
    ensemble = peer.FuncEnsemble("mlp", 3, seed=5)
    gen = torch.Generator().manual_seed(0)
    xs, ys = torch.randn(6, 3, 16, 784, generator=gen), torch.randint(0, 10, (6, 3, 16), generator=gen)
    for x, y in zip(xs, ys, strict=True):
        ensemble.step(x, y)
    torch.manual_seed(5 + 1)  # member 1's init
    model = peer.plain_model("mlp")
    optimizer, reg = torch.optim.Adam(model.parameters(), lr=1e-3), L2Init(model, strength=1e-2)
    for x, y in zip(xs[:, 1], ys[:, 1], strict=True):
        loss = F.cross_entropy(model(x), y) + reg()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for name, p in model.named_parameters():  # Adam's normalisation amplifies rounding: 2e-5
        torch.testing.assert_close(ensemble.params[name][1], p.detach(), rtol=1e-4, atol=2e-5)

