"""The methods since the paper (SPEC §10) as drop-ins for your own PyTorch model.

Each one runs the rule of its plasticlab method — the same functions, called on the model's
own parameters seen as a one-member ensemble ``[1, …]`` — so a plain training loop gets what
``plasticlab run --method …`` computes::

    reg = Parseval(model, strength=1e-3)               # a penalty: loss + reg()
    swr = SWR(model, period=2048, threshold=1e-5)       # swr.step() after optimizer.step()
    snr = SNR(model, optimizer)                         # snr.step() after optimizer.step()
    ht = HareTortoise(model, momentum=0.999, reset_period=1000)   # ht.step(); ht.tortoise
    optimizer = UPGD(model.parameters(), lr=1e-2)       # a torch.optim.Optimizer

    for x, y in stream:
        loss = F.cross_entropy(model(x), y) + reg()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        swr.step(); snr.step(); ht.step()               # after the step, before the next zero_grad

Call order: ``SWR`` scores weights by |g⊙w| with the gradients still in ``.grad`` — call its
``step()`` after ``optimizer.step()`` and before the next ``zero_grad()`` (a ``zero_grad`` that
fills zeros instead of ``None`` would give every weight utility 0 and reinitialize it).
``SNR`` reads which units fired from forward hooks on the ReLUs during the training forward
pass (passes under ``torch.no_grad()``, such as evaluation, are ignored): one training forward
pass, then ``step()`` after the optimizer's.

Random draws (SWR's and SNR's fresh weights, UPGD's noise when given a ``generator``) come
from generators seeded by ``seed`` as plasticlab seeds member ``seed`` of an ensemble, so a
drop-in and the engine's method draw the same numbers (``tests/test_dropin_field.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import nn

from .methods.base import MethodContext
from .methods.hare_tortoise import follow_hare_, reset_hare_
from .methods.normalize_project import joint_norm, project_to_norm_
from .methods.parseval import as_matrices, parseval_penalty
from .methods.schedule import due_members
from .methods.snr import (
    adapt_thresholds,
    empty_histograms,
    fired,
    generator_draws,
    observe_firing,
    reset_silent_units,
)
from .methods.spectral import initial_vectors, power_iteration, spectral_penalty
from .methods.swr import reinitialize_low_utility_
from .methods.weight_clip import clip_, init_bound
from .nets.init import check_scheme, draw_members
from .nets.units import check_layers_current, sequential_hidden_layers
from .optim.unit_reset import unit_reset_state
from .optim.upgd import perturbed_update_, scaled_utility, trace_utility_, utility_max
from .state import NamedState, check_keys

AFFINE = (nn.Linear, nn.Conv2d)


def _affine_modules(model: nn.Module, who: str) -> list[nn.Module]:
    """Every ``nn.Linear``/``nn.Conv2d`` of ``model`` in registration order (the last is taken
    to be the output layer)."""
    layers = [m for m in model.modules() if isinstance(m, AFFINE)]
    if not layers:
        raise ValueError(f"{who}: the model has no nn.Linear or nn.Conv2d layer")
    return layers


def _member(t: torch.Tensor) -> torch.Tensor:
    """A plain tensor as a one-member ensemble ``[1, …]`` (a view: writes land in place)."""
    return t.unsqueeze(0)


def _fans(layer: nn.Module) -> tuple[int, int]:
    """(fan_in, fan_out) as plasticlab's layers count them (conv: × kh·kw)."""
    w = layer.weight
    area = w[0, 0].numel() if w.dim() > 2 else 1
    return w[0].numel(), w.shape[0] * area



