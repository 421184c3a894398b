"""The optional task-end measurements: the ones the field's other toolkits report, each asked
for by name (``train_ensemble(measurements=...)``, ``plasticlab run --measure NAME,…``, a
sweep's ``measure = [...]``) and none of them on by default, so that a run that does not ask
costs and records exactly what it did before.

:data:`MEASUREMENTS` names them with what each records; :class:`TaskEndMeasurements` measures
the asked-for ones of an ensemble at a task end, every member at once and member k on its own
data alone. The measurements that read features reuse the task end's one forward pass and each
layer's one SVD (:func:`plasticlab.measure.network_internals`); those that need the task loss's
gradient share one extra forward and backward on the measurement batch and its labels; churn
adds a forward pass at the task's start and one at its end. Each measurement's definition is
its own module's; docs/measurements.md gives them with their sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F

from ..fast import plain_forms
from ..nets import EnsembleNet
from ..problems.base import Problem
from ..rng import torch_generator
from . import active_units, churn, effective_lr, feature_stats, hessian, init_distance, zero_gradient
from .rank_variants import RANK_VARIANTS, rank_variants

MEASUREMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "effective_lr": (("effective_lr", "effective_lr_per_layer"),
                     "‖g‖/‖θ‖ per affine layer, g the task loss's gradient on the measurement batch "
                     "(FIRE); overall: the count-weighted mean"),
    "feature_stats": (("feature_norm", "feature_variance", "feature_norm_per_layer",
                       "feature_variance_per_layer"),
                      "mean ‖φ(x)‖₂ and mean variance across units of φ(x) on the measurement batch, "
                      "penultimate features (and per layer) (Plasticine)"),
    "active_fraction": (("active_fraction", "active_fraction_per_layer"),
                        "fraction of active entries: ReLU h > 0, tanh |h| ≤ 0.99, sigmoid "
                        "0.01 ≤ h ≤ 0.99 (Plasticine)"),
    "rank_variants": (RANK_VARIANTS,
                      "per hidden layer, from srank's SVD: PCA approximate rank (99 % of Σσ²), "
                      "Lyle's feature rank #σ/√n > 0.01, matrix rank (torch's default tolerance) (FIRE)"),
    "hessian": (("hessian_top_eigenvalue",),
                "the task loss's Hessian's eigenvalue of largest magnitude on the measurement batch, "
                "power iteration, ≤ 20 Hessian-vector products (Hare & Tortoise); the costly one"),
    "churn": (("churn", "prediction_churn"),
              "mean |Δ logit| and the fraction of changed predictions on a fixed batch of the task's "
              "inputs, from the task's start to its end (C-CHAIN)"),
    "zero_grad_ratio": (("zero_grad_ratio", "zero_grad_ratio_per_layer"),
                        "fraction of affine parameters whose task-loss gradient on the measurement "
                        "batch is exactly 0 (Hare & Tortoise)"),
    "distance_to_init": (("distance_to_init", "distance_to_init_per_layer"),
                         "‖θ − θ₀‖₂ per affine layer and over them all (Hare & Tortoise)"),
}
"""Option name → (the task metrics it records, what they are)."""

ALL = "all"
"""Asks for every optional measurement."""


def parse_measurements(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The optional measurements asked for, in :data:`MEASUREMENTS`' order: ``value`` is None,
    a comma-separated string or a list of names (``all``: every one). An unknown name is a
    ValueError listing the valid ones."""
    if value is None:
        return ()
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value)]
    names = [n for n in names if n]
    if ALL in names:
        return tuple(MEASUREMENTS)
    unknown = sorted(set(names) - set(MEASUREMENTS))
    if unknown:
        raise ValueError(f"unknown measurement(s) {', '.join(unknown)}; valid: "
                         f"{', '.join(MEASUREMENTS)} (or {ALL})")
    return tuple(n for n in MEASUREMENTS if n in names)


def task_loss(net: EnsembleNet, x: torch.Tensor, y: torch.Tensor,
              loss: str = "cross_entropy") -> torch.Tensor:
    """L = Σₖ mean_b ℓ(zₖ_b, yₖ_b): the members' mean losses on their batches, summed — the
    training step's task loss (:mod:`plasticlab.step.backward`, which sits above this layer),
    so that member k's gradient, and Hessian block, is its own. ℓ: the cross-entropy of the
    logits and class labels, or (``loss="squared_error"``) the squared error of the one output."""
    outputs = net(x)
    K, B = y.shape
    if loss == "cross_entropy":
        per_example = F.cross_entropy(outputs.flatten(0, 1), y.flatten(), reduction="none").view(K, B)
    elif loss == "squared_error":
        per_example = (outputs[..., 0] - y).square()
    else:
        raise ValueError(f"the optional measurements know the task losses cross_entropy and "
                         f"squared_error, not {loss!r}")
    return per_example.mean(1).sum()


