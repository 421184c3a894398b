"""Sweeps: grid expansion, grouping into ensembles, presets, the selection protocol."""

from __future__ import annotations

import json
import re

import pytest

from plasticlab.experiments import ResultStore
from plasticlab.experiments.orchestrate import pending_runs, plan
from plasticlab.experiments.presets import PRESETS, get_preset, method_grids
from plasticlab.experiments.protocol import select_best
from plasticlab.experiments.sweep import expand, group

SWEEP = {"problem": "permuted_mnist", "methods": ["l2_init", "baseline", "redo"], "seeds": "0-2",
         "tasks": 20, "grid": {"lr": [1e-3, 1e-4], "l2_init": {"strength": [1e-2, 1e-3]},
                               "redo": {"period": [625, 1250], "threshold": [0.0, 0.1]}}}


def test_grid_expands_to_every_point_times_every_seed():
    runs = expand(SWEEP)
    # (2 lr × (2 λ + 1 + 4 redo points)) × 3 seeds
    assert len(runs) == 2 * (2 + 1 + 4) * 3
    assert {r.config.tasks for r in runs} == {20}
    assert {r.config.params["strength"] for r in runs if r.config.method == "l2_init"} == {1e-2, 1e-3}


def test_per_member_parameters_step_sizes_and_penalty_methods_share_an_ensemble():
    ensembles = group(expand(SWEEP), max_members=32)
    # L2 Init and the Baseline (methods.penalty_members): 2 lr × (2 λ + 1) × 3 seeds
    (quad,) = [e for e in ensembles if e.config.method in ("l2_init", "baseline")]
    assert len(quad.seeds) == 18
    assert sorted(set(quad.members.method_names())) == ["baseline", "l2_init"]
    assert sorted(set(quad.members.rates())) == [1e-4, 1e-3]
    redo = [e for e in ensembles if e.config.method == "redo"]
    assert len(redo) == 2  # one per period (shared); lr and τ vary inside
    for e in redo:
        assert len({m.params["period"] for m in e.members}) == 1
        assert {m.params["threshold"] for m in e.members} == {0.0, 0.1}
        assert set(e.members.rates()) == {1e-3, 1e-4}
        assert set(e.members.method_names()) == {"redo"}


def test_a_member_of_a_packed_ensemble_keeps_its_own_run_id_method_and_step_size():
    runs = expand(SWEEP)
    packed = [e for e in group(runs, max_members=16) if e.config.method != "redo"]
    assert len(packed) == 2  # 18 runs split in two
    configs = [(c, s) for e in packed for c, s in zip(e.members.configs(), e.seeds, strict=True)]
    assert {ResultStore.run_id(c, s) for c, s in configs} == {
        ResultStore.run_id(r.config.to_dict(), r.seed) for r in runs if r.config.method != "redo"}
    assert all(c["params"] == {} for c, _ in configs if c["method"] == "baseline")


def test_step_sizes_stay_apart_where_the_optimizer_has_one_for_all_members():
    lr_grid = {"problem": "permuted_mnist", "seeds": "0-2", "grid": {"lr": [1e-3, 1e-4]}}
    upgd = group(expand({**lr_grid, "method": "baseline", "optimizer": "upgd"}), max_members=16)
    assert len(upgd) == 2 and all(len(set(e.members.rates())) == 1 for e in upgd)
    cbp = expand({**lr_grid, "method": "cbp", "params": {"cbp": {"adam_variant": "reference"}}})
    assert len(group(cbp, max_members=16)) == 2  # AdamGnT has one step size
    assert len(group(expand({**lr_grid, "method": "cbp"}), max_members=16)) == 1


def test_ensembles_are_capped_at_max_members():
    ensembles = group(expand({**SWEEP, "seeds": "0-9"}), max_members=4)
    assert max(len(e.seeds) for e in ensembles) == 4
    assert sum(len(e.seeds) for e in ensembles) == len(expand({**SWEEP, "seeds": "0-9"}))


def test_oversized_groups_split_into_equal_parts_not_a_remainder():
    runs = expand({**SWEEP, "methods": ["baseline"], "seeds": "0-16", "grid": {}})
    assert len(runs) == 17
    assert sorted(len(e.seeds) for e in group(runs, max_members=16)) == [8, 9]


def test_fewer_ensembles_than_workers_are_halved_so_every_core_has_one():
    runs = expand({**SWEEP, "methods": ["baseline"], "seeds": "0-9", "grid": {}})
    assert [len(e.seeds) for e in group(runs, max_members=16)] == [10]
    halves = group(runs, max_members=16, workers=2)
    assert sorted(len(e.seeds) for e in halves) == [5, 5]
    assert sorted(s for e in halves for s in e.seeds) == list(range(10))
    assert len(group(runs[:1], max_members=16, workers=2)) == 1  # one run cannot be split


