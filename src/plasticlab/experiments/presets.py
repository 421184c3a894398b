"""Presets: every study of SPEC §7 as a sweep (see :mod:`plasticlab.experiments.sweep`).

``plasticlab presets`` lists them; ``plasticlab sweep --preset NAME`` runs one. Full-scale
settings are the paper's; ``--scale`` shortens them. The main comparison and its grids follow
SPEC §6: the grid runs on 3 selection seeds, the selected configuration on 10 new seeds.
"""

from __future__ import annotations

from collections.abc import Callable

from ..problems import PROBLEMS
from .paper import BEST, COMPARED_METHODS

SELECTION_SEEDS = "0-2"
EVALUATION_SEEDS = "100-109"
LAMBDAS = [1e-2, 1e-3, 1e-4, 1e-5]


def adam_lrs() -> list[float]:
    """Adam step sizes of the paper's sweep."""
    return [1e-3, 1e-4]


def sgd_lrs(problem: str) -> list[float]:
    """SGD step sizes of the paper's sweep (0.1 too on 5+1 CIFAR and Continual ImageNet)."""
    extra = [0.1] if problem in ("five_plus_one_cifar", "continual_imagenet") else []
    return extra + [1e-2, 1e-3]


def method_grids(problem: str) -> dict:
    """The paper's per-method grids (SPEC §1–2, §6); ReDo's period in tasks → steps."""
    steps = PROBLEMS[problem].defaults["steps_per_task"]
    return {
        "l2_init": {"strength": LAMBDAS},
        "l2": {"strength": LAMBDAS},
        "shrink_perturb": {"shrink": [1 - x for x in LAMBDAS], "noise": LAMBDAS},
        "cbp": {"replacement_rate": [10.0 ** -e for e in range(1, 7)]},
        "redo": {"period": [k * steps for k in (1, 2, 5)], "threshold": [0.0, 0.01, 0.1]},
    }


def main_comparison(problem: str, optimizer: str) -> dict:
    """All compared methods with their full grids on one problem × optimizer (protocol mode)."""
    return {
        "name": f"main-{problem}-{optimizer}",
        "description": f"main comparison, {problem}, {optimizer}: grid on 3 seeds, best on 10 new",
        "problem": problem, "methods": list(COMPARED_METHODS), "optimizer": optimizer,
        "seeds": SELECTION_SEEDS,
        "grid": {"lr": adam_lrs() if optimizer == "adam" else sgd_lrs(problem),
                 **method_grids(problem)},
        "protocol": {"evaluation_seeds": EVALUATION_SEEDS},
    }


def best_configs(problem: str, optimizer: str) -> dict:
    """Each compared method at the paper's reported best configuration, 10 seeds."""
    params = {m: dict(p) for m, (_, p) in BEST[optimizer][problem].items()}
    lrs = {m: lr for m, (lr, _) in BEST[optimizer][problem].items()}
    return {
        "name": f"best-{problem}-{optimizer}",
        "description": f"the paper's best configurations (SPEC §6), {problem}, {optimizer}",
        "problem": problem, "methods": list(COMPARED_METHODS), "optimizer": optimizer,
        "seeds": EVALUATION_SEEDS, "params": params, "per_method_lr": lrs,
    }


def ablation() -> dict:
    """L2 Init vs L2 Init + Resample vs L1 Init (Permuted MNIST, Adam)."""
    return {"name": "ablation", "description": "L2 Init vs L2 Init + Resample vs L1 Init",
            "problem": "permuted_mnist", "methods": ["l2_init", "l2_init_resample", "l1_init"],
            "optimizer": "adam", "seeds": SELECTION_SEEDS,
            "grid": {"lr": adam_lrs(), "l2_init": {"strength": LAMBDAS},
                     "l2_init_resample": {"strength": LAMBDAS}, "l1_init": {"strength": LAMBDAS}},
            "protocol": {"evaluation_seeds": EVALUATION_SEEDS}}


def architecture_study(name: str, key: str, value) -> dict:
    """Robustness to width (×4) or depth (+2 layers): L2 Init and Baseline on Permuted MNIST."""
    return {"name": name, "description": f"robustness: {key} = {value}",
            "problem": "permuted_mnist", "methods": ["baseline", "l2_init"], "optimizer": "adam",
            "seeds": SELECTION_SEEDS, key: value,
            "grid": {"lr": adam_lrs(), "l2_init": {"strength": LAMBDAS}},
            "protocol": {"evaluation_seeds": EVALUATION_SEEDS}}


