"""EWC's switches (SPEC §9 vs Kirkpatrick et al.): anchor last|sum, fisher empirical|true,
fisher_data test|train, fisher_samples — each against an independent per-example float64
computation on a plain copy of the member's network."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from torch import nn

from plasticlab import EWC
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.fisher import diagonal_fisher
from plasticlab.methods import METHODS
from plasticlab.problems import get_problem
from plasticlab.rng import torch_generator
from plasticlab.run_config import Members
from test_methods import make_method
from test_nets import plain_mlp_member


def _perturb(model, scale, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def test_ewc_defaults_are_the_authors_code():
    defaults = {p.name: p.default for p in METHODS["ewc"].hyperparameters}
    assert defaults == {"ewc_strength": 10.0, "anchor": "last", "fisher": "empirical",
                        "fisher_data": "test", "fisher_samples": 992}
    assert EWC(nn.Linear(2, 2), 1.0).anchor == "last"


def test_last_anchor_penalty_after_task_2_depends_on_task_2s_anchor_and_fisher_only():
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 3))
    two_tasks = EWC(model, strength=2.0, anchor="last")
    _perturb(model, 0.3, 0)
    two_tasks.consolidate([torch.rand_like(p) * 5 for p in model.parameters()])  # task 1
    _perturb(model, 0.3, 1)
    f2 = [torch.rand_like(p) for p in model.parameters()]
    anchor2 = [p.detach().clone() for p in model.parameters()]
    two_tasks.consolidate(f2)  # task 2
    only_task_2 = EWC(model, strength=2.0, anchor="last")
    only_task_2.consolidate(f2)
    _perturb(model, 1.0, 2)
    explicit = sum(0.5 * 2.0 * (f * (p - a) ** 2).sum()
                   for p, f, a in zip(model.parameters(), f2, anchor2, strict=True))
    torch.testing.assert_close(two_tasks(), explicit, rtol=1e-5, atol=1e-5)
    assert torch.equal(two_tasks(), only_task_2())
    grads = torch.autograd.grad(explicit, list(model.parameters()))
    two_tasks.add_grad_()
    for p, g in zip(model.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-6)


def test_an_unknown_anchor_or_fisher_is_an_error_listing_the_valid_ones():
    with pytest.raises(ValueError, match="last, sum"):
        EWC(nn.Linear(2, 2), 1.0, anchor="mean")
    with pytest.raises(ValueError, match="empirical, true"):
        EWC(nn.Linear(2, 2), 1.0).consolidate_model(nn.Linear(2, 2), torch.zeros(1, 2), fisher="x")
    with pytest.raises(ValueError, match="method ewc: anchor must be one of last, sum"):
        resolve_config({"problem": "permuted_mnist", "method": "ewc", "params": {"anchor": "all"}})


def test_empirical_fisher_is_the_mean_squared_per_example_score_with_the_data_labels():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    x, y = torch.randn(9, 5), torch.randint(0, 3, (9,))
    fisher = diagonal_fisher(lambda xb: model(xb[0])[None], list(model.parameters()), x[None],
                             labels=y[None])
    ref = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)).double()
    ref.load_state_dict(model.state_dict())
    expected = [torch.zeros_like(p) for p in ref.parameters()]
    for n in range(9):
        logp = torch.log_softmax(ref(x[n:n + 1].double())[0], -1)
        for e, g in zip(expected, torch.autograd.grad(logp[y[n]], list(ref.parameters())), strict=True):
            e += g * g / 9
    for f, e in zip(fisher, expected, strict=True):
        torch.testing.assert_close(f.double(), e, rtol=1e-5, atol=1e-7)


def test_drop_in_empirical_fisher_needs_the_labels():
    model = nn.Linear(3, 2)
    ewc = EWC(model, 1.0)
    with pytest.raises(ValueError, match="needs the finished task's labels"):
        ewc.consolidate_model(model, torch.randn(4, 3))
    ewc.consolidate_model(model, torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
    ewc.consolidate_model(model, torch.randn(4, 3), fisher="true", generator=torch.Generator())
    assert ewc.tasks == 2


def _reference_fisher(member: nn.Module, x: torch.Tensor, y: torch.Tensor | None,
                      generator: torch.Generator | None) -> list[torch.Tensor]:
    """Per-example float64 scores on a plain copy of one member; labels from ``y`` (empirical)
    or drawn from the float32 model's own predictive distribution (true)."""
    ref = copy.deepcopy(member).double()
    out = [torch.zeros_like(p) for p in ref.parameters()]
    for n in range(x.shape[0]):
        logp = torch.log_softmax(ref(x[n:n + 1].double())[0], -1)
        if y is None:
            probs = torch.softmax(member(x[n:n + 1])[0], -1).detach()
            u = torch.rand((), generator=generator)
            label = int((probs.cumsum(-1) < u).sum().clamp(max=probs.shape[0] - 1))
        else:
            label = int(y[n])
        for o, g in zip(out, torch.autograd.grad(logp[label], list(ref.parameters())), strict=True):
            o += g * g / x.shape[0]
    return out