def test_ensembles_are_halved_until_every_round_fills_every_worker():
    runs = expand({**SWEEP, "methods": ["baseline"], "seeds": "0-35", "grid": {}})
    assert [len(e.seeds) for e in group(runs, max_members=12)] == [12, 12, 12]
    # 12, 12, then 12 alone on one of two cores; halving one gives two full rounds of 18
    assert sorted(len(e.seeds) for e in group(runs, max_members=12, workers=2)) == [6, 6, 12, 12]
    assert len(group(runs, max_members=12, workers=3)) == 3  # already a full round
    assert sorted(len(e.seeds) for e in group(runs, max_members=12, workers=4)) == [6, 6, 12, 12]


def test_the_costliest_ensemble_is_halved_not_the_one_with_most_members():
    short = expand({**SWEEP, "methods": ["baseline"], "seeds": "0-7", "grid": {}, "tasks": 2})
    long = expand({**SWEEP, "methods": ["l2"], "seeds": "0-3", "grid": {}, "tasks": 40})
    ensembles = group(short + long, max_members=16, workers=3)
    assert sorted((e.config.method, len(e.seeds)) for e in ensembles) == [
        ("baseline", 8), ("l2", 2), ("l2", 2)]


def test_a_calibration_that_prices_a_method_higher_has_its_ensemble_halved():
    from plasticlab.experiments.bench import job_seconds

    # three ensembles of 4 with the same steps on two workers: one must be halved
    runs = expand({**SWEEP, "methods": ["baseline", "concat_relu", "cbp"], "seeds": "0-3", "grid": {}})
    by_steps = group(runs, max_members=4, workers=2)
    assert sorted(len(e.seeds) for e in by_steps if e.config.method == "cbp") == [4]
    # CBP's step costs three times the others' here: its ensemble is the costliest
    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}, "method_cost": {"cbp": 3.0}}
    priced = group(runs, max_members=4, workers=2, cost=job_seconds("cpu", cal, workers=2))
    assert sorted((e.config.method, len(e.seeds)) for e in priced) == [
        ("baseline", 4), ("cbp", 2), ("cbp", 2), ("concat_relu", 4)]


def test_max_members_can_depend_on_the_configuration():
    runs = expand({**SWEEP, "seeds": "0-9"})
    ensembles = group(runs, max_members=lambda c: 2 if c.method == "redo" else 16)
    assert max(len(e.seeds) for e in ensembles if e.config.method == "redo") == 2
    # 60 L2 Init and Baseline runs in 4 ensembles of 15
    assert [len(e.seeds) for e in ensembles if e.config.method != "redo"] == [15] * 4


def test_calibrated_ensemble_size_is_the_fastest_k_per_architecture():
    from plasticlab.experiments.bench import members_for

    calibration = {"samples_per_second": {"mlp": {"1": 5e3, "8": 3e4, "16": 2.5e4},
                                          "cnn": {"1": 1e3, "4": 2e3, "16": 1.5e3}}}
    choose = members_for("cpu", calibration)
    sweep = {"problems": ["permuted_mnist", "random_label_cifar"], "method": "baseline"}
    runs = {r.config.problem: r.config for r in expand(sweep)}
    assert choose(runs["permuted_mnist"]) == 8 and choose(runs["random_label_cifar"]) == 4
    assert members_for("cpu", None)(runs["permuted_mnist"]) == 16
    assert members_for("cuda", calibration)(runs["permuted_mnist"]) == 256
    assert members_for("cuda", calibration)(runs["random_label_cifar"]) == 64
    # a sweep on two workers takes the K that is fastest with both training at once
    calibration["samples_per_second_all_workers"] = {"mlp": {"1": 9e3, "8": 4e4, "16": 5e4}}
    assert members_for("cpu", calibration, workers=2)(runs["permuted_mnist"]) == 16
    assert members_for("cpu", calibration, workers=1)(runs["permuted_mnist"]) == 8


