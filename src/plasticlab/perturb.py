"""Shrink & Perturb for any PyTorch model (Ash & Adams 2020).

After every optimizer step, θ ← p·θ + σ·ε with ε a fresh draw from each layer's own init
distribution::

    sp = ShrinkPerturb(model, shrink=0.999, noise=1e-2)
    ...
    optimizer.step(); sp.step()

With ``member_dim=True`` the same class runs on stacked ensemble parameters, p and σ being
``[K]`` tensors (plasticlab's ``shrink_perturb`` method uses it that way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from .regularizers import _module_sampler, regularized_parameters
from .state import NamedState


class ShrinkPerturb(NamedState):
    """θ ← p·θ + σ·ε on every :meth:`step`; ε from ``sampler`` (default: the module's own init,
    via ``reset_parameters()`` on a private copy).

    Its state (``state_dict()``) is empty: the default sampler draws from torch's global
    generator (resuming the same draws takes ``torch.get_rng_state()`` saved beside the model),
    a sampler of your own keeps its own."""

    device_attributes = ("shrink", "noise")

    def __init__(self, params: nn.Module | Iterable[torch.Tensor], shrink, noise, *,
                 sampler: Callable[[], Sequence[torch.Tensor]] | None = None,
                 member_dim: bool = False):
        module = params if isinstance(params, nn.Module) else None
        self.params = regularized_parameters(module) if module is not None else list(params)
        if not self.params:
            raise ValueError("ShrinkPerturb: no parameters to shrink and perturb")
        if sampler is None:
            if module is None:
                raise ValueError("ShrinkPerturb needs a sampler when given a list of tensors")
            sampler = _module_sampler(module, "ShrinkPerturb")
        self.sampler = sampler
        ref = self.params[0]
        self.shrink = torch.as_tensor(shrink, dtype=ref.dtype, device=ref.device)
        self.noise = torch.as_tensor(noise, dtype=ref.dtype, device=ref.device)
        if bool((self.noise < 0).any()) or bool(((self.shrink < 0) | (self.shrink > 1)).any()):
            # the values as given, not as the parameters' dtype rounds them (0.1 → 0.10000000149)
            raise ValueError(f"ShrinkPerturb: need 0 <= shrink <= 1 and noise >= 0, got shrink "
                             f"{_as_given(shrink)}, noise {_as_given(noise)}")
        self.member_dim = member_dim

    def _view(self, t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        if self.member_dim and t.dim() == 1:
            return t.view(-1, *([1] * (p.dim() - 1)))
        return t

    @torch.no_grad()
    def step(self) -> None:
        """Shrink every parameter by p and add σ times a fresh init draw."""
        self._follow(self.params[0].device)
        for p, eps in zip(self.params, self.sampler(), strict=True):
            p.mul_(self._view(self.shrink, p)).add_(self._view(self.noise, p) * eps)


def _as_given(value) -> str:
    """A number, or a tensor or list of them, as the user wrote it (``:g``)."""
    values = torch.as_tensor(value, dtype=torch.float64).reshape(-1).tolist()
    text = ", ".join(f"{v:g}" for v in values)
    return text if len(values) == 1 else f"[{text}]"