class Parseval(NamedState):
    """Parseval regularization, λ·Σ_ℓ ‖W_ℓ W_ℓᵀ − s·I‖²_F over the hidden layers' weights.

    The hidden layers are every ``nn.Linear``/``nn.Conv2d`` of ``model`` except the last one
    registered (the output layer); biases are not penalised; a conv filter bank is
    out × in·kh·kw. ``reg()`` is the penalty (add it to the loss); its autograd gradient is
    4λ(W Wᵀ − s·I)W, what the engine's ``parseval`` adds to ``.grad``. No state
    (``state_dict()`` is empty).
    """

    def __init__(self, model: nn.Module, strength: float, scale: float = 1.0):
        if not strength >= 0 or not scale >= 0:
            raise ValueError(f"Parseval: need strength λ >= 0 and scale s >= 0, got {strength}, {scale}")
        layers = _affine_modules(model, "Parseval")
        if len(layers) < 2:
            raise ValueError("Parseval: the model needs a hidden layer (two Linear/Conv2d layers); "
                             "the last one is the output layer, which is not penalised")
        self.weights = [layer.weight for layer in layers[:-1]]
        self.strength, self.scale = float(strength), float(scale)

    def __call__(self) -> torch.Tensor:
        """λ·Σ_ℓ ‖W_ℓ W_ℓᵀ − s·I‖²_F, a differentiable scalar."""
        return parseval_penalty([_member(w) for w in self.weights], self.strength, self.scale)[0]


class SWR(NamedState):
    """Selective Weight Reinitialization: every ``period`` calls of :meth:`step`, every weight
    and bias of every ``nn.Linear``/``nn.Conv2d`` (the output layer included) with
    |g⊙w| ≤ ρ·mean |g⊙w| over its tensor is reinitialized — weights from ``init``
    (``torch_default``: PyTorch's own Linear/Conv2d default), biases to 0. Optimizer state is
    left as it is. Needs the gradients of the step just taken: see the module's call order.
    Its state: the generator's position and the steps counted toward the period.
    """

    state_attributes = ("generator", "steps")

    def __init__(self, model: nn.Module, period: int = 2048, threshold: float = 1e-5, *,
                 seed: int = 0, init: str = "torch_default"):
        if int(period) < 1 or not threshold >= 0:
            raise ValueError(f"SWR: need period >= 1 step and threshold ρ >= 0, got {period}, {threshold}")
        self.layers = _affine_modules(model, "SWR")
        for layer in self.layers:
            if layer.bias is None:
                raise ValueError(f"SWR: {layer} has no bias; not supported")
        self.period, self.init = int(period), check_scheme(init)
        self.threshold = torch.tensor([float(threshold)])
        # member `seed`'s stream of the method: torch_generator(seed, "method", "swr")
        self.generator = MethodContext([int(seed)], torch.device("cpu")).generators("swr")[0]
        self.steps = 0
        self.last_reinitialized = 0

    @torch.no_grad()
    def step(self) -> None:
        """Count one optimizer step; on every ``period``-th, reinitialize the low-utility
        entries (their number is in :attr:`last_reinitialized`)."""
        self.steps += 1
        if self.steps % self.period:
            return
        if all(t.grad is None for layer in self.layers for t in (layer.weight, layer.bias)):
            raise RuntimeError("SWR.step(): no gradients; call it after optimizer.step() and "
                               "before the next zero_grad()")
        count = 0
        for layer in self.layers:
            fan_in, fan_out = _fans(layer)
            # a whole fresh tensor each time, whatever the mask, as the method draws
            fresh, _ = draw_members(self.init, tuple(layer.weight.shape), fan_in, fan_out,
                                    [self.generator], layer.weight.device)
            for param, new in ((layer.weight, fresh), (layer.bias, torch.zeros_like(_member(layer.bias)))):
                if param.grad is None:
                    continue
                everyone = torch.ones((1,) * (param.dim() + 1), dtype=torch.bool, device=param.device)
                count += int(reinitialize_low_utility_(_member(param), _member(param.grad),
                                                       new.to(param.dtype), self.threshold.to(param.device),
                                                       everyone)[0])
        self.last_reinitialized = count