@pytest.mark.slow
def test_calibration_measures_each_k_alone_and_with_every_worker_at_once(data_dir):
    from plasticlab.experiments.bench import calibrate, estimate_seconds

    lines = []
    # a task end's cost at K = 2 (a sweep's calibration measures it at 8: the CNN's test accuracy
    # of eight members was half of this test)
    cal = calibrate(data_dir, members=(1, 2), steps=8, methods=False, workers=2, log=lines.append,
                    overhead_members=2)
    for table in ("samples_per_second", "samples_per_second_all_workers"):
        assert set(cal[table]) == {"mlp", "cnn"}
        assert all(set(rates) == {"1", "2"} and min(rates.values()) > 0 for rates in cal[table].values())
    assert cal["workers"] == 2 and "2 workers at once" in lines[0]
    assert cal["task_overhead_members"] == 2 and set(cal["task_overhead_seconds"]) == {"mlp", "cnn"}
    assert any("K=2   " in line and "per task end" in line for line in lines)
    # a step timed at batch 1, the problem's 16 and 128, at the largest K calibrated
    assert cal["batch_step_seconds_at"] == {"mlp": 16, "cnn": 16}
    assert all(set(t) == {"1", "16", "128"} and min(t.values()) > 0
               for t in cal["batch_step_seconds"].values())
    assert any("K=2   a step at batch 1:" in line for line in lines)
    ensembles = group(expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3",
                              "tasks": 2, "steps_per_task": 50}), max_members=2)
    assert estimate_seconds(ensembles, cal, workers=2) > 0


def test_the_estimate_schedules_ensembles_longest_first_onto_the_worker_that_frees_first():
    from plasticlab.experiments.bench import estimate_seconds

    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}}  # 1,000 member-samples/s at any K
    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-11",
                   "tasks": 1, "steps_per_task": 10, "batch_size": 25})
    ensembles = group(runs, max_members=4)  # 3 ensembles of 4: 4 × 10 × 25 = 1,000 samples, 1 s each
    assert estimate_seconds(ensembles, cal, workers=1) == pytest.approx(3.0)
    assert estimate_seconds(ensembles, cal, workers=2) == pytest.approx(2.0)  # not 1.5: a third round
    assert estimate_seconds(ensembles, cal, workers=3) == pytest.approx(1.0)
    assert estimate_seconds(ensembles, cal, workers=8) == pytest.approx(1.0)
    assert estimate_seconds([], cal, workers=2) == 0.0


def test_the_executor_orders_by_the_calibrations_seconds_only_on_a_calibrated_cpu():
    from plasticlab.experiments.bench import ensemble_seconds, job_seconds

    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}}
    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3",
                   "tasks": 1, "steps_per_task": 10, "batch_size": 25})
    (ensemble,) = group(runs, max_members=4)
    assert job_seconds("cpu", cal)(ensemble) == ensemble_seconds(ensemble, cal) == pytest.approx(1.0)
    assert job_seconds("cpu", None) is None  # the executor's member-samples then
    assert job_seconds("cuda", cal) is None  # a CPU's calibration does not price a GPU's steps


def test_an_ensemble_resumed_from_its_checkpoint_is_priced_by_its_tasks_left():
    from plasticlab.experiments.bench import ensemble_seconds, estimate_seconds, job_seconds

    # 1,000 member-samples/s; 0.5 s a task end at K = 4
    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}, "task_overhead_seconds": {"mlp": 0.5},
           "task_overhead_members": 4}
    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-7",
                   "tasks": 4, "steps_per_task": 10, "batch_size": 25})
    first, second = group(runs, max_members=4)  # a task: 4 × 10 × 25 samples, 1 s, and its end
    assert ensemble_seconds(first, cal) == pytest.approx(6.0)
    assert ensemble_seconds(first, cal, tasks_done=3) == pytest.approx(1.5)
    assert ensemble_seconds(first, cal, tasks_done=4) == 0.0
    done = {id(first): 3, id(second): 0}
    assert estimate_seconds([first, second], cal, workers=1,
                            tasks_done=lambda e: done[id(e)]) == pytest.approx(7.5)
    order = job_seconds("cpu", cal, tasks_done=lambda e: done[id(e)])
    assert order(second) > order(first)  # the one that starts afresh is the longer now


def test_scale_shortens_tasks_and_steps():
    runs = expand(SWEEP, scale=0.1)
    assert {(r.config.tasks, r.config.steps_per_task) for r in runs} == {(2, 62)}
    # step-counted method parameters shrink with the tasks (ReDo's period of 1 and 2 tasks)
    assert {r.config.params["period"] for r in runs if r.config.method == "redo"} == {62, 125}
    with pytest.raises(ValueError, match="scale"):
        expand(SWEEP, scale=2)


@pytest.mark.parametrize("bad,needle", [
    ({"learning_rate": 1}, "unknown sweep key"),
    ({"grid": {"strenght": [1]}}, "unknown grid parameter"),
    ({"grid": {"l2": {"strength": [1]}}}, "not in its methods"),
    ({"grid": {"l2_init": {"strenght": [1]}}}, "strenght"),
    ({"methods": ["nope"]}, "unknown method"),
])
def test_sweep_mistakes_are_errors_that_say_what_is_wrong(bad, needle):
    with pytest.raises(ValueError, match=needle):
        expand({**SWEEP, **bad})


