"""Self-Normalized Resets, SNR (Farias & Jozefiak, ICLR 2025; SPEC §10).

A unit that has stopped firing is reset — but "stopped" is judged against the unit's own
history: each hidden unit i learns how long it normally goes between firings and is reset only
when its silence is unusually long. Per unit it keeps

- its **age** aᵢ: samples since it last fired;
- a **histogram** Hᵢ of the ages at which it fired (ages above τ_max are not recorded);
- a **threshold** τᵢ (starting at τ_init).

At every step, on the training batch's forward pass (before the update), a unit **fires** if
its pre-activation is > 0 for any example (any position, for a conv channel): then
Hᵢ[aᵢ] += 1 and aᵢ ← 0; otherwise aᵢ += B. After the optimizer step every unit with aᵢ ≥ τᵢ is
**reset**: incoming weights from the init distribution, bias 0, outgoing weights 0, the
optimizer's moments of those weights 0 (step counts kept); Hᵢ[aᵢ] += 1 and aᵢ ← 0. The output
layer is never reset.

Every ``adapt_period`` steps the thresholds adapt: qᵢ = the age at the p-th percentile of
Hᵢ[1:] (bin 0 — firing in consecutive batches — left out; the smallest recorded age whose
cumulative count reaches p of the total); τᵢ ← qᵢ if qᵢ < τᵢ, else κ·τᵢ (a unit with nothing
recorded also grows its threshold); τᵢ is clipped to [B, τ_max] and Hᵢ is cleared.

Ages move in steps of B, so the histogram has one bin per B samples. p (``percentile``),
κ (``growth``), τ_max, τ_init and ``adapt_period`` are per member. The rule's steps are
functions (:func:`observe_firing`, :func:`reset_silent_units`, :func:`adapt_thresholds`) that
the drop-in :class:`plasticlab.dropin_field.SNR` shares.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .. import philox
from ..nets.units import HiddenLayer, hidden_layers, hidden_philox_keys
from ..params import Param
from .base import CapturedHook, Method, Needs
from .schedule import due_members, due_on_device, host_periods

PERCENTILE_SLACK = 1e-6
"""Relative slack on p·total, far above float32 rounding of p and far below one count in 10⁵."""


def fired(features: torch.Tensor) -> torch.Tensor:
    """Units that fired on the batch, ``[K, U]``: post-ReLU features ``[K, B, U]`` (or
    ``[K, B, U, H, W]``) > 0 somewhere — exactly where the pre-activation is > 0."""
    positive = features.detach() > 0
    return positive.any(dim=1) if positive.dim() == 3 else positive.any(dim=(1, 3, 4))


def record_ages(hist: torch.Tensor, ages: torch.Tensor, mask: torch.Tensor, batch: int,
                max_age: torch.Tensor) -> None:
    """H[a] += 1 for the units in ``mask`` ``[K, U]``, a their age in samples (a multiple of
    ``batch``; bin a/B), unless a > τ_max (per member ``[K]``)."""
    record = mask & (ages <= max_age.view(-1, 1))
    bins = torch.div(ages, batch, rounding_mode="floor").clamp_(max=hist.shape[2] - 1)
    hist.scatter_add_(2, bins.unsqueeze(2), record.unsqueeze(2).to(hist.dtype))


def percentile_age(hist: torch.Tensor, p: torch.Tensor, batch: int) -> torch.Tensor:
    """qᵢ: the smallest age in H[1:] whose cumulative count reaches p·total, in samples,
    ``[K, U]`` float; +inf where H[1:] is empty. p per member ``[K]``."""
    counts = hist[..., 1:].to(torch.float64)
    cumulative = counts.cumsum(dim=2)
    total = cumulative[..., -1:]
    # p arrives as float32 (0.99 → 0.9900000095…): the relative slack keeps "99 of 100" at 99
    reach = p.to(torch.float64).view(-1, 1, 1) * total * (1 - PERCENTILE_SLACK)
    below = (cumulative < reach).sum(dim=2)
    age = ((below + 1) * batch).to(torch.float32)
    return torch.where(total[..., 0] > 0, age, torch.full_like(age, float("inf")))


def adapted_threshold(tau: torch.Tensor, q: torch.Tensor, growth: torch.Tensor, batch: int,
                      max_age: torch.Tensor) -> torch.Tensor:
    """τ ← q if q < τ else κ·τ, clipped to [B, τ_max]; κ and τ_max per member ``[K]``."""
    new = torch.where(q < tau, q, growth.view(-1, 1) * tau)
    return torch.minimum(new.clamp(min=float(batch)), max_age.view(-1, 1).to(new.dtype))


def empty_histograms(layers: Sequence[HiddenLayer], members: int, batch: int, max_age: torch.Tensor,
                     device) -> list[torch.Tensor]:
    """One zero histogram per layer, ``[K, U, bins]``: one bin per B samples up to the largest
    τ_max (read to the host once)."""
    bins = int(max_age.max()) // batch + 1
    return [torch.zeros(members, layer.units, bins, dtype=torch.int32, device=device) for layer in layers]


def observe_firing(hist: torch.Tensor, ages: torch.Tensor, fire: torch.Tensor, batch: int,
                   max_age: torch.Tensor) -> torch.Tensor:
    """One layer's firing ``[K, U]`` on a batch: record the ages of the units that fired in
    ``hist``; return the new ages (0 where fired, aᵢ + B elsewhere)."""
    record_ages(hist, ages, fire, batch, max_age)
    return torch.where(fire, 0, ages + batch)


def generator_draws(layers: Sequence[HiddenLayer], init: str,
                    generators: Sequence[Sequence[torch.Generator]]) -> Callable[[int], torch.Tensor]:
    """:func:`reset_silent_units`' ``fresh`` from per-member generators: layer i's whole
    incoming weights drawn from init ``init``, member k from ``generators[i][k]``."""
    return lambda i: layers[i].sample_init(init, generators[i])[0]


def reset_silent_units(layers: Sequence[HiddenLayer], ages: list[torch.Tensor],
                       thresholds: Sequence[torch.Tensor], histograms: Sequence[torch.Tensor], batch: int,
                       max_age: torch.Tensor, fresh: Callable[[int], torch.Tensor],
                       optimizer) -> torch.Tensor:
    """Reset every unit with aᵢ ≥ τᵢ (``ages[i]`` is replaced in the list); return how many per
    member, ``[K]``. ``fresh(i)``: layer i's fresh incoming weights for every unit, ``[K, …]``
    (:func:`generator_draws`, or a Philox draw); ``optimizer``: anything with plasticlab's
    ``reset(index, mask, restart_count)``.

    The fresh incoming weights are drawn for the whole layer at every step, reset or not:
    the number of draws then never depends on the data, so no host synchronisation is
    needed and member k's stream stays its own."""
    total = None
    masks = []
    for i, layer in enumerate(layers):
        mask = ages[i] >= thresholds[i]
        record_ages(histograms[i], ages[i], mask, batch, max_age)
        ages[i] = torch.where(mask, 0, ages[i])
        weight = fresh(i)
        layer.in_weight.copy_(torch.where(layer.incoming_mask(mask), weight.to(layer.in_weight.dtype),
                                          layer.in_weight))
        layer.in_bias.masked_fill_(mask, 0.0)
        masks.append(mask)
        total = mask.sum(dim=1) if total is None else total + mask.sum(dim=1)
    for layer, mask in zip(layers, masks, strict=True):
        # after every incoming side, as in ReDo: a reset unit never feeds a reset unit
        layer.out_weight.masked_fill_(layer.outgoing_mask(mask), 0.0)
        # moments only: the step count, and so Adam's bias correction, is kept
        for which, where in (("in_weight", layer.incoming_mask(mask)), ("in_bias", mask),
                             ("out_weight", layer.outgoing_mask(mask))):
            layer.reset_optimizer(optimizer, which, where, restart_count=False)
    return total


