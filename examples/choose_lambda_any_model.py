"""Choosing L2 Init's λ for a model of your own, the way the paper chose it.

The paper's protocol (SPEC §6) for a plain PyTorch model: train the whole stream once per λ of
the grid on a few seeds, select the λ with the highest total average online accuracy (the mean
over the seeds), then train that λ on seeds the selection never saw and report its total with
a 95 % bootstrap interval — beside λ = 0, the model without L2 Init, on the same new seeds.
Selecting and reporting on the same seeds would flatter the winner.

    python examples/choose_lambda_any_model.py --data-dir ../shared/data

Swap in your model (``build_model``), your optimizer and your stream; ``task_stream`` gives the
paper's problems as batches, the same for a seed as plasticlab's runs of that seed. For the
paper's own network, a sweep file with a ``[protocol]`` does this in one command
(docs/experiments.md#sweeps).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

from plasticlab import L2Init
from plasticlab.problems import task_stream
from plasticlab.report.stats import bootstrap_ci


def build_model() -> nn.Module:
    """Your model; here the paper's MLP for MNIST."""
    return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 10))


def total_online_accuracy(strength: float, seed: int, tasks: int, steps: int, data_dir) -> float:
    """One run: the model trained on the stream of ``seed`` with L2 Init at λ = ``strength``
    (none at 0); the total average online accuracy (each batch predicted before it is learned)."""
    torch.manual_seed(seed)  # the seed fixes the initial network, as task_stream's fixes the data
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    reg = L2Init(model, strength=strength) if strength > 0 else None
    correct = seen = 0
    for task in task_stream("permuted_mnist", seed=seed, tasks=tasks, steps_per_task=steps,
                            data_dir=data_dir):
        for x, y in task:
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            loss = nn.functional.cross_entropy(logits, y)
            if reg is not None:
                loss = loss + reg()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return correct / seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--steps", type=int, default=625)
    parser.add_argument("--lambdas", default="1e-2,1e-3,1e-4,1e-5", help="the grid (the paper's)")
    parser.add_argument("--grid-seeds", type=int, default=3, help="seeds 0 … n−1 select λ")
    parser.add_argument("--new-seeds", type=int, default=5, help="seeds 100 … report the winner")
    args = parser.parse_args()
    torch.set_num_threads(1)
    grid = [float(v) for v in args.lambdas.split(",")]

    def totals(strength: float, seeds) -> np.ndarray:
        return np.array([total_online_accuracy(strength, s, args.tasks, args.steps, args.data_dir)
                         for s in seeds])

    print("λ       mean total on the grid seeds (%)")
    scores = {}
    for strength in grid:
        scores[strength] = float(totals(strength, range(args.grid_seeds)).mean())
        print(f"{strength:<7g} {100 * scores[strength]:.2f}")
    best = max(scores, key=scores.get)
    new_seeds = range(100, 100 + args.new_seeds)
    print(f"selected λ = {best:g}; on {args.new_seeds} new seeds, total (%) [95 % bootstrap CI]:")
    for name, strength in ((f"L2 Init λ {best:g}", best), ("without L2 Init", 0.0)):
        ci = bootstrap_ci(100 * totals(strength, new_seeds))
        print(f"  {name}: {ci.point:.2f} [{ci.lo:.2f}, {ci.hi:.2f}]")


if __name__ == "__main__":
    main()