def test_variants_link_settings_and_per_method_lr_sets_each_methods_step_size():
    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0",
                   "variants": [{"batch_size": 1, "steps_per_task": 10}, {"batch_size": 32}]})
    assert sorted((r.config.batch_size, r.config.steps_per_task) for r in runs) == [(1, 10), (32, 625)]
    runs = expand({"problem": "permuted_mnist", "methods": ["baseline", "l2_init"],
                   "per_method_lr": {"baseline": 1e-4, "l2_init": 1e-3}})
    assert {r.config.method: r.config.lr for r in runs} == {"baseline": 1e-4, "l2_init": 1e-3}


def test_every_preset_expands_and_the_main_grids_follow_the_paper():
    for name in PRESETS:
        assert expand(get_preset(name)), name
    main = expand(get_preset("main-permuted_mnist-adam"))
    per_method = {}
    for r in main:
        per_method.setdefault(r.config.method, set()).add(
            (r.config.lr, tuple(sorted(r.config.params.items()))))
    assert len(per_method["l2_init"]) == 2 * 4      # α × λ
    assert len(per_method["cbp"]) == 2 * 6          # α × r ∈ {1e-1 … 1e-6}
    assert len(per_method["redo"]) == 2 * 3 * 3     # α × period (1, 2, 5 tasks) × τ
    assert method_grids("permuted_mnist")["redo"]["period"] == [625, 1250, 3125]
    sgd = expand(get_preset("main-continual_imagenet-sgd"))
    assert {r.config.lr for r in sgd} == {0.1, 1e-2, 1e-3}
    with pytest.raises(ValueError, match="valid"):
        get_preset("nope")


def _row(method, lr, strength, seed, acc):
    return {"config": {"problem": "p", "optimizer": "adam", "method": method, "lr": lr,
                       "params": {"strength": strength} if strength is not None else {}},
            "seed": seed, "summary": {"total_online_accuracy": acc}}


def test_selection_picks_the_best_mean_over_seeds_per_method():
    rows = [_row("l2_init", 1e-3, 1e-2, s, a) for s, a in enumerate([0.80, 0.82, 0.81])]
    rows += [_row("l2_init", 1e-3, 1e-3, s, a) for s, a in enumerate([0.90, 0.70, 0.70])]  # 0.767
    rows += [_row("l2_init", 1e-4, 1e-2, s, a) for s, a in enumerate([0.50, 0.50, 0.50])]
    rows += [_row("baseline", 1e-3, None, s, 0.6) for s in range(3)]
    rows += [_row("baseline", 1e-4, None, s, 0.7) for s in range(3)]
    best = select_best(rows)
    l2i = best[("p", "adam", "l2_init")]
    assert (l2i["config"]["lr"], l2i["config"]["params"]) == (1e-3, {"strength": 1e-2})
    assert l2i["score"] == pytest.approx(0.81) and l2i["seeds"] == 3 and l2i["candidates"] == 3
    assert best[("p", "adam", "baseline")]["config"]["lr"] == 1e-4


def test_a_rerun_plans_only_the_runs_that_did_not_finish(tmp_path):
    runs = expand({"problem": "permuted_mnist", "method": "l2_init", "seeds": "0-3",
                   "grid": {"l2_init": {"strength": [1e-2, 1e-3]}}})
    with ResultStore(tmp_path) as store:
        for r in runs[:3]:
            rid = ResultStore.run_id(r.config.to_dict(), r.seed)
            store.start_run(rid, r.config.to_dict(), {"seed": r.seed})
            store.finish_run(rid, {"total_online_accuracy": 0.5}, {"online_accuracy": [0.5]})
        rid = ResultStore.run_id(runs[3].config.to_dict(), runs[3].seed)
        store.start_run(rid, runs[3].config.to_dict(), {"seed": runs[3].seed})  # killed mid-run
    todo, finished = pending_runs(runs, tmp_path)
    assert finished == 3 and len(todo) == len(runs) - 3
    p = plan(runs, tmp_path, max_members=16)
    assert p.runs == len(runs) - 3 and p.finished_runs == 3