class SNR(NamedState):
    """Self-Normalized Resets for an ``nn.Sequential`` of Linear (or Conv2d) layers and ReLUs.

    Per hidden unit: its age (samples since it last fired), a histogram of the ages at which it
    fired and a threshold τᵢ. Forward hooks on the ReLUs see which units fired (output > 0 for
    some example) in each training forward pass; :meth:`step`, after ``optimizer.step()``, ages
    or records every unit, resets those with age ≥ τᵢ (incoming weights from ``init``, bias 0,
    outgoing weights 0, and their optimizer moments 0: ``torch.optim.Adam``/``AdamW``'s
    ``exp_avg``/``exp_avg_sq``, ``torch.optim.SGD``'s momentum, or a :mod:`plasticlab.optim`
    optimizer's; step counts kept) and every ``adapt_period`` steps adapts τᵢ to the p-th
    percentile of the unit's firing ages. ``max_threshold`` and ``initial_threshold`` are in
    samples. ``optimizer=None``: no state to reset. Its state (``state_dict()``): the units'
    ages, histograms and thresholds, the generators' positions, the steps counted.
    """

    state_attributes = ("ages", "thresholds", "histograms", "batch", "generators", "steps")

    def __init__(self, model: nn.Sequential, optimizer=None, percentile: float = 0.99,
                 growth: float = 2.0, max_threshold: int = 20000, initial_threshold: int = 10000,
                 adapt_period: int = 10000, *, seed: int = 0, init: str = "torch_default"):
        if not 0 < percentile <= 1:
            raise ValueError(f"SNR: percentile p must be in (0, 1], got {percentile}")
        if not growth >= 1 or int(max_threshold) < 1 or int(adapt_period) < 1:
            raise ValueError(f"SNR: need growth κ >= 1, max_threshold >= 1 sample and adapt_period "
                             f">= 1 step; got {growth}, {max_threshold}, {adapt_period}")
        self.layers, relus = sequential_hidden_layers(model, "SNR")
        if len({id(r) for r in relus}) != len(relus):
            raise ValueError("SNR: one ReLU module is used after several layers; give each hidden "
                             "layer its own nn.ReLU so its firing can be told apart")
        self.optimizer = unit_reset_state(optimizer, self.layers, "SNR")
        self.init = check_scheme(init)
        device = self.layers[0].in_weight.device
        self.percentile = torch.tensor([float(percentile)], device=device)
        self.growth = torch.tensor([float(growth)], device=device)
        self.max_age = torch.tensor([int(max_threshold)], device=device)
        self.adapt_period = int(adapt_period)
        self.ages = [torch.zeros(1, layer.units, dtype=torch.long, device=device) for layer in self.layers]
        self.thresholds = [torch.full((1, layer.units), float(initial_threshold), device=device)
                           for layer in self.layers]
        self.histograms: list[torch.Tensor] | None = None  # sized by the batch, at the first step
        self.batch: int | None = None
        # member `seed`'s streams of the method: torch_generator(seed, "method", "snr", layer)
        context = MethodContext([int(seed)], device)
        self.generators = [context.generators("snr", i) for i in range(len(self.layers))]
        self.steps = 0
        self.last_reset = 0
        self._fired: list[tuple[torch.Tensor, int] | None] = [None] * len(self.layers)
        self._handles = [relu.register_forward_hook(self._capture(i)) for i, relu in enumerate(relus)]

    def _state_device(self) -> torch.device:
        return self.max_age.device

    def _capture(self, i: int):
        conv = self.layers[i].is_conv

        def hook(module, inputs, output):
            if torch.is_grad_enabled():
                h = output.detach()
                # a member dimension of 1; any leading dims of a Linear's input are batch
                h = h.reshape(1, -1, *h.shape[-3:]) if conv else h.reshape(1, -1, h.shape[-1])
                self._fired[i] = (fired(h), h.shape[1])
        return hook

    @torch.no_grad()
    def step(self) -> None:
        """Age or record every unit from the latest training forward pass, reset the units past
        their threshold (their number is in :attr:`last_reset`), adapt on schedule."""
        check_layers_current(self.layers, "SNR")
        if any(f is None for f in self._fired):
            raise RuntimeError("SNR.step(): no training forward pass since the last step; call it "
                               "once after each optimizer.step()")
        batch = self._fired[0][1]
        if self.histograms is None:
            self.batch = batch
            self.histograms = empty_histograms(self.layers, 1, batch, self.max_age, self.max_age.device)
            self.thresholds = [t.clamp(min=float(batch)) for t in self.thresholds]
        elif batch != self.batch:
            raise ValueError(f"SNR: the batch size changed from {self.batch} to {batch}")
        for i, (fire, _) in enumerate(self._fired):
            self.ages[i] = observe_firing(self.histograms[i], self.ages[i], fire, self.batch, self.max_age)
        self.last_reset = int(reset_silent_units(self.layers, self.ages, self.thresholds, self.histograms,
                                                 self.batch, self.max_age,
                                                 generator_draws(self.layers, self.init, self.generators),
                                                 self.optimizer)[0])
        self.steps += 1
        if self.steps % self.adapt_period == 0:
            member = torch.ones(1, 1, dtype=torch.bool, device=self.max_age.device)
            adapt_thresholds(self.histograms, self.thresholds, member, self.percentile, self.growth,
                             self.batch, self.max_age)
        self._fired = [None] * len(self.layers)

    def remove(self) -> None:
        """Remove the forward hooks."""
        for handle in self._handles:
            handle.remove()


