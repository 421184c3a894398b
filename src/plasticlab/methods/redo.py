"""ReDo: recycling dormant neurons (Sokar, Agarwal, Castro & Evci, ICML 2023; SPEC §2.2).

Every ``period`` optimizer steps, ReDo looks at how active each hidden unit is on a batch of
current inputs. The score of unit i of a layer with H units is its mean absolute activation,
normalised by the layer's average:

    s_i = E_x |h_i(x)| / ( (1/H) Σ_k E_x |h_k(x)| + 1e-9 )

(the expectation is the batch mean; for a conv layer a unit is an output channel and the mean
runs over batch *and* space). A unit with s_i ≤ τ is **dormant** — τ = 0 means exactly zero
activity on the batch. Each dormant unit is recycled:

- its incoming weights and bias are re-initialised: a fresh draw from the network's init
  distribution (``reinit="fresh"``, the paper) or its initial values θ₀
  (``reinit="initial"``, the variant of the L2 Init authors' reference code);
- its outgoing weights are set to 0, so recycling does not change what the next layer computes
  at that moment — the new unit starts silent and earns a role through the gradient;
- the optimizer moments of all those weights are set to 0 (Adam's m and v; the step count, and
  therefore the bias correction, is kept — ReDo resets moments only).

The output layer has no outgoing weights and is never recycled.

*When* and *on what* it scores (``schedule``): by default right after every ``period``-th
optimizer step, on a fresh forward pass of the just-updated network over that step's inputs.
The L2 Init authors' code instead recycles at the *start* of a step whose step count (updates
so far) is a positive multiple of ``period``, scoring the activations its network kept from
its most recent forward pass; ``schedule="reference"`` scores that pass as a training loop
with no other forward passes has it: the previous step's batch, before its update. (In the
authors' own runs, whose periods are whole tasks, the most recent pass at a recycle is their
task-end measurement over the next task's test images — not reproduced; see the docs.) Their
code also leaves the optimizer state alone (``reset_optimizer=False``), restores θ₀
(``reinit="initial"``) and recycles layer by layer (``layer_order="per_layer"``): the four
settings of ``docs/methods-reference-modes.md``.

Two front ends share one implementation, :class:`UnitRecycler` (a list of
:class:`~plasticlab.nets.units.HiddenLayer` plus an optimizer adapter):

- :class:`ReDo`, the method ``redo`` for the ensemble engine: per-member τ as a ``[K]``
  tensor, masks and ``torch.where`` instead of per-member branches, no host synchronisation;
- :class:`ReDoSequential`, a drop-in for a user's own ``nn.Sequential`` and its ``torch.optim``
  optimizer: ``redo = ReDoSequential(model, optimizer)`` then ``redo.recycle(x_batch)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .. import philox
from ..checkpoint import Excluded
from ..nets import EnsembleNet
from ..nets.init import check_scheme
from ..nets.units import (
    HiddenLayer,
    check_layers_current,
    dormancy_scores,
    dormant_mask,
    hidden_layers,
    hidden_philox_keys,
    sequential_hidden_layers,
    unit_activity,
)
from ..optim.unit_reset import unit_reset_state
from ..params import Param
from ..state import CoreState
from .base import Method, MethodContext, Needs

REINIT_CHOICES = ("fresh", "initial")
SCHEDULES = ("after_step", "reference")
LAYER_ORDERS = ("incoming_first", "per_layer")


# --- optimizers ---------------------------------------------------------------------------------


# --- the recycling step, shared by both front ends ---------------------------------------------

class UnitRecycler:
    """ReDo's recycling step over ``layers`` (each a :class:`HiddenLayer`, ``[K, …]`` views).

    ``reinit``: ``"fresh"`` draws new incoming weights and bias from init ``scheme`` with
    ``generators[l]`` (one generator per member for layer l, so member k's draws depend on its
    own generator only) — or, given ``philox_keys[l]`` (``[K, 2, 2]``: layer l's weight and bias
    streams), with Philox counted by :attr:`counter`, which the caller sets to the step;
    ``"initial"`` restores θ₀, the values the layers hold when this object is built.
    ``optimizer``: see :func:`plasticlab.optim.unit_reset.unit_reset_state`;
    ``reset_optimizer=False`` leaves its state (moments) as it is, as the L2 Init authors' code
    does. ``layer_order``: see :meth:`recycle`.
    """

    def __init__(self, layers: Sequence[HiddenLayer], optimizer, reinit: str = "fresh",
                 scheme: str = "torch_default",
                 generators: Sequence[Sequence[torch.Generator]] | None = None,
                 reset_optimizer: bool = True, layer_order: str = "incoming_first",
                 philox_keys: Sequence[torch.Tensor] | None = None):
        if reinit not in REINIT_CHOICES:
            raise ValueError(f"ReDo: reinit must be one of {', '.join(REINIT_CHOICES)}, got {reinit!r}")
        if layer_order not in LAYER_ORDERS:
            raise ValueError(f"ReDo: layer_order must be one of {', '.join(LAYER_ORDERS)}, "
                             f"got {layer_order!r}")
        self.layers = list(layers)
        self.reinit = reinit
        self.reset_optimizer = bool(reset_optimizer)
        self.layer_order = layer_order
        self.scheme = check_scheme(scheme)
        self.state = unit_reset_state(optimizer, self.layers, "ReDo")
        # with Philox: each layer's keys [K, 2, 2] (its weight's and bias's streams), the draws
        # counted by :attr:`counter`, the step the recycle follows (set by the caller)
        self.philox_keys = None if philox_keys is None else list(philox_keys)
        if reinit == "fresh" and self.philox_keys is not None:
            if len(self.philox_keys) != len(self.layers):
                raise ValueError("ReDo: Philox draws need one key tensor per layer")
            self.counter = torch.zeros((), dtype=torch.int64, device=self.philox_keys[0].device)
        elif reinit == "fresh":
            if generators is None or len(generators) != len(self.layers):
                raise ValueError("ReDo: reinit='fresh' needs one list of per-member generators per layer")
            self.generators = [list(g) for g in generators]
        else:
            # θ₀ of the incoming side only: that is all "initial" ever restores.
            self.initial = [(layer.in_weight.detach().clone(), layer.in_bias.detach().clone())
                            for layer in self.layers]

    def replacement(self, index: int, members: Sequence[bool] | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Candidate incoming (weight, bias) for every unit of layer ``index``, ``[K, …]``.

        A fresh draw covers the whole layer, dormant or not: the number of draws then never
        depends on which units are dormant, so the random stream stays in step without a
        host synchronisation, and the only per-member loop is inside the draws. ``members``:
        only the members flagged draw (the others' rows are zeros, never written), so a member
        whose schedule is not due leaves its stream where it would be alone.
        """
        if self.reinit == "initial":
            return self.initial[index]
        if self.philox_keys is not None:  # counter-based: every member draws, none falls behind
            return self.layers[index].sample_init_philox(self.scheme, self.philox_keys[index],
                                                         self.counter)
        layer, generators = self.layers[index], self.generators[index]
        if members is None or all(members):
            return layer.sample_init(self.scheme, generators)
        acting = [k for k, due in enumerate(members) if due]
        weight = torch.zeros_like(layer.in_weight)
        bias = torch.zeros_like(layer.in_bias)
        if acting:
            drawn_w, drawn_b = layer.sample_init(self.scheme, [generators[k] for k in acting])
            rows = torch.tensor(acting, device=weight.device)
            weight[rows], bias[rows] = drawn_w.to(weight.dtype), drawn_b.to(bias.dtype)
        return weight, bias

    @torch.no_grad()
    def recycle(self, activity: Sequence[torch.Tensor], threshold: torch.Tensor | float,
                members: Sequence[bool] | None = None) -> torch.Tensor:
        """Recycle the dormant units of every layer; return how many per member and layer, ``[K, L]``.

        ``activity[l]``: layer l's per-unit score before normalisation, ``[K, U_l]`` (ReDo's
        :func:`unit_activity`; ReGraMa's gradient magnitude), all measured on the same batch
        *before* anything changes; ``threshold``: τ, a float or ``[K]``; ``members``: which
        members act (host booleans, e.g. whose period is due; None: all).
        """
        masks = [dormant_mask(a, threshold) for a in activity]
        if members is not None and not all(members):
            acting = torch.tensor(list(members), device=masks[0].device)[:, None]
            masks = [m & acting for m in masks]
        # "incoming_first": every layer's incoming sides, then the outgoing zeros: where a
        # dormant unit of layer l meets a dormant unit of layer l+1, the weight ends at 0, so a
        # recycled unit never feeds the next layer at the moment it is recycled. "per_layer"
        # (the L2 Init authors' loop): layer by layer, incoming then outgoing, so layer l+1's
        # recycled rows, written after layer l's zeros, keep their new value there.
        per_layer = self.layer_order == "per_layer"
        for i, (layer, mask) in enumerate(zip(self.layers, masks, strict=True)):
            weight, bias = self.replacement(i, members)
            layer.in_weight.copy_(torch.where(layer.incoming_mask(mask), weight, layer.in_weight))
            layer.in_bias.copy_(torch.where(mask, bias, layer.in_bias))
            if per_layer:
                layer.out_weight.masked_fill_(layer.outgoing_mask(mask), 0.0)
        for layer, mask in zip(self.layers, masks, strict=True):
            if not per_layer:
                layer.out_weight.masked_fill_(layer.outgoing_mask(mask), 0.0)
            if not self.reset_optimizer:
                continue
            # Moments only (restart_count=False): ReDo keeps the step count and so Adam's bias
            # correction; the zeroed moments make the next update a plain normalised gradient.
            layer.reset_optimizer(self.state, "in_weight", layer.incoming_mask(mask), restart_count=False)
            layer.reset_optimizer(self.state, "in_bias", mask, restart_count=False)
            layer.reset_optimizer(self.state, "out_weight", layer.outgoing_mask(mask), restart_count=False)
        return torch.stack([m.sum(dim=1) for m in masks], dim=1)