def test_the_stored_grouping_is_reused_whatever_the_workers_and_max_members(tmp_path):
    from plasticlab.experiments.orchestrate import write_plan

    runs = expand({"problem": "permuted_mnist", "method": "l2_init", "seeds": "0-5",
                   "grid": {"l2_init": {"strength": [1e-2, 1e-3]}}})
    first = plan(runs, tmp_path, max_members=16, workers=4)
    write_plan(tmp_path, runs, "s", "grid", first.ensembles)
    again = plan(runs, tmp_path, max_members=2, workers=1)
    assert [e.members for e in again.ensembles] == [e.members for e in first.ensembles]
    fresh = plan(runs, tmp_path / "elsewhere", max_members=2, workers=1)
    assert [len(e.seeds) for e in fresh.ensembles] != [len(e.seeds) for e in first.ensembles]


@pytest.mark.parametrize(("tasks_done", "resumed"), [(None, False), (1, False), (2, True), (7, True)])
def test_an_ensemble_with_a_finished_member_resumes_whole_only_where_its_checkpoint_saves_more(
        tmp_path, tasks_done, resumed):
    # Seed 1 finished elsewhere (another --only, an import): resuming the stored 4-member
    # ensemble trains it again. Of 8 tasks, a checkpoint after 2 saves 4 × 2 member-tasks, the
    # same as retraining seed 1 for the 6 left costs (4 × 6 = 3 × 8); after 1 it saves less,
    # and without a checkpoint nothing: the 3 unfinished runs are grouped anew.
    from plasticlab import checkpoint
    from plasticlab.experiments.orchestrate import write_plan

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3", "tasks": 8})
    first = plan(runs, tmp_path, max_members=16)
    write_plan(tmp_path, runs, "s", "grid", first.ensembles)
    (stored,) = json.loads((tmp_path / "plan.json").read_text())["ensembles"]
    if tasks_done is not None:
        checkpoint.save(tmp_path / "checkpoints" / stored["checkpoint"], "x", {"next_task": tasks_done})
    with ResultStore(tmp_path) as store:
        rid = ResultStore.run_id(runs[1].config.to_dict(), runs[1].seed)
        store.start_run(rid, runs[1].config.to_dict(), {"seed": 1})
        store.finish_run(rid, {}, {})
    again = plan(runs, tmp_path, max_members=2, workers=2)
    if resumed:
        (ensemble,) = again.ensembles
        assert ensemble.seeds == [0, 1, 2, 3] and ensemble.record == [True, False, True, True]
        assert again.superseded == []
    else:
        assert sorted(s for e in again.ensembles for s in e.seeds) == [0, 2, 3]
        assert all(e.record is None for e in again.ensembles)
        assert again.superseded == [stored["checkpoint"]]


def test_a_superseded_ensemble_leaves_the_plan_and_its_checkpoint_is_removed_saying_why(tmp_path):
    from plasticlab import checkpoint
    from plasticlab.experiments.orchestrate import tidy_checkpoints, write_plan

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3", "tasks": 8})
    write_plan(tmp_path, runs, "s", "grid", plan(runs, tmp_path, max_members=16).ensembles)
    (stored,) = json.loads((tmp_path / "plan.json").read_text())["ensembles"]
    checkpoint.save(tmp_path / "checkpoints" / stored["checkpoint"], "x", {"next_task": 1})
    with ResultStore(tmp_path) as store:
        for r in runs[:2]:
            rid = ResultStore.run_id(r.config.to_dict(), r.seed)
            store.start_run(rid, r.config.to_dict(), {"seed": r.seed})
            store.finish_run(rid, {}, {})
    again = plan(runs, tmp_path, max_members=16)
    write_plan(tmp_path, runs, "s", "grid", again.ensembles, again.superseded)
    (entry,) = json.loads((tmp_path / "plan.json").read_text())["ensembles"]
    assert entry["checkpoint"] != stored["checkpoint"] and len(entry["run_ids"]) == 2
    (message,) = tidy_checkpoints(tmp_path, again)
    assert message.startswith(f"removed checkpoint {tmp_path / 'checkpoints' / stored['checkpoint']} "
                              "(at task 1): its unfinished runs train in other ensembles of this sweep")
    assert not (tmp_path / "checkpoints" / stored["checkpoint"]).exists()


