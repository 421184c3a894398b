"""L2 Init as a drop-in for a plain PyTorch model, on a continual stream.

A small MLP learns a sequence of Permuted MNIST tasks with torch.optim.Adam; the only change
that L2 Init asks for is the penalty in the loss::

    reg = L2Init(model, strength=1e-2)   # copies θ₀ now, before the first update
    loss = task_loss + reg()             # gradient λ(θ − θ₀)

Run:  python examples/l2_init_any_model.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from plasticlab import L2Init
from plasticlab.problems import task_stream


def train(use_l2_init: bool, tasks: int, steps: int, data_dir) -> list[float]:
    """Online accuracy per task of one plain nn.Module run (seed 0)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                          nn.Linear(100, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    reg = L2Init(model, strength=1e-2) if use_l2_init else None
    accuracy = []
    for task in task_stream("permuted_mnist", seed=0, tasks=tasks, steps_per_task=steps, data_dir=data_dir):
        correct = 0
        for x, y in task:  # x [16, 784], y [16]: the task's batches in turn
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()  # predict first …
            loss = nn.functional.cross_entropy(logits, y)
            if reg is not None:
                loss = loss + reg()
            optimizer.zero_grad()
            loss.backward()  # … then learn
            optimizer.step()
        accuracy.append(correct / task.examples)
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=625)
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = train(False, args.tasks, args.steps, args.data_dir)
    l2i = train(True, args.tasks, args.steps, args.data_dir)
    print("task  baseline  l2_init")
    for t, (a, b) in enumerate(zip(base, l2i, strict=True)):
        print(f"{t:4d}  {100 * a:7.2f}  {100 * b:7.2f}")


if __name__ == "__main__":
    main()
