"""Did a change of the code change any number? Every registered method, every step form, run by run.

    python benchmarks/step_equality.py record before.json --data-dir ../shared/data
    ...change the code...
    python benchmarks/step_equality.py record after.json --data-dir ../shared/data
    python benchmarks/step_equality.py compare before.json after.json

``record`` trains short ensembles (K = 3, seeds 0–2, one torch thread) of every registered method
— on the MLP (Permuted MNIST) with Adam through the hand-written backward and through autograd,
and with SGD; on the CNN (Random Label CIFAR) with Adam — with settings under which each method's
own mechanism acts within the run (replacements, resets, consolidations). It adds the compiled
step for the methods it computes, members with their own step size and members of several
penalty methods in one ensemble, UPGD, and a run with every-N-step measurements and forgetting.
For each run it stores the online accuracy of every member and task, every task-end and step
measurement (each float by its exact ``repr``) and a SHA-256 of the final parameters.

``compare`` prints every run whose record differs (which field, and for the parameters only
that they differ) and exits 1 if any does, 0 when every run is bit-identical.

The script uses only the engine's public entry point and the network builder
(:func:`plasticlab.nets.build_network`, wrapped wherever a module imported it), so that it runs
unchanged on both sides of a restructuring of the engine.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import sys
import time

import torch

import plasticlab.nets as nets_package
from plasticlab import engine
from plasticlab.experiments.config import resolve_config
from plasticlab.methods import METHODS

SEEDS = [0, 1, 2]
# settings under which each method's own mechanism acts within a few hundred steps
ACTIVE = {"cbp": {"replacement_rate": 1e-2, "maturity": 20},
          "redo": {"period": 40, "threshold": 0.1},
          "ewc": {"fisher_samples": 64}, "l2_init_ewc": {"fisher_samples": 64},
          "hare_tortoise": {"reset_period": 70}, "swr": {"period": 50},
          "snr": {"initial_threshold": 40, "adapt_period": 60}, "fire": {},
          "huber_init": {"strength": 1e-2, "delta": 0.01}, "l1_init": {"strength": 1e-4}}
LR = {"adam": 1e-3, "sgd": 1e-2, "upgd": 1e-2}
COMPILED = ("baseline", "l2", "l2_init", "l1_init", "huber_init")


def runs(mlp_steps: int, cnn_steps: int) -> list[tuple[str, dict, dict]]:
    """(label, raw config, engine options incl. ``member_*``) of every run ``record`` trains."""
    out = []
    mlp = {"problem": "permuted_mnist", "tasks": 3, "steps_per_task": mlp_steps}
    cnn = {"problem": "random_label_cifar", "tasks": 2, "steps_per_task": cnn_steps}
    for name in sorted(METHODS):
        params = ACTIVE.get(name, {})
        out.append((f"mlp {name} adam manual", {**mlp, "method": name, "params": params}, {}))
        out.append((f"mlp {name} adam autograd", {**mlp, "method": name, "params": params},
                    {"backprop": "autograd"}))
        out.append((f"mlp {name} sgd", {**mlp, "method": name, "params": params, "optimizer": "sgd",
                                        "lr": LR["sgd"]}, {}))
        out.append((f"cnn {name} adam", {**cnn, "method": name, "params": params}, {}))
    for name in COMPILED:
        for opt in ("adam", "sgd"):
            out.append((f"mlp {name} {opt} compiled",
                        {**mlp, "method": name, "params": ACTIVE.get(name, {}), "optimizer": opt,
                         "lr": LR[opt]}, {"compile": True}))
    mixed = {"member_methods": ["baseline", "l2_init", "huber_init"],
             "member_params": [{}, {"strength": 1e-2}, {"strength": 1e-2, "delta": 0.01}]}
    for opt in ("adam", "sgd"):
        rates = [LR[opt], LR[opt] / 3, LR[opt]]
        out.append((f"mlp l2_init {opt} member lr", {**mlp, "method": "l2_init", "optimizer": opt,
                                                     "lr": LR[opt]}, {"member_lr": rates}))
        out.append((f"mlp mixed members {opt}", {**mlp, "method": "l2_init", "optimizer": opt,
                                                  "lr": LR[opt]}, dict(mixed, member_lr=rates)))
        out.append((f"mlp mixed members {opt} compiled",
                    {**mlp, "method": "l2_init", "optimizer": opt, "lr": LR[opt]},
                    dict(mixed, member_lr=rates, compile=True)))
    out.append(("mlp l2 adam member strength", {**mlp, "method": "l2"},
                {"member_params": [{"strength": 1e-2}, {"strength": 1e-3}, {"strength": 1e-2}]}))
    for opt in ("upgd", "upgd_nonprotecting"):
        for name in ("baseline", "l2_init", "cbp"):
            out.append((f"mlp {name} {opt}", {**mlp, "method": name, "params": ACTIVE.get(name, {}),
                                              "optimizer": opt, "lr": LR["upgd"]}, {}))
    out.append(("mlp l2_init adam measure_every forgetting", {**mlp, "method": "l2_init"},
                {"measure_every": 25, "forgetting": True}))
    out.append(("mlp redo adam measure_every", {**mlp, "method": "redo", "params": ACTIVE["redo"]},
                {"measure_every": 25}))
    return out


class _Keep:
    """Wraps :func:`plasticlab.nets.build_network` in every plasticlab module that imported it,
    keeping the last network built (the engine builds one per ensemble)."""

    def __init__(self):
        self.original = nets_package.build_network
        self.net = None

    def __enter__(self):
        def build(*args, **kwargs):
            self.net = self.original(*args, **kwargs)
            return self.net
        self.patched = [(m, "build_network") for name, m in list(sys.modules.items())
                        if name.startswith("plasticlab")
                        and getattr(m, "build_network", None) is self.original]
        for module, attr in self.patched:
            setattr(module, attr, build)
        return self

    def __exit__(self, *exc):
        for module, attr in self.patched:
            setattr(module, attr, self.original)


def _train(config, options: dict, data_dir):
    """The ensemble of :data:`SEEDS` through whichever ``train_ensemble`` this tree has."""
    signature = inspect.signature(engine.train_ensemble)
    if "members" in signature.parameters:  # train_ensemble(members, …)
        from plasticlab.run_config import Members

        members = Members.from_config(config, SEEDS, params=options.pop("member_params", None),
                                      lr=options.pop("member_lr", None),
                                      methods=options.pop("member_methods", None))
        return engine.train_ensemble(members, data_dir=data_dir, **options)
    return engine.train_ensemble(config, SEEDS, options.pop("member_params", None),  # before
                                 data_dir=data_dir, **options)


def _floats(value):
    """``value`` with every float replaced by its exact ``repr`` (JSON keeps the rest)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_floats(v) for v in value]
    return value


