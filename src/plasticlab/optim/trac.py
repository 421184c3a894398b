"""TRAC: a parameter-free scale on a base optimizer's updates (Muppidi, Zhang & Yang, "Fast TRAC:
A Parameter-Free Optimizer for Lifelong Reinforcement Learning", NeurIPS 2024; reference code
``ComputationalRobotics/TRAC``, ``package/src/trac_optimizer/trac.py``, which
RLE-Foundation/Plasticine ships as ``plasticine/trac.py``).

The base optimizer (Adam) runs as usual on its own iterate x, the displacement from the
parameters θ_ref of the first step; the network plays θ = θ_ref + max(S, 0)·x, one scale S per
run tuned online by n one-dimensional "erfi" tuners, one per discount factor β_j ∈ {0.9, 0.99,
…, 0.999999}. At step t, with the gradient g_t taken at θ_t and the base's update u_t:

    h_t = ⟨x_t, g_t⟩                                     the tuners' 1-D gradient
    v_j ← β_j²·v_j + h_t²,   σ_j ← β_j·σ_j − h_t
    s_j = s_init / erfi(1/√2) · erfi(σ_j / (√2·√v_j + ε)),   S_t = Σ_j s_j
    x_{t+1} = x_t + u_t,     θ_{t+1} = θ_ref + max(S_t, 0) · x_{t+1}

with x = 0, s_j = 0, v_j = 0 and σ_j = 10⁻⁸ at the start (so the first S is positive), s_init =
ε = 10⁻⁸ — the reference code's values. S shrinks when recent gradients point along the
displacement (h > 0: moving further out raises the loss) and grows when they point back: the
paper's adaptive regularization toward θ_ref.

``iterate``: ``kept`` (the default) keeps x as a tensor of its own (the base Adam steps it);
``recovered`` is the reference code's arithmetic, which stores no x and recovers it at every
step as x_t = (θ_t − θ_ref)/(S_{t−1} + ε). That shrinks x by S/(S + ε) per step while S is near
ε, and once the played scale is 0 (S ≤ 0: θ = θ_ref) it gives x_t = 0 and h = 0 at every later
step, so σ only decays and S never turns positive again — the run stays at θ_ref for good
(tests/test_toolkit_trac.py). With a kept x, what a method writes into the parameters between
steps moves θ_ref by the write (:func:`absorb_writes_`), where the reference's division folds
it into x. The played scale is clipped at 0 as in the PyTorch code (its JAX port does not clip,
and starts every s_j at s_init). The tuners run in float64 (float32 in the reference) with an
erfi of plasticlab's own (torch has none), which overflows beyond ≈ 26.6 (≈ 9.4 in float32),
as the reference's does.

On stacked ensemble parameters each member has its own θ_ref, x, tuners and S, and its h is a
sum over its own slabs only; the base Adam takes one step size for all members or one each.
The rule's steps are functions (:func:`erfi`, :func:`tune_`, :func:`inner_products`,
:func:`play_`, :func:`absorb_writes_`, :func:`recover_iterate_`, held together by
:class:`TracCore`) that the drop-in :class:`TRACWrapper`, for any ``torch.optim`` optimizer,
shares.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import torch

from ..params import Param
from .adam import Adam
from .stacked import StackedOptimizer, per_member

BETAS = (0.9, 0.99, 0.999, 0.9999, 0.99999, 0.999999)
"""The tuners' discount factors β_j (the reference's)."""

SIGMA_START = 1e-8
"""σ_j before the first step: the reference's constant. With σ = 0 the first S would be 0, every
later x_t = 0/ε = 0, and the run would never leave θ_ref."""

# erfi, evaluated as a power series below ERFI_SWITCH and asymptotically above: with these term
# counts both reach float64 rounding (tests/test_toolkit_trac.py checks against scipy).
ERFI_SWITCH = 7.0
_SERIES_TERMS = 160
_ASYMPTOTIC_TERMS = 30


_ERFI_CONSTANTS: dict[torch.device, tuple[torch.Tensor, ...]] = {}


def _erfi_constants(device: torch.device) -> tuple[torch.Tensor, ...]:
    """The series' 2n + 1 and log(n!·(2n + 1)), the asymptotic terms' k and log((2k−1)!!),
    float64 on ``device`` (computed once per device)."""
    if device not in _ERFI_CONSTANTS:
        n = torch.arange(_SERIES_TERMS, dtype=torch.float64, device=device)
        k = torch.arange(_ASYMPTOTIC_TERMS, dtype=torch.float64, device=device)
        # (2k−1)!! = (2k)!/(2ᵏ k!), as a log so no factorial overflows
        _ERFI_CONSTANTS[device] = (2 * n + 1, torch.lgamma(n + 1) + torch.log(2 * n + 1), k,
                                   torch.lgamma(2 * k + 1) - k * math.log(2) - torch.lgamma(k + 1))
    return _ERFI_CONSTANTS[device]


def erfi(x: torch.Tensor) -> torch.Tensor:
    """The imaginary error function erfi(x) = −i·erf(ix) = (2/√π)∫₀ˣ e^{t²} dt, elementwise, in
    float64: the series (2/√π) Σₙ |x|^{2n+1}/(n!(2n+1)) below |x| = 7 (every term of one sign,
    so nothing cancels), the asymptotic e^{x²}/(|x|√π) Σₖ (2k−1)!!/(2x²)ᵏ above; odd in x."""
    x = x.to(torch.float64)
    odd, log_series, k, log_double_factorial = _erfi_constants(x.device)
    a = x.abs()
    small = a < ERFI_SWITCH
    t = torch.where(small, a, 0.0).unsqueeze(-1)
    # log(0) = −inf makes every term of erfi(0) exactly 0
    series = torch.exp(odd * torch.log(t) - log_series).sum(-1) * (2 / math.sqrt(math.pi))
    u = torch.where(small, ERFI_SWITCH, a)
    terms = torch.exp(log_double_factorial - k * torch.log(2 * u * u).unsqueeze(-1)).sum(-1)
    asymptotic = torch.exp(u * u) / (u * math.sqrt(math.pi)) * terms
    return torch.sign(x) * torch.where(small, series, asymptotic)


def _erfi_of(x: float, terms: int = 40) -> float:
    """erfi(x) of a Python number by the series (for the constant erfi(1/√2), |x| < 1)."""
    return 2 / math.sqrt(math.pi) * sum(x ** (2 * n + 1) / (math.factorial(n) * (2 * n + 1))
                                        for n in range(terms))


ERFI_AT_ONE_OVER_SQRT2 = _erfi_of(1 / math.sqrt(2))
"""erfi(1/√2), the tuners' normaliser: s_j = s_init when σ_j/√(2v_j) = 1."""


