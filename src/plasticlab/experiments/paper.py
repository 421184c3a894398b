"""The paper's best configurations (SPEC §6 tables), as data.

``BEST[optimizer][problem][method]`` is ``(lr, params)`` in plasticlab's canonical names:
Shrink & Perturb's p is written ``shrink`` (1 − x), ReDo's period is in steps.
"""

from __future__ import annotations

PROBLEMS = ("permuted_mnist", "random_label_mnist", "random_label_cifar", "five_plus_one_cifar",
            "continual_imagenet")
COMPARED_METHODS = ("baseline", "layer_norm", "l2_init", "l2", "shrink_perturb", "cbp",
                    "concat_relu", "redo")


def _row(base, ln, l2i, l2, sp, cbp, crelu, redo):
    return {
        "baseline": (base, {}),
        "layer_norm": (ln, {}),
        "l2_init": (l2i[0], {"strength": l2i[1]}),
        "l2": (l2[0], {"strength": l2[1]}),
        "shrink_perturb": (sp[0], {"shrink": 1 - sp[1], "noise": sp[2]}),
        "cbp": (cbp[0], {"replacement_rate": cbp[1]}),
        "concat_relu": (crelu, {}),
        "redo": (redo[0], {"period": redo[1], "threshold": redo[2]}),
    }


BEST = {
    "adam": {
        "permuted_mnist": _row(1e-4, 1e-3, (1e-3, 1e-2), (1e-3, 1e-2), (1e-3, 1e-3, 1e-2),
                               (1e-3, 1e-3), 1e-3, (1e-3, 625, 0.0)),
        "random_label_mnist": _row(1e-4, 1e-4, (1e-4, 1e-2), (1e-4, 1e-2), (1e-4, 1e-4, 1e-2),
                                   (1e-3, 1e-3), 1e-3, (1e-3, 30000, 0.1)),
        "random_label_cifar": _row(1e-3, 1e-3, (1e-3, 1e-2), (1e-4, 1e-2), (1e-3, 1e-4, 1e-2),
                                   (1e-3, 1e-4), 1e-3, (1e-4, 30000, 0.1)),
        "five_plus_one_cifar": _row(1e-4, 1e-4, (1e-3, 1e-2), (1e-3, 1e-3), (1e-3, 1e-4, 1e-2),
                                    (1e-3, 1e-4), 1e-3, (1e-3, 1560, 0.0)),
        "continual_imagenet": _row(1e-4, 1e-3, (1e-3, 1e-3), (1e-3, 1e-3), (1e-3, 1e-4, 1e-2),
                                   (1e-3, 1e-4), 1e-3, (1e-3, 120, 0.0)),
    },
    "sgd": {
        "permuted_mnist": _row(1e-2, 1e-2, (1e-2, 1e-2), (1e-2, 1e-2), (1e-2, 1e-4, 1e-2),
                               (1e-2, 1e-3), 1e-2, (1e-2, 625, 0.0)),
        "random_label_mnist": _row(1e-3, 1e-3, (1e-2, 1e-2), (1e-2, 1e-2), (1e-2, 1e-4, 1e-2),
                                   (1e-2, 1e-3), 1e-2, (1e-2, 30000, 0.1)),
        "random_label_cifar": _row(1e-2, 1e-2, (1e-2, 1e-2), (1e-2, 1e-2), (1e-2, 1e-4, 1e-2),
                                   (1e-2, 1e-3), 1e-3, (1e-2, 30000, 0.1)),
        "five_plus_one_cifar": _row(1e-2, 0.1, (1e-2, 1e-5), (1e-2, 1e-4), (1e-2, 1e-5, 1e-2),
                                    (1e-2, 1e-3), 1e-2, (1e-2, 1560, 0.0)),
        "continual_imagenet": _row(0.1, 0.1, (0.1, 1e-3), (0.1, 1e-3), (0.1, 1e-4, 1e-4),
                                   (0.1, 1e-3), 1e-2, (0.1, 600, 0.1)),
    },
}


def best_config(problem: str, method: str, optimizer: str = "adam") -> dict:
    """The paper's best raw config for ``method`` on ``problem`` (resolve with
    :func:`plasticlab.experiments.config.resolve_config`)."""
    try:
        lr, params = BEST[optimizer][problem][method]
    except KeyError:
        raise ValueError(f"the paper reports no best config for {method!r} on {problem!r} with "
                         f"{optimizer!r}; methods: {', '.join(COMPARED_METHODS)}") from None
    return {"problem": problem, "method": method, "optimizer": optimizer, "lr": lr,
            "params": dict(params)}