def adapt_thresholds(histograms: Sequence[torch.Tensor], thresholds: list[torch.Tensor],
                     member: torch.Tensor, percentile: torch.Tensor, growth: torch.Tensor, batch: int,
                     max_age: torch.Tensor) -> None:
    """For the members in ``member`` ``[K, 1]``: τ from each unit's firing-age percentile
    (``thresholds[i]`` is replaced in the list), then clear their histograms."""
    for i, hist in enumerate(histograms):
        q = percentile_age(hist, percentile, batch)
        new = adapted_threshold(thresholds[i], q, growth, batch, max_age)
        thresholds[i] = torch.where(member, new, thresholds[i])
        hist.masked_fill_(member.unsqueeze(2), 0)


PERCENTILE = Param("percentile", 0.99, float, "p: the firing-age percentile a threshold adapts to",
                   per_member=True, low=0.0, high=1.0)
GROWTH = Param("growth", 2.0, float, "κ: threshold growth when the percentile is not below it",
               per_member=True, low=1.0)
MAX_THRESHOLD = Param("max_threshold", 20000, int, "τ_max in samples: the largest threshold; "
                      "longer ages are not recorded", per_member=True, low=1)
INITIAL_THRESHOLD = Param("initial_threshold", 10000, int, "τ_init in samples (the public port: "
                          "τ_max/2)", per_member=True, low=1)
