"""Does compiling the whole training step beat the engine's eager step?

The engine's eager step for the paper's MLP on Permuted MNIST with L2 Init and Adam (the
hand-written backward, the penalty λ(θ − θ₀), torch's fused Adam) against the same step
written as one function — forward, the hand-written backward's formulas, λ(θ − θ₀), Adam —
under ``torch.compile`` (inductor; ``--mode`` picks its mode, ``--cpp-wrapper`` its C++
wrapper). Both start from the same network and take the same batches; the script prints the
setup, the compile time, each path's steady-state rate (best of ``--rounds``), their ratio,
and how far apart their parameters are after one step from the same start (compilation
reorders floating-point work, so the paths agree up to rounding, not to the bit; Adam's first
steps, ±α wherever a gradient is non-zero, turn a rounding-level difference in a near-zero
gradient into one of order α).

    python benchmarks/compiled_step.py --data-dir ../shared/data --members 8 32
"""

from __future__ import annotations

import argparse
import time

import torch

from plasticlab.engine import EnsembleTraining
from plasticlab.experiments.config import resolve_config


def training(members: int, data_dir, device: str) -> EnsembleTraining:
    """An L2 Init (λ = 1e-2) + Adam (α = 1e-3) ensemble of ``members`` on Permuted MNIST."""
    config = resolve_config({"problem": "permuted_mnist", "method": "l2_init",
                             "params": {"strength": 1e-2}, "lr": 1e-3, "tasks": 1})
    return EnsembleTraining(config, list(range(members)), data_dir=data_dir, device=device,
                            measure=False)


def compiled_step(params: list[torch.Tensor], initial: list[torch.Tensor], strength: float,
                  lr: float, batch: int, mode: str | None):
    """One training step as a single function under ``torch.compile``: returns
    ``step(m, v, t, x, y)`` that updates ``params``, the moments ``m``, ``v`` in place (``t``:
    the step count as a 0-d tensor, so it does not recompile) and returns each member's number
    of correct predictions."""
    beta1, beta2, eps = 0.9, 0.999, 1e-8

    def step(m, v, t, x, y):
        weights, biases = params[0::2], params[1::2]
        inputs = [x]
        for w, b in zip(weights[:-1], biases[:-1], strict=True):
            inputs.append(torch.relu(torch.baddbmm(b.unsqueeze(1), inputs[-1], w.transpose(1, 2))))
        logits = torch.baddbmm(biases[-1].unsqueeze(1), inputs[-1], weights[-1].transpose(1, 2))
        delta = (torch.softmax(logits, -1)
                 - torch.nn.functional.one_hot(y, logits.shape[-1]).to(logits.dtype)) / batch
        grads: list = [None] * len(params)
        for layer in range(len(weights) - 1, -1, -1):
            grads[2 * layer] = torch.bmm(delta.transpose(1, 2), inputs[layer])
            grads[2 * layer + 1] = delta.sum(1)
            if layer:
                delta = torch.bmm(delta, weights[layer]) * (inputs[layer] > 0)
        bc1, bc2_sqrt = 1 - beta1 ** t, torch.sqrt(1 - beta2 ** t)
        for p, g, mm, vv, p0 in zip(params, grads, m, v, initial, strict=True):
            g = g + strength * (p - p0)
            mm.mul_(beta1).add_(g, alpha=1 - beta1)
            vv.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            p.sub_(lr * (mm / bc1) / (vv.sqrt() / bc2_sqrt + eps))
        return (logits.argmax(-1) == y).sum(1)

    return torch.compile(step, dynamic=False, mode=mode)


def best_rate(run, steps: int, rounds: int, sync) -> float:
    """The best of ``rounds`` timings of ``run(steps)``, in steps/s."""
    best = 0.0
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        run(steps)
        sync()
        best = max(best, steps / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--mode", default=None, help="torch.compile mode (default: inductor's default)")
    parser.add_argument("--cpp-wrapper", action="store_true", help="inductor's C++ wrapper")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._inductor.config.cpp_wrapper = args.cpp_wrapper
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print(f"device {args.device}, {torch.get_num_threads()} thread(s), batch 16, "
          f"torch {torch.__version__}, compile mode {args.mode or 'default'}"
          f"{', C++ wrapper' if args.cpp_wrapper else ''}")
    print("| K | eager (member-samples/s) | compiled (member-samples/s) | compiled/eager | "
          "compile (s) | max |θ_compiled − θ_eager| after one step |")
    print("|---:|---:|---:|---:|---:|---:|")
    for members in args.members:
        eager = training(members, args.data_dir, args.device)
        eager.problem.start_task(0)
        batches = [eager.problem.batch(s) for s in range(200)]
        params = [p for b in eager.net.blocks for p in (b.affine.weight, b.affine.bias)]
        start_state = [p.detach().clone() for p in params]

        def run_eager(n, eager=eager, batches=batches, first=False):
            for i in range(n):
                x, y = batches[0 if first else (i + 1) % len(batches)]
                eager.hand.step(x, y)
                eager.method.add_penalty_grad()
                eager.optimizer.step()

        compiled_params = [t.clone() for t in start_state]
        m = [torch.zeros_like(p) for p in compiled_params]
        v = [torch.zeros_like(p) for p in compiled_params]
        t = torch.zeros((), device=args.device)
        step = compiled_step(compiled_params, [t.clone() for t in start_state], 1e-2, 1e-3, 16,
                             args.mode)
        start = time.perf_counter()
        with torch.no_grad():
            t.add_(1)
            step(m, v, t, *batches[0])
        sync()
        compile_s = time.perf_counter() - start

        def run_compiled(n, step=step, m=m, v=v, t=t, batches=batches):
            with torch.no_grad():
                for i in range(n):
                    t.add_(1)
                    step(m, v, t, *batches[(i + 1) % len(batches)])

        # Both paths: batch 0 (the compiled path's compiling step), then the same timed steps.
        run_eager(1, first=True)
        sync()
        apart = max(float((a.detach() - b).abs().max()) for a, b in zip(params, compiled_params, strict=True))
        eager_rate = best_rate(run_eager, args.steps, args.rounds, sync)
        compiled_rate = best_rate(run_compiled, args.steps, args.rounds, sync)
        per_step = members * 16
        print(f"| {members} | {eager_rate * per_step:,.0f} | {compiled_rate * per_step:,.0f} | "
              f"{compiled_rate / eager_rate:.2f} | {compile_s:.1f} | {apart:.1e} |")


if __name__ == "__main__":
    main()