class HareTortoise(NamedState):
    """Hare & Tortoise: ``model`` is the hare (trained, predicting); :attr:`tortoise` is a copy
    (no gradients) that follows it, θ_t ← m·θ_t + (1 − m)·θ_h, at every :meth:`step`; every
    ``reset_period`` steps the hare is set to a copy of the tortoise. The optimizer's state is
    left as it is. Only parameters are averaged (buffers such as BatchNorm statistics are the
    copy's own). Evaluate ``ht.tortoise(x)`` under ``torch.no_grad()`` for the tortoise's
    predictions (the copy carries the model's forward hooks, e.g. an :class:`SNR`'s, which
    ignore passes without gradients). Its state: the tortoise's (parameters and buffers) and
    the steps counted toward the reset period.
    """

    state_attributes = ("tortoise", "steps")
    device_attributes = ("momentum",)

    def __init__(self, model: nn.Module, momentum: float = 0.999, reset_period: int = 1000):
        if not 0 <= momentum <= 1 or int(reset_period) < 1:
            raise ValueError(f"HareTortoise: need 0 <= momentum m <= 1 and reset_period >= 1 step, "
                             f"got {momentum}, {reset_period}")
        self.hare = list(model.parameters())
        self.tortoise = copy.deepcopy(model).requires_grad_(False)
        for p in self.tortoise.parameters():
            p.grad = None
        self.momentum = torch.tensor([float(momentum)], device=self.hare[0].device)
        self.reset_period = int(reset_period)
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        """θ_t ← m·θ_t + (1 − m)·θ_h; on every ``reset_period``-th step then θ_h ← θ_t."""
        self._follow(self.hare[0].device)
        hare = [_member(p) for p in self.hare]
        tortoise = [_member(p) for p in self.tortoise.parameters()]
        follow_hare_(tortoise, hare, self.momentum)
        self.steps += 1
        due = due_members([self.reset_period], self.steps)
        if any(due):
            reset_hare_(hare, tortoise, due)