# --- the method for the ensemble engine --------------------------------------------------------

PERIOD = Param("period", 625, int, "steps between recycles (SPEC §6 gives it in tasks: × steps_per_task)",
               in_steps=True, low=1)
THRESHOLD = Param("threshold", 0.0, float, "τ: a unit whose normalised score is ≤ τ is dormant "
                  "(0: exactly inactive)", per_member=True, low=0)
REINIT = Param("reinit", "fresh", str, "fresh: redraw from the init distribution; initial: restore θ₀",
               choices=REINIT_CHOICES)
SCHEDULE = Param("schedule", "after_step", str,
                 "after_step: after every period-th step, on a fresh forward of that step's inputs; "
                 "reference: at the start of the next step, on the kept activations of that step's "
                 "forward (before its update), as the L2 Init authors' code", choices=SCHEDULES)
RESET_OPTIMIZER = Param("reset_optimizer", True, bool,
                        "zero the Adam moments of the recycled units' weights (the authors' code: false)")
LAYER_ORDER = Param("layer_order", "incoming_first", str,
                    "incoming_first: all layers' incoming sides, then outgoing zeros; per_layer: layer "
                    "by layer, as the L2 Init authors' code (a recycled row keeps its new weights from a "
                    "unit recycled in the layer before)", choices=LAYER_ORDERS)


