"""The presets that put the authors' code's forms beside plasticlab's (issue: fidelity):
``forgetting`` runs EWC both ways, ``reference-modes`` runs CBP and ReDo both ways."""

from __future__ import annotations

from collections import Counter

from plasticlab.experiments.paper import BEST
from plasticlab.experiments.presets import AUTHORS_CBP, AUTHORS_REDO, KIRKPATRICK_EWC, get_preset
from plasticlab.experiments.sweep import expand


def _forms(runs, method):
    return Counter(tuple(sorted((k, v) for k, v in r.config.params.items() if isinstance(v, str | bool)))
                   for r in runs if r.config.method == method)


def test_forgetting_runs_ewc_as_the_authors_did_and_as_kirkpatrick_did():
    runs = expand(get_preset("forgetting"))
    assert {r.config.tasks for r in runs} == {20} and {r.config.lr for r in runs} == {1e-3}
    assert {r.seed for r in runs} == set(range(5))
    assert {(r.config.test_examples, r.config.internals_on) for r in runs} == {("reference", "next")}
    assert all(r.config.problem_params["identity_first_task"] for r in runs)
    for method in ("ewc", "l2_init_ewc"):
        forms = _forms(runs, method)
        assert len(forms) == 2 and set(forms.values()) == {5}
        params = [r.config.params for r in runs if r.config.method == method]
        authors = [p for p in params if p["anchor"] == "last"]
        assert all(p["fisher"] == "empirical" and p["fisher_data"] == "test" and p["fisher_samples"] == 992
                   for p in authors)
        assert all(p["ewc_strength"] == 10.0 for p in params)
        assert sum(all(p[k] == v for k, v in KIRKPATRICK_EWC.items()) for p in params) == 5
    assert {r.config.params["strength"] for r in runs if r.config.method != "ewc"} == {1e-3}


def test_reference_modes_run_cbp_and_redo_at_the_papers_best_in_both_forms():
    runs = expand(get_preset("reference-modes"))
    for problem in ("permuted_mnist", "random_label_mnist"):
        for method, authors in (("cbp", AUTHORS_CBP), ("redo", AUTHORS_REDO)):
            mine = [r for r in runs if r.config.problem == problem and r.config.method == method]
            lr, best = BEST["adam"][problem][method]
            assert len(mine) == 20 and {r.config.lr for r in mine} == {lr}
            assert all(all(r.config.params[k] == v for k, v in best.items()) for r in mine)
            reference = [r for r in mine if all(r.config.params[k] == v for k, v in authors.items())]
            assert len(reference) == 10  # the other 10 are plasticlab's defaults
            assert {r.seed for r in reference} == set(range(100, 110))


def test_reference_modes_at_a_problem_run_the_best_studys_cbp_and_redo_in_the_authors_form():
    """``reference-modes-P`` is ``best-P-adam``'s CBP and ReDo, same seeds, step sizes and
    settings, with only the authors' forms changed: claim 3 pairs the two seed by seed."""
    for problem in ("permuted_mnist", "random_label_mnist", "random_label_cifar"):
        authors_runs = expand(get_preset(f"reference-modes-{problem}"))
        best_runs = expand(get_preset(f"best-{problem}-adam"))
        for method, authors in (("cbp", AUTHORS_CBP), ("redo", AUTHORS_REDO)):
            theirs = {r.seed: r.config for r in authors_runs if r.config.method == method}
            ours = {r.seed: r.config for r in best_runs if r.config.method == method}
            assert set(theirs) == set(ours) == set(range(100, 110))
            for seed, config in theirs.items():
                assert config.lr == ours[seed].lr and config.problem == problem
                assert config.params == ours[seed].params | authors
        assert {r.config.method for r in authors_runs} == {"cbp", "redo"}


def test_the_toolkit_study_extends_the_field_study_with_its_own_baseline_and_l2_init():
    """``field-toolkit-P`` runs every toolkit method and optimizer of issue 47 on P's field seeds,
    beside Baseline, L2 Init and full reset configured exactly as ``field-P`` runs them: at any
    scale its comparison is the field study's, extended."""
    from plasticlab.experiments.presets import TOOLKIT_METHODS, TOOLKIT_OPTIMIZERS

    for problem in ("permuted_mnist", "random_label_mnist"):
        toolkit = expand(get_preset(f"field-toolkit-{problem}"), scale=0.1)
        field = expand(get_preset(f"field-{problem}"), scale=0.1)
        assert {r.config.method for r in toolkit if r.config.optimizer == "adam"} == {
            "baseline", "l2_init", "full_reset", *TOOLKIT_METHODS}
        assert {r.config.optimizer for r in toolkit} == {"adam", *TOOLKIT_OPTIMIZERS}
        assert {r.seed for r in toolkit} == {r.seed for r in field} == set(range(100, 110))
        ours = {(r.config.method, r.seed): r.config for r in toolkit if r.config.optimizer == "adam"}
        for r in field:
            if r.config.method in ("baseline", "l2_init", "full_reset") and r.config.optimizer == "adam":
                assert ours[r.config.method, r.seed] == r.config
