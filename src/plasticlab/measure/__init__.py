"""Looking inside an ensemble at the end of a task (SPEC §5): the measurements of every run.

:class:`Measurer` measures all K members of an ensemble at once, on the device, and hands back
``[K]`` / ``[K, L]`` tensors; :func:`to_host` turns a set of them into per-member Python values
with a single host synchronisation. The engine calls it at every task end (and, optionally,
every N steps); nothing here runs on the per-step path.

What is measured, per member (definitions in :mod:`plasticlab.metrics`):

- **on a measurement batch** of ``samples`` (default 500) training inputs of the current task,
  ``problem.sample_inputs(samples, "measure")`` — the same inputs for every measurement of a
  task, and a stream of its own, so measuring never changes training — one no-grad forward pass
  with the hidden features gives, per hidden layer: ``srank`` and ``effective_rank`` of the
  feature matrix (conv layers: ``[n·H·W, C]``, positions as rows, channels as units; one
  batched SVD per layer for the whole ensemble), the fraction of ``dead`` units (zero for every
  input and position) and of ReDo-``dormant`` units (score ≤ τ = 0.1), overall and per layer.
  Features are post-activation and before pooling; with Concat ReLU each of the 2U output
  features counts as a unit.
- **on the weights**: ``weight_magnitude``, mean |θ| over every weight and bias of the affine
  layers (the regularized parameters; LayerNorm's gain and bias are not included), overall and
  per affine layer (hidden layers then the output layer).
- **gradient norm** ``grad_norm``: the L2 norm, over all trainable parameters, of the gradient
  of the *task loss* (mean cross-entropy on the step's batch, before any method's penalty) of
  the **last optimizer step** before the measurement — the engine takes it from that step's
  backward pass, so it costs no extra forward/backward (it is the gradient the learner actually
  followed, on one batch, not a fresh full-batch gradient).
- **test accuracy** ``task_test_accuracy`` on the finished task's whole held-out test set
  (problems with test sets only), evaluated in chunks without gradients; where all members
  share one image set under their own input permutations (Permuted MNIST) the permutation is
  moved into the first layer's weights (:mod:`plasticlab.measure.folded_permutation`), so no
  permuted copy of the test set is ever made. At K = 8 on one CPU thread this forward pass
  over 8 × 10,000 images is most of a task end's cost (``benchmarks/measurement_overhead.py``).
- **forgetting** (opt-in): the row A[j, 0..j] of the accuracy matrix — every task's test set
  evaluated after task j — from which :func:`plasticlab.metrics.bwt` and
  :func:`~plasticlab.metrics.one_step_bwt` follow.
- **the optional measurements** (opt-in, each by name: :mod:`plasticlab.measure.optional`):
  effective learning rate, feature norm and variance, active fraction, rank variants, the
  Hessian's top eigenvalue, churn, zero-gradient ratio, distance to θ₀.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from .. import metrics
from ..nets import EnsembleNet
from ..nets.layers import EnsembleLinear
from ..nets.units import dormant_mask, unit_activity
from ..problems.base import Problem, TaskData
from . import folded_permutation
from .optional import TaskEndMeasurements

DEFAULT_SAMPLES = 500
"""Inputs of the current task per member on which the feature measurements are made."""

TEST_CHUNK = 1000
"""Test examples per member per forward pass when evaluating test sets (bounds memory)."""

INTERNALS = ("weight_magnitude", "weight_magnitude_per_layer", "srank", "effective_rank",
             "dead_fraction", "dead_fraction_per_layer", "dormant_fraction",
             "dormant_fraction_per_layer")
"""The names :meth:`Measurer.internals` returns."""

COUNTS = ("srank", "approximate_rank", "feature_rank", "matrix_rank")
"""Metrics whose values are whole numbers (reported as ints)."""

INTERNALS_ON = ("current", "next")
"""Where the feature measurements look: ``current`` — ``samples`` training inputs of the task
that just ended (plasticlab's default); ``next`` — the next task's held-out test inputs (the
authors' code, SPEC §9; the last task, which has no next, uses its own)."""

REFERENCE_TEST_EXAMPLES = 992
"""The authors' test accuracy: the first 1000 images of the seed-shuffled test set in batches of
16, a mean over its 62 full batches — the accuracy on the first 992 (SPEC §9)."""

REFERENCE_INTERNALS_SAMPLES = 1000
"""The authors' feature measurements: the next task's first 1000 test inputs, in one pass."""


def test_example_count(value: str | int | None) -> int | None:
    """The run parameter ``test_examples`` as a count: ``all`` (or None) → None (every test
    image), ``reference`` → :data:`REFERENCE_TEST_EXAMPLES`, ``N`` → N ≥ 1 (the first N of each
    member's seed-shuffled test set, all of them if fewer)."""
    if value is None or value == "all":
        return None
    if value == "reference":
        return REFERENCE_TEST_EXAMPLES
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"test_examples must be 'all', 'reference' or a whole number >= 1, got {value!r}")
    return n


def _member_tests(problem: Problem, task: int, examples: int | None = None) -> list[TaskData] | None:
    """Every member's held-out ``TaskData`` of ``task`` (None without test sets), checked: the
    whole test set, or its first ``examples`` in the member's seed-shuffled order."""
    if not 0 <= task < problem.tasks:
        raise ValueError(f"{problem.name}: no task {task} (tasks 0..{problem.tasks - 1})")
    parts = [problem.member_test_subset(k, seed, task, examples) for k, seed in enumerate(problem.seeds)]
    if parts[0] is None:
        return None
    sizes = {p.x.shape[0] for p in parts}
    if len(sizes) != 1:
        raise AssertionError(f"{problem.name}: members disagree on the test-set size {sizes}")
    return parts


def _overrides_test_set(problem: Problem) -> bool:
    return type(problem).test_set is not Problem.test_set


def held_out_batches(problem: Problem, task: int, chunk: int = TEST_CHUNK, examples: int | None = None
                 ) -> Iterator[tuple[torch.Tensor, torch.Tensor]] | None:
    """``task``'s held-out test set as chunks of network inputs ``[K, ≤chunk, …]`` and labels
    ``[K, ≤chunk]``, or None when the problem has no test sets.

    The same examples, permutation and normalisation as ``problem.test_set(task)``, but built
    chunk by chunk from the members' stored uint8 examples, so a 10,000-image test set of a large
    ensemble is never materialised as one float tensor (that costs more than evaluating it). A
    problem that overrides ``test_set`` is evaluated through its own ``test_set``.
    ``examples``: only the first N of each member's seed-shuffled test set
    (:meth:`Problem.member_test_subset`); None for all of it.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if _overrides_test_set(problem):
        if examples is not None:
            raise ValueError(f"{problem.name} builds its own test sets (it overrides test_set): "
                             "evaluate it with test_examples=all")
        data = problem.test_set(task)
        if data is None:
            return None
        x, y = data
        return ((x[:, i:i + chunk], y[:, i:i + chunk]) for i in range(0, y.shape[1], chunk))
    parts = _member_tests(problem, task, examples)
    if parts is None:
        return None
    n, device = parts[0].x.shape[0], problem.device
    labels = torch.stack([p.y for p in parts]).to(device)
    perm = torch.stack([p.perm for p in parts]).to(device) if parts[0].perm is not None else None
    shared = all(p.x is parts[0].x for p in parts)  # e.g. Permuted MNIST: one image set

    def chunks() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for i in range(0, n, chunk):
            y = labels[:, i:i + chunk]
            if shared and perm is not None:
                # Normalise the shared images once, then one gather for all members' permutations:
                # [c, D] → [c, K·D] → a [K, c, D] view (what the network's batched matmul reads).
                base = problem.normalize(parts[0].x[i:i + chunk].to(device))
                x = base.index_select(1, perm.flatten()).view(base.shape[0], len(parts), -1)
                yield x.transpose(0, 1), y
                continue
            x = torch.stack([p.x[i:i + chunk] for p in parts]).to(device)
            if perm is not None:
                x = torch.gather(x, 2, perm[:, None, :].expand(x.shape[0], x.shape[1], perm.shape[1]))
            yield problem.normalize(x), y

    return chunks()


@torch.no_grad()
def evaluate_accuracy(net: EnsembleNet, batches) -> torch.Tensor:
    """Accuracy of every member over all ``(x, y)`` chunks of ``batches``, ``[K]`` float64,
    accumulated on the device (no host synchronisation)."""
    correct = None
    total = 0
    for x, y in batches:
        c = metrics.correct_counts(net(x), y)
        correct = c if correct is None else correct + c
        total += y.shape[1]
    if correct is None:
        raise ValueError("empty test set")
    return correct.double() / total


def held_out_accuracy(net: EnsembleNet, problem: Problem, task: int, chunk: int = TEST_CHUNK,
                      examples: int | None = None) -> torch.Tensor | None:
    """Every member's accuracy on ``task``'s whole held-out test set, ``[K]`` float64 on the
    device; None when the problem has no test sets. No gradients, ``chunk`` test examples per
    member per forward pass.

    Evaluates exactly ``problem.test_set(task)``, chunk by chunk (:func:`held_out_batches`);
    when the members share one stored image set under per-member permutations and the network
    starts with a linear layer, :mod:`plasticlab.measure.folded_permutation` moves the permutation
    into that layer's weights instead (one matmul for the ensemble, no permuted copies) — the
    same function, computed faster. ``examples``: as in :func:`held_out_batches`.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    # a network that cannot fold skips building the members' test examples here (and twice)
    if not _overrides_test_set(problem) and isinstance(net.blocks[0].affine, EnsembleLinear):
        parts = _member_tests(problem, task, examples)
        if parts is None:
            return None
        if folded_permutation.applies(net, parts):
            return folded_permutation.held_out_accuracy(net, problem, parts, chunk)
    batches = held_out_batches(problem, task, chunk, examples)
    return None if batches is None else evaluate_accuracy(net, batches)


@torch.no_grad()
def network_internals(net: EnsembleNet, x: torch.Tensor,
                      dormant_threshold: float = metrics.DORMANT_THRESHOLD,
                      optional: TaskEndMeasurements | None = None) -> dict[str, torch.Tensor]:
    """Every internal measurement of the ensemble on inputs ``x`` ``[K, n, …]``: see the module
    docstring. Returns float64 device tensors named as :data:`INTERNALS`: ``[K]`` for overall
    values, ``[K, L]`` per hidden layer, ``[K, A]`` per affine layer. A member whose features
    are not finite (a diverged run) gets NaN ranks. ``optional``: also its measurements of the
    same features and singular values (:meth:`TaskEndMeasurements.from_features`)."""
    _, features = net(x, return_features=True)
    activity = [unit_activity(f) for f in features]  # E|h_i| [K, U], shared by the unit counts
    ranks, eranks, svs, finites = [], [], [], []
    for f, a in zip(features, activity, strict=True):
        phi = metrics.feature_matrix(f)
        try:
            sv = metrics.singular_values(phi)  # one batched SVD per layer
        except torch.linalg.LinAlgError:  # non-finite features of a diverged member
            sv = metrics.singular_values(torch.nan_to_num(phi, nan=0.0, posinf=0.0, neginf=0.0))
        # A member with non-finite features (its E|h| is inf/NaN) gets NaN ranks.
        finite = torch.isfinite(a).all(1)
        nan = torch.full(finite.shape, float("nan"), dtype=torch.float64, device=phi.device)
        ranks.append(torch.where(finite, metrics.srank(sv).double(), nan))
        eranks.append(torch.where(finite, metrics.effective_rank(sv), nan))
        svs.append(sv)
        finites.append(finite)
    dead, dead_layers = metrics.unit_fractions([a == 0 for a in activity])
    dormant, dormant_layers = metrics.unit_fractions([dormant_mask(a, dormant_threshold)
                                                      for a in activity])
    layers = [(layer.weight, layer.bias) for layer in net.affine_layers]
    out = {
        "weight_magnitude": metrics.weight_magnitude(net.regularized_parameters()),
        "weight_magnitude_per_layer": metrics.layer_weight_magnitude(layers),
        "srank": torch.stack(ranks, dim=1),
        "effective_rank": torch.stack(eranks, dim=1),
        "dead_fraction": dead,
        "dead_fraction_per_layer": dead_layers,
        "dormant_fraction": dormant,
        "dormant_fraction_per_layer": dormant_layers,
    }
    if optional is not None:
        out |= optional.from_features(features, svs, finites)
    return out


class Measurer:
    """The measurements of one ensemble on one stream.

    ``samples``: measurement-batch size per member (default :data:`DEFAULT_SAMPLES` with
    ``internals_on="current"``, :data:`REFERENCE_INTERNALS_SAMPLES` with ``"next"``);
    ``forgetting``: also evaluate every earlier task's test set at each task end (the accuracy
    matrix); ``test_examples``: test accuracy on the first N of each member's seed-shuffled test
    set (None: all of it); ``internals_on``: see :data:`INTERNALS_ON`; ``test_chunk``: test
    examples per member per forward pass; ``measurements``: the optional task-end measurements
    asked for (:data:`plasticlab.measure.optional.MEASUREMENTS`; made here, before training:
    the parameters now are θ₀). Results stay on the device until :func:`to_host`.
    """

    def __init__(self, net: EnsembleNet, problem: Problem, *, samples: int | None = None,
                 forgetting: bool = False, dormant_threshold: float = metrics.DORMANT_THRESHOLD,
                 test_chunk: int = TEST_CHUNK, test_examples: int | None = None,
                 internals_on: str = "current", measurements: tuple[str, ...] = ()):
        if internals_on not in INTERNALS_ON:
            raise ValueError(f"internals_on must be one of {', '.join(INTERNALS_ON)}, got {internals_on!r}")
        if internals_on == "next" and not problem.has_test_sets:
            raise ValueError(f"internals_on='next' measures on the next task's held-out test inputs; "
                             f"{problem.name} has no test sets: use internals_on=current")
        if samples is None:
            samples = DEFAULT_SAMPLES if internals_on == "current" else REFERENCE_INTERNALS_SAMPLES
        if samples < 1:
            raise ValueError(f"measurement samples must be >= 1, got {samples}")
        if forgetting and not problem.has_test_sets:
            raise ValueError(f"{problem.name} has no held-out test sets; forgetting (the accuracy "
                             "matrix) needs them")
        if test_examples is not None and test_examples < 1:
            raise ValueError(f"test_examples must be >= 1 (or None for all), got {test_examples}")
        self.net, self.problem = net, problem
        self.samples, self.forgetting = int(samples), bool(forgetting)
        self.test_examples, self.internals_on = test_examples, internals_on
        self.dormant_threshold, self.test_chunk = float(dormant_threshold), int(test_chunk)
        self._examples: tuple[torch.Tensor, torch.Tensor] | None = None
        self._inputs_task = -1
        self.optional = (TaskEndMeasurements(net, problem, measurements, self.samples)
                         if measurements else None)

    def examples(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current task's measurement batch ``[K, samples, …]`` and its labels
        ``[K, samples]`` (drawn once per task): its training examples, or with
        ``internals_on="next"`` the next task's first test examples."""
        if self._examples is None or self._inputs_task != self.problem.task:
            task = self.problem.task
            if self.internals_on == "current":
                self._examples = self.problem.sample_examples(self.samples, "measure")
            else:
                self._examples = self.problem.test_examples(min(task + 1, self.problem.tasks - 1),
                                                            self.samples)
            self._inputs_task = task
        return self._examples

    def inputs(self) -> torch.Tensor:
        """The inputs of :meth:`examples`."""
        return self.examples()[0]

    def task_start(self) -> torch.Tensor | None:
        """What a task's start records for its end (the stream on the task, the network as it
        starts it): the churn reference logits when churn is asked for, else None."""
        if self.optional is None or not self.optional.wants_reference:
            return None
        return self.optional.reference()

    def internals(self) -> dict[str, torch.Tensor]:
        """:func:`network_internals` on the current task's measurement batch."""
        return network_internals(self.net, self.inputs(), self.dormant_threshold)

    def test_accuracy(self, task: int) -> torch.Tensor | None:
        """Every member's accuracy on ``task``'s test set (its first ``test_examples``),
        ``[K]``; None without test sets."""
        return held_out_accuracy(self.net, self.problem, task, self.test_chunk, self.test_examples)

    def task_end(self, task: int, grad_norm: torch.Tensor | None = None,
                 reference: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """All task-end measurements of ``task`` (the stream must still be on it): the
        internals, ``grad_norm`` as given, ``task_test_accuracy`` (problems with test sets),
        with forgetting ``accuracy_row`` ``[K, task+1]`` = A[task, 0..task], and the optional
        measurements asked for (``reference``: what :meth:`task_start` recorded)."""
        if self.optional is None:
            out = self.internals()
        else:
            x, y = self.examples()
            out = network_internals(self.net, x, self.dormant_threshold, self.optional)
            out |= self.optional.from_network(x, y, task, reference)
        if grad_norm is not None:
            out["grad_norm"] = grad_norm
        if self.forgetting:
            row = [self.test_accuracy(m) for m in range(task + 1)]
            out["accuracy_row"] = torch.stack(row, dim=1)
            out["task_test_accuracy"] = row[-1]
        elif self.problem.has_test_sets:
            acc = self.test_accuracy(task)
            if acc is not None:
                out["task_test_accuracy"] = acc
        return out


def to_host(values: dict[str, torch.Tensor]) -> list[dict[str, float | int | list]]:
    """Per-member Python values of ``[K, …]`` tensors, with ONE host synchronisation:
    ``[{name: value}, …]`` (one dict per member); a ``[K]`` tensor gives a number, a ``[K, L]``
    tensor a list, ``[K, M, L]`` a list of lists; integer tensors and the :data:`COUNTS`
    metrics give ints (NaN stays NaN)."""
    if not values:
        return []
    names = list(values)
    flat = [values[n].reshape(values[n].shape[0], -1) for n in names]
    K = flat[0].shape[0]
    rows = torch.cat([f.double() for f in flat], dim=1).tolist()  # the one sync
    out: list[dict] = [{} for _ in range(K)]
    start = 0
    for name, f in zip(names, flat, strict=True):
        width = f.shape[1]
        is_int = name in COUNTS or not (f.dtype.is_floating_point or f.dtype.is_complex)
        shape = tuple(values[name].shape[1:])
        for k in range(K):
            v = rows[k][start:start + width]
            if is_int:
                v = [int(x) if math.isfinite(x) else x for x in v]
            out[k][name] = _nest(v, shape)
        start += width
    return out


def _nest(flat: list, shape: tuple[int, ...]):
    """A flat row-major list as nested lists of ``shape`` (a number for shape ())."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0]
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
