"""Speed of the ensemble engine against a plain PyTorch loop and the machine's own limit.

    python benchmarks/speed.py --data-dir ../shared/data [--csv results/speed.csv]
    python benchmarks/speed.py --data-dir ../shared/data --device cuda   # on a GPU

In one run, on this machine, one torch thread (``--device cuda``: on the GPU, with K up to
1024, the ``float32`` matmul peak as the limit and ``plasticlab run --device cuda`` with 256
members):
  (a) a plain per-run loop: ``nn.Sequential`` + ``torch.optim.Adam``, the L2 Init penalty in the
      loss, online accuracy counted per step — the way a single run is usually written;
  (b) plasticlab's engine at K = 1, 4, 8, 16, 32 members per process, for Baseline, L2 Init,
      Continual Backprop and ReDo (task-end measurements off: training speed only); for the
      MLP also L2 Init with autograd's backward instead of the hand-written one (the engine's
      default for the MLP, :mod:`plasticlab.step.mlp_backprop`), the plain form it replaces,
      and L2 Init with the compiled step (``--compile``, :mod:`plasticlab.step.compiled`,
      steady state);
  (c) the single-core sgemm peak, which bounds each network's forward+backward throughput;
  (d) end to end, start-up included: ``plasticlab run`` of L2 Init with 8 members for 8 full
      Permuted MNIST tasks (a fresh process: imports, data loading, the run, the store), with
      its task-end measurements on (the default) and off;
  (e) the peer: the ``torch.func`` ensemble a PyTorch user would write (``peer_ensemble.py``),
      eager and under ``torch.compile``, at ``--peer-members`` K (steady state; the compile time
      is printed apart).
For the Permuted MNIST MLP and the Random Label CIFAR CNN, batch 16. Prints member-samples/s,
the ratio to (a), and the fraction of the sgemm bound; writes the table as CSV. Every figure is
the best of ``--repeats`` rounds, each round measuring every figure once: this VM's speed
drifts by tens of percent within minutes, so each figure's samples are spread over the whole
run, and the best of them is the least disturbed estimate of each.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import peer_ensemble
import torch
from torch import nn

from plasticlab import L2Init
from plasticlab.experiments.bench import samples_per_second
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.presets import FIELD_OPTIMIZERS
from plasticlab.problems import get_problem

PROBLEMS = peer_ensemble.PROBLEMS  # the same streams for every row
# each row's config beside the problem's: the method and its parameters (Adam, α 1e-3)
METHODS = {"baseline": {}, "l2_init": {"params": {"strength": 1e-2}},
           "cbp": {"params": {"replacement_rate": 1e-4}}, "redo": {"params": {"period": 625}},
           # the field since the paper (SPEC §10) at its reference values; --methods picks them
           "snr": {}, "hare_tortoise": {}, "parseval": {}, "swr": {}, "full_reset": {},
           "head_reset": {}, "fire": {},
           # the other toolkits' methods (issue 47) at their defaults; --methods picks them
           "weight_clip": {}, "normalize_project": {}, "spectral": {}, "wasserstein_init": {},
           # UPGD is an optimizer: the Baseline trained by it, at its reference settings
           **{name: {"method": "baseline", "optimizer": name, "lr": lr, "optimizer_params": settings}
              for name, (lr, settings) in FIELD_OPTIMIZERS.items()}}
DEFAULT_METHODS = ("baseline", "l2_init", "cbp", "redo")


def sgemm_peak(device: str = "cpu", repeats: int = 20) -> float:
    """GFLOP/s of a square float32 matmul (best of a few): 1024² on one CPU thread, 8192² on a
    GPU (TF32 off, as PyTorch's default for matmuls)."""
    n = 1024 if device == "cpu" else 8192
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = float("inf")
    for _ in range(3):
        _sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        _sync(device)
        best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * n ** 3 / best / 1e9


def _sync(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize(device)


def flops_per_sample(arch: str) -> float:
    """Forward+backward FLOPs of one example (≈ 3 × the forward's multiply-adds × 2)."""
    if arch == "mlp":
        macs = 784 * 100 + 100 * 100 + 100 * 10
    else:
        macs = 28 * 28 * 16 * 75 + 10 * 10 * 16 * 400 + 400 * 100 + 100 * 100 + 100 * 10
    return 3 * 2 * macs


def plain_loop(arch: str, steps: int, data_dir, device: str = "cpu") -> float:
    """Member-samples/s of the plain single-run loop (a)."""
    name, params = PROBLEMS[arch]
    stream = get_problem(name)([0], tasks=1, steps_per_task=steps, data_dir=data_dir, device=device,
                               **params)
    stream.start_task(0)
    batches = [tuple(t[0] for t in stream.batch(s)) for s in range(steps)]
    torch.manual_seed(0)
    model = peer_ensemble.plain_model(arch).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    reg = L2Init(model, strength=1e-2)
    correct = 0
    start = time.perf_counter()
    for x, y in batches:
        logits = model(x)
        correct += (logits.argmax(1) == y).sum().item()
        loss = nn.functional.cross_entropy(logits, y) + reg()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    _sync(device)
    return steps * 16 / (time.perf_counter() - start)


def engine(arch: str, method: str, members: int, steps: int, data_dir, backprop: str = "auto",
           device: str = "cpu", compile: bool = False) -> float:
    """Member-samples/s of plasticlab's engine (b), start-up excluded (the task's start and its
    final read-back, which waits for the device, included). ``compile``: the compiled step
    (``--compile``), steady state: a short training of the same ensemble first compiles it
    (the process then reuses the compiled step; the compile time is in compiled_step.py's
    table)."""
    name, params = PROBLEMS[arch]

    def config(steps):
        return resolve_config({"problem": name, "method": method, **METHODS[method],
                               "tasks": 1, "steps_per_task": steps, "problem_params": params})

    if compile:
        samples_per_second(config(3), members, data_dir, device=device, compile=True)
    return samples_per_second(config(steps), members, data_dir, backprop=backprop, device=device,
                              compile=compile)


def cli_run(data_dir, members: int = 8, tasks: int = 8, measure: bool = True,
            device: str = "cpu") -> float:
    """Member-samples/s of a whole ``plasticlab run`` in a fresh process (d)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "plasticlab.cli", "run", "--problem", "permuted_mnist",
               "--method", "l2_init", "--set", "strength=1e-2", "--seeds", f"0-{members - 1}",
               "--tasks", str(tasks), "--out", out, "--no-progress", "--json", "--device", device]
        cmd += ["--data-dir", data_dir] if data_dir else []
        cmd += [] if measure else ["--no-measure"]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - start
    return members * tasks * 625 * 16 / seconds


COMPILE_SECONDS: dict[tuple[str, int], float] = {}
"""Warm-up seconds of the compiled peer per (arch, K), mostly compilation: printed apart."""


def peer(arch: str, members: int, steps: int, data_dir, compiled: bool, device: str = "cpu") -> float:
    """Member-samples/s of the ``torch.func`` ensemble a user would write (e), eager or under
    ``torch.compile`` (steady state; the compile time is kept in :data:`COMPILE_SECONDS`)."""
    rate, warm = peer_ensemble.samples_per_second(arch, members, steps, data_dir, compiled=compiled,
                                                  device=device)
    if compiled:
        COMPILE_SECONDS[(arch, members)] = max(COMPILE_SECONDS.get((arch, members), 0.0), warm)
    return rate


def measurements(args, members: list[int]) -> list[tuple[str, str, int, object]]:
    """Every figure of the table: (arch, label, K, a function returning member-samples/s)."""
    out = []
    for arch, steps in (("mlp", args.mlp_steps), ("cnn", args.cnn_steps)):
        if arch not in args.archs:
            continue
        out.append((arch, "plain_loop_l2_init", 1,
                    partial(plain_loop, arch, steps, args.data_dir, args.device)))
        for k in args.peer_members:
            for compiled in (False, True):
                label = "torch_func_l2_init" + (", compiled" if compiled else "")
                out.append((arch, label, k, partial(peer, arch, k, steps, args.data_dir, compiled,
                                                    args.device)))
        variants = [(method, "auto") for method in METHODS if method in args.methods]
        if arch == "mlp" and "l2_init" in args.methods:
            variants += [("l2_init", "autograd"), ("l2_init", "compiled")]
        for method, form in variants:
            label = method if form == "auto" else f"{method}, {form}"
            backprop = "autograd" if form == "autograd" else "auto"
            out += [(arch, label, k, partial(engine, arch, method, k, steps, args.data_dir, backprop,
                                             args.device, form == "compiled"))
                    for k in members]
    for measure in (True, False) if "mlp" in args.archs else ():
        label = "cli_run_l2_init" + ("" if measure else "_no_measure")
        out.append(("mlp", label, args.cli_members,
                    partial(cli_run, args.data_dir, args.cli_members, measure=measure, device=args.device)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--device", default="cpu", help="cpu (one thread) or cuda[:N]")
    parser.add_argument("--members", help="K values (default 1,4,8,16,32 on CPU, 1,64,256,1024 on CUDA)")
    parser.add_argument("--cli-members", type=int,
                        help="members of the end-to-end `plasticlab run` (default 8 on CPU, 256 on CUDA)")
    parser.add_argument("--mlp-steps", type=int, default=400)
    parser.add_argument("--cnn-steps", type=int, default=40)
    parser.add_argument("--csv", default="results/speed.csv")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many measurements")
    parser.add_argument("--archs", default="mlp,cnn", help="which networks: mlp, cnn or both")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"which methods (default: {', '.join(DEFAULT_METHODS)}; any of "
                             f"{', '.join(METHODS)})")
    parser.add_argument("--peer-members", default="8",
                        help="K values of the torch.func peer ensemble, eager and compiled "
                             "(default 8; empty: none)")
    parser.add_argument("--verbose", action="store_true", help="print each figure as it is measured")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cpu = args.device == "cpu"
    args.archs = [a for a in ("mlp", "cnn") if a in args.archs.split(",")]
    args.methods = args.methods.split(",")
    unknown = set(args.methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {sorted(unknown)}: choose from {', '.join(METHODS)}")
    members = [int(k) for k in (args.members or ("1,4,8,16,32" if cpu else "1,64,256,1024")).split(",")]
    args.cli_members = args.cli_members or (8 if cpu else 256)
    args.peer_members = [int(k) for k in args.peer_members.split(",") if k.strip()]
    where = "cpu" if cpu else f"{args.device} ({torch.cuda.get_device_name(args.device)})"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread, device {where}, batch 16, "
          f"best of {args.repeats} rounds", flush=True)
    # Rounds: every figure once per round, so each figure's samples are spread over the whole
    # run and a slow spell of the VM cannot land on one figure's every sample.
    table = measurements(args, members)
    rates = [0.0] * len(table)
    peak = 0.0
    for round_ in range(args.repeats):
        peak = max(peak, sgemm_peak(args.device))
        for i, (arch, label, k, measure) in enumerate(table):
            rate = measure()
            rates[i] = max(rates[i], rate)
            if args.verbose:  # each figure as it is measured: a run cut short keeps them
                print(f"  {arch} {label} K={k}: {rate:,.0f}", flush=True)
        print(f"round {round_ + 1}/{args.repeats} done", flush=True)
    print(f"sgemm peak {peak:.1f} GFLOP/s " + ("(1024², one core)" if cpu else "(8192², TF32 off)"))
    rows = []
    for arch in args.archs:
        bound = peak * 1e9 / flops_per_sample(arch)
        plain = next(r for (a, label, _, _), r in zip(table, rates, strict=True)
                     if a == arch and label == "plain_loop_l2_init")
        print(f"\n{arch}: bound {bound:,.0f} samples/s ({flops_per_sample(arch) / 1e6:.2f} MFLOP per "
              f"sample fwd+bwd); plain loop (L2 Init, torch.optim.Adam) {plain:,.0f} samples/s")
        print(f"  {'method':<28}{'K':>4}{'member-samples/s':>18}{'× plain':>9}{'of bound':>10}")
        for (a, label, k, _), rate in zip(table, rates, strict=True):
            if a != arch:
                continue
            rows.append({"device": args.device, "arch": arch, "method": label, "members": k,
                         "samples_per_s": rate,
                         "ratio_to_plain": rate / plain, "fraction_of_bound": rate / bound})
            if label != "plain_loop_l2_init":
                print(f"  {label:<28}{k:>4}{rate:>18,.0f}{rate / plain:>9.2f}{rate / bound:>10.1%}")
    if "mlp" in args.archs:
        print(f"  (cli_run: a whole `plasticlab run`, L2 Init, K={args.cli_members}, 8 tasks × 625 "
              "steps, start-up included, task-end measurements on / off)")
    if COMPILE_SECONDS:
        print("  (torch_func: stack_module_state + vmap(grad(functional_call)) + torch.optim.Adam("
              "foreach), steady state; compiled warm-up, mostly compilation: "
              + ", ".join(f"{a} K={k} {t:.0f} s" for (a, k), t in sorted(COMPILE_SECONDS.items())) + ")")
    path = Path(args.csv)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