def test_an_ensemble_straddling_the_filter_keeps_its_checkpoint_for_a_later_sweep(tmp_path):
    # --only seed=0-1 trains seeds 0 and 1 anew; seeds 2 and 3 have not finished, and the
    # stored ensemble's checkpoint may yet serve a sweep that trains them: kept, in the plan.
    from plasticlab import checkpoint
    from plasticlab.experiments.orchestrate import ensemble_entry, tidy_checkpoints, write_plan

    def ensemble_checkpoint(e):
        return ensemble_entry(e, "grid")["checkpoint"]

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3", "tasks": 8})
    write_plan(tmp_path, runs, "s", "grid", plan(runs, tmp_path, max_members=16).ensembles)
    (stored,) = json.loads((tmp_path / "plan.json").read_text())["ensembles"]
    checkpoint.save(tmp_path / "checkpoints" / stored["checkpoint"], "x", {"next_task": 5})
    part = plan(runs[:2], tmp_path, max_members=16)
    assert [e.seeds for e in part.ensembles] == [[0, 1]] and part.superseded == []
    write_plan(tmp_path, runs, "s", "grid", part.ensembles, part.superseded)
    assert tidy_checkpoints(tmp_path, part) == []
    assert len(json.loads((tmp_path / "plan.json").read_text())["ensembles"]) == 2
    # the whole sweep resumes seeds 0-3 from the checkpoint; the ensemble of seeds 0-1 never started
    again = plan(runs, tmp_path, max_members=16)
    (whole,) = again.ensembles
    assert whole.seeds == [0, 1, 2, 3] and whole.record == [True] * 4
    assert again.superseded == [ensemble_checkpoint(part.ensembles[0])]


def test_of_two_stored_ensembles_sharing_runs_the_one_with_more_saved_work_resumes(tmp_path):
    # Seeds 0-3 planned together and stopped 20 steps into their first task; then, under
    # --only seed=0-1, seeds 0 and 1 together, stopped after 3 tasks: a whole sweep resumes the
    # second (6 member-tasks saved, not 4 × 0.1) and trains seeds 2 and 3 anew.
    from plasticlab import checkpoint
    from plasticlab.experiments.orchestrate import ensemble_entry, write_plan

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3", "tasks": 8,
                   "steps_per_task": 200})
    wide = plan(runs, tmp_path, max_members=16).ensembles
    narrow = plan(runs[:2], tmp_path, max_members=16).ensembles
    write_plan(tmp_path, runs, "s", "grid", [*wide, *narrow])
    (wide_ckpt, narrow_ckpt) = (ensemble_entry(e, "grid")["checkpoint"] for e in (*wide, *narrow))
    checkpoint.save(tmp_path / "checkpoints" / wide_ckpt, "x", {"next_task": 0, "in_flight": {"step": 20}})
    checkpoint.save(tmp_path / "checkpoints" / narrow_ckpt, "x", {"next_task": 3})
    again = plan(runs, tmp_path, max_members=16)
    assert [e.seeds for e in again.ensembles] == [[0, 1], [2, 3]]
    assert again.ensembles[0].record == [True, True] and again.superseded == [wide_ckpt]


@pytest.mark.parametrize("grid", ["strength = [1e-2, -1]", "strength = [1e-2, nan]"])
def test_an_invalid_grid_value_fails_the_dry_run_and_creates_nothing(tmp_path, capsys, grid):
    from plasticlab.cli import main

    path = tmp_path / "bad.toml"
    path.write_text(f'name = "bad"\nproblem = "permuted_mnist"\nmethod = "l2_init"\n'
                    f"[grid.l2_init]\n{grid}\n")
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(path), "--out", str(tmp_path / "out"), *extra]) == 2
        assert "strength must be a finite number >= 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag", ["--workers", "--max-members"])
def test_a_worker_count_below_one_is_an_error_before_anything_is_created(tmp_path, capsys, flag):
    from plasticlab.cli import main

    out = tmp_path / "out"
    assert main(["sweep", "--preset", "main-permuted_mnist-adam", "--out", str(out), flag, "-1"]) == 2
    assert f"{flag} must be >= 1" in capsys.readouterr().err
    assert not out.exists()


def test_a_checkpoint_no_unfinished_ensemble_uses_is_reported_and_removed(tmp_path):
    from plasticlab.experiments.orchestrate import tidy_checkpoints

    runs = expand({"problem": "permuted_mnist", "method": "baseline", "seeds": "0-1"})
    p = plan(runs, tmp_path, max_members=16)
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "0123456789abcdef.ckpt").write_bytes(b"an old-format checkpoint")
    (folder / "run-0123456789abcdef.ckpt").write_bytes(b"a plasticlab run's own")
    (messages,) = tidy_checkpoints(tmp_path, p)
    assert "removed checkpoint" in messages and "0123456789abcdef.ckpt" in messages
    assert sorted(f.name for f in folder.iterdir()) == ["run-0123456789abcdef.ckpt"]