class UPGD(torch.optim.Optimizer):
    """Utility-based perturbed gradient descent as a ``torch.optim.Optimizer``.

    Per weight, u = −g⊙w, ū ← β·ū + (1 − β)·u, η = max of ū over **every** parameter of every
    group, s = sigmoid((ū/(1 − βᵗ))/η) (s = 0 when η ≤ 0), ξ ~ N(0, σ²) fresh per weight:

    - ``protecting=True``: w ← (1 − αλ)·w − α·(g + ξ)⊙(1 − s);
    - ``protecting=False``: w ← (1 − αλ)·w − α·(g + ξ⊙(1 − s)).

    α (``lr``), β, σ and λ (``weight_decay``, decoupled) may differ between parameter groups;
    t counts each parameter's own steps (a parameter without a gradient is skipped). The noise
    comes from torch's global generator, or from ``generator`` (one draw per step for all
    parameters, in order — plasticlab's member streams use this). Same functions as the
    engine's ``--optimizer upgd`` / ``upgd_nonprotecting`` (:mod:`plasticlab.optim.upgd`),
    whose reference values are α 0.01, β 0.9999, σ 0.1, λ 0.01 (non-protecting: α 1e-3,
    β 0.9), chosen by the reference for batch size 1.
    """

    def __init__(self, params: Iterable, lr: float = 1e-2, beta: float = 0.9999, sigma: float = 0.1,
                 weight_decay: float = 0.01, protecting: bool = True,
                 generator: torch.Generator | None = None):
        if not lr > 0:
            raise ValueError(f"UPGD step size lr must be > 0, got {lr}")
        if not 0 <= beta < 1 or not sigma >= 0 or not weight_decay >= 0:
            raise ValueError(f"UPGD needs 0 <= beta < 1, sigma >= 0, weight_decay >= 0; got beta "
                             f"{beta}, sigma {sigma}, weight_decay {weight_decay}")
        super().__init__(params, {"lr": lr, "beta": beta, "sigma": sigma, "weight_decay": weight_decay})
        self.protecting = bool(protecting)
        self.generator = generator

    def state_dict(self) -> dict:
        """``torch.optim.Optimizer.state_dict()`` and, given one, the ``generator``'s state, so a
        resumed run draws the noise it would have drawn."""
        state = super().state_dict()
        return state if self.generator is None else {**state, "generator": self.generator.get_state()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore :meth:`state_dict`'s output; with a generator of its own this UPGD needs the
        saved generator's state, without one it refuses a state that holds one."""
        if not isinstance(state_dict, dict):
            raise ValueError(f"UPGD.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        state_dict = dict(state_dict)
        saved = state_dict.pop("generator", None)
        if (saved is None) != (self.generator is None):
            raise ValueError("UPGD.load_state_dict: the state was saved by a UPGD "
                             f"{'without' if saved is None else 'with'} a generator and this one has "
                             f"{'one' if saved is None else 'none'}: build it as the saved one was")
        check_keys("UPGD", state_dict, ("state", "param_groups"))
        super().load_state_dict(state_dict)
        if saved is not None:
            self.generator.set_state(saved)

    def _noise(self, params: list[torch.Tensor]) -> list[torch.Tensor]:
        """N(0, 1) shaped like each of ``params`` (σ is applied per group)."""
        if self.generator is None:
            return [torch.randn_like(p) for p in params]
        ref = params[0]
        flat = torch.randn(sum(p.numel() for p in params), generator=self.generator,
                           device=ref.device, dtype=ref.dtype)
        return [t.view_as(p) for t, p in zip(flat.split([p.numel() for p in params]), params, strict=True)]

    @torch.no_grad()
    def step(self, closure=None):
        """One UPGD update of every parameter with a gradient; ``closure`` as torch's."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = [(g, [p for p in g["params"] if p.grad is not None]) for g in self.param_groups]
        active = [p for _, ps in groups for p in ps]
        if not active:
            return loss
        for group, ps in groups:
            for p in ps:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["utility"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
            trace_utility_([self.state[p]["utility"] for p in ps], ps, [p.grad for p in ps], group["beta"])
        eta = utility_max([self.state[p]["utility"] for p in active], member_dim=False)
        noise = iter(self._noise(active))
        for group, ps in groups:
            for p in ps:
                state = self.state[p]
                s = scaled_utility([state["utility"]], state["step"], group["beta"], False, eta=eta)[0]
                perturbed_update_(p, p.grad, s, next(noise) * group["sigma"], group["lr"],
                                  group["weight_decay"], self.protecting)
        return loss


class WeightClip(NamedState):
    """Weight Clipping: :meth:`step`, after every ``optimizer.step()``, clips every weight and bias
    of every ``nn.Linear``/``nn.Conv2d`` (the output layer included) to ±κ·s_ℓ, s_ℓ the bound of
    the layer's init distribution under ``init`` (``torch_default``, PyTorch's own: 1/√fan_in;
    a normal scheme: √3·σ) — what the engine's ``weight_clip`` computes. No state (the bounds
    come from the layers' shapes; ``state_dict()`` is empty)."""

    device_attributes = ("bounds",)

    def __init__(self, model: nn.Module, kappa: float = 2.0, *, init: str = "torch_default"):
        if not kappa > 0:
            raise ValueError(f"WeightClip: kappa κ must be > 0, got {kappa}")
        self.params, self.bounds = [], []
        for layer in _affine_modules(model, "WeightClip"):
            s = float(kappa) * init_bound(init, *_fans(layer))
            for p in (layer.weight, layer.bias):
                if p is not None:
                    self.params.append(p)
                    self.bounds.append(torch.full((1,) * (p.dim() + 1), s, dtype=p.dtype, device=p.device))

    @torch.no_grad()
    def step(self) -> None:
        """θ ← clip(θ, −κ·s_ℓ, κ·s_ℓ) for every clipped weight and bias."""
        self._follow(self.params[0].device)
        for p, bound in zip(self.params, self.bounds, strict=True):
            clip_(_member(p), bound)


class NormalizeProject(NamedState):
    """Normalize-and-Project's projection for a model that already has its normalization layers
    (NaP puts an ``nn.LayerNorm`` before every nonlinearity): :meth:`step`, after every
    ``optimizer.step()``, rescales every ``nn.Linear``/``nn.Conv2d`` weight (the output layer
    included; biases left alone) back to its norm at construction, and each ``nn.LayerNorm``'s
    (weight, bias) jointly back to theirs — what the engine's ``normalize_project`` computes.
    Its state: those norms at construction."""

    state_attributes = ("initial_norms",)

    def __init__(self, model: nn.Module):
        norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm) and m.weight is not None]
        if not norms:
            raise ValueError("NormalizeProject: the model has no nn.LayerNorm with a learned scale; "
                             "NaP normalizes before every nonlinearity: add nn.LayerNorm layers first")
        self.groups = ([[layer.weight] for layer in _affine_modules(model, "NormalizeProject")]
                       + [[t for t in (n.weight, n.bias) if t is not None] for n in norms])
        with torch.no_grad():
            self.initial_norms = [joint_norm([_member(t) for t in group]) for group in self.groups]

    @torch.no_grad()
    def step(self) -> None:
        """Project every weight, and every LayerNorm's (weight, bias), onto its initial norm."""
        self._follow(self.groups[0][0].device)
        for group, target in zip(self.groups, self.initial_norms, strict=True):
            project_to_norm_([_member(t) for t in group], target)


