"""Continual Backprop (Dohare et al. 2021/2024): generate-and-test on hidden units (SPEC §2.1).

Backprop alone lets the random, diverse units of the initial network die or freeze; Continual
Backprop keeps injecting them. After every optimizer step it *tests* each hidden unit by a
running utility and *generates* replacements for the least useful mature ones. For hidden layer
ℓ with post-activation features h (one value per unit and input; a conv unit is an output
channel and its statistics are also averaged over space), at every step:

1. every unit's age a ← a + 1;
2. its running mean activation f̄ ← d·f̄ + (1−d)·mean_batch(h), bias-corrected f̂ = f̄ / (1−dᵃ);
3. its instantaneous utility y — the *adaptable contribution* (the default of the paper's runs)

       y = mean|w_out| · mean_batch|h − f̂| / mean|w_in|

   or the *contribution* y = mean|w_out| · mean_batch|h|, where w_in are the unit's incoming
   weights (bias excluded) and w_out the next layer's weights that read it;
4. its running utility u ← d·u + (1−d)·y, ranked by the bias-corrected û = u / (1−dᵃ);
5. units with a > m (the maturity threshold) are *eligible*; the layer replaces r·#eligible
   of them per step, the fractional part carried over (acc ← acc + r·#eligible; n = ⌊acc⌋;
   acc ← acc − n): the n eligible units of lowest û;
6. a replaced unit gets incoming weights freshly drawn from the network's init distribution,
   bias 0 and outgoing weights 0 — so the network's output does not jump — and a, u, f̄ = 0.
   Its mean contribution W_next[:, i]·f̂ᵢ is folded into the next layer's bias (when this layer
   and the next are both Linear), and the optimizer state of every touched weight restarts:
   Adam's moments *and* that element's step count, so the new weights get a correct first-step
   bias correction (the public AdamGnT's bias-correction line is a no-op; not so here).

One implementation, :class:`GenerateAndTest` (a list of
:class:`~plasticlab.nets.units.HiddenLayer` views plus an optimizer), serves two front ends:

- :class:`ContinualBackprop`, the method ``cbp`` of the ensemble engine: r, m, d are per
  member, every statistic is a ``[K, U]`` tensor, and choices are made with masks and sorts;
- :class:`ContinualBackpropSequential`, a drop-in for a user's own ``nn.Sequential``:
  ``cbp = ContinualBackpropSequential(model, optimizer)``, then ``cbp.step()`` after each
  ``optimizer.step()``.

**No host synchronisation.** How *many* units member k replaces at step t depends only on
counts, never on data: a replaced unit restarts at age 0 and is eligible again exactly m+1
steps later, and a unit is never replaced while young, so #eligible and the accumulator evolve
deterministically from the replacement counts. They are tracked on the host (numpy, exactly),
which therefore knows which steps replace anything — all reset work is skipped on the others —
and how many units each member replaces; only *which* units (the lowest û) is decided on the
device. The per-step statistics are a handful of elementwise ops on ``[K, U]`` tensors.
With Philox draws (``draws="philox"``) the whole step is also written for capture in a
compiled training step (:meth:`GenerateAndTest.captured_step`): the host's counts are written to
the device before the step, and every layer's replacement runs as masks every step.

Differences from the public code, on purpose: the next-layer bias correction uses f̂ computed
*before* the unit's statistics are zeroed (the public ``gnt.py`` zeroes f̄ first, which turns the
correction into a no-op); Adam's per-element step count restarts (see above); the number of
replacements is always accumulated (the public code's alternative of replacing one unit with
probability r·#eligible < 1 is not offered).

Two switches of the method ``cbp`` run it as the L2 Init authors' code does (SPEC §9;
``docs/methods-reference-modes.md``), the defaults keeping the behaviour above:

- ``adam_variant=reference``: with Adam, the whole network trains with
  :class:`~plasticlab.optim.adam_gnt.AdamGnT` (θ ← θ − α·(1 − β₂ᵗ)·m/(√v + ε), per-element t
  restarted with the replaced units) instead of Adam; with SGD it changes nothing (the public
  code also trains with plain SGD there);
- ``replacement_init=kaiming``: new units' incoming weights from U(±√(6/fan_in)) (the public
  code's ``init='kaiming'``) instead of the network's own init distribution.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .. import philox
from ..checkpoint import Excluded
from ..device import to_device
from ..nets import EnsembleNet
from ..nets import init as init_schemes
from ..nets.units import (
    HiddenLayer,
    check_layers_current,
    hidden_layers,
    hidden_philox_keys,
    parameter_index,
    sequential_hidden_layers,
    unit_mean,
)
from ..optim import Adam
from ..optim.adam_gnt import AdamGnT
from ..optim.unit_reset import unit_reset_state
from ..params import Param
from ..state import CoreState
from .base import CapturedHook, Method, MethodContext, Needs

UTILITIES = ("adaptable_contribution", "contribution")
ADAM_VARIANTS = ("standard", "reference")
REPLACEMENT_INITS = ("network", "kaiming")

COUNT_TOLERANCE = 1e-9
"""Added to the accumulator before flooring, so that rates whose sum is an integer in exact
arithmetic give that integer despite binary rounding (r = 0.1 on 10 units accumulated over 10
steps gives 0.9999999999999999, not 1)."""


# --- host-side counts ------------------------------------------------------------------------

class ReplacementSchedule:
    """How many units each member replaces at each step of one layer, tracked on the host.

    With U units, per-member rate r and maturity m: at step t, E_t units are eligible
    (age > m); the accumulator acc ← acc + r·E_t gives n_t = ⌊acc⌋ replacements (acc ← acc − n_t).
    A unit replaced at step s has age t − s at step t, so it returns to the eligible pool at
    step s + m + 1; the initial units all become eligible at step m + 1. ``returning`` is a ring
    buffer of those arrivals, indexed by step modulo max(m) + 2.
    """

    def __init__(self, units: int, rate: Sequence[float], maturity: Sequence[int]):
        self.rate = np.asarray(rate, dtype=np.float64)
        self.maturity = np.asarray(maturity, dtype=np.int64)
        self.members = len(self.rate)
        self.size = int(self.maturity.max()) + 2
        self.returning = np.zeros((self.members, self.size), dtype=np.int64)
        self.returning[np.arange(self.members), (self.maturity + 1) % self.size] = units
        self.eligible = np.zeros(self.members, dtype=np.int64)  # after this step's replacements
        self.accumulated = np.zeros(self.members, dtype=np.float64)
        self.step = 0

    def advance(self) -> np.ndarray:
        """Move to the next step; return the number of units each member replaces at it, ``[K]``."""
        self.step += 1
        slot = self.step % self.size
        self.eligible += self.returning[:, slot]
        self.returning[:, slot] = 0
        self.accumulated += self.rate * self.eligible
        n = np.floor(self.accumulated + COUNT_TOLERANCE).astype(np.int64)
        n = np.minimum(n, self.eligible)  # r ≤ 1 already guarantees it
        self.accumulated -= n
        self.eligible -= n
        self.returning[np.arange(self.members), (self.step + self.maturity + 1) % self.size] += n
        return n


# --- device-side statistics ---------------------------------------------------------------------

@dataclass
class UnitStatistics:
    """One layer's per-unit state, ``[K, U]`` each: age a, running utility u (not bias-corrected)
    and running mean activation f̄ (not bias-corrected)."""

    age: torch.Tensor
    utility: torch.Tensor
    mean_activation: torch.Tensor


def _as_feature_shape(per_unit: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """``[K, U]`` → broadcastable against ``features`` ``[K, B, U(, H, W)]``."""
    return per_unit.view(per_unit.shape[0], 1, per_unit.shape[1], *([1] * (features.dim() - 3)))


def instantaneous_utility(layer: HiddenLayer, features: torch.Tensor, mean_activation: torch.Tensor,
                          utility: str) -> torch.Tensor:
    """y of every unit, ``[K, U]``, from this step's features h and the bias-corrected mean f̂.

    ``adaptable_contribution``: mean|w_out| · mean_batch|h − f̂| / mean|w_in|;
    ``contribution``: mean|w_out| · mean_batch|h|. For conv units the batch mean also runs over
    space. ``mean_activation`` (f̂) is only read by the adaptable contribution.
    """
    if utility == "adaptable_contribution":
        spread = unit_mean((features - _as_feature_shape(mean_activation, features)).abs())
        return layer.outgoing_abs_mean() * spread / layer.incoming_abs_mean()
    if utility == "contribution":
        return layer.outgoing_abs_mean() * unit_mean(features.abs())
    raise ValueError(f"unknown utility {utility!r}; valid: {', '.join(UTILITIES)}")


# --- the algorithm --------------------------------------------------------------------------------

class GenerateAndTest:
    """Continual Backprop's generate-and-test over hidden layers, for K members at once.

    ``layers``: the hidden layers as :class:`HiddenLayer` ``[K, …]`` views; ``optimizer``: an
    object with ``params`` and ``reset(index, mask, restart_count)`` (``plasticlab.optim``);
    ``replacement_rate`` r, ``maturity`` m, ``decay`` d: one value per member; ``utility``:
    ``adaptable_contribution`` | ``contribution``; ``init``: the init scheme fresh incoming
    weights are drawn from; ``generators[ℓ][k]``: member k's generator for layer ℓ's draws —
    or ``philox_keys[ℓ]`` (``[K, 2, 2]``: layer ℓ's weight and bias streams): a replaced unit's
    fresh incoming weights are then its own row of the layer's Philox init draw, counted by
    :attr:`counter` (the caller sets it to the step).
    """

    def __init__(self, layers: Sequence[HiddenLayer], optimizer, *, replacement_rate: Sequence[float],
                 maturity: Sequence[int], decay: Sequence[float], utility: str, init: str,
                 generators: Sequence[Sequence[torch.Generator]] | None = None,
                 philox_keys: Sequence[torch.Tensor] | None = None):
        rate = [float(r) for r in replacement_rate]
        mature = [int(m) for m in maturity]
        decays = [float(d) for d in decay]
        if not layers:
            raise ValueError("Continual Backprop needs at least one hidden layer")
        K = layers[0].in_weight.shape[0]
        if not len(rate) == len(mature) == len(decays) == K:
            raise ValueError(f"need one replacement_rate, maturity and decay per member ({K})")
        if any(not 0.0 <= r <= 1.0 for r in rate):
            raise ValueError(f"replacement_rate must be in [0, 1], got {rate}")
        if any(m < 0 for m in mature):
            raise ValueError(f"maturity must be >= 0, got {mature}")
        if any(not 0.0 <= d < 1.0 for d in decays):
            raise ValueError(f"decay must be in [0, 1), got {decays}")
        if utility not in UTILITIES:
            raise ValueError(f"unknown utility {utility!r}; valid: {', '.join(UTILITIES)}")
        self.philox_keys = None if philox_keys is None else list(philox_keys)
        if self.philox_keys is not None:
            if len(self.philox_keys) != len(layers):
                raise ValueError(f"need Philox keys for each hidden layer ({len(layers)})")
            self.counter = torch.zeros((), dtype=torch.int64, device=self.philox_keys[0].device)
        elif generators is None or len(generators) != len(layers) or any(len(g) != K for g in generators):
            raise ValueError(f"need one generator per member ({K}) for each hidden layer ({len(layers)})")
        self.layers, self.optimizer = list(layers), optimizer
        self.utility, self.init = utility, init_schemes.check_scheme(init)
        self.generators = None if generators is None else [list(g) for g in generators]
        w = self.layers[0].in_weight
        self.decay = torch.tensor(decays, dtype=w.dtype, device=w.device).view(K, 1)
        self.maturity = torch.tensor(mature, dtype=torch.int64, device=w.device).view(K, 1)
        self.schedules = [ReplacementSchedule(layer.units, rate, mature) for layer in self.layers]
        self.stats = []
        for layer in self.layers:
            zeros = torch.zeros(K, layer.units, dtype=layer.in_weight.dtype, device=layer.in_weight.device)
            self.stats.append(UnitStatistics(torch.zeros_like(zeros, dtype=torch.int64), zeros.clone(),
                                             zeros.clone()))
        self.replaced = [np.zeros(K, dtype=np.int64) for _ in self.layers]  # totals, on the host
        # the captured form's counts of this step, on the device; whether its first prepare has
        # made Adam's restart patterns
        self.device_counts = [torch.zeros(K, dtype=torch.int64, device=w.device) for _ in self.layers]
        self.patterns_made = False
        self.last_replaced = [np.zeros(K, dtype=np.int64) for _ in self.layers]
        for i, layer in enumerate(self.layers):
            for which in ("in_weight", "in_bias", "out_weight"):
                try:
                    parameter_index(optimizer, getattr(layer, f"{which}_param"))
                except ValueError:
                    raise ValueError(f"Continual Backprop: a weight of hidden layer {i} (or of the layer "
                                     "after it) is not one of the optimizer's parameters; build the "
                                     "optimizer over all of the model's parameters") from None

    @property
    def members(self) -> int:
        """K, the number of members."""
        return int(self.decay.shape[0])

    def eligible_counts(self) -> list[np.ndarray]:
        """Host-side #eligible units (age > m) per layer, ``[K]`` each, after the last step."""
        return [s.eligible.copy() for s in self.schedules]

    @torch.no_grad()
    def step(self, features: Sequence[torch.Tensor]) -> None:
        """One generate-and-test step, after an optimizer step whose forward pass produced
        ``features`` (each hidden layer's post-activation ``[K, B, U]`` or ``[K, B, U, H, W]``)."""
        if len(features) != len(self.layers):
            raise ValueError(f"expected features of {len(self.layers)} hidden layers, got {len(features)}")
        counts = self._advance()
        # Test every layer first, with the weights as the optimizer left them, then generate:
        # a replacement in layer ℓ changes layer ℓ+1's weights, which must not leak into layer
        # ℓ+1's utility of this step (the order of the public code).
        tested = [self._test(i, h.detach()) for i, h in enumerate(features)]
        for i, n in enumerate(counts):
            if n.any():  # numpy: known on the host, no device sync
                self._generate(i, n, *tested[i])

    def _advance(self) -> list[np.ndarray]:
        """Step 5's counts of this step, how many units each member replaces in each layer
        (``[K]`` per layer, on the host), with the totals kept."""
        counts = [schedule.advance() for schedule in self.schedules]
        for i, n in enumerate(counts):
            self.last_replaced[i] = n
            self.replaced[i] += n
        return counts

    # --- the same step in the form a compiled step captures (draws="philox") ------------------

    def prepare_captured(self, step: int) -> None:
        """Outside the compiled step, before it: the Philox counter at ``step``, this step's
        counts (on the host, as :meth:`step` has them) written to the device, and on the first
        call Adam's restart patterns made (at their current counts), so the compiled update
        has them from its first step."""
        if self.philox_keys is None:
            raise ValueError("Continual Backprop is captured only with Philox draws (draws='philox')")
        self.counter.fill_(step)
        if not self.patterns_made:  # a restart of no unit makes them
            for i in range(len(self.layers)):
                self._restart(i, torch.zeros_like(self.stats[i].utility, dtype=torch.bool))
            self.patterns_made = True
        for n, on_device in zip(self._advance(), self.device_counts, strict=True):
            on_device.copy_(torch.from_numpy(n))

    def captured_step(self, features: Sequence[torch.Tensor]) -> None:
        """:meth:`step` as tensor operations alone, after :meth:`prepare_captured`: every layer
        replaces every step, a member whose count is 0 choosing no unit (so its weights, moments
        and statistics stay as they are, and its Philox draw, counted by the step, is unused)."""
        tested = [self._test(i, h) for i, h in enumerate(features)]
        for i, (correction, mean) in enumerate(tested):
            mask = self._chosen_units(i, correction, self.device_counts[i], self.layers[i].units)[0]
            self._fresh_philox(i, mask)
            self._reset_units(i, mask, mean)

    def _test(self, i: int, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 1–4 for layer i; returns (1−dᵃ, f̂), both ``[K, U]``."""
        s, d = self.stats[i], self.decay
        s.age += 1
        s.mean_activation.mul_(d).add_((1 - d) * unit_mean(h))
        correction = 1 - torch.pow(d, s.age)
        mean = s.mean_activation / correction
        y = instantaneous_utility(self.layers[i], h, mean, self.utility)
        s.utility.mul_(d).add_((1 - d) * y)
        return correction, mean

    def _generate(self, i: int, n: np.ndarray, correction: torch.Tensor, mean: torch.Tensor) -> None:
        """Steps 5–6 for layer i: member k replaces its ``n[k]`` lowest-û eligible units."""
        counts = to_device(torch.from_numpy(n), self.stats[i].age.device)
        mask, order, chosen = self._chosen_units(i, correction, counts, int(n.max()))
        if self.philox_keys is not None:
            self._fresh_philox(i, mask)
        else:
            self._draw_rows(i, n, order, chosen)
        self._reset_units(i, mask, mean)

    def _chosen_units(self, i: int, correction: torch.Tensor, counts: torch.Tensor, N: int
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Which units of layer i each member replaces, its ``counts[k]`` lowest-û eligible
        ones: the unit mask ``[K, U]``, and the padded choice (``order`` ``[K, N]``, the N
        lowest-û units in order; ``chosen``: the first ``counts[k]`` of them), N ≥ max counts."""
        s = self.stats[i]
        K, U = s.age.shape
        device = s.age.device
        # Sort û with the young units pushed to +∞, take each member's first n[k] (a padded set
        # of N, with the columns past n[k] switched off). Stable, so ties (dead units all have
        # û = 0) go to the lowest index, the same in any ensemble.
        ranked = torch.where(s.age > self.maturity, s.utility / correction, math.inf)
        order = torch.sort(ranked, dim=1, stable=True).indices[:, :N]  # [K, N]
        chosen = torch.arange(N, device=device) < counts.view(K, 1)
        mask = torch.zeros(K, U, dtype=torch.bool, device=device).scatter_(1, order, chosen)
        return mask, order, chosen

    def _fresh_philox(self, i: int, mask: torch.Tensor) -> None:
        """Philox: a replaced unit's fresh incoming weights are its own row of the layer's init
        draw at this step (counter-based: every member draws at once, none falls behind)."""
        layer = self.layers[i]
        fresh, _ = layer.sample_init_philox(self.init, self.philox_keys[i], self.counter)
        layer.in_weight.copy_(torch.where(layer.incoming_mask(mask), fresh, layer.in_weight))

    def _reset_units(self, i: int, mask: torch.Tensor, mean: torch.Tensor) -> None:
        """Step 6 for layer i's units in ``mask`` once their incoming weights are drawn: bias 0,
        outgoing weights 0 (their mean contribution into the next bias), statistics 0, and the
        optimizer state of every touched weight restarted."""
        layer, s = self.layers[i], self.stats[i]
        layer.in_bias.masked_fill_(mask, 0.0)

        if not layer.is_conv and not layer.outgoing_is_conv:
            # The next layer keeps receiving the removed units' mean contribution W[:, i]·f̂ᵢ
            # through its bias, so zeroing them does not shift its output on average.
            removed = torch.where(mask, mean, 0.0)
            layer.out_bias.add_((layer.out_weight * removed.unsqueeze(1)).sum(-1))
        out_mask = layer.outgoing_mask(mask)
        layer.out_weight.masked_fill_(out_mask, 0.0)

        s.age.masked_fill_(mask, 0)
        s.utility.masked_fill_(mask, 0.0)
        s.mean_activation.masked_fill_(mask, 0.0)
        self._restart(i, mask, out_mask)

    def _restart(self, i: int, mask: torch.Tensor, out_mask: torch.Tensor | None = None) -> None:
        """Restart the optimizer state (moments and step counts) of the weights of layer i's
        units in ``mask`` (``out_mask``: its outgoing mask, where the caller has it)."""
        layer = self.layers[i]
        out_mask = layer.outgoing_mask(mask) if out_mask is None else out_mask
        layer.reset_optimizer(self.optimizer, "in_weight", layer.incoming_mask(mask), restart_count=True)
        layer.reset_optimizer(self.optimizer, "in_bias", mask, restart_count=True)
        layer.reset_optimizer(self.optimizer, "out_weight", out_mask, restart_count=True)

    def _draw_rows(self, i: int, n: np.ndarray, order: torch.Tensor, chosen: torch.Tensor) -> None:
        """The generators' fresh incoming weights for layer i: row j of member k's draw goes to
        its j-th lowest-û unit (``order``, ``chosen``: :meth:`_generate`'s padded choice)."""
        # Only the members that replace draw, each from its own generator, so member k's stream
        # of draws depends on its own replacements alone (the one loop over members). The
        # generators live on the host (the same numbers on any device); the rows travel in one
        # non-blocking copy.
        layer = self.layers[i]
        K, N = order.shape
        row_shape = tuple(layer.in_weight.shape[2:])
        rows = torch.zeros((K, N, *row_shape), dtype=layer.in_weight.dtype)
        for k in np.flatnonzero(n):
            w, _ = init_schemes.draw(self.init, (int(n[k]), *row_shape), layer.fan_in, layer.fan_out,
                                     self.generators[i][k])
            rows[k, : int(n[k])] = w
        rows = to_device(rows, order.device)
        expand = (K, N, *row_shape)
        index = order.view(K, N, *([1] * len(row_shape))).expand(expand)
        pick = chosen.view(K, N, *([1] * len(row_shape))).expand(expand)
        layer.in_weight.scatter_(1, index, torch.where(pick, rows, layer.in_weight.gather(1, index)))


def _per_member_values(value, K: int, kind: type) -> list:
    """A hyper-parameter as one host value per member.

    The engine passes ``[K]`` float32 tensors; a float32 value is read back as the shortest
    decimal that rounds to it (0.3, not 0.30000001192092896), so that the host accumulation of
    r·#eligible is the one the user wrote down (read once, at construction).
    """
    if torch.is_tensor(value):
        values = [float(str(np.float32(v))) for v in value.detach().cpu().reshape(-1).tolist()]
    elif isinstance(value, int | float):
        values = [float(value)] * K
    else:
        values = [float(v) for v in value]
    if len(values) == 1 and K > 1:
        values = values * K
    if len(values) != K:
        raise ValueError(f"expected one value per member ({K}), got {len(values)}")
    return [int(round(v)) for v in values] if kind is int else values


# --- front end 1: the ensemble engine's method --------------------------------------------------

class ContinualBackprop(Method):
    """Continual Backprop (method ``cbp``): after every optimizer step, replace the r·#eligible
    lowest-utility mature hidden units of each layer with fresh ones (SPEC §2.1).

    Hyper-parameters: ``replacement_rate`` r, ``maturity`` m, ``decay`` d (per member),
    ``utility`` (``adaptable_contribution`` | ``contribution``), and two switches towards the
    public code (SPEC §9), shared by an ensemble:

    - ``adam_variant``: ``standard`` (Adam, each element's bias correction restarted with it)
      or ``reference`` (with Adam, the whole network trains with
      :class:`~plasticlab.optim.adam_gnt.AdamGnT`, which replaces the optimizer the method is
      handed: :attr:`optimizer`; with SGD (any optimizer but Adam), nothing changes —
      :meth:`notes` says so);
    - ``replacement_init``: ``network`` (fresh incoming weights from the network's own init
      scheme) or ``kaiming`` (U(±√(6/fan_in)), fan_in = in_channels·kh·kw for a conv unit).

    Member k's layer ℓ draws from ``context.generators("cbp", ℓ)[k]`` — or, with
    ``draws="philox"``, a new unit's incoming weights are its row of the layer's Philox init
    draw at the step (streams ``method/cbp/ℓ/weight|bias``); new units' biases are 0.
    """

    name = "cbp"
    title = "CBP"
    description = "Continual Backprop: replace low-utility mature hidden units with fresh ones"
    hyperparameters = (
        Param("replacement_rate", 1e-4, float, "r: fraction of the eligible units replaced per step",
              per_member=True, low=0, high=1),
        Param("maturity", 100, int, "m: a unit is eligible for replacement once its age exceeds m steps",
              per_member=True, low=0),
        Param("decay", 0.99, float, "d: decay of the running utility and mean activation",
              per_member=True, low=0, high=1, high_open=True),
        Param("utility", "adaptable_contribution", str, "unit utility measure", choices=UTILITIES),
        Param("adam_variant", "standard", str,
              "with Adam: standard Adam (per-element restarts) or reference: the public code's "
              "AdamGnT for the whole network, θ ← θ − α(1−β₂ᵗ)m/(√v+ε); no effect with SGD",
              choices=ADAM_VARIANTS),
        Param("replacement_init", "network", str,
              "new units' incoming weights: network: the network's init distribution; kaiming: "
              "U(±√(6/fan_in)) as the public code", choices=REPLACEMENT_INITS),
        philox.draws_param("a new unit's incoming weights"),
    )
    def __init__(self, net: EnsembleNet, optimizer, hp: dict, context: MethodContext):
        super().__init__(net, optimizer, hp, context)
        self.adam_variant = hp.get("adam_variant", "standard")
        self.replacement_init = hp.get("replacement_init", "network")
        if self.adam_variant not in ADAM_VARIANTS:
            raise ValueError(f"method cbp: adam_variant must be one of {', '.join(ADAM_VARIANTS)}, "
                             f"got {self.adam_variant!r}")
        if self.replacement_init not in REPLACEMENT_INITS:
            raise ValueError(f"method cbp: replacement_init must be one of {', '.join(REPLACEMENT_INITS)}, "
                             f"got {self.replacement_init!r}")
        if self.adam_variant == "reference":
            self.optimizer = reference_optimizer(optimizer)
        layers = hidden_layers(net, self.name)
        K = net.members
        self.core = GenerateAndTest(
            layers, self.optimizer,
            replacement_rate=_per_member_values(hp["replacement_rate"], K, float),
            maturity=_per_member_values(hp["maturity"], K, int),
            decay=_per_member_values(hp["decay"], K, float),
            utility=hp.get("utility", "adaptable_contribution"),
            init="kaiming_uniform" if self.replacement_init == "kaiming" else net.init,
            **self._draws(hp.get("draws", "generator"), net, context, len(layers)))

    def _draws(self, draws: str, net: EnsembleNet, context: MethodContext, layers: int) -> dict:
        """Where new units' weights come from: each member's generator per layer, or (Philox)
        each layer's streams method/cbp/ℓ/weight|bias of each member's seed."""
        if draws == "generator":
            return {"generators": [context.generators(self.name, i) for i in range(layers)]}
        return {"philox_keys": hidden_philox_keys(net, context.seeds, f"method/{self.name}")}

    @classmethod
    def needs(cls, params):
        # AdamGnT (adam_variant=reference) has one step size for all members
        return Needs(after_step=True, features=True,
                     member_lr=params.get("adam_variant", "standard") != "reference")

    def after_step(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """Generate-and-test on this step's hidden features (Philox draws counted by ``step``)."""
        if self.core.philox_keys is not None:
            self.core.counter.fill_(step)
        self.core.step(features)

    def captured_after_step(self) -> CapturedHook | None:
        """With Philox draws, generate-and-test as masks (:meth:`GenerateAndTest.captured_step`):
        how many units each member replaces is counted on the host (counts alone decide it)
        and written to the device before the step; which units, their draws and resets are
        tensor operations. The host generators' draws cannot be captured: None."""
        core = self.core
        if core.philox_keys is None:
            return None
        touched = (p for layer in core.layers for p in (layer.in_weight_param, layer.in_bias_param,
                                                         layer.out_weight_param, layer.out_bias_param))
        state = (t for s in core.stats for t in (s.age, s.utility, s.mean_activation))
        return CapturedHook(run=lambda features, x: core.captured_step(features), params=tuple(touched),
                            reads=(core.counter, core.decay, core.maturity, *core.philox_keys,
                                   *core.device_counts, *state),
                            prepare=core.prepare_captured, draws=True)

    def notes(self) -> dict:
        """The optimizer that trained the network when ``adam_variant=reference`` was asked for."""
        if self.adam_variant != "reference":
            return {}
        if isinstance(self.optimizer, AdamGnT):
            return {"optimizer": "AdamGnT (adam_variant=reference)"}
        return {"adam_variant": f"reference: no effect with {type(self.optimizer).__name__} (the public "
                                "code replaces only Adam)"}

    @property
    def replacements(self) -> list[np.ndarray]:
        """Units replaced so far per hidden layer, ``[K]`` each (host counts)."""
        return [r.copy() for r in self.core.replaced]


def reference_optimizer(optimizer):
    """The optimizer ``adam_variant=reference`` trains with: for a fresh
    :class:`~plasticlab.optim.Adam`, an :class:`~plasticlab.optim.adam_gnt.AdamGnT` over the
    same parameters with the same α, β and ε; any other optimizer (SGD) as it is — the public
    code uses AdamGnT only in place of Adam."""
    if not isinstance(optimizer, Adam):
        return optimizer
    if optimizer.weight_decay:
        raise ValueError("method cbp: adam_variant=reference does not take Adam's weight_decay")
    if any(optimizer.step_counts):
        raise ValueError("method cbp: adam_variant=reference replaces Adam before training; this Adam "
                         "has already taken steps")
    return AdamGnT(optimizer.params, lr=optimizer.lr, betas=optimizer.betas, eps=optimizer.eps)


# --- front end 2: a drop-in for nn.Sequential ---------------------------------------------------

class ContinualBackpropSequential(CoreState):
    """Continual Backprop for your own ``nn.Sequential`` (Linear/Conv2d, ReLU, pooling,
    flatten, dropout).

    Usage::

        optimizer = plasticlab.optim.Adam(model.parameters(), lr=1e-3)
        cbp = ContinualBackpropSequential(model, optimizer, replacement_rate=1e-4, maturity=100,
                                          decay=0.99)
        for x, y in stream:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            cbp.step()

    Forward hooks on the ReLUs capture the features h of the latest forward pass run with
    gradients enabled (the one being trained on; passes under ``torch.no_grad()``, such as
    evaluation, are ignored). :meth:`step` then runs the same :class:`GenerateAndTest` as the
    method ``cbp``, with fresh incoming weights drawn from ``init`` (PyTorch's default
    Linear/Conv2d initialisation unless told otherwise) by a generator seeded from ``seed``.
    Optimizers: ``plasticlab.optim.Adam`` or ``SGD``, or ``torch.optim.SGD`` without momentum;
    ``torch.optim.Adam`` is refused (its single step count per tensor gets the bias correction of
    restarted units wrong). Models with normalisation layers or other activations are refused,
    naming the layer. ``state_dict()``/``load_state_dict()``: the units' ages, utilities and
    mean activations, the replacement counts and the generators' positions, for resuming.
    """

    def __init__(self, model: nn.Sequential, optimizer, replacement_rate: float = 1e-4, maturity: int = 100,
                 decay: float = 0.99, utility: str = "adaptable_contribution", seed: int = 0,
                 init: str = "torch_default"):
        name = type(self).__name__
        layers, relus = sequential_hidden_layers(model, name)
        if len({id(r) for r in relus}) != len(relus):
            raise ValueError(f"{name}: one ReLU module is used after several layers; give each hidden "
                             "layer its own nn.ReLU so its features can be told apart")
        self.model = model
        self.optimizer = optimizer
        device = layers[0].in_weight.device
        context = MethodContext([int(seed)], device)
        # Seeded like member `seed` of an ensemble, so the drop-in and the method draw the same units.
        state = unit_reset_state(optimizer, layers, name, restarts_counts=True)
        self.core = GenerateAndTest(
            layers, state, replacement_rate=[replacement_rate], maturity=[maturity],
            decay=[decay], utility=utility, init=init,
            generators=[context.generators(ContinualBackprop.name, i) for i in range(len(layers))])
        self._features: list[torch.Tensor | None] = [None] * len(layers)
        self._handles = [relu.register_forward_hook(self._capture(i)) for i, relu in enumerate(relus)]

    def _capture(self, i: int):
        conv = self.core.layers[i].is_conv

        def hook(module, inputs, output):
            if torch.is_grad_enabled():
                h = output.detach()
                # Add the member dimension of 1; any leading dims of a Linear's input are batch.
                self._features[i] = (h.reshape(1, -1, *h.shape[-3:]) if conv
                                     else h.reshape(1, -1, h.shape[-1]))
        return hook

    def step(self) -> None:
        """Generate-and-test on the features of the latest training forward pass; call it
        after every ``optimizer.step()``."""
        check_layers_current(self.core.layers, type(self).__name__)
        if any(f is None for f in self._features):
            raise RuntimeError(f"{type(self).__name__}.step(): no features captured since the last step; "
                               "run the model's training forward pass (with gradients enabled) first")
        features, self._features = self._features, [None] * len(self._features)
        self.core.step(features)

    def _state_parts(self):
        return self.core, self.core.layers, Excluded(
            objects=[self.model, self.optimizer, self.core.optimizer, *self.core.layers],
            tensors=[*self.model.parameters(), *self.model.buffers()])

    @property
    def replacements(self) -> list[int]:
        """Units replaced so far, per hidden layer."""
        return [int(r[0]) for r in self.core.replaced]

    def remove(self) -> None:
        """Remove the forward hooks (the model is left as it is)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