def batch_size_study() -> dict:
    """Batch sizes 1, 32, 128 on Permuted MNIST, λ = 1e-2, α ∈ {1e-5 … 1e-2}."""
    return {"name": "batch-size", "description": "batch size 1/32/128, λ = 1e-2, α swept",
            "problem": "permuted_mnist", "methods": ["baseline", "l2_init"], "optimizer": "adam",
            "seeds": SELECTION_SEEDS, "params": {"l2_init": {"strength": 1e-2}},
            "grid": {"lr": [1e-5, 1e-4, 1e-3, 1e-2]},
            # one epoch of the task's 10,000 images per task at every batch size
            "variants": [{"batch_size": b, "steps_per_task": 10_000 // b} for b in (1, 32, 128)]}


def init_study() -> dict:
    """Initialisation schemes: PyTorch default, Kaiming/Xavier × uniform/normal."""
    return {"name": "init", "description": "initialisation schemes",
            "problem": "permuted_mnist", "methods": ["baseline", "l2_init"], "optimizer": "adam",
            "seeds": SELECTION_SEEDS, "params": {"l2_init": {"strength": 1e-2}},
            "grid": {"lr": [1e-3], "init": ["torch_default", "kaiming_uniform", "kaiming_normal",
                                            "xavier_uniform", "xavier_normal"]}}


def lambda_sensitivity() -> dict:
    """λ ∈ {0, 1e-5 … 1e-1} at α ∈ {1e-4, 1e-3} (λ = 0 is the Baseline)."""
    return {"name": "lambda-sensitivity", "description": "L2 Init λ sensitivity",
            "problem": "permuted_mnist", "method": "l2_init", "optimizer": "adam",
            "seeds": SELECTION_SEEDS,
            "grid": {"lr": [1e-4, 1e-3],
                     "l2_init": {"strength": [0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]}}}


AUTHORS_MEASUREMENTS = {"test_examples": "reference", "internals_on": "next",
                        "problem_params": {"identity_first_task": True}}
"""The authors' code's measurement conventions and stream (SPEC §9): test accuracy on 992 of
each seed's shuffled test images, feature statistics on the next task's test inputs, task 0
unpermuted — for presets that reproduce one of the paper's tables."""

KIRKPATRICK_EWC = {"anchor": "sum", "fisher": "true", "fisher_data": "train", "fisher_samples": 200}
"""Kirkpatrick et al.'s EWC: one anchor per task, the true Fisher on the task's training inputs
(the ``ewc`` defaults are the authors' code, SPEC §9)."""


def forgetting() -> dict:
    """Forgetting (Permuted MNIST, 20 tasks, Adam α = 1e-3, 5 seeds): L2 Init λ = 1e-3,
    EWC β = 10, both; BWT, one-step BWT, total online accuracy. EWC twice: the authors' form
    (the defaults, where the paper's table comes from) and Kirkpatrick's, side by side; measured
    as the authors' code measures (:data:`AUTHORS_MEASUREMENTS`)."""
    ewc, both = {"ewc_strength": 10.0}, {"strength": 1e-3, "ewc_strength": 10.0}
    return {"name": "forgetting", "description": "L2 Init, EWC and both: BWT and accuracy "
                                                 "(EWC as the authors ran it, and Kirkpatrick's)",
            "problem": "permuted_mnist", "optimizer": "adam", "lr": 1e-3, "tasks": 20,
            "seeds": "0-4", "forgetting": True, **AUTHORS_MEASUREMENTS,
            "variants": [
                {"methods": ["l2_init", "ewc", "l2_init_ewc"],
                 "params": {"l2_init": {"strength": 1e-3}, "ewc": ewc, "l2_init_ewc": both}},
                {"methods": ["ewc", "l2_init_ewc"],
                 "params": {"ewc": ewc | KIRKPATRICK_EWC, "l2_init_ewc": both | KIRKPATRICK_EWC}},
            ]}


# --- the field since the paper (SPEC §10) ---------------------------------------------------------

FIELD_PROBLEMS = ("permuted_mnist", "random_label_mnist")
FIELD_METHODS = ("snr", "hare_tortoise", "parseval", "swr", "full_reset", "head_reset", "fire")
"""The methods of SPEC §10 (UPGD is an optimizer: :data:`FIELD_OPTIMIZERS`)."""
TOOLKIT_METHODS: tuple[str, ...] = ("regrama", "dash",
                                     "weight_clip", "normalize_project", "spectral", "wasserstein_init",
                                     "deep_fourier", "plasticity_injection", "c_chain")
"""The methods the other plasticity toolkits have (issue 47), each with its ``field-METHOD-PROBLEM``
grid preset; they join the ``field-PROBLEM`` comparisons once those studies are extended."""
FIELD_OPTIMIZERS = {"upgd": (1e-2, {}), "upgd_nonprotecting": (1e-3, {"beta": 0.9})}
"""UPGD's two variants: reference step size and settings (SPEC §10, input-permuted MNIST;
σ 0.1 and λ 0.01 are the optimizer's defaults)."""
TOOLKIT_OPTIMIZERS = {"trac": (1e-3, {})}
"""The optimizers the other toolkits have (issue 47), each with its ``field-OPTIMIZER-PROBLEM``
grid preset as UPGD's: reference step size and settings (TRAC: its base Adam's α of the
reference's README). Apart from :data:`FIELD_OPTIMIZERS`, whose every entry is a variant of the
committed ``field-PROBLEM`` studies: they join those once the studies are extended."""


AUTHORS_CBP = {"adam_variant": "reference", "replacement_init": "kaiming"}
"""CBP as the L2 Init authors' code ran it (SPEC §9): AdamGnT for the whole network, new units
drawn from U(±√(6/fan_in))."""

AUTHORS_REDO = {"schedule": "reference", "reset_optimizer": False, "reinit": "initial",
                "layer_order": "per_layer"}
"""ReDo as the L2 Init authors' code ran it (SPEC §9): recycled at the start of a step on the
kept activations, from θ₀, layer by layer, the optimizer's state untouched."""


def reference_modes() -> dict:
    """CBP and ReDo at the paper's best Adam configurations (SPEC §6) on Permuted MNIST and
    Random Label MNIST, each in plasticlab's default form and in the form the authors' code
    ran, 10 seeds: how much of the paper's CBP/ReDo numbers the reference code's choices make."""
    variants = []
    for problem in ("permuted_mnist", "random_label_mnist"):
        for form in ({}, {"cbp": AUTHORS_CBP, "redo": AUTHORS_REDO}):
            best = {m: BEST["adam"][problem][m] for m in ("cbp", "redo")}
            variants.append({"problem": problem, "methods": list(best),
                             "per_method_lr": {m: lr for m, (lr, _) in best.items()},
                             "params": {m: dict(p) | form.get(m, {}) for m, (_, p) in best.items()}})
    return {"name": "reference-modes", "description": "CBP and ReDo: plasticlab's defaults vs the "
                                                      "authors' code's forms, paper's best configs",
            "optimizer": "adam", "seeds": EVALUATION_SEEDS, "variants": variants}


def reference_modes_at(problem: str) -> dict:
    """CBP and ReDo on ``problem`` in the form the authors' code ran (:data:`AUTHORS_CBP`,
    :data:`AUTHORS_REDO`) at the paper's best Adam configurations (SPEC §6), 10 seeds: the
    companion of ``best-PROBLEM-adam``, whose same seeds and configurations run plasticlab's
    forms, so that claim 3 is judged with both forms at the study's scale."""
    best = {m: BEST["adam"][problem][m] for m in ("cbp", "redo")}
    authors = {"cbp": AUTHORS_CBP, "redo": AUTHORS_REDO}
    return {"name": f"reference-modes-{problem}",
            "description": f"CBP and ReDo in the authors' code's forms, paper's best configs, {problem}",
            "problem": problem, "methods": list(best), "optimizer": "adam", "seeds": EVALUATION_SEEDS,
            "per_method_lr": {m: lr for m, (lr, _) in best.items()},
            "params": {m: dict(p) | authors[m] for m, (_, p) in best.items()}}


def _decades(reference: float) -> list[float]:
    """``reference`` and one decade either side."""
    return [reference * 10, reference, reference / 10]


def field_fixed(problem: str) -> dict:
    """SPEC §10's reference values that are not swept, per method; periods in steps
    (SNR adapts every 16 tasks, as its reference code does)."""
    steps = PROBLEMS[problem].defaults["steps_per_task"]
    return {"snr": {"adapt_period": 16 * steps}, "hare_tortoise": {"momentum": 0.999},
            "swr": {"period": 2048}, "regrama": {"period": 1000}, "dash": {"alpha": 0.3}}


def field_grids() -> dict:
    """Each new method's grid: its SPEC §10 reference value, one decade either side (p and m
    by decades of 1 − p, 1 − m). The boundary resets and FIRE have no parameter to sweep."""
    return {"snr": {"percentile": [1 - x for x in _decades(1e-2)]},
            "hare_tortoise": {"momentum": [1 - x for x in _decades(1e-3)]},
            "parseval": {"strength": _decades(1e-3)},
            "swr": {"threshold": _decades(1e-5)}, "regrama": {"threshold": _decades(1e-2)},
            "dash": {"lambda": _decades(5e-2)},
            # κ by decades of κ − 1, its headroom over the init range (κ < 1 clips θ₀ itself)
            "weight_clip": {"kappa": [1 + x for x in _decades(1.0)]},
            "spectral": {"strength": _decades(1e-3)}, "wasserstein_init": {"strength": _decades(1e-2)},
            "c_chain": {"relative_scale": _decades(1e-2)}}


def field_method_grid(method: str, problem: str) -> dict:
    """One new method on ``problem`` in the paper's protocol (SPEC §6): its grid × Adam's step
    sizes on 3 seeds, the best configuration on 10 new seeds."""
    fixed = field_fixed(problem)
    grid = field_grids().get(method)
    params = {k: v for k, v in fixed.get(method, {}).items() if k not in (grid or {})}
    return {"name": f"field-{method}-{problem}",
            "description": f"{method} (SPEC §10) on {problem}: grid on 3 seeds, best on 10 new",
            "problem": problem, "method": method, "optimizer": "adam", "seeds": SELECTION_SEEDS,
            "grid": {"lr": adam_lrs(), **({method: grid} if grid else {})},
            **({"params": {method: params}} if params else {}),
            "protocol": {"evaluation_seeds": EVALUATION_SEEDS}}


def field_optimizer_grid(optimizer: str, problem: str) -> dict:
    """UPGD (one variant), or a toolkit's optimizer (TRAC), on ``problem`` in the paper's
    protocol: its reference step size and one decade either side, on 3 seeds; the best on 10
    new seeds."""
    optimizers = FIELD_OPTIMIZERS | TOOLKIT_OPTIMIZERS
    return {"name": f"field-{optimizer}-{problem}",
            "description": f"{optimizer} ({'SPEC §10' if optimizer in FIELD_OPTIMIZERS else 'issue 47'}) "
                           f"on {problem}: grid on 3 seeds, best on 10 new",
            "problem": problem, "method": "baseline", "optimizer": optimizer, "seeds": SELECTION_SEEDS,
            "grid": {"lr": _decades(optimizers[optimizer][0])},
            "optimizer_params": dict(optimizers[optimizer][1]),
            "protocol": {"evaluation_seeds": EVALUATION_SEEDS}}


def field_comparison(problem: str) -> dict:
    """Every method side by side on ``problem``, 10 seeds: the paper's methods at the paper's
    best Adam configurations (SPEC §6), each new method at its SPEC §10 reference values with
    L2 Init's step size (its grid preset's selection replaces them once run), UPGD at its
    reference step size."""
    best = BEST["adam"][problem]
    lr = best["l2_init"][0]
    fixed = field_fixed(problem)
    params = {m: dict(p) for m, (_, p) in best.items()}
    params.update({m: dict(fixed.get(m, {})) for m in FIELD_METHODS})
    lrs = {m: r for m, (r, _) in best.items()} | {m: lr for m in FIELD_METHODS}
    variants = [{"methods": [*COMPARED_METHODS, *FIELD_METHODS], "optimizer": "adam",
                 "params": {m: p for m, p in params.items() if p}, "per_method_lr": lrs}]
    variants += [{"method": "baseline", "optimizer": name, "lr": rate, "optimizer_params": dict(settings)}
                 for name, (rate, settings) in FIELD_OPTIMIZERS.items()]
    return {"name": f"field-{problem}",
            "description": f"the paper's methods and the field since (SPEC §10) side by side, {problem}",
            "problem": problem, "seeds": EVALUATION_SEEDS, "variants": variants}


def field_toolkit(problem: str) -> dict:
    """The toolkits' methods (:data:`TOOLKIT_METHODS`, issue 47) beside the Baseline, L2 Init
    and the from-scratch full reset on ``problem``, 10 seeds: the companion of
    ``field-PROBLEM``, which it extends. The Baseline and L2 Init at the paper's best Adam
    configurations (SPEC §6), full reset and each new method at its reference values
    (:func:`field_fixed`, else the method's defaults) with L2 Init's α, TRAC at its reference
    step size on the Baseline. A study of its own, so that it can run at a scale the committed
    ``field-PROBLEM`` studies did not, with its own Baseline and L2 Init at that scale."""
    best = BEST["adam"][problem]
    lr = best["l2_init"][0]
    fixed = field_fixed(problem)
    methods = ["baseline", "l2_init", "full_reset", *TOOLKIT_METHODS]
    params = {"l2_init": dict(best["l2_init"][1])} | {m: dict(fixed[m]) for m in TOOLKIT_METHODS
                                                        if m in fixed}
    lrs = {"baseline": best["baseline"][0]} | {m: lr for m in methods if m != "baseline"}
    variants = [{"methods": methods, "optimizer": "adam", "params": params, "per_method_lr": lrs}]
    variants += [{"method": "baseline", "optimizer": name, "lr": rate, "optimizer_params": dict(settings)}
                 for name, (rate, settings) in TOOLKIT_OPTIMIZERS.items()]
    return {"name": f"field-toolkit-{problem}",
            "description": f"the other toolkits' methods (issue 47) beside the Baseline, L2 Init "
                           f"and the full reset, {problem}",
            "problem": problem, "seeds": EVALUATION_SEEDS, "variants": variants}


TOOLKIT_PROBLEMS = ("warm_start_mnist", "warm_start_cifar", "split_mnist", "split_cifar",
                    "slowly_changing_regression")
"""The problems the other plasticity toolkits have (issue 47), each with its ``field-PROBLEM``
preset (:func:`toolkit_problem_study`)."""


def toolkit_problem_study(problem: str) -> dict:
    """Baseline vs L2 Init (λ ∈ {1e-2, 1e-3, 1e-4}) on one of :data:`TOOLKIT_PROBLEMS`, 5 seeds,
    with Full Reset — θ₀ and a new optimizer at every task end, the from-scratch run the
    warm-start's generalisation gap and the plasticity gap are measured against. Adam α = 1e-3
    (FIRE's and Hare & Tortoise's); split problems with forgetting on, each head in turn; the
    regression as Dohare et al. ran it: SGD α = 0.01, Kaiming-uniform init."""
    study = {"name": f"field-{problem}",
             "description": f"baseline, L2 Init and the from-scratch full reset on {problem} (issue 47)",
             "problem": problem, "methods": ["baseline", "l2_init", "full_reset"],
             "optimizer": "adam", "lr": 1e-3, "seeds": "0-4",
             "grid": {"l2_init": {"strength": LAMBDAS[:3]}}}
    if problem.startswith("split_"):
        study |= {"forgetting": True, "variants": [{"problem_params": {"head": head}}
                                                    for head in ("fixed", "growing")]}
    if problem == "slowly_changing_regression":
        study |= {"optimizer": "sgd", "lr": 1e-2, "init": "kaiming_uniform"}
    return study


def _registry() -> dict[str, Callable[[], dict]]:
    presets: dict[str, Callable[[], dict]] = {}
    for problem in BEST["adam"]:  # the paper's problems
        for optimizer in ("adam", "sgd"):
            presets[f"main-{problem}-{optimizer}"] = (lambda p=problem, o=optimizer: main_comparison(p, o))
            presets[f"best-{problem}-{optimizer}"] = (lambda p=problem, o=optimizer: best_configs(p, o))
    presets["ablation"] = ablation
    presets["width"] = lambda: architecture_study("width", "width", 4.0)
    presets["depth"] = lambda: architecture_study("depth", "extra_layers", 2)
    presets["batch-size"] = batch_size_study
    presets["init"] = init_study
    presets["lambda-sensitivity"] = lambda_sensitivity
    presets["forgetting"] = forgetting
    presets["reference-modes"] = reference_modes
    for problem in BEST["adam"]:
        presets[f"reference-modes-{problem}"] = (lambda p=problem: reference_modes_at(p))
    for problem in FIELD_PROBLEMS:
        presets[f"field-{problem}"] = (lambda p=problem: field_comparison(p))
        presets[f"field-toolkit-{problem}"] = (lambda p=problem: field_toolkit(p))
        for method in (*FIELD_METHODS, *TOOLKIT_METHODS):
            presets[f"field-{method}-{problem}"] = (lambda m=method, p=problem: field_method_grid(m, p))
        for optimizer in (*FIELD_OPTIMIZERS, *TOOLKIT_OPTIMIZERS):
            presets[f"field-{optimizer}-{problem}"] = (
                lambda o=optimizer, p=problem: field_optimizer_grid(o, p))
    for problem in TOOLKIT_PROBLEMS:
        presets[f"field-{problem}"] = (lambda p=problem: toolkit_problem_study(p))
    return presets


PRESETS = _registry()


def get_preset(name: str) -> dict:
    """The sweep of preset ``name``; an unknown name lists the valid ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
    return PRESETS[name]()
