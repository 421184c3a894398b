"""DASH: Direction-Aware SHrinking (Shin, Oh, Cho & Yun, "DASH: Warm-Starting Neural Network
Training in Stationary Settings without Loss of Plasticity", NeurIPS 2024) — a *boundary
oracle*: it acts at every task end.

A warm-started network has memorised noise besides learning features. DASH shrinks each weight
vector by how well it points along the loss's descent direction on the data: a vector aligned
with −∇L (a feature the data still asks for) is kept, one orthogonal or opposed to it shrinks,
down to a factor λ. With the task's training data cut into minibatches b = 1 … n:

    G ← 0;   for b = 1 … n:   G ← (1 − α)·G + α·(−∇_θ L_b(θ))          (all at the same θ)
    for each vector w of each layer:   s = min(1, max(λ, cos(w, G_w))),   w ← s·w

with G_w the part of G at w's entries and cos(u, v) = ⟨u, v⟩ / max(‖u‖‖v‖, 1e-8) (torch's
``cosine_similarity``; 0 where either is 0). The vectors, as both reference codes cut them:

- a Linear layer's weight: one vector per unit, its row of incoming weights;
- a Conv layer's weight: one vector per (output channel, input channel) — the kh·kw taps of
  that slice of the filter (``conv_unit="slice"``); ``conv_unit="filter"`` takes the whole
  filter of an output channel, a unit as the other methods see it;
- a bias: one vector per layer, the whole bias.

Every affine layer is shrunk, the output layer included. L_b is the mean cross-entropy of
minibatch b; G's running average weighs the last minibatch by α, the one before by α(1 − α), …
(with a single minibatch α cancels out of the cosine). The optimizer's state is kept unless
``reset_optimizer``.

Two front ends: :class:`DirectionAwareShrinking`, the method ``dash`` (per-member λ and α as
``[K]`` tensors), and :class:`DASH`, a drop-in for any ``nn.Module`` built of
``nn.Linear``/``nn.Conv2d`` layers: ``DASH(model).shrink(batches)``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..params import Param
from .base import Method, Needs
from .full_reset import fresh_optimizer_state

COSINE_EPS = 1e-8
"""The floor of ‖u‖‖v‖ in the cosine (torch's ``cosine_similarity`` default), so a zero
vector or a zero gradient gives cos = 0 and the factor λ."""

CONV_UNITS = ("slice", "filter")


def _per_member(value: torch.Tensor | float, like: torch.Tensor) -> torch.Tensor | float:
    """A per-member ``[K]`` value shaped to broadcast against ``like`` ``[K, …]``."""
    if isinstance(value, torch.Tensor):
        return value.view(-1, *([1] * (like.dim() - 1)))
    return value


def running_descent_direction(params: Sequence[torch.Tensor], losses: Iterable[torch.Tensor],
                              alpha: torch.Tensor | float) -> list[torch.Tensor]:
    """G: the running average G ← (1 − α)·G + α·(−∇L_b) over the minibatch losses ``losses``
    (in order, all at the current θ), from G = 0; one tensor per parameter of ``params``
    ``[K, …]``. ``alpha``: a float or per member ``[K]``."""
    direction = [torch.zeros_like(p) for p in params]
    for loss in losses:
        grads = torch.autograd.grad(loss, list(params))
        with torch.no_grad():
            for d, g in zip(direction, grads, strict=True):
                a = _per_member(alpha, d)
                d.mul_(1 - a).add_(a * g.neg())
    return direction


def vector_dim(param: torch.Tensor, conv_unit: str = "slice") -> int:
    """Where the shrunk vectors of a stacked parameter ``[K, …]`` start: its trailing dims from
    there on are one vector (bias ``[K, out]``: 1; Linear ``[K, out, in]``: 2; Conv
    ``[K, out, in, kh, kw]``: 3 per slice, 2 per filter)."""
    if param.dim() == 2:
        return 1
    if param.dim() == 3:
        return 2
    if param.dim() == 5:
        if conv_unit not in CONV_UNITS:
            raise ValueError(f"DASH: conv_unit must be one of {', '.join(CONV_UNITS)}, got {conv_unit!r}")
        return 3 if conv_unit == "slice" else 2
    raise ValueError(f"DASH shrinks Linear and Conv2d layers; got a parameter of shape "
                     f"{tuple(param.shape[1:])}")


def shrink_factor(param: torch.Tensor, direction: torch.Tensor, lam: torch.Tensor | float,
                  start: int) -> torch.Tensor:
    """s = min(1, max(λ, cos(w, G_w))) for every vector w of ``param`` (its dims from ``start``
    on), shaped to broadcast against ``param``; λ a float or per member ``[K]``."""
    w, g = param.flatten(start), direction.flatten(start)
    norms = (w.norm(dim=-1) * g.norm(dim=-1)).clamp_min(COSINE_EPS)
    cos = (w * g).sum(dim=-1) / norms
    floor = _per_member(torch.as_tensor(lam, dtype=cos.dtype, device=cos.device), cos)
    s = torch.maximum(cos, floor).clamp(max=1.0)
    return s.view(*s.shape, *([1] * (param.dim() - start)))


@torch.no_grad()
def shrink_(params: Sequence[torch.Tensor], direction: Sequence[torch.Tensor],
            lam: torch.Tensor | float, conv_unit: str = "slice") -> None:
    """w ← s·w for every vector of every parameter ``[K, …]`` (in place), s its
    :func:`shrink_factor` against ``direction``."""
    for p, d in zip(params, direction, strict=True):
        p.mul_(shrink_factor(p, d, lam, vector_dim(p, conv_unit)))


def minibatch_losses(net, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int
                     ) -> Iterator[torch.Tensor]:
    """L = Σ_k mean_b CE(z_kb, y_kb) of each consecutive minibatch of ``batch_size`` examples of
    ``inputs`` ``[K, n, …]`` (the last one may be smaller): member k's gradient is its own."""
    K, n = labels.shape
    for start in range(0, n, batch_size):
        x = inputs[:, start:start + batch_size].contiguous()
        y = labels[:, start:start + batch_size]
        logits = net(x)
        yield F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(K, -1).mean(1).sum()


LAMBDA = Param("lambda", 0.05, float, "λ: the smallest shrink factor (FIRE's scripts: 0.05; the "
               "DASH authors' default: 0.3)", per_member=True, low=0, high=1)
ALPHA = Param("alpha", 0.3, float, "α: the last minibatch's weight in G's running average (both "
              "reference codes: 0.3)", per_member=True, low=0, low_open=True, high=1)
SAMPLES = Param("samples", 0, int, "training examples of the ended task G is taken on (0: all of "
                "them)", low=0)
BATCH_SIZE = Param("batch_size", 256, int, "examples per minibatch of G's running average (FIRE: 256)",
                   low=1)
CONV_UNIT = Param("conv_unit", "slice", str, "slice: one factor per input channel of a conv filter "
                  "(both reference codes); filter: one per output channel", choices=CONV_UNITS)
RESET_OPTIMIZER = Param("reset_optimizer", False, bool, "restart the optimizer's state after "
                        "shrinking (FIRE's harness restarts it at every chunk for every method; "
                        "the DASH authors' code keeps it)")


class DirectionAwareShrinking(Method):
    """At every task end: G on the task's training data, then every weight vector w ← s·w."""

    name = "dash"
    title = "DASH"
    description = "DASH: shrink each weight vector by its cosine with −∇L (at least λ) at each task end"
    hyperparameters = (LAMBDA, ALPHA, SAMPLES, BATCH_SIZE, CONV_UNIT, RESET_OPTIMIZER)

    @classmethod
    def needs(cls, params):
        return Needs(task_end=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.lam = torch.as_tensor(hp["lambda"], dtype=torch.float32, device=context.device).reshape(-1)
        self.alpha = torch.as_tensor(hp["alpha"], dtype=torch.float32, device=context.device).reshape(-1)
        if bool(((self.lam < 0) | (self.lam > 1)).any()):  # once, at construction
            raise ValueError("method dash: lambda λ must be in [0, 1]")
        if bool(((self.alpha <= 0) | (self.alpha > 1)).any()):
            raise ValueError("method dash: alpha α must be in (0, 1]")
        self.samples, self.batch_size = int(hp["samples"]), int(hp["batch_size"])
        self.conv_unit = hp["conv_unit"]
        vector_dim(torch.empty(1, 1, 1, 1, 1), self.conv_unit)  # an unknown conv_unit fails here
        self.fresh_optimizer_state = fresh_optimizer_state(optimizer) if hp["reset_optimizer"] else None

    def on_task_end(self, stream) -> None:
        """Take G on the ended task's training examples (``samples`` of them, each member its
        own draw, in ``batch_size`` minibatches) and shrink every weight vector and bias."""
        # a stream without a declared task loss is a classification stream
        loss = getattr(stream, "loss", "cross_entropy")
        if loss != "cross_entropy":
            raise ValueError(f"method dash takes G from the cross-entropy of a classification "
                             f"problem; this problem trains with {loss!r}")
        size = stream.current_task_size
        n = self.samples or size
        if n > size:
            raise ValueError(f"method dash: samples={n}, but a task of this problem has only "
                             f"{size} training examples (0 takes all of them)")
        inputs, labels = stream.sample_examples(n, "dash")
        self.shrink(inputs, labels)
        if self.fresh_optimizer_state is not None:
            self.optimizer.load_state_dict(self.fresh_optimizer_state)

    def shrink(self, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        """DASH on ``inputs`` ``[K, n, …]`` with ``labels`` ``[K, n]``: G over their minibatches,
        then w ← s·w for every vector of every affine layer."""
        params = self.net.regularized_parameters()
        direction = running_descent_direction(
            params, minibatch_losses(self.net, inputs, labels, self.batch_size), self.alpha)
        shrink_(params, direction, self.lam, self.conv_unit)


class DASH:
    """DASH for your own model: every ``nn.Linear``/``nn.Conv2d`` of ``model`` (the output layer
    included) is shrunk by :meth:`shrink`.

    ::

        dash = DASH(model, lam=0.05, alpha=0.3)
        ...                                # train on a chunk of data
        dash.shrink(loader)                # (x, y) batches of the data; then train on
    ``lam`` is λ (``lambda`` in the engine), ``alpha`` α, ``conv_unit`` as the method's. The
    gradients are taken on a copy of the model (as both reference codes do), so its ``.grad``
    and any running statistics are left alone; the optimizer is not touched.
    """

    def __init__(self, model: nn.Module, lam: float = 0.05, alpha: float = 0.3,
                 conv_unit: str = "slice"):
        if not 0 <= lam <= 1:
            raise ValueError(f"DASH: lam λ must be in [0, 1], got {lam}")
        if not 0 < alpha <= 1:
            raise ValueError(f"DASH: alpha α must be in (0, 1], got {alpha}")
        if conv_unit not in CONV_UNITS:
            raise ValueError(f"DASH: conv_unit must be one of {', '.join(CONV_UNITS)}, got {conv_unit!r}")
        if not any(isinstance(m, nn.Linear | nn.Conv2d) for m in model.modules()):
            raise ValueError("DASH: the model has no nn.Linear or nn.Conv2d layer")
        self.model, self.lam, self.alpha, self.conv_unit = model, float(lam), float(alpha), conv_unit

    @staticmethod
    def _parameters(model: nn.Module) -> list[torch.Tensor]:
        """Every Linear/Conv2d weight and bias of ``model``, in registration order."""
        return [p for m in model.modules() if isinstance(m, nn.Linear | nn.Conv2d)
                for p in (m.weight, m.bias) if p is not None]

    def shrink(self, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy) -> None:
        """G over the (x, y) ``batches`` in order (``loss_fn(model(x), y)`` each), then every
        weight vector and bias w ← s·w, in place."""
        copy_ = copy.deepcopy(self.model)
        losses = (loss_fn(copy_(x), y) for x, y in batches)
        # the model's parameters seen as one-member ensembles [1, …]
        direction = running_descent_direction(self._parameters(copy_), losses, self.alpha)
        members = [p.unsqueeze(0) for p in self._parameters(self.model)]
        shrink_(members, [d.unsqueeze(0) for d in direction], self.lam, self.conv_unit)
