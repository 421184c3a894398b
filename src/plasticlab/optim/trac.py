"""TRAC: a parameter-free scale on a base optimizer's updates (Muppidi, Zhang & Yang, "Fast TRAC:
A Parameter-Free Optimizer for Lifelong Reinforcement Learning", NeurIPS 2024; reference code
``ComputationalRobotics/TRAC``, ``package/src/trac_optimizer/trac.py``, which
RLE-Foundation/Plasticine ships as ``plasticine/trac.py``).

The base optimizer (Adam) runs as usual; TRAC keeps its iterates as a displacement x from the
parameters θ_ref at the first step and plays θ = θ_ref + S·x, with one scale S per run tuned
online by n one-dimensional "erfi" tuners, one per discount factor β_j ∈ {0.9, 0.99, …,
0.999999}. At step t, with the gradient g_t taken at θ_t and the base update u_t:

    x_t = (θ_t − θ_ref) / (S_{t−1} + ε)                 the base iterate, recovered from θ_t
    h_t = ⟨x_t, g_t⟩                                     the tuners' 1-D gradient
    v_j ← β_j²·v_j + h_t²,   σ_j ← β_j·σ_j − h_t
    s_j = s_init / erfi(1/√2) · erfi(σ_j / (√2·√v_j + ε)),   S_t = Σ_j s_j
    θ_{t+1} = θ_ref + max(S_t, 0) · (x_t + u_t)

with s_j = 0 and v_j = 0 at the start, σ_j = 10⁻⁸ (so the first S is positive and x can grow),
s_init = ε = 10⁻⁸ — the reference code's values and arithmetic. S shrinks when recent
gradients point along the displacement (h > 0: moving further out raises the loss) and grows
when they point back — the "adaptive regularization toward θ_ref" of the paper. Differences
from the paper's algorithm, in which the base optimizer keeps its own iterate: the reference
code (and plasticlab) recovers it from θ by dividing by S_{t−1} + ε, which shrinks it by
S/(S + ε) per step while S is near ε, and clips the played scale at 0 (the reference's JAX port
does not clip, and starts every s_j at s_init; plasticlab follows the PyTorch code). The tuners
run in float64 here (float32 in the reference), with an erfi of plasticlab's own (torch has
none): erfi overflows for arguments beyond ≈ 26.6 (≈ 9.4 in float32), as the reference's does.

On stacked ensemble parameters each member has its own θ_ref, tuners and S, and its h is a sum
over its own slabs only; the base Adam takes one step size for all members or one each. The
rule's steps are functions (:func:`erfi`, :func:`tune_`, :func:`trac_update_`) that the
drop-in :class:`TRACWrapper`, for any ``torch.optim`` optimizer, shares.
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


def erfi(x: torch.Tensor) -> torch.Tensor:
    """The imaginary error function erfi(x) = −i·erf(ix) = (2/√π)∫₀ˣ e^{t²} dt, elementwise, in
    float64: the series (2/√π) Σₙ |x|^{2n+1}/(n!(2n+1)) below |x| = 7 (every term of one sign,
    so nothing cancels), the asymptotic e^{x²}/(|x|√π) Σₖ (2k−1)!!/(2x²)ᵏ above; odd in x."""
    x = x.to(torch.float64)
    a = x.abs()
    small = a < ERFI_SWITCH
    n = torch.arange(_SERIES_TERMS, dtype=torch.float64, device=x.device)
    t = torch.where(small, a, torch.zeros_like(a)).unsqueeze(-1)
    # log(0) = −inf makes every term of erfi(0) exactly 0
    series = torch.exp((2 * n + 1) * torch.log(t) - torch.lgamma(n + 1) - torch.log(2 * n + 1)).sum(-1)
    series = series * (2 / math.sqrt(math.pi))
    k = torch.arange(_ASYMPTOTIC_TERMS, dtype=torch.float64, device=x.device)
    u = torch.where(small, torch.full_like(a, ERFI_SWITCH), a).unsqueeze(-1)
    # (2k−1)!! = (2k)!/(2ᵏ k!), each term as a log so no factorial overflows
    log_terms = torch.lgamma(2 * k + 1) - k * math.log(2) - torch.lgamma(k + 1) - k * torch.log(2 * u * u)
    u = u.squeeze(-1)
    asymptotic = torch.exp(u * u) / (u * math.sqrt(math.pi)) * torch.exp(log_terms).sum(-1)
    return torch.sign(x) * torch.where(small, series, asymptotic)


def _erfi_of(x: float, terms: int = 40) -> float:
    """erfi(x) of a Python number by the series (for the constant erfi(1/√2), |x| < 1)."""
    return 2 / math.sqrt(math.pi) * sum(x ** (2 * n + 1) / (math.factorial(n) * (2 * n + 1))
                                        for n in range(terms))


ERFI_AT_ONE_OVER_SQRT2 = _erfi_of(1 / math.sqrt(2))
"""erfi(1/√2), the tuners' normaliser: s_j = s_init when σ_j/√(2v_j) = 1."""