def test_dry_run_prints_how_the_runs_are_packed_into_ensembles(tmp_path, capsys):
    from plasticlab.cli import main

    assert main(["sweep", "--preset", "main-permuted_mnist-adam", "--dry-run", "--out",
                 str(tmp_path / "x"), "--workers", "1"]) == 0
    out = capsys.readouterr().out
    # S&P: 2 step sizes × 16 (p, σ) × 3 seeds = 96 runs, split under the CPU's default K of 16
    assert "permuted_mnist shrink_perturb adam: 6 ensemble(s), K = 16 ×6" in out
    assert main(["sweep", "--preset", "main-permuted_mnist-adam", "--dry-run", "--out",
                 str(tmp_path / "x"), "--max-members", "256"]) == 0
    out = capsys.readouterr().out
    # with room for them (a GPU's K), every step size of a method shares one ensemble, and the
    # Baseline, L2 and L2 Init one between them: 6 + 24 + 24 runs
    assert "permuted_mnist baseline+l2_init+l2 adam: 1 ensemble(s), K = 54" in out
    assert "permuted_mnist shrink_perturb adam: 1 ensemble(s), K = 96" in out
    assert "in 8 ensembles" in out
    assert not (tmp_path / "x").exists()


def test_on_a_gpu_ensembles_are_not_halved_to_give_every_worker_one(tmp_path, capsys, monkeypatch):
    import plasticlab.cli.sweep
    from plasticlab.cli import main

    # No GPU here: the device check is told there is one; a dry run trains nothing.
    monkeypatch.setattr(plasticlab.cli.sweep, "check_device", lambda device: device)
    args = ["sweep", "--preset", "best-permuted_mnist-adam", "--dry-run", "--out", str(tmp_path / "x")]
    # 8 methods × 10 seeds: 6 ensembles (Baseline, L2 and L2 Init share one of 30) ...
    assert main([*args, "--workers", "8", "--max-members", "256"]) == 0
    assert "in 8 ensembles" in capsys.readouterr().out  # ... halved until 8 cores have one each
    assert main([*args, "--workers", "8", "--device", "cuda"]) == 0
    assert "in 6 ensembles" in capsys.readouterr().out  # ... on one GPU as they are


def test_a_steps_time_is_interpolated_in_its_batch_size_not_taken_as_proportional_to_it():
    from plasticlab.experiments.bench import batch_factor, estimate_seconds

    # a step of 1 s at batch 1, 2 s at 16 (the rates' batch), 9 s at 128
    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}, "batch_step_seconds_at": {"mlp": 16},
           "batch_step_seconds": {"mlp": {"1": 1.0, "16": 2.0, "128": 9.0}}}
    assert batch_factor(cal, "mlp", 16) == 1.0
    assert batch_factor(cal, "mlp", 1) == pytest.approx(8.0)  # half of batch 16's time, not a 16th
    assert batch_factor(cal, "mlp", 32) == pytest.approx(3.0 / 2 * 16 / 32)  # 2 + 7·16/112 = 3 s
    assert batch_factor(cal, "mlp", 256) == pytest.approx(17.0 / 2 * 16 / 256)  # beyond 128: extrapolated
    assert batch_factor(cal, "cnn", 1) == 1.0  # not calibrated: proportional, as before
    assert batch_factor({}, "mlp", 1) == 1.0
    spec = {"problem": "permuted_mnist", "method": "baseline", "seeds": "0-3", "tasks": 1}
    one = group(expand({**spec, "steps_per_task": 250, "batch_size": 1}), max_members=4)
    sixteen = group(expand({**spec, "steps_per_task": 250, "batch_size": 16}), max_members=4)
    # 250 steps of 4 members: 16 s at batch 16 by the rate; batch 1's steps cost half of those
    # (the table), not a sixteenth: 8 s, not 1 s (without the table)
    assert estimate_seconds(sixteen, cal) == pytest.approx(16.0)
    assert estimate_seconds(one, cal) == pytest.approx(8.0)
    assert estimate_seconds(one, {"samples_per_second": cal["samples_per_second"]}) == pytest.approx(1.0)


def test_the_estimate_counts_the_optimizers_cost_as_well_as_the_methods():
    from plasticlab.experiments.bench import estimate_seconds

    cal = {"samples_per_second": {"mlp": {"4": 1000.0}}, "method_cost": {"l2_init": 1.5},
           "optimizer_cost": {"upgd": 4.0}}
    spec = {"problem": "permuted_mnist", "seeds": "0-3", "tasks": 1, "steps_per_task": 10, "batch_size": 25}
    seconds = {(method, optimizer): estimate_seconds(
        group(expand({**spec, "method": method, "optimizer": optimizer}), max_members=4), cal)
        for method in ("baseline", "l2_init") for optimizer in ("adam", "upgd")}
    assert seconds == pytest.approx({("baseline", "adam"): 1.0, ("l2_init", "adam"): 1.5,
                                     ("baseline", "upgd"): 4.0, ("l2_init", "upgd"): 6.0})


