"""Stop and resume a plain PyTorch training loop that uses L2 Init, on a continual stream.

L2 Init's θ₀ is taken when the regularizer is built, before the first update. A run resumed
from a checkpoint builds it again — on the trained weights — so θ₀ must come from the
checkpoint too, as the optimizer's moments do::

    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "reg": reg.state_dict()}, path)
    ...
    reg.load_state_dict(torch.load(path, weights_only=True)["reg"])

This script trains Permuted MNIST tasks three ways — without a break; stopped halfway and
resumed from a checkpoint file; resumed without the regularizer's state — and prints each
run's online accuracy per task, and whether its final weights are the uninterrupted run's.

Run:  python examples/resume_any_model.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

import torch
from torch import nn

from plasticlab import L2Init
from plasticlab.problems import task_stream


def build():
    """The model, its optimizer and L2 Init, as a fresh process builds them."""
    model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                          nn.Linear(100, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, optimizer, L2Init(model, strength=1e-2)


def train(model, optimizer, reg, tasks) -> list[float]:
    """Online accuracy of each task of ``tasks`` (a stream's: ``task_stream``)."""
    accuracy = []
    for task in tasks:
        correct = 0
        for x, y in task:
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()
            loss = nn.functional.cross_entropy(logits, y) + reg()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        accuracy.append(correct / task.examples)
    return accuracy


def run(tasks: int, steps: int, data_dir, stop: int | None = None, load_reg: bool = True):
    """A run of ``tasks`` tasks; with ``stop``, checkpointed after task ``stop`` − 1 and resumed
    in newly built objects (of another initialisation), with or without L2 Init's state."""
    def stream(first_task: int = 0):  # seed 0's tasks, from first_task (a resumed run's)
        return task_stream("permuted_mnist", seed=0, first_task=first_task, tasks=tasks,
                           steps_per_task=steps, data_dir=data_dir)

    torch.manual_seed(0)
    model, optimizer, reg = build()
    if stop is None:
        return train(model, optimizer, reg, stream()), model
    first = train(model, optimizer, reg, itertools.islice(stream(), stop))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "reg": reg.state_dict()}, path)
        torch.manual_seed(1)  # a new process: other initial weights until the checkpoint loads
        model, optimizer, reg = build()
        saved = torch.load(path, weights_only=True)
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    if load_reg:
        reg.load_state_dict(saved["reg"])
    return first + train(model, optimizer, reg, stream(first_task=stop)), model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=6)
    parser.add_argument("--steps", type=int, default=625)
    args = parser.parse_args()
    torch.set_num_threads(1)
    stop = args.tasks // 2
    whole, reference = run(args.tasks, args.steps, args.data_dir)
    resumed, a = run(args.tasks, args.steps, args.data_dir, stop)
    forgot, b = run(args.tasks, args.steps, args.data_dir, stop, load_reg=False)
    same = [all(torch.equal(p, q) for p, q in zip(m.parameters(), reference.parameters(), strict=True))
            for m in (a, b)]
    print(f"task  uninterrupted  resumed  resumed_without_theta0   (stopped after task {stop - 1})")
    for t, row in enumerate(zip(whole, resumed, forgot, strict=True)):
        print(f"{t:4d}  " + "  ".join(f"{100 * v:{w}.2f}" for v, w in zip(row, (13, 7, 22), strict=True)))
    print(f"final weights equal to the uninterrupted run's: resumed {same[0]}, "
          f"resumed without θ₀ {same[1]}")


if __name__ == "__main__":
    main()