def tune_(s: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, h: torch.Tensor,
          betas: torch.Tensor, s_init: float, eps: float) -> None:
    """One step of the erfi tuners, in place, for ``[K, n]`` states and each member's 1-D
    gradient h ``[K]``: v_j ← β_j²v_j + h², σ_j ← β_jσ_j − h, s_j = s_init/erfi(1/√2)·
    erfi(σ_j/(√2·√v_j + ε)). erfi runs member by member: its vector loop would otherwise round
    an element by where it sits in a ``[K, n]`` tensor, and member k would depend on K."""
    v.mul_(betas * betas).add_(h.square().unsqueeze(1))
    sigma.mul_(betas).sub_(h.unsqueeze(1))
    scale = s_init / ERFI_AT_ONE_OVER_SQRT2
    for k in range(s.shape[0]):
        s[k] = scale * erfi(sigma[k] / (math.sqrt(2) * v[k].sqrt() + eps))


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


def trac_update_(params: Sequence[torch.Tensor], before: Sequence[torch.Tensor],
                 grads: Sequence[torch.Tensor], reference: Sequence[torch.Tensor], tuners: TuneState,
                 s_init: float, eps: float, iterate: Sequence[torch.Tensor] | None = None) -> None:
    """TRAC's step after the base optimizer's, in place, for stacked ``[K, …]`` tensors:
    ``params`` hold θ_t + u_t (the base's step from ``before`` = θ_t), ``grads`` g_t, and
    ``reference`` θ_ref. Takes the base iterate x_t — ``iterate``, kept as tensors of its own
    and advanced here to x_t + u_t, or (None) recovered as (θ_t − θ_ref)/(S_{t−1} + ε), the
    reference code's form — then h_t = Σ over the member's tensors of ⟨x_t, g_t⟩, steps the
    tuners (:func:`tune_`) and sets θ ← θ_ref + max(S_t, 0)·(x_t + u_t)."""
    if iterate is None:
        denominator = tuners.s.sum(1) + eps  # S_{t−1} + ε, the unclipped sum
        iterate = [(b - r) / per_member(denominator.to(b.dtype), b)
                   for b, r in zip(before, reference, strict=True)]
    h = torch.zeros(tuners.s.shape[0], dtype=torch.float64, device=tuners.s.device)
    for p, b, g, x in zip(params, before, grads, iterate, strict=True):
        h += (x * g).flatten(1).sum(1).to(torch.float64)
        x.add_(p - b)  # x_{t+1} = x_t + u_t
    tune_(tuners.s, tuners.v, tuners.sigma, h, tuners.betas, s_init, eps)
    scale = tuners.scale()
    for p, x, r in zip(params, iterate, reference, strict=True):
        p.copy_(r + x * per_member(scale.to(p.dtype), p))


def absorb_writes_(before: Sequence[torch.Tensor], reference: Sequence[torch.Tensor],
                   iterate: Sequence[torch.Tensor], scale: torch.Tensor) -> None:
    """With a kept iterate: θ_ref ← θ_ref + (θ_t − (θ_ref + max(S, 0)·x_t)), in place — what a
    method wrote into the parameters since TRAC's last step (a reset, a perturbation) moves the
    reference point, so the next θ = θ_ref + S·x keeps it. Nothing written: nothing changes, to
    the bit (θ_t is that very expression)."""
    for b, r, x in zip(before, reference, iterate, strict=True):
        r.add_(b - (r + x * per_member(scale.to(b.dtype), b)))


S_INIT = Param("s_init", 1e-8, float, "s_init: the tuners' initial scale (the reference's s_prev)",
               low=0.0, low_open=True)
EPS = Param("eps", 1e-8, float, "ε: added to S before dividing and to √2·√v in erfi's argument",
            low=0.0, low_open=True)
ITERATES = ("kept", "recovered")
ITERATE = Param("iterate", "kept", str, "kept: the base iterate x is a tensor of its own; "
                "recovered: x = (θ − θ_ref)/(S + ε) each step, the reference code's",
                choices=ITERATES)


