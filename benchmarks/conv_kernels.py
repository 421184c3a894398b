"""The ensemble convolution's kernels against each other: one training step of the paper's CNN
(forward, backward of the members' summed mean cross-entropy, plasticlab's fused Adam) for K
members, with each ``EnsembleConv2d`` kernel — ``loop`` (one convolution per member, the
simple form) and ``grouped`` (one convolution with groups=K) — and, on CUDA, the grouped
kernel with cuDNN's autotuner on (``torch.backends.cudnn.benchmark``: it picks the fastest
algorithm per shape, possibly a non-deterministic one, so the engine leaves it off).

    python benchmarks/conv_kernels.py [--device cuda] [--members 16,64,256]

Prints the setup (device, threads, K, batch) and member-samples/s per kernel and K, each the
median of ``--repeats`` timed runs of ``--steps`` steps after a warm-up, on random inputs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from plasticlab.nets import build_network
from plasticlab.optim import Adam
from plasticlab.rng import torch_generator
from plasticlab.step.backward import autograd_gradients as autograd_step

KERNELS = ("loop", "grouped")


def rate(kernel: str, members: int, device: str, steps: int, repeats: int, batch: int = 16) -> float:
    """Member-samples/s of training steps of the CNN with ``kernel``."""
    net = build_network("cnn", members, (3, 32, 32), 10, conv_kernel=kernel,
                        generators=[torch_generator(s, "init") for s in range(members)]).to(device)
    optimizer = Adam(list(net.parameters()), lr=1e-3)
    x = torch.randn(members, batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (members, batch), device=device)

    def step():
        autograd_step(net, optimizer, x, y, features=False)  # the engine's own CNN step
        optimizer.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        if device != "cpu":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device != "cpu":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return steps * members * batch / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--members", default="1,8,16")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    name = "cpu" if args.device == "cpu" else torch.cuda.get_device_name(args.device)
    print(f"torch {torch.__version__}, device {args.device} ({name}), {torch.get_num_threads()} "
          f"thread(s), batch 16, {args.steps} steps × median of {args.repeats}")
    columns = [(k, False) for k in KERNELS] + ([("grouped", True)] if args.device != "cpu" else [])
    print(f"{'K':>6}" + "".join(f"{k + (' +tuned' if tuned else ''):>16}" for k, tuned in columns)
          + "   (member-samples/s)")
    for members in (int(k) for k in args.members.split(",")):
        rates = []
        for kernel, tuned in columns:
            with torch.backends.cudnn.flags(enabled=True, benchmark=tuned):
                rates.append(rate(kernel, members, args.device, args.steps, args.repeats))
        print(f"{members:>6}" + "".join(f"{r:>16,.0f}" for r in rates), flush=True)


if __name__ == "__main__":
    main()
