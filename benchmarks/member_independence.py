"""Does a seed's run depend on its ensemble? Member k of ``--seeds`` against seed k run alone.

    python benchmarks/member_independence.py --data-dir ../shared/data [--tasks 6 --steps 800]

For each configuration (Permuted MNIST MLP: Baseline, L2 Init, L1 Init, Huber Init with Adam,
Baseline and L2 Init with SGD, with the hand-written and autograd backward; Random Label CIFAR
CNN: Baseline and L2 Init with Adam, ``--cnn-tasks`` × ``--cnn-steps``), trains the ensemble of
seeds 0…7 and seed ``--member`` alone through :func:`plasticlab.engine.train_ensemble` (one
torch thread unless ``--threads``; task-end measurements off: they do not change training), and
prints the first task after which member ``--member``'s parameters or online accuracy differ
from the lone run's (``-``: none, bit for bit), the largest gap in online accuracy over the
tasks (points) and the largest parameter difference at the end of any task.

``--every-method``: instead, every registered method with ``--optimizer`` (default Adam; the
methods' defaults, with settings
that make replacement, resets and consolidation happen within a short run) on the MLP,
``--tasks`` × ``--steps`` (default here 3 × 400), or with ``--arch cnn`` on the CNN,
``--cnn-tasks`` × ``--cnn-steps``.

``--cost``: instead, what member alignment costs: one Adam step over the MLP's parameters at
K = 8 with L2 Init's decay in Adam's pass, ``Adam(member_dim=False)`` (whole tensors, as before the fix)
against ``member_dim=True`` (the engine's), with the gradients in the same buffers at every step
(the hand-written backward) or new tensors (autograd); rounds interleaved, best of each.

``--upgd-cost``: instead, what UPGD's per-member sigmoid costs: its scaled utility s over the
MLP's parameters at K = ``--seeds``, one sigmoid over each whole ``[K, …]`` tensor (as before
the fix) against :func:`plasticlab.optim.upgd.scaled_utility` (member by member), and a whole
UPGD step beside them for scale; rounds interleaved, best of each.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import torch

from plasticlab import engine
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS
from plasticlab.optim import UPGD, Adam
from plasticlab.optim.upgd import scaled_utility, utility_max
from plasticlab.run_config import Members

MLP = [
    ("baseline + adam", "baseline", {}, "adam", "manual"),
    ("baseline + adam, autograd", "baseline", {}, "adam", "autograd"),
    ("l2_init + adam", "l2_init", {"strength": 1e-2}, "adam", "manual"),
    ("l2_init + adam, autograd", "l2_init", {"strength": 1e-2}, "adam", "autograd"),
    ("l1_init + adam", "l1_init", {"strength": 1e-4}, "adam", "manual"),
    ("huber_init + adam", "huber_init", {"strength": 1e-2, "delta": 0.01}, "adam", "manual"),
    ("baseline + sgd", "baseline", {}, "sgd", "manual"),
    ("l2_init + sgd", "l2_init", {"strength": 1e-2}, "sgd", "manual"),
]
CNN = [
    ("cnn baseline + adam", "baseline", {}, "adam", "autograd"),
    ("cnn l2_init + adam", "l2_init", {"strength": 1e-2}, "adam", "autograd"),
]
LR = {"adam": 1e-3, "sgd": 1e-2}
# --every-method: settings under which each method's own mechanism acts within a few hundred steps.
ACTIVE = {"cbp": {"replacement_rate": 1e-3, "maturity": 50}, "redo": {"period": 100, "threshold": 0.1},
          "ewc": {"fisher_samples": 64}, "l2_init_ewc": {"fisher_samples": 64},
          "hare_tortoise": {"reset_period": 300}, "swr": {"period": 200},
          "snr": {"initial_threshold": 100, "adapt_period": 200}}


def train_recording(config, seeds, data_dir, backprop: str, threads: int = 1):
    """Train one ensemble; return its result and every parameter ``[K, …]`` at each task end."""
    built, snapshots = [], []

    def build_and_keep(*args, **kwargs):
        built.append(engine_build(*args, **kwargs))
        return built[-1]

    def snapshot(task, accuracies):
        snapshots.append([p.detach().clone() for p in built[-1].parameters()])

    engine_build = engine.build_network
    with mock.patch.object(engine, "build_network", build_and_keep):
        result = engine.train_ensemble(Members.from_config(config, seeds),
                                       data_dir=data_dir, measure=False, threads=threads,
                                       backprop=backprop, on_task_end=snapshot)
    return result, snapshots


def compare(config, seeds: list[int], member: int, data_dir, backprop: str, threads: int = 1) -> dict:
    """Member ``seeds.index(member)`` of the ensemble ``seeds`` against ``member`` alone:
    ``first_task`` (first task end where the parameters or the online accuracy differ, None if
    none), ``accuracy_gap`` (largest |Δ online accuracy| over the tasks, in points),
    ``max_param_gap`` (largest |Δθ| at any task end), ``equal`` (bit for bit throughout)."""
    k = seeds.index(member)
    together, params_together = train_recording(config, seeds, data_dir, backprop, threads)
    alone, params_alone = train_recording(config, [member], data_dir, backprop, threads)
    acc_t = together.members[k].task_online_accuracy
    acc_a = alone.members[0].task_online_accuracy
    first, param_gap = None, 0.0
    for task, (ps_t, ps_a) in enumerate(zip(params_together, params_alone, strict=True)):
        same = acc_t[task] == acc_a[task]
        for p, q in zip(ps_t, ps_a, strict=True):
            same = same and torch.equal(p[k], q[0])
            param_gap = max(param_gap, float((p[k] - q[0]).abs().max()))
        if not same and first is None:
            first = task
    gap = max(abs(a - b) for a, b in zip(acc_t, acc_a, strict=True)) * 100
    return {"first_task": first, "accuracy_gap": gap, "max_param_gap": param_gap,
            "equal": first is None}


def adam_step_cost(rounds: int = 25, steps: int = 200) -> dict:
    """Seconds per Adam step, best of ``rounds``, for (member_dim, new gradient tensors)."""
    shapes = [(8, 100, 784), (8, 100), (8, 100, 100), (8, 100), (8, 10, 100), (8, 10)]
    cases = {}
    for member_dim in (False, True):
        for fresh in (False, True):
            params = [torch.randn(s) for s in shapes]
            grads = [[torch.randn(s) * 1e-3 for s in shapes] for _ in range(2)]
            cases[member_dim, fresh] = (Adam(params, lr=1e-3, weight_decay=1e-2, member_dim=member_dim),
                                        params, grads)
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for (member_dim, fresh), (opt, params, grads) in cases.items():
            for p, g in zip(params, grads[0], strict=True):
                p.grad = g
            start = time.perf_counter()
            for i in range(steps):
                if fresh:
                    for p, g in zip(params, grads[i % 2], strict=True):
                        p.grad = g
                opt.step()
            best[member_dim, fresh] = min(best[member_dim, fresh], (time.perf_counter() - start) / steps)
    return best


def whole_tensor_scaled_utility(utilities, step: int, beta: float) -> list[torch.Tensor]:
    """UPGD's s as it was before the per-member sigmoid: one sigmoid over each whole tensor."""
    eta = utility_max(utilities, member_dim=True)
    positive = eta > 0
    safe = torch.where(positive, eta, torch.ones_like(eta))
    out = []
    for u in utilities:
        shape = (-1, *([1] * (u.dim() - 1)))
        s = torch.sigmoid(u / (1 - beta ** step) / safe.view(shape))
        out.append(torch.where(positive.view(shape), s, torch.zeros_like(s)))
    return out


