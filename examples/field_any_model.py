"""The methods since the paper as drop-ins for a plain ``nn.Sequential`` model.

One small MLP per method learns the same Permuted MNIST stream (L2 Init beside them for
reference); the per-method lines are all a user adds to their own training loop:

- Parseval: ``reg = Parseval(model, strength=1e-3)``; ``loss + reg()``;
- SWR: ``swr = SWR(model, period=200, threshold=1e-5)``; ``swr.step()`` after
  ``optimizer.step()``, before the next ``zero_grad()`` (it scores weights by |g⊙w|);
- SNR: ``snr = SNR(model, optimizer)``; ``snr.step()`` after ``optimizer.step()`` (hooks on the
  ReLUs see which units fire; resets zero torch.optim.Adam's moments of the reset weights);
- Hare & Tortoise: ``ht = HareTortoise(model, momentum=0.999, reset_period=1000)``;
  ``ht.step()`` after ``optimizer.step()``; ``ht.tortoise`` is the slow copy;
- UPGD: ``optimizer = UPGD(model.parameters(), lr=1e-2)``, a ``torch.optim.Optimizer``.

Run:  python examples/field_any_model.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from plasticlab import SNR, SWR, UPGD, HareTortoise, L2Init, Parseval
from plasticlab.problems import task_stream


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 10))


def train(method: str, tasks: int, steps: int, data_dir) -> list[float]:
    """Online accuracy per task of one plain-PyTorch run with ``method`` added."""
    model = mlp()
    if method == "upgd":
        optimizer = UPGD(model.parameters(), lr=1e-2, beta=0.9999, sigma=0.1, weight_decay=0.01)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    penalty = {"l2_init": lambda: L2Init(model, strength=1e-2),
               "parseval": lambda: Parseval(model, strength=1e-3)}.get(method, lambda: None)()
    after_step = {"swr": lambda: SWR(model, period=200, threshold=1e-5).step,
                  "snr": lambda: SNR(model, optimizer).step,
                  "hare_tortoise": lambda: HareTortoise(model, momentum=0.999, reset_period=1000).step,
                  }.get(method, lambda: None)()

    accuracy = []
    for task in task_stream("permuted_mnist", seed=0, tasks=tasks, steps_per_task=steps, data_dir=data_dir):
        correct = 0
        for x, y in task:
            logits = model(x)  # the training forward pass (SNR's hooks watch this one)
            correct += (logits.argmax(1) == y).sum().item()  # predict first, then learn
            loss = nn.functional.cross_entropy(logits, y)
            if penalty is not None:
                loss = loss + penalty()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if after_step is not None:
                after_step()  # gradients still in .grad (SWR needs them)
        accuracy.append(correct / task.examples)
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="folder with mnist/ (default $PLASTICLAB_DATA)")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    methods = ["baseline", "l2_init", "parseval", "swr", "snr", "hare_tortoise", "upgd"]
    curves = {m: train(m, args.tasks, args.steps, args.data_dir) for m in methods}
    print("task " + "".join(f"{m:>16}" for m in methods))
    for t in range(args.tasks):
        print(f"{t:4d} " + "".join(f"{100 * curves[m][t]:16.2f}" for m in methods))


if __name__ == "__main__":
    main()
