"""UPGD: utility-based perturbed gradient descent (Elsayed & Mahmood, ICLR 2024; SPEC §10).

An optimizer that protects useful weights and perturbs the others. Per weight, the utility
u = −g⊙w (a first-order estimate of how much the loss would rise if the weight were removed)
is traced with an exponential average, and scaled against the member's largest trace:

    ū ← β·ū + (1 − β)·u,      η = max over every weight of the member of ū,
    s = sigmoid( (ū / (1 − βᵗ)) / η ),      ξ ~ N(0, σ²) fresh per weight and step.

*Protecting* UPGD (``upgd``) scales the whole perturbed step by 1 − s, so useful weights
(s → 1) hardly move and useless ones take gradient and noise:

    w ← (1 − αλ)·w − α·(g + ξ)⊙(1 − s);

*non-protecting* UPGD (``upgd_nonprotecting``) scales only the noise:

    w ← (1 − αλ)·w − α·(g + ξ⊙(1 − s)).

η has no bias correction (as in the reference). When η ≤ 0 no weight of the member has a
positive utility: nothing is protected there (s = 0) rather than dividing by a non-positive
number. Reference values (input-permuted MNIST): α 0.01, β 0.9999, σ 0.1, λ 0.01;
non-protecting α 1e-3, β 0.9 (σ and λ as protecting). The reference trains on one example per
step (batch size 1, a new permutation every 5000 steps); on the mean gradient of a batch of B
each example moves the weights B times less at the same α, so the reference α is no guide at
batch 16. Non-protecting UPGD's gradient step is exactly SGD's (only the noise is scaled): at
a given α it learns as fast as SGD at that α.

On stacked ensemble parameters (``member_dim=True``) η is each member's own maximum, s is taken
member by member and each member's noise comes from its own generator, so member k equals seed
k alone. With ``draws="philox"`` ξ is drawn instead with Philox-4x32-10 on the parameters'
device (:mod:`plasticlab.philox`) for every member and tensor at once: tensor i's from the
stream ``optimizer/NAME/i`` of the member's seed, counted by the update t — other numbers, no
draw member by member, member k still seed k alone. The rule's steps
are functions (:func:`trace_utility_`, :func:`utility_max`, :func:`scaled_utility`,
:func:`perturbed_update_`) that the ``torch.optim.Optimizer`` drop-in
:class:`plasticlab.dropin_field.UPGD` shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch

from .. import philox
from ..params import Param
from .stacked import StackedOptimizer


def trace_utility_(utilities: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
                   grads: Sequence[torch.Tensor], beta: float) -> None:
    """ū ← β·ū + (1 − β)·u with u = −g⊙w, in place, for every tensor."""
    for u, p, g in zip(utilities, params, grads, strict=True):
        u.mul_(beta).add_(-g * p, alpha=1 - beta)


def utility_max(utilities: Sequence[torch.Tensor], member_dim: bool) -> torch.Tensor:
    """η = the max of ū over all tensors (no bias correction); ``[K]`` with ``member_dim``."""
    if member_dim:
        return torch.stack([u.flatten(1).amax(dim=1) for u in utilities]).amax(dim=0)
    return torch.stack([u.amax() for u in utilities]).amax()


def scaled_utility(utilities: Sequence[torch.Tensor], step: int, beta: float,
                   member_dim: bool, eta: torch.Tensor | None = None) -> list[torch.Tensor]:
    """s = sigmoid((ū/(1−βᵗ))/η) for every tensor, η the max of ū over all tensors (per member
    with ``member_dim``) unless given; s = 0 where η ≤ 0."""
    if eta is None:
        eta = utility_max(utilities, member_dim)
    positive = eta > 0
    safe = torch.where(positive, eta, torch.ones_like(eta))
    correction = 1 - beta ** step
    out = []
    for u in utilities:
        shape = (-1, *([1] * (u.dim() - 1))) if member_dim else ()
        s = u / correction / safe.view(shape)
        if member_dim:
            # Member by member: sigmoid's vector loop rounds a slab's last elements differently
            # by where the slab sits in a whole [K, …] tensor, so member k would depend on K.
            for s_k in s.unbind(0):
                s_k.sigmoid_()
        else:
            s.sigmoid_()
        out.append(torch.where(positive.view(shape), s, 0.0))
    return out


def perturbed_update_(param: torch.Tensor, grad: torch.Tensor, scale: torch.Tensor,
                      noise: torch.Tensor, lr: float, weight_decay: float, protecting: bool) -> None:
    """w ← (1 − αλ)·w − α·(g + ξ)⊙(1 − s) (protecting) or w ← (1 − αλ)·w − α·(g + ξ⊙(1 − s))
    (non-protecting), in place; ``noise`` is ξ, already σ-scaled."""
    keep = 1 - scale
    update = (grad + noise) * keep if protecting else grad + noise * keep
    param.mul_(1 - lr * weight_decay).add_(update, alpha=-lr)


BETA = Param("beta", 0.9999, float, "β: decay of the utility trace", low=0.0, high=1.0, high_open=True)
SIGMA = Param("sigma", 0.1, float, "σ: standard deviation of the perturbation ξ", low=0.0)
WEIGHT_DECAY = Param("weight_decay", 0.01, float, "λ: weight decay, w ← (1 − αλ)·w", low=0.0)


class UPGD(StackedOptimizer):
    """Protecting UPGD over a list of tensors whose gradients are in ``.grad``.

    ``member_dim`` (default): the parameters are stacked ensemble members ``[K, …]``, each with
    its own η; ``False``: one run. ``generators``: one per member (or one in all) for the noise
    ξ; without them torch's global generator is used. Parameters without a gradient are skipped.
    """

    protecting: ClassVar[bool] = True
    draws_noise: ClassVar[bool] = True
    name: ClassVar[str] = "upgd"
    title: ClassVar[str] = "UPGD"
    hyperparameters: ClassVar[tuple[Param, ...]] = (BETA, SIGMA, WEIGHT_DECAY,
                                                    philox.draws_param("its noise ξ"))

    def __init__(self, params: Sequence[torch.Tensor], lr: float, beta: float = 0.9999,
                 sigma: float = 0.1, weight_decay: float = 0.01, member_dim: bool = True,
                 generators: Sequence[torch.Generator] | None = None, draws: str = "generator",
                 seeds: Sequence[int] | None = None):
        if not isinstance(lr, int | float):
            raise ValueError(f"UPGD takes one step size for all members, got lr={lr}: train "
                             "each step size as its own ensemble")
        if not lr > 0:
            raise ValueError(f"UPGD step size lr must be > 0, got {lr}")
        if not 0 <= beta < 1 or not sigma >= 0 or not weight_decay >= 0:
            raise ValueError(f"UPGD needs 0 <= beta < 1, sigma >= 0, weight_decay >= 0; got beta "
                             f"{beta}, sigma {sigma}, weight_decay {weight_decay}")
        self.params = list(params)
        self.lr, self.beta = float(lr), float(beta)
        self.sigma, self.weight_decay = float(sigma), float(weight_decay)
        self.member_dim = bool(member_dim)
        self.generators = list(generators) if generators is not None else None
        members = self.params[0].shape[0] if self.member_dim and self.params else 1
        if self.generators is not None and len(self.generators) != members:
            raise ValueError(f"UPGD needs one generator per member ({members}), got {len(self.generators)}")
        self.utility = [torch.zeros_like(p) for p in self.params]
        self.step_count = 0
        if draws not in philox.DRAWS:
            raise ValueError(f"UPGD draws must be one of {', '.join(philox.DRAWS)}, got {draws!r}")
        self.keys = None  # with Philox: [K, tensors, 2], tensor i's stream of each member's seed
        if draws == "philox":
            if seeds is None or len(seeds) != members:
                raise ValueError(f"UPGD with draws='philox' needs one seed per member ({members}), "
                                 f"got {seeds}")
            device = self.params[0].device
            self.keys = torch.stack([philox.member_keys(seeds, f"optimizer/{self.name}/{i}", device)
                                     for i in range(len(self.params))], dim=1)
            # the update t, on the device: set without waiting on it
            self.counter = torch.zeros((), dtype=torch.int64, device=device)

    def noise(self, params: Sequence[torch.Tensor], active: Sequence[int] | None = None
              ) -> list[torch.Tensor]:
        """σ·N(0, 1) shaped like each of ``params``; member k's from its own generator, one draw
        of all its weights at once — or, with Philox, every member's and tensor's in one draw
        (``active``: the indices of ``params`` among the optimizer's tensors, for their streams)."""
        if self.keys is not None:
            self.counter.fill_(self.step_count)
            rows = list(range(len(params))) if active is None else list(active)
            shapes = [p.shape[1:] if self.member_dim else p.shape for p in params]
            drawn = philox.normal_streams(self.keys[:, rows], self.counter, shapes)
            return [z.reshape(p.shape) * self.sigma for z, p in zip(drawn, params, strict=True)]
        if self.generators is None:
            return [torch.randn_like(p) * self.sigma for p in params]
        ref = params[0]
        if not self.member_dim:
            flat = torch.randn(sum(p.numel() for p in params), generator=self.generators[0],
                               device=ref.device, dtype=ref.dtype)
            return [t.view_as(p) * self.sigma for t, p in zip(flat.split([p.numel() for p in params]),
                                                                 params, strict=True)]
        sizes = [p[0].numel() for p in params]
        flat = torch.stack([torch.randn(sum(sizes), generator=g, device=ref.device, dtype=ref.dtype)
                            for g in self.generators])
        return [t.reshape(p.shape) * self.sigma
                for t, p in zip(flat.split(sizes, dim=1), params, strict=True)]

    @torch.no_grad()
    def step(self) -> None:
        """One UPGD update of every parameter with a gradient."""
        if self.params:
            self.check_state_current(self.utility[0])
        active = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not active:
            return
        self.step_count += 1
        params = [self.params[i] for i in active]
        utilities = [self.utility[i] for i in active]
        trace_utility_(utilities, params, [p.grad for p in params], self.beta)
        scales = scaled_utility(utilities, self.step_count, self.beta, self.member_dim)
        for p, s, xi in zip(params, scales, self.noise(params, active), strict=True):
            perturbed_update_(p, p.grad, s, xi, self.lr, self.weight_decay, self.protecting)

    @torch.no_grad()
    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Restart the utility trace of parameter ``index`` where ``mask`` is true (a reset
        weight has no history). The bias correction is one count for all weights, so a
        restarted trace is corrected by the global count: it reads as 0 until it rebuilds."""
        self.utility[index].masked_fill_(mask.expand_as(self.params[index]), 0.0)

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly (for checkpoints)."""
        return {"lr": self.lr, "beta": self.beta, "sigma": self.sigma, "weight_decay": self.weight_decay,
                "step_count": self.step_count, "utility": [u.clone() for u in self.utility],
                "generators": None if self.generators is None else [g.get_state() for g in self.generators]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (generators' states included)."""
        self.lr, self.beta, self.sigma = state["lr"], state["beta"], state["sigma"]
        self.weight_decay, self.step_count = state["weight_decay"], state["step_count"]
        for dst, src in zip(self.utility, state["utility"], strict=True):
            dst.copy_(src)
        if self.generators is not None and state.get("generators") is not None:
            for g, s in zip(self.generators, state["generators"], strict=True):
                g.set_state(s)


class NonprotectingUPGD(UPGD):
    """Non-protecting UPGD: only the noise is scaled by 1 − s."""

    protecting = False
    name = "upgd_nonprotecting"
    title = "non-protecting UPGD"