@pytest.mark.parametrize("fisher,fisher_data", list(itertools.product(["empirical", "true"],
                                                                      ["test", "train"])))
def test_each_fisher_form_matches_a_per_example_float64_computation(data_dir, fisher, fisher_data):
    seeds = [0, 1]
    method, net = make_method("ewc", {"fisher": fisher, "fisher_data": fisher_data,
                                      "fisher_samples": 12}, members=2)
    stream = get_problem("permuted_mnist")(seeds, tasks=3, steps_per_task=2,
                                           examples_per_task=200, data_dir=data_dir)
    stream.start_task(1)
    members = [plain_mlp_member(net, k) for k in range(2)]
    method.on_task_end(stream)
    if fisher_data == "test":
        x, y = stream.test_examples(1, 12)
        # the first 12 of each seed's shuffled test set of task 1, under task 1's permutation
        order = stream.test_order(0, 10_000)[:12]
        perm = stream.member_test(0, 0, 1).perm
        expected_x0 = stream.normalize(stream.x_test[torch.from_numpy(order)][:, perm])
        assert torch.equal(x[0], expected_x0)
    else:
        x, y = stream.sample_examples(12, "ewc_fisher")
    for k in range(2):
        gen = torch_generator(seeds[k], "method", "ewc_fisher")
        expected = _reference_fisher(members[k], x[k], y[k] if fisher == "empirical" else None, gen)
        got = [f[k] for f in method.ewc.fisher_sum]  # anchor=last: F of the task just ended
        for g, e in zip(got, expected, strict=True):
            torch.testing.assert_close(g.double(), e, rtol=2e-4, atol=1e-8)
    assert method.fisher_data_used == fisher_data


def test_fisher_data_test_falls_back_to_train_without_test_sets_and_the_manifest_says_so(data_dir):
    cfg = resolve_config({"problem": "random_label_mnist", "method": "ewc", "tasks": 2,
                          "steps_per_task": 3, "problem_params": {"examples": 64},
                          "params": {"fisher_samples": 4}})
    result = train_ensemble(Members.from_config(cfg, [0]), data_dir=data_dir, measure=False)
    assert "fell back" in result.extra["method"]["fisher_data"]


def test_sum_and_last_anchors_agree_on_the_first_task_and_differ_after(data_dir):
    base = {"problem": "permuted_mnist", "method": "ewc", "tasks": 3, "steps_per_task": 40,
            "problem_params": {"examples_per_task": 640}}
    runs = {}
    for anchor in ("last", "sum"):
        params = {"anchor": anchor, "fisher_samples": 16, "ewc_strength": 1e4}
        result = train_ensemble(Members.from_config(resolve_config({**base, "params": params}), [0]),
                                data_dir=data_dir,
                                measure=False)
        runs[anchor] = result.members[0].task_online_accuracy
    assert runs["last"][:2] == runs["sum"][:2]  # one anchor so far: the same penalty
    assert runs["last"][2] != runs["sum"][2]