def test_the_estimate_prices_a_cnn_ensemble_by_the_costs_timed_on_the_cnn():
    from plasticlab.experiments.bench import estimate_seconds

    # CBP and SGD timed on both networks; L2 Init on the MLP only
    cal = {"samples_per_second": {"mlp": {"4": 1000.0}, "cnn": {"4": 1000.0}},
           "method_cost": {"cbp": 2.0, "l2_init": 1.5}, "optimizer_cost": {"sgd": 0.5},
           "method_cost_by_arch": {"cnn": {"cbp": 4.0}}, "optimizer_cost_by_arch": {"cnn": {"sgd": 0.75}}}
    spec = {"seeds": "0-3", "tasks": 1, "steps_per_task": 10, "batch_size": 25}

    def seconds(problem, method, optimizer="adam"):
        return estimate_seconds(group(expand({**spec, "problem": problem, "method": method,
                                              "optimizer": optimizer}), max_members=4), cal)

    assert seconds("permuted_mnist", "cbp") == pytest.approx(2.0)
    assert seconds("random_label_cifar", "cbp") == pytest.approx(4.0)
    assert seconds("random_label_cifar", "cbp", "sgd") == pytest.approx(3.0)
    assert seconds("random_label_cifar", "l2_init") == pytest.approx(1.5)  # the MLP's, untimed on the CNN


def test_relative_costs_time_each_method_and_each_optimizer_against_the_baseline_with_adam(data_dir):
    from plasticlab.experiments.bench import relative_costs

    lines = []
    methods, optimizers = relative_costs(4, data_dir, methods=("l2_init",), optimizers=("upgd",),
                                         log=lines.append, base=1e9)
    # a billion member-samples/s is faster than anything trains here: every cost is above 1
    assert set(methods) == {"l2_init"} and set(optimizers) == {"upgd"}
    assert methods["l2_init"] > 1 and optimizers["upgd"] > 1
    assert "upgd" in lines[1] and "Adam's time per step" in lines[1]
    # and on the CNN, as the calibration times the paper's methods and SGD there
    methods, optimizers = relative_costs(2, data_dir, methods=("cbp",), optimizers=("sgd",),
                                         log=lines.append, arch="cnn", base=1e9)
    assert methods["cbp"] > 1 and optimizers["sgd"] > 1 and "CNN, K=8)" in lines[-1]


def test_only_keeps_the_runs_whose_every_filtered_setting_is_one_of_its_values():
    from plasticlab.experiments.sweep import only_runs, run_filters

    runs = expand({"problem": "permuted_mnist", "seeds": "0-2", "variants": [
        {"method": "l2_init", "optimizer": "adam", "grid": {"lr": [1e-3, 1e-2]}},
        {"method": "baseline", "optimizer": "upgd", "lr": 1e-2}]})
    picked = only_runs(runs, run_filters(["optimizer=upgd"], runs))
    assert {(r.config.optimizer, r.seed) for r in picked} == {("upgd", s) for s in (0, 1, 2)}
    picked = only_runs(runs, run_filters(["lr=1e-2", "seed=0-1"], runs))  # read as 0.01; AND
    assert sorted((r.config.method, r.seed) for r in picked) == [
        ("baseline", 0), ("baseline", 1), ("l2_init", 0), ("l2_init", 1)]
    picked = only_runs(runs, run_filters(["method=baseline,l2_init", "optimizer=adam"], runs))
    assert len(picked) == 6 and {r.config.method for r in picked} == {"l2_init"}
    assert only_runs(runs, run_filters([], runs)) == runs


@pytest.mark.parametrize("text,message", [
    ("optimizer=upgdd", "no run of the sweep has optimizer = upgdd; its values: adam, upgd"),
    ("optimiser=upgd", "unknown key 'optimiser'"),
    ("lr=fast", "lr takes float values"),
    ("seed=7", "no run of the sweep has seed = 7"),
    ("method", "expects KEY=VALUE"),
])
def test_a_filter_that_could_select_nothing_by_mistake_is_an_error(text, message):
    from plasticlab.experiments.sweep import run_filters

    runs = expand({"problem": "permuted_mnist", "seeds": "0-2", "variants": [
        {"method": "l2_init", "optimizer": "adam", "lr": 1e-3},
        {"method": "baseline", "optimizer": "upgd", "lr": 1e-2}]})
    with pytest.raises(ValueError, match=re.escape(message)):
        run_filters([text], runs)
    assert run_filters(["seed=7"], runs, more_seeds=[7]) == {"seed": {7}}  # a protocol's seeds