class ReDo(Method):
    """ReDo on an ensemble: every ``period`` steps, recycle each member's dormant units.

    Hyper-parameters: ``period`` (steps, shared by the ensemble: it decides *when* work
    happens), ``threshold`` τ (per member, ``[K]``), ``reinit`` (``fresh`` | ``initial``),
    ``schedule``, ``reset_optimizer`` and ``layer_order`` (shared; see :class:`UnitRecycler`).

    ``schedule="after_step"``: after the optimizer step ``step`` with ``step % period == 0``,
    score on a fresh forward pass of the just-updated network over this step's inputs.
    ``schedule="reference"``: at that step's end only the per-unit activity E|h_i| of the
    step's own forward pass (before the update) is kept, ``[K, U]`` per layer; the next step's
    :meth:`before_step` recycles from it before its forward pass — so measurements taken at a
    task end that coincides with a recycle still see the network as it was, as in the authors'
    code. Neither makes a host synchronisation.

    After each recycle, :attr:`last_recycled` ``[K]`` and :attr:`last_recycled_per_layer`
    ``[K, L]`` hold how many units were recycled (on the device; read them when a host sync is
    due anyway).
    """

    name = "redo"
    title = "ReDo"
    description = "ReDo: recycle dormant units every period steps"
    hyperparameters = (PERIOD, THRESHOLD, REINIT, SCHEDULE, RESET_OPTIMIZER, LAYER_ORDER,
                       philox.draws_param("a recycled unit's fresh weights (reinit=fresh)"))

    @classmethod
    def needs(cls, params):
        # schedule=reference scores a step's own forward pass (its features) and recycles
        # before the next step
        reference = params.get("schedule", "after_step") == "reference"
        return Needs(after_step=True, some_steps=not reference, before_step=reference,
                     features=reference)

    def __init__(self, net: EnsembleNet, optimizer, hp: dict, context: MethodContext):
        super().__init__(net, optimizer, hp, context)
        self.period = int(hp["period"])
        if self.period < 1:
            raise ValueError(f"method redo: period must be >= 1 step, got {self.period}")
        self.threshold = torch.as_tensor(hp["threshold"], dtype=torch.float32,
                                         device=context.device).reshape(-1)
        if bool((self.threshold < 0).any()):  # once, at construction
            raise ValueError("method redo: threshold τ must be >= 0")
        self.schedule = hp.get("schedule", "after_step")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"method redo: schedule must be one of {', '.join(SCHEDULES)}, "
                             f"got {self.schedule!r}")
        layers = hidden_layers(net, "ReDo")
        generators = [context.generators(self.name, i) for i in range(len(layers))]
        # draws=philox: layer l's fresh weights and biases from the streams
        # method/redo/l/weight|bias of each member's seed, counted by the step
        keys = (hidden_philox_keys(net, context.seeds, f"method/{self.name}")
                if hp.get("draws", "generator") == "philox" else None)
        self.recycler = UnitRecycler(layers, optimizer, hp["reinit"], net.init, generators,
                                     reset_optimizer=hp.get("reset_optimizer", True),
                                     layer_order=hp.get("layer_order", "incoming_first"),
                                     philox_keys=keys)
        K, device = net.members, context.device
        self.last_recycled_per_layer = torch.zeros(K, len(layers), dtype=torch.long, device=device)
        self.last_recycled = torch.zeros(K, dtype=torch.long, device=device)
        # schedule="reference": the activity kept from a step's forward pass for the next
        # step's recycle (None when no recycle is due).
        self.kept_activity: list[torch.Tensor] | None = None

    def after_step(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """On steps that are multiples of ``period``: with ``schedule="after_step"`` score the
        units on ``x`` with the updated network and recycle the dormant ones; with
        ``schedule="reference"`` keep this step's activity (from ``features``, the step's own
        forward pass) for :meth:`before_step`. Other steps do nothing."""
        if step % self.period:
            return
        if self.schedule == "reference":
            if not features:
                raise ValueError("ReDo schedule='reference' scores the step's own forward pass: "
                                 "after_step needs its hidden features")
            self.kept_activity = [unit_activity(f) for f in features]
            return
        with torch.no_grad():
            _, feats = self.net(x, return_features=True)
        self.recycle([unit_activity(f) for f in feats], step)

    def acts_after(self, step: int) -> bool:
        """``schedule="after_step"``: after every ``period``-th step (the others' hook does
        nothing, so a compiled step computes them whole)."""
        return step % self.period == 0

    def before_step(self, step: int) -> None:
        """``schedule="reference"``: at the start of a step whose count of updates so far is a
        positive multiple of ``period``, recycle from the activity kept at the end of the
        previous step (its forward pass, before its update)."""
        if self.kept_activity is None or step % self.period or step == 0:
            return
        kept, self.kept_activity = self.kept_activity, None
        self.recycle(kept, step)

    def recycle(self, activity: Sequence[torch.Tensor], step: int | None = None) -> torch.Tensor:
        """Recycle from per-layer :func:`unit_activity` ``[K, U]`` at ``step`` (the updates so
        far: what Philox draws are counted by; needed with ``draws="philox"``); return ``[K, L]``
        counts."""
        if self.recycler.philox_keys is not None:
            if step is None:
                raise ValueError("ReDo with draws='philox' counts its draws by the step: "
                                 "recycle(activity, step)")
            self.recycler.counter.fill_(step)
        counts = self.recycler.recycle(activity, self.threshold)
        self.last_recycled_per_layer = counts
        self.last_recycled = counts.sum(dim=1)
        return counts


# --- the drop-in for a user's own nn.Sequential ------------------------------------------------

class ReDoSequential(CoreState):
    """ReDo for a plain ``nn.Sequential`` of Linear/Conv2d, ReLU, pooling, flatten and dropout.

    ::

        redo = ReDoSequential(model, optimizer, threshold=0.0, reinit="fresh", seed=0)
        ...
        if step % 1000 == 0:
            redo.recycle(x_batch)          # score on this batch, recycle now

    ``optimizer``: ``torch.optim.Adam``/``AdamW``/``SGD`` (their per-element moments and
    momentum buffers of the touched weights are set to 0, unless ``reset_optimizer=False``;
    step counts are kept), a :mod:`plasticlab.optim` optimizer, or ``None``. ``threshold`` τ:
    a unit whose score is ≤ τ is dormant (0: exactly inactive on the batch).
    ``reinit="fresh"`` redraws incoming weights and bias from ``init`` (``torch_default`` is
    PyTorch's own Linear/Conv2d default) with a generator seeded by ``seed``;
    ``reinit="initial"`` restores the values the model has when this object is built (build it
    before training). ``layer_order``: see
    :meth:`UnitRecycler.recycle`. Layers it cannot reason about (e.g. BatchNorm) are refused
    with the layer named. ``state_dict()``/``load_state_dict()``: the generators' positions
    (``"fresh"``) or the kept initial values (``"initial"``), for resuming.
    """

    def __init__(self, model: nn.Sequential, optimizer=None, threshold: float = 0.0,
                 reinit: str = "fresh", seed: int = 0, init: str = "torch_default",
                 reset_optimizer: bool = True, layer_order: str = "incoming_first"):
        if not threshold >= 0:
            raise ValueError(f"ReDo: threshold τ must be >= 0, got {threshold}")
        self.model, self.threshold = model, float(threshold)
        layers, relus = sequential_hidden_layers(model, "ReDo")
        # Same streams as member `seed` of an ensemble: torch_generator(seed, "method", "redo", l).
        context = MethodContext([seed], torch.device("cpu"))
        generators = [context.generators("redo", i) for i in range(len(layers))]
        self.recycler = UnitRecycler(layers, optimizer, reinit, init, generators,
                                     reset_optimizer=reset_optimizer, layer_order=layer_order)
        # One hook per distinct ReLU module (a module may be reused at several places).
        self._relus = list({id(m): m for m in relus}.values())
        self.last_recycled = [0] * len(layers)

    def _state_parts(self):
        return self.recycler, self.recycler.layers, Excluded(
            objects=[self.model, self.recycler.state, *self.recycler.layers],
            tensors=[*self.model.parameters(), *self.model.buffers()])

    def activity(self, x: torch.Tensor) -> list[torch.Tensor]:
        """E|h_i| of every hidden layer on batch ``x``, as ``[1, U]`` tensors (no gradients;
        dropout off while measuring, the model's train/eval modes restored after)."""
        found: list[torch.Tensor] = []

        def hook(module, inputs, output):
            # Reduce at once: later in-place layers cannot alter it, and no batch is kept.
            h = output.detach().abs()
            found.append(h.mean(dim=0) if h.dim() == 2 else h.mean(dim=(0, 2, 3)))

        handles = [m.register_forward_hook(hook) for m in self._relus]
        modes = [(m, m.training) for m in self.model.modules()]
        try:
            self.model.eval()
            with torch.no_grad():
                self.model(x)
        finally:
            for handle in handles:
                handle.remove()
            for m, mode in modes:
                m.training = mode
        # The ReLU calls run in layer order and hidden layer l owns the l-th (a ReLU after the
        # output layer, if any, is the one after them).
        out = []
        for layer, a in zip(self.recycler.layers, found, strict=False):
            # A ReLU placed after Flatten sees a conv layer's C·H·W positions, channel-major:
            # the channel's activity is the mean over its contiguous block.
            out.append(a.view(layer.units, -1).mean(dim=1)[None])
        return out

    def scores(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Normalised scores s_i of every hidden layer's units on batch ``x``, ``[U]`` each."""
        return [dormancy_scores(a)[0] for a in self.activity(x)]

    def dormant(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Which units are dormant (s_i ≤ τ) on batch ``x``, a ``[U]`` bool tensor per layer."""
        return [dormant_mask(a, self.threshold)[0] for a in self.activity(x)]

    def recycle(self, x: torch.Tensor) -> list[int]:
        """Score the units on batch ``x`` and recycle the dormant ones now; return how many
        were recycled in each hidden layer."""
        check_layers_current(self.recycler.layers, type(self).__name__)
        counts = self.recycler.recycle(self.activity(x), self.threshold)
        self.last_recycled = counts[0].tolist()
        return self.last_recycled