def upgd_scale_cost(members: int = 8, rounds: int = 25, steps: int = 100) -> dict:
    """Seconds, best of ``rounds``: UPGD's scaled utility over the MLP's parameters at K =
    ``members``, whole-tensor and per member, and one whole UPGD step (member by member)."""
    shapes = [(members, 100, 784), (members, 100), (members, 100, 100), (members, 100),
              (members, 10, 100), (members, 10)]
    params = [torch.randn(s) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape) * 1e-3
    utilities = [torch.randn(s) * 1e-4 for s in shapes]
    generators = [torch.Generator().manual_seed(k) for k in range(members)]
    opt = UPGD(params, lr=1e-2, member_dim=True, generators=generators)
    cases = {"whole": lambda: whole_tensor_scaled_utility(utilities, 10, 0.9999),
             "per member": lambda: scaled_utility(utilities, 10, 0.9999, member_dim=True),
             "UPGD step": opt.step}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(rounds):
        for name, call in cases.items():
            start = time.perf_counter()
            for _ in range(steps):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    return best


def configurations(args) -> list[tuple[str, object, str]]:
    if args.every_method:
        cnn = args.arch == "cnn"
        problem = "random_label_cifar" if cnn else "permuted_mnist"
        tasks, steps = (args.cnn_tasks, args.cnn_steps) if cnn else (args.tasks or 3, args.steps or 400)
        return [(f"{args.arch} {name} + {args.optimizer} ({tasks}×{steps})",
                 resolve_config({"problem": problem, "method": name, "params": ACTIVE.get(name, {}),
                                 "optimizer": args.optimizer, "tasks": tasks, "steps_per_task": steps}),
                 "auto")
                for name in sorted(METHODS)]
    args.tasks, args.steps = args.tasks or 6, args.steps or 800
    out = []
    for rows, problem, tasks, steps, extra in (
            (MLP, "permuted_mnist", args.tasks, args.steps, {}),
            (CNN, "random_label_cifar", args.cnn_tasks, args.cnn_steps, {})):
        for label, method, params, optimizer, backprop in rows:
            config = resolve_config({"problem": problem, "method": method, "params": params,
                                     "optimizer": optimizer, "lr": LR[optimizer], "tasks": tasks,
                                     "steps_per_task": steps, **extra})
            out.append((f"{label} ({tasks}×{steps})", config, backprop))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--tasks", type=int, help="MLP tasks (default 6; 3 with --every-method)")
    parser.add_argument("--steps", type=int, help="MLP steps per task (default 800; 400 with --every-method)")
    parser.add_argument("--cnn-tasks", type=int, default=3)
    parser.add_argument("--cnn-steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=8, help="the ensemble: seeds 0…N−1")
    parser.add_argument("--member", type=int, default=3)
    parser.add_argument("--only", help="run only configurations whose label contains this")
    parser.add_argument("--every-method", action="store_true", help="every registered method with Adam")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the engine's default: 1)")
    parser.add_argument("--arch", choices=("mlp", "cnn"), default="mlp", help="with --every-method")
    parser.add_argument("--optimizer", default="adam", help="with --every-method (its default lr)")
    parser.add_argument("--cost", action="store_true", help="the Adam step with and without member alignment")
    parser.add_argument("--upgd-cost", dest="upgd_cost", action="store_true",
                        help="UPGD's scaled utility with one sigmoid per tensor and per member")
    args = parser.parse_args()
    if args.upgd_cost:
        torch.set_num_threads(1)
        best = upgd_scale_cost(args.seeds)
        print(f"torch {torch.__version__}, 1 thread: UPGD over the MLP's parameters at K = {args.seeds}, "
              "best of 25 rounds")
        print(f"  scaled utility s, one sigmoid per whole tensor {best['whole'] * 1e6:6.0f} µs")
        print(f"  scaled utility s, sigmoid member by member     {best['per member'] * 1e6:6.0f} µs   "
              f"{(best['per member'] - best['whole']) * 1e6:+5.0f} µs")
        print(f"  a whole UPGD step (member by member)           {best['UPGD step'] * 1e6:6.0f} µs")
        return
    if args.cost:
        torch.set_num_threads(1)
        best = adam_step_cost()
        print(f"torch {torch.__version__}, 1 thread: one Adam step, MLP at K = 8, decay in Adam's pass, "
              "best of 25 rounds")
        for fresh, label in ((False, "same gradient buffers (hand-written backward)"),
                             (True, "new gradient tensors (autograd)")):
            whole, aligned = best[False, fresh] * 1e6, best[True, fresh] * 1e6
            print(f"  {label:<48} whole tensors {whole:5.0f} µs   member-aligned {aligned:5.0f} µs   "
                  f"{aligned - whole:+4.0f} µs")
        return
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{args.threads} thread(s); member {args.member} of seeds 0-{args.seeds - 1} "
          f"vs seed {args.member} alone")
    print(f"{'configuration':<44}{'first task':>11}{'acc gap (pts)':>15}{'max |Δθ|':>11}{'s':>6}")
    for label, config, backprop in configurations(args):
        if args.only and args.only not in label:
            continue
        start = time.perf_counter()
        row = compare(config, list(range(args.seeds)), args.member, args.data_dir, backprop, args.threads)
        first = "-" if row["first_task"] is None else str(row["first_task"])
        print(f"{label:<44}{first:>11}{row['accuracy_gap']:>15.3g}{row['max_param_gap']:>11.2g}"
              f"{time.perf_counter() - start:>6.0f}", flush=True)


if __name__ == "__main__":
    main()