class TracCore:
    """TRAC's own state for K members — θ_ref (taken at the first step), the kept iterate x,
    the tuners — and its step around a base optimizer's, on stacked ``[K, …]`` tensors."""

    def __init__(self, members: int, device: torch.device, s_init: float, eps: float,
                 iterate: str):
        if not s_init > 0 or not eps > 0:
            raise ValueError(f"TRAC needs s_init > 0 and eps > 0, got s_init {s_init}, eps {eps}")
        if iterate not in ITERATES:
            raise ValueError(f"TRAC iterate must be one of {', '.join(ITERATES)}, got {iterate!r}")
        self.s_init, self.eps, self.iterate_form = float(s_init), float(eps), iterate
        self.tuners = TuneState(members, device)
        self.reference: list[torch.Tensor] | None = None
        self.iterate: list[torch.Tensor] | None = None  # x, with iterate="kept"

    @torch.no_grad()
    def step(self, params: Sequence[torch.Tensor], base_step, gradients) -> None:
        """θ_t is ``params`` now; ``base_step()`` takes the base's step on them; then TRAC's on
        the tensors with a gradient, ``gradients()`` (read after the base's step, which may
        compute them; None for a tensor without one), :func:`absorb_writes_` first with a kept
        iterate."""
        before = [p.clone() for p in params]
        base_step()  # reads the gradients, leaves them as they are
        grads = gradients()
        if self.reference is None:
            self.reference = [b.clone() for b in before]
            if self.iterate_form == "kept":
                self.iterate = [torch.zeros_like(b) for b in before]
        elif self.iterate is not None:
            absorb_writes_(before, self.reference, self.iterate, self.tuners.scale())
        active = [i for i, g in enumerate(grads) if g is not None]
        pick = lambda seq: None if seq is None else [seq[i] for i in active]  # noqa: E731
        trac_update_(pick(params), pick(before), pick(grads),
                     pick(self.reference), self.tuners, self.s_init, self.eps, pick(self.iterate))

    def state_dict(self) -> dict:
        """TRAC's state (no θ_ref or x before the first step)."""
        copy = lambda seq: None if seq is None else [t.clone() for t in seq]  # noqa: E731
        return {"s_init": self.s_init, "eps": self.eps, "iterate_form": self.iterate_form,
                "tuners": self.tuners.state_dict(), "reference": copy(self.reference),
                "iterate": copy(self.iterate)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (a fresh one restarts TRAC: θ_ref is taken again
        at the next step)."""
        self.s_init, self.eps, self.iterate_form = state["s_init"], state["eps"], state["iterate_form"]
        self.tuners.load_state_dict(state["tuners"])
        copy = lambda seq: None if seq is None else [t.clone() for t in seq]  # noqa: E731
        self.reference, self.iterate = copy(state["reference"]), copy(state["iterate"])


class TRAC(StackedOptimizer):
    """TRAC over Adam on a list of tensors whose gradients are in ``.grad`` (module docstring).

    ``member_dim`` (default): the tensors are stacked ensemble members ``[K, …]``, each with its
    own θ_ref, iterate and tuners; ``False``: one run. ``lr``: the base Adam's step size, one
    for all members or one each. ``iterate``: ``kept`` or ``recovered`` (the reference code's).
    :meth:`reset` restarts the base Adam's moments (CBP, ReDo); the tuners are the whole run's.
    """

    hyperparameters: ClassVar[tuple[Param, ...]] = (S_INIT, EPS, ITERATE)

    def __init__(self, params: Sequence[torch.Tensor], lr, s_init: float = 1e-8,
                 eps: float = 1e-8, iterate: str = "kept", member_dim: bool = True):
        self.params = list(params)
        if not self.params:
            raise ValueError("TRAC needs parameters to optimize")
        self.member_dim = bool(member_dim)
        self.base = Adam(self.params, lr=lr, member_dim=member_dim)
        self.lr = self.base.lr
        members = self.params[0].shape[0] if self.member_dim else 1
        self.core = TracCore(members, self.params[0].device, s_init, eps, iterate)
        # the tensors TRAC steps, each with a member dimension (a one-member view for one run)
        self._stacked = self.params if self.member_dim else [p.unsqueeze(0) for p in self.params]

    def step(self) -> None:
        """The base Adam's step, then TRAC's (:meth:`TracCore.step`)."""
        if any(p.grad is not None for p in self.params):
            self.core.step(self._stacked, self.base.step, self._gradients)

    def _gradients(self) -> list[torch.Tensor | None]:
        """Each tensor's gradient with a member dimension, None where it has none."""
        grads = [p.grad for p in self.params]
        return grads if self.member_dim else [None if g is None else g.unsqueeze(0) for g in grads]

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

    @property
    def param_groups(self) -> list[dict]:
        """The base optimizer's parameter groups."""
        return self.base.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        """The base optimizer's ``zero_grad``."""
        self.base.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        """The base's step (``closure`` as torch's), then TRAC's; returns the closure's loss."""
        out = {}

        def base_step():
            out["loss"] = self.base.step(closure)  # torch's step runs a closure with gradients on

        def gradients():
            return [None if p.grad is None else p.grad.unsqueeze(0) for p in self.params]

        self.core.step([p.detach().unsqueeze(0) for p in self.params], base_step, gradients)
        return out["loss"]

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
           "erfi", "trac_update_", "tune_"]
