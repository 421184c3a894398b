"""The peer: the ensemble a PyTorch user would write without plasticlab.

K copies of the plain ``nn.Sequential`` stacked with ``torch.func.stack_module_state``, per-member
gradients with ``vmap(grad(functional_call))``, the L2 Init pull λ(θ − θ₀) added to them, and one
``torch.optim.Adam(foreach=True)`` over the stacked parameters — optionally the whole step under
``torch.compile``. ``benchmarks/speed.py`` runs it beside the plain loop and plasticlab's engine,
so every figure is a ratio against what a user would otherwise write.

    python benchmarks/peer_ensemble.py --data-dir ../shared/data --members 8 [--compiled]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, stack_module_state, vmap

from plasticlab.problems import get_problem

PROBLEMS = {"mlp": ("permuted_mnist", {"examples_per_task": 4000}),
            "cnn": ("random_label_cifar", {"examples": 1200})}


def plain_model(arch: str) -> torch.nn.Module:
    """The paper's MLP or CNN as a plain ``nn.Sequential`` (SPEC §4)."""
    nn = torch.nn
    if arch == "mlp":
        return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                             nn.Linear(100, 10))
    return nn.Sequential(nn.Conv2d(3, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 100), nn.ReLU(),
                         nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10))


class FuncEnsemble:
    """K members of ``plain_model(arch)`` trained as one stacked ensemble with ``torch.func``:
    each step, first predict (online accuracy), then one Adam step on the mean cross-entropy plus
    the L2 Init penalty (λ/2)‖θ − θ₀‖² of every member."""

    def __init__(self, arch: str, members: int, *, lr: float = 1e-3, strength: float = 1e-2,
                 seed: int = 0, compiled: bool = False, device: str = "cpu"):
        models = []
        for k in range(members):
            torch.manual_seed(seed + k)
            models.append(plain_model(arch).to(device))
        self.params, _ = stack_module_state(models)
        self.initial = {n: p.detach().clone() for n, p in self.params.items()}
        self.base = copy.deepcopy(models[0]).to("meta")
        self.strength = strength
        self.optimizer = torch.optim.Adam(list(self.params.values()), lr=lr, foreach=True)
        self.correct = torch.zeros(members, dtype=torch.int64, device=device)

        def member_loss(params, x, y):
            logits = functional_call(self.base, params, (x,))
            return F.cross_entropy(logits, y), logits

        self.member_grads = vmap(grad(member_loss, has_aux=True))
        self.step = torch.compile(self._step) if compiled else self._step

    def _step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        grads, logits = self.member_grads(self.params, x, y)
        self.correct += (logits.argmax(-1) == y).sum(1)
        for name, p in self.params.items():
            p.grad = grads[name] + self.strength * (p.detach() - self.initial[name])
        self.optimizer.step()


def samples_per_second(arch: str, members: int, steps: int, data_dir, *, compiled: bool = False,
                       device: str = "cpu", warmup: int = 20) -> tuple[float, float]:
    """Steady-state member-samples/s of :class:`FuncEnsemble` over ``steps`` steps of each
    member's own stream (after ``warmup`` steps), and the seconds the warm-up took (with
    ``compiled``, that is mostly compilation)."""
    name, params = PROBLEMS[arch]
    stream = get_problem(name)(list(range(members)), tasks=1, steps_per_task=steps + warmup,
                               data_dir=data_dir, device=device, **params)
    stream.start_task(0)
    batches = [stream.batch(s) for s in range(steps + warmup)]
    ensemble = FuncEnsemble(arch, members, compiled=compiled, device=device)
    start = time.perf_counter()
    for x, y in batches[:warmup]:
        ensemble.step(x, y)
    ensemble.correct.tolist()
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for x, y in batches[warmup:]:
        ensemble.step(x, y)
    ensemble.correct.tolist()  # waits for the device
    return steps * members * stream.batch_size / (time.perf_counter() - start), warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--arch", default="mlp", choices=tuple(PROBLEMS))
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--compiled", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rate, warm = samples_per_second(args.arch, args.members, args.steps, args.data_dir,
                                    compiled=args.compiled)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, cpu, batch 16, "
          f"{args.arch}, K={args.members}, {'compiled' if args.compiled else 'eager'}: "
          f"{rate:,.0f} member-samples/s (warm-up incl. compilation {warm:.1f} s)")


if __name__ == "__main__":
    main()