ERFI_LANES = 16
"""erfi's arguments per member, padded: 16 float64 (128 bytes, two AVX-512 vectors), so the
vector loops of exp and log treat every member's values alike whatever K (module-level note in
:func:`tune_`)."""


def tune_(s: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, h: torch.Tensor,
          betas: torch.Tensor, s_init: float, eps: float) -> None:
    """One step of the erfi tuners, in place, for ``[K, n]`` states and each member's 1-D
    gradient h ``[K]``: v_j ← β_j²v_j + h², σ_j ← β_jσ_j − h, s_j = s_init/erfi(1/√2)·
    erfi(σ_j/(√2·√v_j + ε)).

    erfi's exp and log run a vector loop and finish a tensor's last elements in a scalar one that
    rounds differently: over a ``[K, n]`` tensor, which of member k's values land there would
    depend on K. Each member's n arguments are padded to :data:`ERFI_LANES` (all of erfi's
    per-member blocks are then whole vectors, none in a tail), so member k's s is the same to
    the bit in any ensemble — one call for all members, not K."""
    v.mul_(betas * betas).add_(h.square().unsqueeze(1))
    sigma.mul_(betas).sub_(h.unsqueeze(1))
    members, n = s.shape
    if n > ERFI_LANES:
        raise ValueError(f"TRAC takes at most {ERFI_LANES} discount factors, got {n}")
    arguments = torch.zeros(members, ERFI_LANES, dtype=torch.float64, device=s.device)
    arguments[:, :n] = sigma / (math.sqrt(2) * v.sqrt() + eps)
    s.copy_(s_init / ERFI_AT_ONE_OVER_SQRT2 * erfi(arguments)[:, :n])


