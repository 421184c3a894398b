"""Does the compiled training step (``compile=True``) beat the engine's eager step?

The engine's eager step for the paper's MLP on Permuted MNIST with L2 Init (λ 1e-2) and Adam
(the hand-written backward, the penalty λ(θ − θ₀), torch's fused Adam) — or, with ``--method
shrink_perturb``, Shrink & Perturb with its noise drawn with Philox (``draws=philox``: the
perturbation and its draw captured in the compiled step; the eager step with its host
generators' draws, the default, is timed too); ``cbp`` likewise (generate-and-test as masks);
``snr`` likewise (resets and threshold adaptation as masks); ``concat_relu`` (autograd eager,
``torch.func``'s gradient compiled), ``redo`` (its recycling steps eager), ``weight_clip``,
``c_chain`` (its churn gradient through ``torch.func``), ``ewc`` (its Fisher-weighted pull, the
task-end consolidation eager), ``hare_tortoise``, ``plasticity_injection`` (its frozen heads read
from slots; ``--injections N`` injects N times before the timing, as N task ends would, so the
step carries 2N frozen heads) — against the same step
through :class:`plasticlab.step.compiled.CompiledStep` — what ``plasticlab run --compile``
runs (inductor on the CPU; CUDA graphs, ``mode="reduce-overhead"``, on CUDA). Both start from the
same network and take the same batches. Printed per K: each path's steady-state rate (best of
``--rounds``), their ratio, the first compiled call (compilation: with ``--fresh-cache`` from an
empty inductor cache, else from whatever this machine's cache holds), how far apart the
parameters are after one step from the same start (compilation reorders floating-point work:
the paths agree up to rounding), and, with ``--tasks N``, a whole N-task training of each (start,
compile and the task-end measurements included).

    python benchmarks/compiled_step.py --data-dir ../shared/data --members 1 8 32
    python benchmarks/compiled_step.py --data-dir ../shared/data --members 8 --fresh-cache --tasks 4
    python benchmarks/compiled_step.py --data-dir ../shared/data --members 8 --method shrink_perturb
    python benchmarks/compiled_step.py --data-dir ../shared/data --members 8 \
        --method plasticity_injection --injections 3
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def _fresh_cache_requested() -> bool:
    return "--fresh-cache" in sys.argv


if _fresh_cache_requested():  # before torch reads its configuration
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-")

import torch  # noqa: E402

from plasticlab.engine import EnsembleTraining, train_ensemble  # noqa: E402
from plasticlab.experiments.config import resolve_config  # noqa: E402
from plasticlab.run_config import Members  # noqa: E402

METHODS = {"l2_init": {"strength": 1e-2}, "shrink_perturb": {"draws": "philox"}, "concat_relu": {},
           "redo": {}, "weight_clip": {}, "cbp": {"draws": "philox"}, "snr": {"draws": "philox"},
           "c_chain": {}, "ewc": {}, "hare_tortoise": {}, "plasticity_injection": {}}


def config(tasks: int = 1, method: str = "l2_init", **params):
    """L2 Init (λ = 1e-2), or Shrink & Perturb (its defaults, Philox draws), + Adam (α = 1e-3)
    on Permuted MNIST, the paper's MLP and batch; ``params`` over the method's."""
    return resolve_config({"problem": "permuted_mnist", "method": method,
                           "params": {**METHODS[method], **params}, "lr": 1e-3, "tasks": tasks})


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


def step_rates(members: int, args, sync) -> tuple[float, float, float, float]:
    """(eager steps/s, compiled steps/s, first compiled call in s, max |θ_c − θ_e| after one
    step) for an ensemble of ``members``."""
    def training(compile, **params):
        return EnsembleTraining(Members.from_config(config(method=args.method, **params),
                                                    list(range(members))),
                                data_dir=args.data_dir, device=args.device, measure=False,
                                compile=compile)

    eager, compiled = training(False), training(True)
    for t in (eager, compiled):
        t.problem.start_task(0)
        for _ in range(args.injections):  # what a task end does to plasticity injection
            t.method.on_task_end(t.problem)
    batches = [eager.problem.batch(s) for s in range(200)]
    correct = torch.zeros(members, device=args.device)

    # the engine's step, as a task runs it (the compiled one where it applies); t: the updates so
    # far, counted across rounds so that a method acting every period steps acts as in a run
    taken = {"eager": 0, "compiled": 0, "generators": 0}

    def run(training, n, first, form):
        for i in range(n):
            x, y = batches[0 if first else (i + 1) % len(batches)]
            training.step(x, y, correct, taken[form])
            taken[form] += 1

    def run_eager(n, first=False):
        run(eager, n, first, "eager")

    def run_compiled(n, first=False):
        run(compiled, n, first, "compiled")

    if METHODS[args.method].get("draws") == "philox":
        generators = training(False, draws="generator")
        generators.problem.start_task(0)
        rate = best_rate(lambda n: run(generators, n, False, "generators"), args.steps, args.rounds, sync)
        print(f"K = {members}: eager with the host generators' draws (the default), "
              f"{rate * members * 16:,.0f} member-samples/s", flush=True)

    assert compiled.step.form == "compiled", compiled.step.eager_because
    start = time.perf_counter()
    run_compiled(1, first=True)
    sync()
    compile_s = time.perf_counter() - start
    run_eager(1, first=True)
    sync()
    apart = max(float((a.detach() - b.detach()).abs().max())
                for a, b in zip(eager.net.parameters(), compiled.net.parameters(), strict=True))
    return (best_rate(run_eager, args.steps, args.rounds, sync),
            best_rate(run_compiled, args.steps, args.rounds, sync), compile_s, apart)


def whole_run(members: int, tasks: int, compile: bool, args, sync) -> float:
    """Seconds for a whole ``tasks``-task training of ``members`` (measurements on)."""
    sync()
    start = time.perf_counter()
    train_ensemble(Members.from_config(config(tasks, args.method), list(range(members))),
                   data_dir=args.data_dir,
                   device=args.device, compile=compile)
    sync()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--members", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--method", choices=sorted(METHODS), default="l2_init")
    parser.add_argument("--tasks", type=int, default=0,
                        help="also time a whole training of this many tasks, eager and compiled")
    parser.add_argument("--injections", type=int, default=0,
                        help="plasticity_injection: inject this many times before the timing")
    parser.add_argument("--fresh-cache", action="store_true",
                        help="compile from an empty inductor cache (a new TORCHINDUCTOR_CACHE_DIR)")
    args = parser.parse_args()
    if args.injections and args.method != "plasticity_injection":
        parser.error("--injections is plasticity_injection's")
    if args.device == "cpu":
        torch.set_num_threads(1)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print(f"{args.method} ({config(method=args.method).params}), Adam; "
          f"device {args.device}, {torch.get_num_threads()} thread(s), batch 16, "
          f"torch {torch.__version__}, "
          + (f"{args.injections} injection(s) before the timing, " if args.injections else "")
          + "inductor cache "
          f"{'fresh' if args.fresh_cache else os.environ.get('TORCHINDUCTOR_CACHE_DIR', 'default')}")
    print("| K | eager (member-samples/s) | compiled (member-samples/s) | compiled/eager | "
          "first compiled call (s) | max |θ_compiled − θ_eager| after one step |"
          + (f" whole {args.tasks}-task run, eager / compiled (s) |" if args.tasks else ""))
    print("|---:|---:|---:|---:|---:|---:|" + ("---:|" if args.tasks else ""))
    for members in args.members:
        eager, compiled, compile_s, apart = step_rates(members, args, sync)
        per_step = members * 16
        row = (f"| {members} | {eager * per_step:,.0f} | {compiled * per_step:,.0f} | "
               f"{compiled / eager:.2f} | {compile_s:.1f} | {apart:.1e} |")
        if args.tasks:
            row += (f" {whole_run(members, args.tasks, False, args, sync):.1f} / "
                    f"{whole_run(members, args.tasks, True, args, sync):.1f} |")
        print(row, flush=True)


if __name__ == "__main__":
    main()