class Spectral(NamedState):
    """Spectral regularization, λ·Σ_ℓ [(σ_max(W_ℓ)^k − 1)² + ‖b_ℓ‖^{2k}] over every
    ``nn.Linear``/``nn.Conv2d`` (the output layer included; a conv filter bank is
    out × in·kh·kw). Each call ``reg()`` runs ``power_iterations`` rounds of power iteration
    from the kept left vectors (drawn first from the stream of member ``seed``) and returns the
    penalty, a differentiable scalar whose gradient is what the engine's ``spectral`` adds —
    so call it once per step. Its state: the power iteration's vectors."""

    state_attributes = ("u",)

    def __init__(self, model: nn.Module, strength: float = 1e-3, exponent: float = 2.0,
                 power_iterations: int = 1, *, seed: int = 0):
        if not strength >= 0 or not exponent >= 1 or int(power_iterations) < 1:
            raise ValueError(f"Spectral: need strength λ >= 0, exponent k >= 1 and power_iterations "
                             f">= 1, got {strength}, {exponent}, {power_iterations}")
        layers = _affine_modules(model, "Spectral")
        self.weights = [layer.weight for layer in layers]
        self.biases = [layer.bias for layer in layers if layer.bias is not None]
        self.strength, self.exponent, self.iters = float(strength), float(exponent), int(power_iterations)
        # member `seed`'s stream of the method: torch_generator(seed, "method", "spectral")
        generator = MethodContext([int(seed)], torch.device("cpu")).generators("spectral")
        self.u = [initial_vectors(w.shape[0], generator, w) for w in self.weights]

    def __call__(self) -> torch.Tensor:
        """Advance the power iteration one step's worth, then the penalty (a scalar)."""
        self._follow(self.weights[0].device)
        vectors = []
        with torch.no_grad():
            for i, w in enumerate(self.weights):
                u, v, _ = power_iteration(as_matrices(_member(w)), self.u[i], self.iters)
                self.u[i] = u
                vectors.append((u, v))
        return spectral_penalty([_member(w) for w in self.weights], [_member(b) for b in self.biases],
                                vectors, self.strength, self.exponent)[0]