class TuneState:
    """The n tuners of each of K members: s, v, σ ``[K, n]`` (float64) and β ``[n]``."""

    def __init__(self, members: int, device: torch.device, betas: Sequence[float] = BETAS):
        self.betas = torch.tensor(list(betas), dtype=torch.float64, device=device)
        self.s = torch.zeros(members, len(betas), dtype=torch.float64, device=device)
        self.v = torch.zeros_like(self.s)
        self.sigma = torch.full_like(self.s, SIGMA_START)

    def scale(self) -> torch.Tensor:
        """The played scale max(S, 0) per member, ``[K]``."""
        return self.s.sum(1).clamp(min=0)

    def state_dict(self) -> dict:
        """The tuners' tensors, for checkpoints."""
        return {"s": self.s.clone(), "v": self.v.clone(), "sigma": self.sigma.clone()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        for name in ("s", "v", "sigma"):
            getattr(self, name).copy_(state[name])


def recover_iterate_(out: Sequence[torch.Tensor], before: Sequence[torch.Tensor],
                     reference: Sequence[torch.Tensor], tuners: TuneState, eps: float) -> None:
    """The reference code's base iterate, x_t = (θ_t − θ_ref)/(S_{t−1} + ε) with the unclipped
    S_{t−1}, written into ``out`` for stacked ``[K, …]`` tensors."""
    denominator = tuners.s.sum(1) + eps
    for x, b, r in zip(out, before, reference, strict=True):
        torch.sub(b, r, out=x).div_(per_member(denominator.to(x.dtype), x))


def inner_products(iterate: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                   scratch: Sequence[torch.Tensor]) -> torch.Tensor:
    """h_t = Σ over each member's tensors of ⟨x_t, g_t⟩, ``[K]`` (float64), for stacked
    ``[K, …]`` tensors; ``scratch``: a buffer per tensor."""
    h = torch.zeros(iterate[0].shape[0], dtype=torch.float64, device=iterate[0].device)
    for x, g, w in zip(iterate, grads, scratch, strict=True):
        h += torch.mul(x, g, out=w).flatten(1).sum(1).to(torch.float64)
    return h


def play_(params: Sequence[torch.Tensor], reference: Sequence[torch.Tensor],
          iterate: Sequence[torch.Tensor], scale: torch.Tensor) -> None:
    """θ ← θ_ref + max(S, 0)·x, in place, with the played scale ``scale`` ``[K]``."""
    for p, r, x in zip(params, reference, iterate, strict=True):
        torch.mul(x, per_member(scale.to(p.dtype), p), out=p).add_(r)


def absorb_writes_(params: Sequence[torch.Tensor], reference: Sequence[torch.Tensor],
                   iterate: Sequence[torch.Tensor], scale: torch.Tensor,
                   scratch: Sequence[torch.Tensor]) -> None:
    """With a kept iterate: θ_ref ← θ_ref + (θ_t − (θ_ref + max(S, 0)·x_t)), in place — what a
    method wrote into the parameters since TRAC's last step (a reset, a perturbation) moves the
    reference point, so the next θ = θ_ref + S·x keeps it. Nothing written: nothing changes, to
    the bit (θ_t is that very expression, rounded the same way, :func:`play_`)."""
    for p, r, x, w in zip(params, reference, iterate, scratch, strict=True):
        played = torch.mul(x, per_member(scale.to(p.dtype), p), out=w).add_(r)
        r.add_(torch.sub(p, played, out=w))


S_INIT = Param("s_init", 1e-8, float, "s_init: the tuners' initial scale (the reference's s_prev)",
               low=0.0, low_open=True)
EPS = Param("eps", 1e-8, float, "ε: added to S before dividing and to √2·√v in erfi's argument",
            low=0.0, low_open=True)
ITERATES = ("kept", "recovered")
ITERATE = Param("iterate", "kept", str, "kept: the base iterate x is a tensor of its own; "
                "recovered: x = (θ − θ_ref)/(S + ε) each step, the reference code's",
                choices=ITERATES)


class TracCore:
    """TRAC's own state for K members — θ_ref (taken at the first step), the iterate x, the
    tuners — and the parts of its step, on stacked ``[K, …]`` tensors: :meth:`prepare` before
    the base's step, :meth:`finish` after it."""

    def __init__(self, members: int, device: torch.device, s_init: float, eps: float,
                 iterate: str, iterate_tensors: Sequence[torch.Tensor] | None = None):
        if not s_init > 0 or not eps > 0:
            raise ValueError(f"TRAC needs s_init > 0 and eps > 0, got s_init {s_init}, eps {eps}")
        if iterate not in ITERATES:
            raise ValueError(f"TRAC iterate must be one of {', '.join(ITERATES)}, got {iterate!r}")
        self.s_init, self.eps, self.iterate_form = float(s_init), float(eps), iterate
        self.tuners = TuneState(members, device)
        self.reference: list[torch.Tensor] | None = None
        # x (zeros before the first step): kept from step to step, or recovered at each
        self.iterate = None if iterate_tensors is None else list(iterate_tensors)
        self._scratch: list[torch.Tensor] | None = None  # a buffer per tensor, for the whole run

    @torch.no_grad()
    def prepare(self, params: Sequence[torch.Tensor]) -> None:
        """Before the base's step from θ_t = ``params``: θ_ref ← θ_t at the first step; then
        x_t — a method's writes absorbed into θ_ref (kept), or recovered from θ_t (recovered)."""
        if self._scratch is None:
            self._scratch = [torch.empty_like(p) for p in params]
        if self.iterate is None:
            self.iterate = [torch.zeros_like(p) for p in params]
        if self.reference is None:
            self.reference = [p.clone() for p in params]
        elif self.iterate_form == "kept":
            absorb_writes_(params, self.reference, self.iterate, self.tuners.scale(), self._scratch)
        if self.iterate_form == "recovered":
            recover_iterate_(self.iterate, params, self.reference, self.tuners, self.eps)

    def inner_products(self, grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
        """h_t over the tensors with a gradient (x_t still as :meth:`prepare` left it)."""
        active = [i for i, g in enumerate(grads) if g is not None]
        return inner_products([self.iterate[i] for i in active], [grads[i] for i in active],
                              [self._scratch[i] for i in active])

    @torch.no_grad()
    def finish(self, params: Sequence[torch.Tensor], active: Sequence[int], h: torch.Tensor) -> None:
        """After the base's step has made the iterate x_t + u_t: the tuners take h_t, and the
        tensors ``active`` (those with a gradient) play θ_ref + max(S_t, 0)·x."""
        tuners = self.tuners
        tune_(tuners.s, tuners.v, tuners.sigma, h, tuners.betas, self.s_init, self.eps)
        play_([params[i] for i in active], [self.reference[i] for i in active],
              [self.iterate[i] for i in active], tuners.scale())

    def state_dict(self) -> dict:
        """TRAC's state (no θ_ref before the first step)."""
        copy = lambda seq: None if seq is None else [t.clone() for t in seq]  # noqa: E731
        return {"s_init": self.s_init, "eps": self.eps, "iterate_form": self.iterate_form,
                "tuners": self.tuners.state_dict(), "reference": copy(self.reference),
                "iterate": copy(self.iterate)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (a fresh one restarts TRAC: θ_ref is taken again
        at the next step, from x = 0); x is written into its tensors in place (a base optimizer
        may hold them)."""
        self.s_init, self.eps, self.iterate_form = state["s_init"], state["eps"], state["iterate_form"]
        self.tuners.load_state_dict(state["tuners"])
        self.reference = None if state["reference"] is None else [r.clone() for r in state["reference"]]
        saved = state["iterate"]
        if self.iterate is None:
            self.iterate = None if saved is None else [t.clone() for t in saved]
        else:
            for x, t in zip(self.iterate, saved or [torch.zeros_like(x) for x in self.iterate], strict=True):
                x.copy_(t)


class TRAC(StackedOptimizer):
    """TRAC over Adam on a list of tensors whose gradients are in ``.grad`` (module docstring).

    The base Adam steps the iterates x itself (its update u depends on the gradients alone), so
    x_t + u_t needs no copy of θ; the parameters are then θ_ref + max(S, 0)·x.
    ``member_dim`` (default): the tensors are stacked ensemble members ``[K, …]``, each with its
    own θ_ref, iterate and tuners; ``False``: one run. ``lr``: the base Adam's step size, one
    for all members or one each. ``iterate``: ``kept`` or ``recovered`` (the reference code's).
    :meth:`reset` restarts the base Adam's moments (CBP, ReDo); the tuners are the whole run's.
    """

    title = "TRAC"

    hyperparameters: ClassVar[tuple[Param, ...]] = (S_INIT, EPS, ITERATE)

    def __init__(self, params: Sequence[torch.Tensor], lr, s_init: float = 1e-8,
                 eps: float = 1e-8, iterate: str = "kept", member_dim: bool = True):
        self.params = list(params)
        if not self.params:
            raise ValueError("TRAC needs parameters to optimize")
        self.member_dim = bool(member_dim)
        self.iterates = [torch.zeros_like(p) for p in self.params]  # x, which the base Adam steps
        self.base = Adam(self.iterates, lr=lr, member_dim=member_dim)
        self.lr = self.base.lr
        members = self.params[0].shape[0] if self.member_dim else 1
        self.core = TracCore(members, self.params[0].device, s_init, eps, iterate,
                             self._stacked(self.iterates))

    def _stacked(self, tensors: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """``tensors`` with a member dimension (a one-member view for one run)."""
        if self.member_dim:
            return list(tensors)
        return [None if t is None else t.unsqueeze(0) for t in tensors]

    @torch.no_grad()
    def step(self) -> None:
        """x_t (:meth:`TracCore.prepare`), h_t, the base Adam's step on x, then the tuners and
        θ ← θ_ref + max(S, 0)·x on every tensor with a gradient."""
        self.check_state_current(self.iterates[0])
        grads = [p.grad for p in self.params]
        active = [i for i, g in enumerate(grads) if g is not None]
        if not active:
            return
        params = self._stacked(self.params)
        self.core.prepare(params)
        h = self.core.inner_products(self._stacked(grads))
        for x, g in zip(self.iterates, grads, strict=True):
            x.grad = g
        try:
            self.base.step()
        finally:
            for x in self.iterates:
                x.grad = None
        self.core.finish(params, active, h)

    def scale(self) -> torch.Tensor:
        """The scale max(S, 0) each member plays now, ``[K]``."""
        return self.core.tuners.scale()

    def reset(self, index: int, mask: torch.Tensor, restart_count: bool = True) -> None:
        """Restart the base Adam's state of parameter ``index`` where ``mask`` is true."""
        self.base.reset(index, mask, restart_count=restart_count)

    def state_dict(self) -> dict:
        """Everything needed to continue training exactly (for checkpoints)."""
        return {"base": self.base.state_dict(), "trac": self.core.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.base.load_state_dict(state["base"])
        self.lr = self.base.lr
        self.core.load_state_dict(state["trac"])


class TRACWrapper:
    """TRAC around any ``torch.optim`` optimizer, for a plain PyTorch model::

        optimizer = TRACWrapper(torch.optim.Adam(model.parameters(), lr=1e-3))
        loss.backward(); optimizer.step(); optimizer.zero_grad()

    The base optimizer steps as usual, then the same rule as the engine's ``--optimizer trac``
    (:class:`TracCore` on the parameters seen as a one-member ensemble): one scale S for all of
    the base's parameters, θ_ref their values at the first step. :meth:`scale` is the S played
    now."""

    def __init__(self, base: torch.optim.Optimizer, s_init: float = 1e-8, eps: float = 1e-8,
                 iterate: str = "kept"):
        self.base = base
        self.params = [p for group in base.param_groups for p in group["params"]]
        if not self.params:
            raise ValueError("TRACWrapper: the base optimizer has no parameters")
        self.core = TracCore(1, self.params[0].device, s_init, eps, iterate)
        self._before: list[torch.Tensor] | None = None  # θ_t, rewritten at every step

    @property
    def param_groups(self) -> list[dict]:
        """The base optimizer's parameter groups."""
        return self.base.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The base optimizer's ``zero_grad``."""
        self.base.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """The base's step (``closure`` as torch's), then TRAC's; returns the closure's loss.
        The base moves θ here, so x advances by its move θ_after − θ_t."""
        core = self.core
        params = [p.detach().unsqueeze(0) for p in self.params]
        core.prepare(params)
        with torch.no_grad():
            if self._before is None:
                self._before = [torch.empty_like(p) for p in params]
            for b, p in zip(self._before, params, strict=True):
                b.copy_(p)
        loss = self.base.step(closure)  # torch's step runs a closure with gradients on
        with torch.no_grad():
            grads = [None if p.grad is None else p.grad.unsqueeze(0) for p in self.params]
            h = core.inner_products(grads)
            active = [i for i, g in enumerate(grads) if g is not None]
            for i in active:
                core.iterate[i].add_(params[i] - self._before[i])
            core.finish(params, active, h)
        return loss

    def scale(self) -> float:
        """The scale max(S, 0) played now."""
        return float(self.core.tuners.scale()[0])

    def state_dict(self) -> dict:
        """The base's state and TRAC's (θ_ref in the order of the base's parameters)."""
        return {"base": self.base.state_dict(), "trac": self.core.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.base.load_state_dict(state["base"])
        self.core.load_state_dict(state["trac"])


__all__ = ["BETAS", "ITERATES", "TRAC", "TRACWrapper", "TracCore", "TuneState", "absorb_writes_",
           "erfi", "inner_products", "play_", "recover_iterate_", "tune_"]
