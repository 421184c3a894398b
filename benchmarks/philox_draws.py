"""What drawing every member's noise with Philox (``plasticlab.philox``) costs against today's
per-member ``torch.Generator`` draws.

Shrink & Perturb draws a fresh θ from the init distribution for every member at every step:
for the paper's MLP (784-100-100-100-10, weights and biases: 99,710 numbers per member) that is
today ``nets.init.draw_members("torch_default", …)`` layer by layer — member by member on the
host, from its own CPU generator, then copied to the device. The Philox form draws all members'
numbers in one batch of tensor operations on the device (``philox.uniform``, one flat draw per
member, cut into the layers and scaled by each layer's bound). The same for standard normals:
``torch.randn(…, generator=g)`` per member against ``philox.normal``. Prints the setup and, per
K, member-elements/s of each form (best of ``--rounds``), in one run.

    python benchmarks/philox_draws.py [--device cuda] [--members 1,8,32,256]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from plasticlab import philox
from plasticlab.device import to_device
from plasticlab.nets.init import draw_members

LAYERS = [((100, 784), 784, 100), ((100, 100), 100, 100), ((100, 100), 100, 100), ((10, 100), 100, 10)]
"""(weight shape, fan in, fan out) of the paper's MLP."""
ELEMENTS = sum(math.prod(shape) + shape[0] for shape, _, _ in LAYERS)


def generator_uniform(generators, device, step):
    """Today's draw: every layer's (weight, bias) from ``draw_members``, member by member."""
    return [t for shape, fan_in, fan_out in LAYERS
            for t in draw_members("torch_default", shape, fan_in, fan_out, generators, device)]


def philox_uniform(keys, device, step):
    """Every member's 99,710 numbers as one Philox draw of U(−1, 1), cut into the layers'
    (weight, bias) and each scaled by its bound 1/√fan_in."""
    flat = philox.uniform(keys, step, (ELEMENTS,), device, low=-1.0, high=1.0)
    out, start = [], 0
    for shape, fan_in, _ in LAYERS:
        for part in (shape, shape[:1]):
            n = math.prod(part)
            out.append(flat[:, start:start + n].view(len(keys), *part).mul_(1.0 / math.sqrt(fan_in)))
            start += n
    return out


def generator_normal(generators, device, step):
    """Today's form of a normal draw: ``torch.randn`` per member from its generator, stacked
    and copied to the device."""
    return to_device(torch.stack([torch.randn(ELEMENTS, generator=g) for g in generators]), device)


def philox_normal(keys, device, step):
    """Every member's 99,710 standard normals as one Philox draw."""
    return philox.normal(keys, step, (ELEMENTS,), device)


def rate(draw, source, members: int, device: torch.device, rounds: int) -> float:
    """Member-elements/s of ``draw(source, device, step)``, best of ``rounds`` timed blocks of
    enough draws to take ~0.2 s at 10⁸ elements/s."""
    repeats = max(1, 20_000_000 // (members * ELEMENTS))
    draw(source, device, 0)  # warm-up: allocator, kernels
    best, step = math.inf, 1
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            draw(source, device, step)
            step += 1
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, (time.perf_counter() - start) / repeats)
    return members * ELEMENTS / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--members", default="1,8,32,256", help="comma-separated K values")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the engine uses 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} "
          f"thread(s); the paper's MLP 784-100-100-100-10, {ELEMENTS:,} elements per member; "
          f"generators on the host (cpu), Philox on {device}; best of {args.rounds} rounds; "
          f"member-elements/s")
    print("| K | uniform: torch.Generator per member | Philox | × | normal: torch.randn per member "
          "| Philox | × |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for members in (int(k) for k in args.members.split(",")):
        seeds = list(range(members))
        generators = [torch.Generator().manual_seed(s) for s in seeds]
        keys = philox.member_keys(seeds, "benchmark", device)
        row = []
        for today, ours in ((generator_uniform, philox_uniform), (generator_normal, philox_normal)):
            a = rate(today, generators, members, device, args.rounds)
            b = rate(ours, keys, members, device, args.rounds)
            row += [f"{a / 1e6:,.1f}M", f"{b / 1e6:,.1f}M", f"{b / a:.2f}"]
        print(f"| {members} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