ADAPT_PERIOD = Param("adapt_period", 10000, int, "optimizer steps between threshold adaptations "
                     "(the reference: 16 tasks)", per_member=True, in_steps=True, low=1)


class SelfNormalizedResets(Method):
    """Reset each hidden unit whose silence exceeds its own adaptive threshold."""

    name = "snr"
    title = "SNR"
    description = "Self-Normalized Resets: reset units silent longer than their own firing-age percentile"
    hyperparameters = (PERCENTILE, GROWTH, MAX_THRESHOLD, INITIAL_THRESHOLD, ADAPT_PERIOD,
                       philox.draws_param("a reset unit's fresh weights"))

    @classmethod
    def needs(cls, params):
        return Needs(after_step=True, features=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.layers: list[HiddenLayer] = hidden_layers(net, "SNR")
        device, K = context.device, net.members
        as_k = {k: torch.as_tensor(hp[k], device=device).reshape(-1)
                for k in ("percentile", "growth", "max_threshold", "initial_threshold")}
        if bool(((as_k["percentile"] <= 0) | (as_k["percentile"] > 1)).any()):  # once, at construction
            raise ValueError("method snr: percentile p must be in (0, 1]")
        if bool((as_k["growth"] < 1).any()) or bool((as_k["max_threshold"] < 1).any()):
            raise ValueError("method snr: need growth κ >= 1 and max_threshold >= 1 sample")
        self.percentile, self.growth = as_k["percentile"], as_k["growth"]
        self.max_age = as_k["max_threshold"].long()
        self.adapt_periods = host_periods(hp["adapt_period"], self.name, "adapt_period")
        self.ages = [torch.zeros(K, layer.units, dtype=torch.long, device=device) for layer in self.layers]
        self.thresholds = [as_k["initial_threshold"].view(-1, 1).expand(K, layer.units).clone()
                           for layer in self.layers]
        self.histograms: list[torch.Tensor] | None = None  # sized by the batch, at the first step
        self.batch: int | None = None
        if hp.get("draws", "generator") == "philox":
            # layer i's fresh weights: the layer's Philox init draw at the step (streams
            # method/snr/i/weight|bias), every step, as the generators draw every step
            self.counter = torch.zeros((), dtype=torch.int64, device=device)
            self.philox_keys = keys = hidden_philox_keys(net, context.seeds, f"method/{self.name}")
            self.fresh = lambda i: self.layers[i].sample_init_philox(net.init, keys[i], self.counter)[0]
        else:
            self.counter, self.philox_keys = None, None
            self.fresh = generator_draws(self.layers, net.init,
                                         [context.generators(self.name, i) for i in range(len(self.layers))])
        self.last_reset = torch.zeros(K, dtype=torch.long, device=device)
        # the captured form's adaptation schedule: the periods and the update count on the device
        self.periods_on_device = torch.tensor(self.adapt_periods, device=device)
        self.step_on_device = torch.zeros((), dtype=torch.int64, device=device)

    def after_step(self, features: list[torch.Tensor], x: torch.Tensor, step: int) -> None:
        """Age or record every unit from this step's forward pass, reset the units past their
        threshold, and adapt the thresholds of members whose period is due."""
        batch = x.shape[1]
        if self.histograms is None:
            self.start(batch)
        elif batch != self.batch:
            raise ValueError(f"method snr: the batch size changed from {self.batch} to {batch}")
        with torch.no_grad():
            for i, f in enumerate(features):
                self.observe(i, fired(f))
            if self.counter is not None:
                self.counter.fill_(step)
            self.reset_silent()
        due = due_members(self.adapt_periods, step)
        if any(due):
            self.adapt(due)

    def start(self, batch: int) -> None:
        """Size the histograms: one bin per B samples up to the largest τ_max (read once)."""
        self.batch = batch
        self.histograms = empty_histograms(self.layers, self.net.members, batch, self.max_age,
                                           self.context.device)
        for t in self.thresholds:
            t.clamp_(min=float(batch))

    # The state is updated in place (the rule's functions return new tensors, copied into the
    # kept ones), so a compiled step reads the same tensors from step to step.

    def observe(self, i: int, fire: torch.Tensor) -> None:
        """Layer i's firing ``[K, U]``: record and zero the ages of the units that fired,
        age the others by B."""
        self.ages[i].copy_(observe_firing(self.histograms[i], self.ages[i], fire, self.batch,
                                          self.max_age))

    def reset_silent(self) -> torch.Tensor:
        """Reset every unit with aᵢ ≥ τᵢ (:func:`reset_silent_units`); return how many per
        member, ``[K]``."""
        ages = list(self.ages)
        reset = reset_silent_units(self.layers, ages, self.thresholds, self.histograms,
                                   self.batch, self.max_age, self.fresh, self.optimizer)
        for kept, new in zip(self.ages, ages, strict=True):
            kept.copy_(new)
        self.last_reset.copy_(reset)
        return self.last_reset

    def captured_after_step(self) -> CapturedHook | None:
        """With Philox draws, :meth:`after_step` as tensor operations (the rule's functions are
        written with masks): every step ages or records every unit, resets those past their
        threshold and adapts the thresholds of the members whose period divides the update
        count — decided on the device, so the adaptation's percentiles are computed every step
        and kept only where a member is due. The ages, thresholds and count are updated in
        place. The host generators' draws cannot be captured: None."""
        if self.counter is None:
            return None
        touched = (p for layer in self.layers for p in (layer.in_weight_param, layer.in_bias_param,
                                                         layer.out_weight_param))
        return CapturedHook(run=self._captured_step, params=tuple(touched),
                            reads=(*self.ages, *self.thresholds, self.last_reset, self.counter,
                                   *self.philox_keys, self.periods_on_device, self.step_on_device,
                                   self.percentile, self.growth, self.max_age),
                            prepare=self._prepare_captured, draws=True, start=self._start_captured)

    def _start_captured(self, batch: int) -> tuple[torch.Tensor, ...]:
        # as after_step's first call does
        if self.histograms is None:
            self.start(batch)
        elif batch != self.batch:
            raise ValueError(f"method snr: the batch size changed from {self.batch} to {batch}")
        return tuple(self.histograms)

    def _prepare_captured(self, step: int) -> None:
        self.counter.fill_(step)
        self.step_on_device.fill_(step)

    def _captured_step(self, features: list[torch.Tensor], x: torch.Tensor) -> None:
        for i, f in enumerate(features):
            self.observe(i, fired(f))
        self.reset_silent()
        self.adapt(due_on_device(self.periods_on_device, self.step_on_device))

    def adapt(self, due: Sequence[bool] | torch.Tensor) -> None:
        """For the due members (host booleans, or a ``[K]`` bool tensor): τ from each unit's
        firing-age percentile, then clear H."""
        due = due if isinstance(due, torch.Tensor) else torch.tensor(list(due), device=self.context.device)
        thresholds = list(self.thresholds)
        adapt_thresholds(self.histograms, thresholds, due.view(-1, 1), self.percentile, self.growth,
                         self.batch, self.max_age)
        for kept, new in zip(self.thresholds, thresholds, strict=True):
            kept.copy_(new)