class TaskEndMeasurements:
    """The optional measurements ``names`` of ``net`` trained on ``problem``'s stream, with
    ``samples`` inputs per member on the churn reference batch. Made before training starts:
    the parameters then are θ₀ for ``distance_to_init``."""

    def __init__(self, net: EnsembleNet, problem: Problem, names: Iterable[str], samples: int):
        self.names = frozenset(parse_measurements(list(names)))
        self.net, self.problem, self.samples = net, problem, int(samples)
        self.loss = getattr(problem, "loss", "cross_entropy")  # the problem's task loss ℓ
        self.activations = ([active_units.check_rule(b.activation) for b in net.hidden_blocks]
                            if "active_fraction" in self.names else [])
        self.initial = ([[p.detach().clone() for p in (layer.weight, layer.bias)]
                         for layer in net.affine_layers] if "distance_to_init" in self.names else [])

    @property
    def wants_reference(self) -> bool:
        """Whether a task's start must record :meth:`reference` (churn)."""
        return "churn" in self.names

    @torch.no_grad()
    def reference(self) -> torch.Tensor:
        """The logits ``[K, samples, classes]`` of the network now on the task's churn reference
        batch (``problem.sample_inputs(samples, "churn")``: the same inputs at its end)."""
        return self.net(self.problem.sample_inputs(self.samples, "churn"))

    def from_features(self, features: Sequence[torch.Tensor], svs: Sequence[torch.Tensor],
                      finite: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The measurements of the task end's features (one ``[K, n, …]`` tensor per hidden
        layer), their singular values ``svs`` (one ``[K, r]`` per layer) and which members'
        features are ``finite`` (``[K]`` per layer; NaN ranks elsewhere)."""
        out: dict[str, torch.Tensor] = {}
        if "feature_stats" in self.names:
            out |= feature_stats.feature_stats(features)
        if "active_fraction" in self.names:
            units = [f.shape[2] for f in features]
            out["active_fraction"], out["active_fraction_per_layer"] = active_units.active_fraction(
                features, self.activations, units)
        if "rank_variants" in self.names:
            layers = []
            for f, sv, ok in zip(features, svs, finite, strict=True):
                rows = f.shape[1] * (f.shape[3] * f.shape[4] if f.dim() == 5 else 1)
                ranks = rank_variants(sv, rows, f.shape[2], f.dtype)
                layers.append({k: torch.where(ok, v, torch.full_like(v, float("nan")))
                               for k, v in ranks.items()})
            out |= {k: torch.stack([layer[k] for layer in layers], dim=1) for k in RANK_VARIANTS}
        return out

    def from_network(self, x: torch.Tensor, y: torch.Tensor, task: int,
                     reference: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The measurements of the network itself at ``task``'s end: those of the task loss on
        the measurement batch ``x`` ``[K, n, …]`` with labels ``y`` ``[K, n]``, churn against the
        task's start logits ``reference``, and the distance to θ₀."""
        out: dict[str, torch.Tensor] = {}
        net, names = self.net, self.names
        layers = [[layer.weight, layer.bias] for layer in net.affine_layers]
        if names & {"effective_lr", "zero_grad_ratio"}:
            with torch.enable_grad():
                flat = torch.autograd.grad(task_loss(net, x, y, self.loss), [p for ps in layers for p in ps])
            grads = [list(flat[2 * i:2 * i + 2]) for i in range(len(layers))]
            if "effective_lr" in names:
                out["effective_lr"], out["effective_lr_per_layer"] = effective_lr.layer_effective_lr(
                    grads, layers)
            if "zero_grad_ratio" in names:
                out["zero_grad_ratio"], out["zero_grad_ratio_per_layer"] = (
                    zero_gradient.zero_gradient_ratio(grads))
        if "hessian" in names:
            generators = [torch_generator(s, "hessian", task) for s in self.problem.seeds]
            with plain_forms():  # every layer's plain form: each is twice differentiable
                out["hessian_top_eigenvalue"] = hessian.top_eigenvalue(
                    lambda: task_loss(net, x, y, self.loss), list(net.parameters()), generators)
        if "churn" in names:
            if reference is None:
                raise ValueError("churn needs the logits recorded at the task's start")
            with torch.no_grad():
                after = self.reference()
            out["churn"] = churn.churn(reference, after)
            out["prediction_churn"] = churn.prediction_churn(reference, after)
        if "distance_to_init" in names:
            out["distance_to_init"], out["distance_to_init_per_layer"] = init_distance.distance_to_init(
                layers, self.initial)
        return out


__all__ = ["ALL", "MEASUREMENTS", "TaskEndMeasurements", "parse_measurements", "task_loss"]
