"""What ``loss + reg()`` with the L2 Init drop-in costs a training step of your own model, with
the penalty as one node of foreach kernels (:mod:`plasticlab.foreach_penalty`) and in its plain
form (``plasticlab.fast.plain_forms()``: a subtraction, square, sum and product per tensor
through autograd), beside the same step without a penalty and with ``reg.add_grad_()``.

    python benchmarks/dropin_penalty.py                   # the CPU, one torch thread
    python benchmarks/dropin_penalty.py --device cuda

A plain ``nn.Sequential`` of ``--layers`` Linear(width, width) + ReLU blocks (2·layers + 4
parameter tensors), batch ``--batch``, ``torch.optim.Adam``; each form's step time the median of
``--repeats`` timings of ``--steps`` steps, the forms alternating so that a shared machine's
drifts hit each. The same steps give the same weights in both forms
(``tests/test_foreach_penalty.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time

import torch
from torch import nn

import plasticlab
from plasticlab import fast

FORMS = ("no penalty", "loss + reg(), plain", "loss + reg(), foreach", "reg.add_grad_()")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = torch.device(args.device)
    torch.manual_seed(0)
    blocks = [m for _ in range(args.layers) for m in (nn.Linear(args.width, args.width), nn.ReLU())]
    model = nn.Sequential(nn.Linear(64, args.width), nn.ReLU(), *blocks,
                          nn.Linear(args.width, 10)).to(device)
    reg = plasticlab.L2Init(model, strength=1e-2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch, 64, device=device), torch.randint(10, (args.batch,), device=device)
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine())
    print(f"device {device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"K 1 (one model), batch {args.batch}, {len(list(model.parameters()))} parameter tensors "
          f"({sum(p.numel() for p in model.parameters()):,} weights), {args.steps} steps × {args.repeats}")

    def step(form: str) -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        if form.startswith("loss + reg()"):
            loss = loss + reg()
        optimizer.zero_grad()
        loss.backward()
        if form == "reg.add_grad_()":
            reg.add_grad_()
        optimizer.step()

    def timed(form: str) -> float:
        plain = fast.plain_forms() if form.endswith("plain") else contextlib.nullcontext()
        with plain:
            for _ in range(5):
                step(form)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            for _ in range(args.steps):
                step(form)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / args.steps

    times = {form: [] for form in FORMS}
    for _ in range(args.repeats):
        for form in FORMS:
            times[form].append(timed(form))
    base = statistics.median(times["no penalty"])
    for form in FORMS:
        t = statistics.median(times[form])
        print(f"  {form:<24} {1e3 * t:8.3f} ms a step   the penalty's cost {1e3 * (t - base):+8.3f} ms "
              f"({100 * (t - base) / base:+6.1f} %)")


if __name__ == "__main__":
    main()
