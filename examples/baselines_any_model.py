"""Every baseline of the paper as a drop-in for a plain ``nn.Sequential`` model.

One small MLP per method learns the same Permuted MNIST stream; the per-method lines are all a
user has to add to their own training loop:

- Shrink & Perturb: ``sp = ShrinkPerturb(model, shrink=0.999, noise=1e-2)``; ``sp.step()`` after
  ``optimizer.step()``;
- EWC: ``ewc = EWC(model, strength=10)``; ``loss + ewc()``; at a task end
  ``ewc.consolidate_model(model, inputs, labels)`` on examples of the task that ended (the
  authors' form: its held-out test images, the empirical Fisher, only the last task anchored;
  ``EWC(..., anchor="sum")`` and ``fisher="true"`` give Kirkpatrick's);
- Continual Backprop: ``cbp = ContinualBackpropSequential(model, optimizer, replacement_rate=1e-4)``;
  ``cbp.step()`` after ``optimizer.step()`` (with plasticlab.optim.Adam: it restarts single
  units' Adam state, which torch.optim.Adam cannot do correctly);
- ReDo: ``redo = ReDoSequential(model, optimizer, threshold=0.0)``; every N steps
  ``redo.recycle(x_batch)``.

Run:  python examples/baselines_any_model.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import plasticlab.optim
from plasticlab import EWC, L2Init, ShrinkPerturb
from plasticlab.methods.cbp import ContinualBackpropSequential
from plasticlab.methods.redo import ReDoSequential
from plasticlab.problems import task_stream


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 10))


def train(method: str, tasks: int, steps: int, data_dir) -> list[float]:
    """Online accuracy per task of one plain-PyTorch run with ``method`` added."""
    model = mlp()
    if method == "cbp":
        optimizer = plasticlab.optim.Adam(list(model.parameters()), lr=1e-3)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    penalty = {"l2_init": lambda: L2Init(model, strength=1e-2),
               "ewc": lambda: EWC(model, strength=10.0)}.get(method, lambda: None)()
    after_step = None
    if method == "shrink_perturb":
        after_step = ShrinkPerturb(model, shrink=0.999, noise=1e-2).step
    elif method == "cbp":
        after_step = ContinualBackpropSequential(model, optimizer, replacement_rate=1e-4).step
    redo = ReDoSequential(model, optimizer, threshold=0.0) if method == "redo" else None

    accuracy = []
    for task in task_stream("permuted_mnist", seed=0, tasks=tasks, steps_per_task=steps, data_dir=data_dir):
        correct = 0
        for step, (x, y) in enumerate(task):
            logits = model(x)
            correct += (logits.argmax(1) == y).sum().item()  # predict first, then learn
            loss = nn.functional.cross_entropy(logits, y)
            if penalty is not None:
                loss = loss + penalty()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if after_step is not None:
                after_step()
            if redo is not None and (step + 1) % steps == 0:
                redo.recycle(x)
        if method == "ewc":  # EWC alone is told where tasks end
            penalty.consolidate_model(model, *task.test_set(992))
        accuracy.append(correct / task.examples)
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = ["baseline", "l2_init", "shrink_perturb", "ewc", "cbp", "redo"]
    curves = {m: train(m, args.tasks, args.steps, args.data_dir) for m in methods}
    print("task " + "".join(f"{m:>16}" for m in methods))
    for t in range(args.tasks):
        print(f"{t:4d} " + "".join(f"{100 * curves[m][t]:16.2f}" for m in methods))


if __name__ == "__main__":
    main()
