"""C-CHAIN: Continual Churn Approximated Reduction (Tang, Obando-Ceron, Castro, Courville &
Berseth, "Mitigating Plasticity Loss in Continual Reinforcement Learning by Reducing Churn",
ICML 2025; reference code ``bluecontra/C-CHAIN``).

*Churn* is how much an update changes the network's outputs on data outside its batch. The
paper ties growing churn to the collapse of the NTK's rank, and so to lost plasticity; C-CHAIN
adds a churn-reduction term to the task loss L:

    L_C(θ) = (1/|B_ref|) Σ_{x ∈ B_ref} d(f_θ(x), f_{θ⁻}(x)),      total L + λ·L_C,

where θ⁻ is the network one update before the current one (the reference code's ``his_idx``:
the copy kept before the last update) and B_ref a reference batch of other data than the
update's own. d is ``mse`` — the mean over the outputs of (f_θ(x) − f_{θ⁻}(x))², the value
churn of the reference's Double DQN (MinAtar) and its DMC PPO's action means — or ``kl`` —
KL(softmax f_{θ⁻}(x) ‖ softmax f_θ(x)), the policy churn of its discrete PPO (which computes the
cross-entropy −Σ p⁻ log p: the same gradient, a value larger by the entropy of p⁻).

λ is set from a target *relative* scale λ_rel of the two losses (the reference's
``target_rel_loss_scale``): after ``warmup`` updates, every update sets

    λ = λ_rel · mean |L| / (mean L_C + 10⁻⁸),

the means over the last ``window`` updates, so λ·L_C stays near λ_rel·|L|; before, λ is
``initial_strength``. Defaults are the reference's Double DQN (the one variant that adapts λ
per update, as plasticlab's stream does): d = mse, λ_rel 0.01, window 50,000, warmup 10,000,
initial λ 50; no floor on λ (its PPO variants floor λ at 1 and restart the means at each task —
a boundary oracle — which plasticlab does not do). Both losses' means are over the updates that
have a reference (the reference's task-loss mean also takes in the first update's).

The reference batch. The reference code draws B_ref from its replay buffer or rollout, apart
from the training batch; it has no supervised variant. plasticlab's learner sees one batch per
step, so B_ref is the batch of two updates ago: at update t (from θ_t, batch B_t), B_ref =
B_{t−2} and θ⁻ = θ_{t−1}, whose outputs on B_{t−2} are taken right after update t−2 — data the
run has, out of the batch of both the last update (whose churn L_C measures) and this one. The
first two updates have no reference and take no churn term. Nothing is told where tasks end.

Per member: λ_rel, window, warmup and initial λ are ``[K]``; the means, λ and the churn are each
member's own; d is one for the ensemble. :func:`churn` is the measurement itself (also
:mod:`plasticlab.measure`'s churn on a fixed batch can read it); :class:`RelativeScale` the
coefficient's rule; :class:`CChain` the drop-in for any ``nn.Module``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..nets.network import forward_with
from ..params import Param
from .base import CapturedHook, CapturedTransform, Method, Needs

DIVERGENCES = ("mse", "kl")
RATIO_EPS = 1e-8  # the reference's guard in λ = λ_rel·|L| / (L_C + 1e-8)


def churn(outputs: torch.Tensor, reference: torch.Tensor, divergence: str = "mse") -> torch.Tensor:
    """The churn d(f_θ(x), f_{θ⁻}(x)) averaged over a batch, per member ``[K]``, from the outputs
    ``[K, B, C]`` of the network now (differentiable) and of a reference network on the same
    inputs (a constant): ``mse``, (1/(B·C)) Σ_b Σ_c (z − z⁻)²; ``kl``, (1/B) Σ_b
    KL(softmax z⁻ ‖ softmax z). Outputs that are −∞ (a growing head's outputs not yet in it)
    take no part: ``mse`` averages over the entries finite in both."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"churn divergence must be one of {', '.join(DIVERGENCES)}, got {divergence!r}")
    if outputs.shape != reference.shape or outputs.dim() != 3:
        raise ValueError(f"churn compares outputs [K, B, C] of the same inputs, got "
                         f"{tuple(outputs.shape)} and {tuple(reference.shape)}")
    reference = reference.detach()
    if divergence == "mse":
        both = torch.isfinite(outputs.detach()) & torch.isfinite(reference)
        squared = torch.where(both, outputs - reference, 0.0).square()
        return squared.flatten(1).sum(1) / both.flatten(1).sum(1).clamp(min=1)
    log_ref = F.log_softmax(reference, dim=-1)
    p_ref = log_ref.exp()
    # p⁻ = 0 (an output out of the head, or one that underflows) adds nothing, not 0·(−∞ + ∞)
    terms = torch.where(p_ref > 0, p_ref * (log_ref - F.log_softmax(outputs, dim=-1)), 0.0)
    return terms.sum(-1).mean(1)


class RelativeScale:
    """λ per member, set from the running means of |L| and L_C over each member's last ``window``
    updates: λ = λ_rel·mean|L| / (mean L_C + 10⁻⁸) from update ``warmup`` on, ``initial`` before.
    The last W_max values sit in a ring ``[K, W_max, 2]`` (float64) and the window sums are
    carried, so an update costs O(K), on the device, with no read back to the host."""

    def __init__(self, relative: torch.Tensor, window: Sequence[int], warmup: Sequence[int],
                 initial: torch.Tensor):
        device = relative.device
        self.relative = relative.to(torch.float64)
        self.window = torch.tensor(list(window), dtype=torch.long, device=device)
        self.warmup = torch.tensor(list(warmup), dtype=torch.long, device=device)
        self.size = max(window)
        members = len(window)
        self.ring = torch.zeros(members, self.size, 2, dtype=torch.float64, device=device)
        self.sums = torch.zeros(members, 2, dtype=torch.float64, device=device)
        self.strength = initial.to(torch.float64).clone()  # λ
        # values written into the ring so far, on the device (every update is tensor operations,
        # so a compiled step can record), and λ changed in place
        self.recorded_updates = torch.zeros((), dtype=torch.long, device=device)

    @property
    def recorded(self) -> int:
        """Values written into the ring so far (read back to the host)."""
        return int(self.recorded_updates)

    @recorded.setter
    def recorded(self, value: int) -> None:  # a checkpoint from when the count was a host int
        self.recorded_updates.fill_(int(value))

    def record(self, task_loss: torch.Tensor, churn_loss: torch.Tensor, update: int | torch.Tensor,
               taken: torch.Tensor | None = None) -> None:
        """Take in update ``update``'s |L| and L_C (``[K]`` each) and set λ for the next update;
        ``update``: its count, a number or a 0-d tensor. ``taken``: where given (a 0-d bool
        tensor), the update is taken in only where it is true — a compiled step's form of the
        first updates, which have no churn term."""
        n = self.recorded_updates
        value = torch.stack([task_loss.detach().abs(), churn_loss.detach()], dim=1).to(torch.float64)
        # the value that leaves member k's window: written W_k records ago, if there was one
        slot = torch.remainder(n - self.window, self.size)
        leaving = self.ring.gather(1, slot.view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1)
        full = (self.window <= n).unsqueeze(1)
        change = value - torch.where(full, leaving, 0.0)
        at = torch.remainder(n, self.size).view(1)
        if taken is None:
            self.sums += change
        else:
            self.sums += torch.where(taken, change, 0.0)
            value = torch.where(taken, value, self.ring.index_select(1, at).squeeze(1))
        self.ring.index_copy_(1, at, value.unsqueeze(1))
        n += 1 if taken is None else taken.long()
        count = torch.minimum(self.window, n).to(torch.float64)
        means = self.sums / count.unsqueeze(1)
        adapted = self.relative * means[:, 0] / (means[:, 1] + RATIO_EPS)
        due = self.warmup <= update
        self.strength.copy_(torch.where(due if taken is None else due & taken, adapted, self.strength))

    def means(self) -> torch.Tensor:
        """The window means of |L| and L_C per member, ``[K, 2]`` (0 before the first record)."""
        count = torch.minimum(self.window, self.recorded_updates.clamp(min=1)).to(torch.float64)
        return self.sums / count.unsqueeze(1)


RELATIVE_SCALE = Param("relative_scale", 1e-2, float, "λ_rel: the target λ·L_C / |L| (the "
                       "reference's target_rel_loss_scale)", per_member=True, low=0.0)
DIVERGENCE = Param("divergence", "mse", str, "d: mse of the outputs (value churn) or kl of their "
                   "softmax (policy churn)", choices=DIVERGENCES)
WINDOW = Param("window", 50_000, int, "updates in the running means of |L| and L_C",
               per_member=True, in_steps=True, low=1)
WARMUP = Param("warmup", 10_000, int, "updates before λ adapts", per_member=True, in_steps=True,
               low=0)
INITIAL_STRENGTH = Param("initial_strength", 50.0, float, "λ before it adapts", per_member=True,
                         low=0.0)


def churn_gradients(net, params: Sequence[torch.Tensor], divergence: str):
    """∂(Σ_k λ_k·L_C,k)/∂θ through ``torch.func.grad`` of ``net`` (a function of (θ as a list in
    the order of ``params``, the reference inputs, their reference outputs, λ ``[K]``) returning
    (the gradients, L_C ``[K]``)): the eager step's autograd, written for a compiled step."""
    forward = forward_with(net, params)

    def weighted_churn(values, inputs, reference, strength):
        value = churn(forward(values, inputs), reference, divergence)
        return (strength.to(value.dtype) * value).sum(), value.detach()

    return torch.func.grad(weighted_churn, has_aux=True)


def _host_counts(values: torch.Tensor) -> list[int]:
    """A per-member count ``[K]`` as host integers, read once at construction."""
    return [int(round(v)) for v in torch.as_tensor(values).reshape(-1).tolist()]


class ContinualChurnReduction(Method):
    """Adds λ·∂L_C/∂θ to the task gradient at every update, L_C on the batch of two updates ago
    against the network's outputs one update ago; λ adapts to λ_rel·|L|/L_C."""

    name = "c_chain"
    title = "C-CHAIN"
    description = "C-CHAIN: reduce churn λ·d(f_θ, f_θ⁻) on an earlier batch, λ ∝ |L|/L_C"
    hyperparameters = (RELATIVE_SCALE, DIVERGENCE, WINDOW, WARMUP, INITIAL_STRENGTH)

    @classmethod
    def needs(cls, params):
        return Needs(gradient_hook=True, task_loss=True, after_step=True)

    def __init__(self, net, optimizer, hp, context):
        super().__init__(net, optimizer, hp, context)
        self.divergence = hp["divergence"]
        if self.divergence not in DIVERGENCES:
            raise ValueError(f"method c_chain: divergence must be one of {', '.join(DIVERGENCES)}")
        outputs = net.blocks[-1].affine.bias.shape[-1]
        if self.divergence == "kl" and outputs < 2:
            raise ValueError(f"method c_chain: divergence=kl compares softmax distributions and needs "
                             f"at least 2 outputs; this network has {outputs}: use divergence=mse")
        device = context.device
        relative = torch.as_tensor(hp["relative_scale"], device=device).reshape(-1)
        initial = torch.as_tensor(hp["initial_strength"], device=device).reshape(-1)
        window, warmup = _host_counts(hp["window"]), _host_counts(hp["warmup"])
        if bool((relative < 0).any()) or bool((initial < 0).any()) or min(window) < 1 or min(warmup) < 0:
            raise ValueError("method c_chain: needs relative_scale >= 0, initial_strength >= 0, "
                             "window >= 1 update and warmup >= 0 updates")
        self.params = [p for p in net.parameters() if p.requires_grad]
        self.scale = RelativeScale(relative, window, warmup, initial)
        self.task_loss: torch.Tensor | None = None
        # (inputs, outputs after its update) of the last batch and of the one before it, kept in
        # place from the first step on (_keep)
        self.last_inputs = self.last_outputs = None
        self.reference_inputs = self.reference_outputs = None
        self.updates = 0
        self.last_churn = torch.zeros(len(window), dtype=self.params[0].dtype, device=device)
        self.update_on_device = torch.zeros((), dtype=torch.long, device=device)  # the captured form's count

    def observe_task_loss(self, loss: torch.Tensor) -> None:
        self.task_loss = loss

    def add_penalty_grad(self) -> None:
        """Add λ·∂L_C/∂θ to ``.grad`` (from the third update on: before, there is no reference)
        and update λ."""
        self.updates += 1
        if self.updates < 3:
            return
        with torch.enable_grad():
            value = churn(self.net(self.reference_inputs), self.reference_outputs, self.divergence)
            weighted = (self.scale.strength.to(value.dtype) * value).sum()
            grads = torch.autograd.grad(weighted, self.params, allow_unused=True)
        for p, g in zip(self.params, grads, strict=True):
            if g is not None:
                p.grad = g if p.grad is None else p.grad.add_(g)
        self.last_churn.copy_(value.detach())
        self.scale.record(self.task_loss, value.detach(), self.updates)

    @torch.no_grad()
    def after_step(self, features, x, step):
        """Keep this batch and the network's outputs on it now (θ⁻ of the update after next)."""
        self._keep(x)

    def _keep(self, x: torch.Tensor) -> None:
        # the last batch becomes the reference, this one the last, each in its own buffer
        self._buffers(x)
        self.reference_inputs.copy_(self.last_inputs)
        self.reference_outputs.copy_(self.last_outputs)
        self.last_inputs.copy_(x)
        self.last_outputs.copy_(self.net(x))

    def _buffers(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # the batches' and outputs' buffers, made at the first step (a checkpoint restores them)
        if self.last_inputs is None:
            outputs = self.net.blocks[-1].affine.bias.shape[-1]
            like = torch.zeros(*x.shape[:2], outputs, dtype=x.dtype, device=x.device)
            self.last_inputs, self.reference_inputs = torch.zeros_like(x), torch.zeros_like(x)
            self.last_outputs, self.reference_outputs = like, like.clone()
        elif self.reference_inputs is None:  # a checkpoint taken after the first step
            self.reference_inputs = torch.zeros_like(self.last_inputs)
            self.reference_outputs = torch.zeros_like(self.last_outputs)
        return self.last_inputs, self.reference_inputs, self.last_outputs, self.reference_outputs

    def captured_gradient_transform(self) -> CapturedTransform:
        """λ·∂L_C/∂θ through ``torch.func``'s gradient of the network on the reference batch, and
        λ's update, as tensor operations: from the third update on (the count on the device);
        before, the term is computed and left out (``where``), and nothing is recorded."""
        gradient = churn_gradients(self.net, self.params, self.divergence)

        def add(grads, task_loss):
            third = self.update_on_device >= 3
            churn_grads, value = gradient(list(self.params), self.reference_inputs,
                                          self.reference_outputs, self.scale.strength)
            for g, c in zip(grads, churn_grads, strict=True):
                g.add_(torch.where(third, c, 0.0))
            self.last_churn.copy_(torch.where(third, value, self.last_churn))
            self.scale.record(task_loss, value, self.update_on_device, taken=third)

        scale = self.scale
        return CapturedTransform(run=add, params=tuple(self.params), reads_task_loss=True,
                                 reads=(self.update_on_device, self.last_churn, scale.relative,
                                        scale.window, scale.warmup, scale.ring, scale.sums,
                                        scale.strength, scale.recorded_updates))

    def captured_after_step(self) -> CapturedHook:
        """Keeping the batch and the network's outputs on it, in place: captured whole (the
        buffers made before the first compiled step)."""
        def prepare(step: int) -> None:  # this update's count, on the host and on the device
            self.updates = step
            self.update_on_device.fill_(step)

        return CapturedHook(run=lambda features, x: self._keep(x), params=(), reads=(),
                            prepare=prepare, start=self._start_captured)

    def _start_captured(self, batch: int) -> tuple[torch.Tensor, ...]:
        first = self.net.blocks[0].affine
        shape = (self.net.members, batch, *first.weight.shape[2:])
        return self._buffers(torch.zeros(shape, dtype=first.weight.dtype, device=first.weight.device))

    def penalty(self) -> torch.Tensor:
        """λ·L_C of the last update, per member (0 before the first churn term)."""
        return (self.scale.strength * self.last_churn.to(torch.float64)).to(self.last_churn.dtype)

    def extra_measurements(self, measurer, task: int) -> dict[str, torch.Tensor]:
        """λ at the task's end (``c_chain_strength``) and the window mean of L_C
        (``c_chain_churn``), per member."""
        return {"c_chain_strength": self.scale.strength.clone(), "c_chain_churn": self.scale.means()[:, 1]}


class CChain:
    """C-CHAIN for any ``nn.Module`` whose output is ``[B, C]`` (or ``[B]``)::

        chain = CChain(model)                      # the reference's DQN values
        for x, y in stream:
            loss = F.cross_entropy(model(x), y)
            total = loss + chain(loss)              # + λ·L_C on the batch of two steps ago
            optimizer.zero_grad(); total.backward(); optimizer.step()
            chain.step(x)                           # after optimizer.step()

    The same rule as the engine's ``c_chain`` (:func:`churn`, :class:`RelativeScale`, the
    model as a one-member ensemble). ``step(x)`` runs the model on ``x`` without gradients — a
    model with batch normalisation updates its running statistics there too."""

    def __init__(self, model: torch.nn.Module, relative_scale: float = 1e-2, divergence: str = "mse",
                 window: int = 50_000, warmup: int = 10_000, initial_strength: float = 50.0):
        if divergence not in DIVERGENCES:
            raise ValueError(f"CChain: divergence must be one of {', '.join(DIVERGENCES)}, "
                             f"got {divergence!r}")
        if not relative_scale >= 0 or not initial_strength >= 0 or int(window) < 1 or int(warmup) < 0:
            raise ValueError(f"CChain: needs relative_scale >= 0, initial_strength >= 0, window >= 1 "
                             f"and warmup >= 0; got {relative_scale}, {initial_strength}, {window}, {warmup}")
        self.model, self.divergence = model, divergence
        device = next(model.parameters()).device
        self.scale = RelativeScale(torch.tensor([float(relative_scale)], device=device), [int(window)],
                                   [int(warmup)], torch.tensor([float(initial_strength)], device=device))
        self.queue: list[tuple[torch.Tensor, torch.Tensor]] = []  # (x, f(x)) of the last two steps
        self.updates = 0

    @staticmethod
    def _member(out: torch.Tensor) -> torch.Tensor:
        """A model's output ``[B, C]`` or ``[B]`` as a one-member ensemble's ``[1, B, C]``."""
        return out.reshape(1, out.shape[0], -1)

    def __call__(self, task_loss: torch.Tensor) -> torch.Tensor:
        """λ·L_C(θ) for this step (differentiable; 0 for the first two), and λ set for the next
        from ``task_loss`` (the step's L, a scalar)."""
        self.updates += 1
        if len(self.queue) < 2:
            return torch.zeros((), device=task_loss.device)
        inputs, outputs = self.queue[0]
        value = churn(self._member(self.model(inputs)), outputs, self.divergence)
        # λ of this step, copied: record changes λ in place, and the term's backward reads it
        term = (self.scale.strength.to(value.dtype, copy=True) * value)[0]
        self.scale.record(task_loss.detach().reshape(1), value.detach(), self.updates)
        return term

    def strength(self) -> float:
        """λ now."""
        return float(self.scale.strength[0])

    @torch.no_grad()
    def step(self, x: torch.Tensor) -> None:
        """After ``optimizer.step()``: keep ``x`` and the model's outputs on it now."""
        self.queue = [*self.queue[-1:], (x.detach().clone(), self._member(self.model(x)))]


__all__ = ["DIVERGENCES", "CChain", "ContinualChurnReduction", "RelativeScale", "churn"]