def record_one(raw: dict, options: dict, data_dir) -> dict:
    """One run's record: accuracies, measurements, the step that ran, the parameters' hash."""
    config = resolve_config(raw)
    with _Keep() as keep:
        result = _train(config, dict(options), data_dir)
    digest = hashlib.sha256()
    for p in keep.net.parameters():
        digest.update(p.detach().contiguous().cpu().numpy().tobytes())
    return {"accuracy": _floats([m.task_online_accuracy for m in result.members]),
            "task_metrics": _floats([m.task_metrics for m in result.members]),
            "step_metrics": _floats([m.step_metrics for m in result.members]),
            "accuracy_matrix": _floats([m.accuracy_matrix for m in result.members]),
            "step": result.extra.get("step"), "backprop": result.extra.get("backprop"),
            "params_sha256": digest.hexdigest()}


def record(path: str, data_dir, mlp_steps: int, cnn_steps: int, only: str | None) -> None:
    """Train every run of :func:`runs` and write their records to ``path`` (JSON)."""
    torch.set_num_threads(1)
    out = {"torch": str(torch.__version__), "threads": torch.get_num_threads(),
           "mlp_steps": mlp_steps, "cnn_steps": cnn_steps, "runs": {}}
    for label, raw, options in runs(mlp_steps, cnn_steps):
        if only and only not in label:
            continue
        start = time.perf_counter()
        out["runs"][label] = record_one(raw, options, data_dir)
        print(f"{label:55s} {time.perf_counter() - start:6.1f} s  {out['runs'][label]['step']}",
              flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{len(out['runs'])} runs recorded in {path} (torch {out['torch']}, "
          f"{out['threads']} thread)")


def compare(before: str, after: str) -> int:
    """Print each run whose record differs between the two files; 1 if any does, else 0."""
    a, b = (json.load(open(p))["runs"] for p in (before, after))
    differ = 0
    for label in sorted(set(a) | set(b)):
        if label not in a or label not in b:
            print(f"{label}: only in {'after' if label in b else 'before'}")
            differ += 1
            continue
        fields = [k for k in a[label] if a[label][k] != b[label].get(k)]
        if fields:
            differ += 1
            print(f"{label}: differs in {', '.join(fields)}")
    same = len(set(a) & set(b)) - differ
    print(f"{same} of {len(set(a) | set(b))} runs bit-identical, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="train every run and write their records")
    rec.add_argument("out")
    rec.add_argument("--data-dir")
    rec.add_argument("--mlp-steps", type=int, default=100, help="steps per task on the MLP (3 tasks)")
    rec.add_argument("--cnn-steps", type=int, default=20, help="steps per task on the CNN (2 tasks)")
    rec.add_argument("--only", help="only the runs whose label contains this text")
    cmp = sub.add_parser("compare", help="compare two records")
    cmp.add_argument("before")
    cmp.add_argument("after")
    args = parser.parse_args()
    if args.command == "record":
        print(f"device cpu, threads 1, K={len(SEEDS)}, torch {torch.__version__}")
        record(args.out, args.data_dir, args.mlp_steps, args.cnn_steps, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
