"""Running sweeps: parallel workers, a failing run, kill and resume, the protocol, Ray."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from conftest import lock_released
from plasticlab.cli import main
from plasticlab.experiments import ResultStore

TINY = """
name = "tiny"
problem = "permuted_mnist"
methods = {methods}
seeds = "0-1"
tasks = 2
steps_per_task = {steps}
[problem_params]
examples_per_task = 160
"""


def write_sweep(tmp_path, methods=("baseline", "l2_init", "l2", "l1_init"), steps=10, extra=""):
    path = tmp_path / "sweep.toml"
    path.write_text(TINY.format(methods=json.dumps(list(methods)), steps=steps) + extra)
    return path


# Where a test is not about the executor (the first ones and the Ray test are), its sweeps train
# inline, in the test's own process: a worker process takes ~2 s of a core to start.
INLINE = ("--executor", "inline")


def finished_runs(out):
    with ResultStore(out) as store:
        return {r["run_id"]: r for r in store.runs(status="finished")}


@pytest.mark.slow
def test_sweep_runs_every_run_once_on_two_workers(data_dir, tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--workers", "2", "--no-progress"]) == 0
    runs = finished_runs(out)
    assert len(runs) == 4 * 2
    assert {(r["config"]["method"], r["seed"]) for r in runs.values()} == {
        (m, s) for m in ("baseline", "l2_init", "l2", "l1_init") for s in (0, 1)}
    # a second run has nothing left to do
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--no-progress"]) == 0
    assert "0 to run" in capsys.readouterr().out


def test_a_run_waiting_for_a_worker_has_no_attempt_until_a_worker_takes_its_ensemble(data_dir, tmp_path):
    # One worker, two ensembles (Layer Norm trains another network): the second ensemble's
    # runs start — 'running' in the store — only once the first has ended.
    sweep = write_sweep(tmp_path, methods=("l2_init", "layer_norm"))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--workers", "1", "--no-progress"]) == 0
    runs = list(finished_runs(out).values())
    assert len(runs) == 4
    by_method = {m: [r["manifest"] for r in runs if r["config"]["method"] == m]
                 for m in ("l2_init", "layer_norm")}
    first, second = sorted(by_method.values(), key=lambda ms: min(m["start_time"] for m in ms))
    assert min(m["start_time"] for m in second) >= max(m["end_time"] for m in first)
    with ResultStore(out) as store:
        assert all(len(store.attempts(r["run_id"])) == 1 for r in runs)


def test_a_failing_run_is_recorded_and_the_sweep_goes_on(data_dir, tmp_path):
    # Random Label CIFAR's file is there (the driver's check passes) but unreadable: its worker
    # fails, the sweep goes on
    data = tmp_path / "data"
    (data / "cifar10").mkdir(parents=True)
    (data / "mnist").symlink_to(data_dir / "mnist", target_is_directory=True)
    (data / "cifar10" / "broken.npz").write_bytes(b"not a zip archive")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('problems = ["permuted_mnist", "random_label_cifar"]\nmethod = "baseline"\n'
                     'seeds = "0"\ntasks = 2\nsteps_per_task = 5\n')
    out = tmp_path / "out"
    code = main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data), "--workers", "1",
                 "--no-progress"])
    assert code == 1  # something failed …
    with ResultStore(out) as store:
        failed = store.runs(status="failed")
        done = store.runs(status="finished")
    assert [r["config"]["problem"] for r in failed] == ["random_label_cifar"]
    assert "broken.npz" in failed[0]["error"]
    assert [r["config"]["problem"] for r in done] == ["permuted_mnist"]  # … and the rest ran


def test_a_missing_dataset_is_one_error_before_any_run_starts(data_dir, tmp_path, capsys):
    # not one failed ensemble per job: the driver fetches what its workers will read first
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('problems = ["permuted_mnist", "continual_imagenet"]\n'
                     'methods = ["baseline", "l2_init", "layer_norm"]\n'
                     'seeds = "0-1"\ntasks = 2\nsteps_per_task = 5\n')
    out = tmp_path / "out"
    code = main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--workers", "2",
                 "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("No ImageNet-32 class files") == 1 and "imagenet32/classes" in err
    with ResultStore(out) as store:
        assert store.runs() == []


@pytest.mark.slow
def test_a_killed_sweep_resumes_and_ends_with_every_run_exactly_once(data_dir, tmp_path):
    sweep = write_sweep(tmp_path, methods=("baseline", "l2_init", "l2", "l1_init", "huber_init",
                                           "l2_init_resample"), steps=150)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "plasticlab.cli", "sweep", str(sweep), "--out", str(out),
           "--data-dir", str(data_dir), "--workers", "1", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if (out / "results.sqlite").exists() and len(finished_runs(out)) >= 2:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the sweep finished before it could be killed; make it longer"
    import os
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = finished_runs(out)
    assert 2 <= len(before) < 12
    assert lock_released(out)
    # the same command, in this process and inline: what is resumed is the store's (a worker
    # process would take ~2 s of a core to start)
    assert main([*cmd[3:], *INLINE]) == 0
    after = finished_runs(out)
    assert len(after) == 12
    for run_id, run in before.items():  # finished runs were not run again
        assert after[run_id]["manifest"]["end_time"] == run["manifest"]["end_time"]


PROTOCOL = """
[grid.l2_init]
strength = [1e-1, 1e-3]
[protocol]
evaluation_seeds = "7-8"
"""


def test_protocol_selects_on_the_grid_seeds_and_evaluates_on_new_seeds(data_dir, tmp_path, capsys):
    sweep = write_sweep(tmp_path, methods=("l2_init",), extra=PROTOCOL)
    out = tmp_path / "out"
    # inline: a protocol sweep on a worker process is test_gpu_scripts' grid-pace test
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--no-progress", *INLINE]) == 0
    selection = json.loads((out / "selection.json").read_text())["selected"]
    assert len(selection) == 1 and selection[0]["candidates"] == 2
    chosen = selection[0]["params"]["strength"]
    runs = finished_runs(out).values()
    grid = [r for r in runs if r["seed"] in (0, 1)]
    scores = {}
    for r in grid:
        scores.setdefault(r["config"]["params"]["strength"], []).append(
            r["summary"]["total_online_accuracy"])
    assert chosen == max(scores, key=lambda k: sum(scores[k]))
    evaluation = [r for r in runs if r["seed"] in (7, 8)]
    assert {r["config"]["params"]["strength"] for r in evaluation} == {chosen}
    printed = capsys.readouterr().out
    assert "selected" in printed and "evaluation on seeds 7..8" in printed and "(n = 2)" in printed
    # what the report reads: the evaluation seeds, and every planned run (grid and evaluation)
    assert json.loads((out / "selection.json").read_text())["evaluation_seeds"] == [7, 8]
    planned = json.loads((out / "plan.json").read_text())["runs"]
    assert sorted((p["phase"], p["seed"]) for p in planned) == [
        ("evaluation", 7), ("evaluation", 8), ("grid", 0), ("grid", 0), ("grid", 1), ("grid", 1)]
    assert {p["run_id"] for p in planned} == set(finished_runs(out))


def test_dry_run_prints_the_plan_without_running(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "--preset", "main-permuted_mnist-adam", "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "252 runs" in text and "ensembles" in text
    assert not (out / "results.sqlite").exists()


def test_presets_lists_every_study(capsys):
    assert main(["presets"]) == 0
    text = capsys.readouterr().out
    for name in ("main-permuted_mnist-adam", "best-continual_imagenet-sgd", "ablation", "width",
                 "depth", "batch-size", "init", "lambda-sensitivity", "forgetting"):
        assert name in text


def test_a_grid_of_step_sizes_and_penalty_methods_trains_as_one_ensemble_of_their_own_runs(
        data_dir, tmp_path, capsys):
    sweep = write_sweep(tmp_path, methods=("l2_init", "baseline"),
                        extra="[grid]\nlr = [1e-3, 1e-2]\n")
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--workers", "1", "--no-progress", *INLINE]) == 0
    runs = finished_runs(out).values()
    assert sorted((r["config"]["method"], r["config"]["lr"], r["seed"]) for r in runs) == [
        (m, lr, s) for m in ("baseline", "l2_init") for lr in (1e-3, 1e-2) for s in (0, 1)]
    for r in runs:  # one ensemble of eight: both methods, both step sizes, both seeds
        ensemble = r["manifest"]["ensemble"]
        assert ensemble["members"] == 8
        assert sorted(ensemble["lr"]) == [1e-3] * 4 + [1e-2] * 4
        assert sorted(ensemble["methods"]) == ["baseline"] * 4 + ["l2_init"] * 4
    for method, params in (("baseline", {}), ("l2_init", {"strength": 1e-2})):
        packed = next(r for r in runs if r["config"]["method"] == method
                      and r["config"]["lr"] == 1e-2 and r["seed"] == 1)
        assert packed["config"]["params"] == params
        capsys.readouterr()
        assert main(["run", "--problem", "permuted_mnist", "--method", method, "--lr", "1e-2",
                     "--tasks", "2", "--steps-per-task", "10", "--set", "examples_per_task=160",
                     "--seeds", "1", "--data-dir", str(data_dir), "--out", str(tmp_path / "alone"),
                     "--no-progress", "--json"]) == 0
        (alone,) = json.loads(capsys.readouterr().out)["runs"]
        assert alone["run_id"] == packed["run_id"]
        with ResultStore(out) as store:
            assert store.task_metrics(packed["run_id"])["online_accuracy"] == alone["task_online_accuracy"]


def test_status_shows_how_far_each_unfinished_ensemble_has_come(data_dir, tmp_path, capsys):
    from plasticlab import checkpoint

    sweep = write_sweep(tmp_path, methods=("l2_init", "l2"))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--workers", "1", "--no-progress", *INLINE]) == 0
    plan = json.loads((out / "plan.json").read_text())
    entry = plan["ensembles"][0]
    # a checkpoint as an interrupted sweep leaves it: 1 of the 2 tasks done, in 3 s of training
    checkpoint.save(out / "checkpoints" / entry["checkpoint"], "x", {"next_task": 1, "wall": 3.0})
    (out / "checkpoints" / "ensemble-broken.ckpt").write_bytes(b"not a checkpoint")
    # and an ensemble of the plan that has not started: no checkpoint, its run not finished
    plan["ensembles"].append({"phase": "grid", "run_ids": ["not-finished"],
                              "checkpoint": "ensemble-waiting.ckpt"})
    (out / "plan.json").write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    methods = {r["config"]["method"] for r in finished_runs(out).values()
               if r["run_id"] in entry["run_ids"]}
    stem = entry["checkpoint"].removesuffix(".ckpt")
    line = next(line for line in text.splitlines() if stem in line)
    assert line.strip().startswith(f"{stem} (grid, ")
    assert set(line.split("(grid, ")[1].split(",")[0].split("+")) == methods
    assert f"K={len(entry['run_ids'])}): 1 of 2 tasks done, saved " in line
    assert line.endswith("UTC; 3.0 s a task, 0h00m03s of training left at that pace")
    assert "ensemble-broken.ckpt: unreadable" in text
    assert "and 1 ensemble(s) of the plan not started (1 runs)" in text
    # a plan entry the plan has no runs for gets no estimate, calibrated or not
    assert "`plasticlab bench` calibrates this machine for an estimate of their time" in text


def test_status_json_is_the_same_progress_for_a_script(data_dir, tmp_path, capsys):
    from plasticlab import checkpoint

    sweep = write_sweep(tmp_path, methods=("l2_init", "l2"))
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                 "--workers", "1", "--no-progress", *INLINE]) == 0
    capsys.readouterr()
    assert main(["status", str(out), "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["runs"] == 4 and done["complete"] and done["status"]["finished"] == 4
    assert done["ensembles"] == [] and done["waiting"]["ensembles"] == 0
    # as in the text's test above: one ensemble 1 of its 2 tasks in, 3 s of training; an
    # unreadable checkpoint; an ensemble of the plan not started
    plan = json.loads((out / "plan.json").read_text())
    entry = plan["ensembles"][0]
    checkpoint.save(out / "checkpoints" / entry["checkpoint"], "x", {"next_task": 1, "wall": 3.0})
    (out / "checkpoints" / "ensemble-broken.ckpt").write_bytes(b"not a checkpoint")
    new = {**plan["runs"][0], "run_id": "new-0", "seed": plan["runs"][0]["seed"] + 10}
    plan["runs"].append(new)
    plan["ensembles"].append({"phase": "grid", "run_ids": ["new-0"], "checkpoint": "ensemble-waiting.ckpt"})
    (out / "plan.json").write_text(json.dumps(plan))
    assert main(["status", str(out), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    broken, saved = state["ensembles"]
    assert broken["checkpoint"] == "ensemble-broken.ckpt"
    assert "not a plasticlab checkpoint" in broken["error"]
    assert broken["tasks_done"] is None and broken["seconds_left"] is None
    assert saved["checkpoint"] == entry["checkpoint"] and saved["error"] is None
    fields = ("phase", "members", "tasks", "tasks_done", "steps_in_task")
    assert [saved[f] for f in fields] == ["grid", len(entry["run_ids"]), 2, 1, 0]
    assert (saved["seconds_per_task"], saved["seconds_left"]) == (3.0, 3.0)
    assert saved["pace_of"] == "every sitting"
    assert saved["saved"].endswith("Z") and len(saved["saved"]) == 20
    config = new["config"]
    assert state["waiting"] == {"ensembles": 1, "runs": 1, "estimated_seconds": None,
                                "each": [f"{config['method']} {config['problem']} lr={config['lr']:g} K=1"]}
    assert state["runs"] == 5 and state["status"]["to run"] == 1 and not state["complete"]


def test_status_gives_the_pace_of_the_sitting_that_wrote_the_checkpoint(data_dir, tmp_path, capsys):
    from plasticlab import checkpoint

    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, methods=("l2_init",), steps=10)), "--out", str(out),
                 "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]) == 0
    (entry,) = json.loads((out / "plan.json").read_text())["ensembles"]

    def status_line(state: dict) -> str:
        checkpoint.save(out / "checkpoints" / entry["checkpoint"], "x", state)
        capsys.readouterr()
        assert main(["status", str(out)]) == 0
        return next(line for line in capsys.readouterr().out.splitlines()
                    if entry["checkpoint"].removesuffix(".ckpt") in line)

    # saved 5 steps into the second task (of 10 a task): 1.5 tasks' work in 30 s, 10 s of it by an
    # earlier, slower sitting that stopped a quarter into the first task; this one's 20 s gave
    # 1.25 tasks: 16 s a task, and the half task left takes 8 s
    line = status_line({"next_task": 1, "wall": 30.0, "in_flight": {"step": 5},
                        "sitting_start": {"task": 0.25, "wall": 10.0}})
    assert "1 of 2 tasks done and 5 steps of the next, saved " in line
    assert line.endswith("UTC; 16.0 s a task this sitting, 0h00m08s of training left at that pace")
    # under a task's worth in this sitting: the pace over every sitting, 30 s for 1.5 tasks
    line = status_line({"next_task": 1, "wall": 30.0, "in_flight": {"step": 5},
                        "sitting_start": {"task": 0.75, "wall": 25.0}})
    assert line.endswith("UTC; 20.0 s a task, 0h00m10s of training left at that pace")


def test_status_estimates_the_ensembles_not_started_by_the_machines_calibration(data_dir, tmp_path, capsys):
    from plasticlab import checkpoint
    from plasticlab.experiments import bench

    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, methods=("l2_init",), steps=10)), "--out", str(out),
                 "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]) == 0
    plan = json.loads((out / "plan.json").read_text())
    # one ensemble of the plan under way, and one not started: the same runs with new seeds
    (out / "checkpoints").mkdir(exist_ok=True)
    checkpoint.save(out / "checkpoints" / plan["ensembles"][0]["checkpoint"], "x",
                    {"next_task": 1, "wall": 1.0})
    new_runs = [{**r, "run_id": f"new-{r['seed']}", "seed": r["seed"] + 10} for r in plan["runs"]]
    plan["runs"] += new_runs
    plan["ensembles"].append({"phase": "grid", "run_ids": [r["run_id"] for r in new_runs],
                              "checkpoint": "ensemble-new.ckpt"})
    (out / "plan.json").write_text(json.dumps(plan))
    # 64 member-samples/s: 2 members × 2 tasks × 10 steps × 16 examples take 10 s
    bench.save({"samples_per_second": {"mlp": {"2": 64.0}}})
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    i, line = next((i, line) for i, line in enumerate(lines) if "not started" in line)
    assert line.strip().startswith("and 1 ensemble(s) of the plan not started (2 runs): "
                                   "about 0h00m10s of training on ")
    assert line.endswith("worker(s), by this machine's calibration")
    # and what each of them trains, named as the sweep's progress names it
    assert lines[i + 1].split() == ["l2_init", plan["runs"][0]["config"]["problem"],
                                    f"lr={plan['runs'][0]['config']['lr']:g}", "K=2"]


def test_a_resumed_sweep_says_how_far_its_ensembles_are_and_estimates_the_tasks_left(
        data_dir, tmp_path, capsys):
    from plasticlab import checkpoint
    from plasticlab.experiments import bench

    out = tmp_path / "out"
    args = ["sweep", str(write_sweep(tmp_path, methods=("l2_init",), steps=10)), "--out", str(out),
            "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]
    assert main(args) == 0
    # 64 member-samples/s: the ensemble's 2 members × 10 steps × 16 examples take 5 s a task
    bench.save({"samples_per_second": {"mlp": {"2": 64.0}}})
    capsys.readouterr()
    assert main([*args, "--rerun", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(
        "in 1 ensembles, 20 ensemble steps; estimated 0h00m10s on 1 worker(s)")
    # its checkpoint after the first of its two tasks: the sweep resumes there
    (ensemble,) = json.loads((out / "plan.json").read_text())["ensembles"]
    checkpoint.save(out / "checkpoints" / ensemble["checkpoint"], "x", {"next_task": 1, "wall": 1.0})
    assert main([*args, "--rerun", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(
        "in 1 ensembles, 20 ensemble steps; 1 ensemble(s) resume from a checkpoint, 1 of their 2 "
        "tasks done; estimated 0h00m05s on 1 worker(s) for the tasks left")


BATCH_SIZES = """
name = "batches"
problem = "permuted_mnist"
method = "baseline"
seeds = "0-1"
tasks = 2
variants = [{batch_size = 1, steps_per_task = 40}, {batch_size = 32, steps_per_task = 2}]
[problem_params]
examples_per_task = 160
"""


def test_a_calibrated_sweep_trains_the_ensemble_its_calibration_prices_longest_first(
        data_dir, tmp_path):
    from plasticlab.experiments import bench

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(BATCH_SIZES)

    def first_batch_size(out) -> int:
        assert main(["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir),
                     "--workers", "1", "--no-progress", *INLINE]) == 0
        with ResultStore(out) as store:
            return store.runs()[0]["config"]["batch_size"]  # the runs in the order they started

    # batch 32's 2 × 2 × 32 member-samples a member outnumber batch 1's 2 × 40 × 1
    assert first_batch_size(tmp_path / "uncalibrated") == 32
    # but a step at batch 1 takes half of one at 16 here, so batch 1's 80 steps are the longer
    bench.save({"samples_per_second": {"mlp": {"2": 1000.0}},
                "batch_step_seconds": {"mlp": {"1": 0.5, "16": 1.0, "128": 5.0}},
                "batch_step_seconds_at": {"mlp": 16}})
    assert first_batch_size(tmp_path / "calibrated") == 1


def test_status_names_an_ensemble_a_worker_has_taken_before_its_first_checkpoint(data_dir, tmp_path, capsys):
    from plasticlab.experiments.store import ResultStore

    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, methods=("l2_init",), steps=10)), "--out", str(out),
                 "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]) == 0
    plan = json.loads((out / "plan.json").read_text())
    # two ensembles of the plan without a checkpoint: a worker has taken the runs of one (they
    # are 'running' in the store, its first task not yet ended), no worker those of the other
    taken, waiting = ([{**r, "run_id": f"{name}-{r['seed']}", "seed": r["seed"] + offset}
                       for r in plan["runs"]] for name, offset in (("taken", 10), ("waiting", 20)))
    plan["runs"] += taken + waiting
    plan["ensembles"] += [{"phase": "grid", "run_ids": [r["run_id"] for r in runs],
                           "checkpoint": f"ensemble-{runs[0]['run_id']}.ckpt"} for runs in (taken, waiting)]
    (out / "plan.json").write_text(json.dumps(plan))
    with ResultStore(out) as store:
        for r in taken:
            store.start_run(r["run_id"], r["config"], {})
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    config = plan["runs"][0]["config"]
    assert (f"    l2_init {config['problem']} lr={config['lr']:g} K=2: started, no task end saved yet (its "
            "first task is training, or a killed sweep left it so)") in lines
    assert any(line.startswith("    and 1 ensemble(s) of the plan not started (2 runs)") for line in lines)


def test_status_counts_a_run_a_later_plan_grouped_anew_in_its_newest_ensemble_only(
        data_dir, tmp_path, capsys):
    from plasticlab import checkpoint

    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, methods=("l2_init",), steps=10)), "--out", str(out),
                 "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]) == 0
    plan = json.loads((out / "plan.json").read_text())
    checkpoint.save(out / "checkpoints" / plan["ensembles"][0]["checkpoint"], "x",
                    {"next_task": 1, "wall": 1.0})
    # a plan.json as plasticlab wrote it before it dropped superseded ensembles: two new runs
    # planned together, then (another --only) the first of them alone; neither started
    new = [{**r, "run_id": f"new-{r['seed']}", "seed": r["seed"] + 10} for r in plan["runs"]]
    plan["runs"] += new
    plan["ensembles"] += [
        {"phase": "grid", "run_ids": [r["run_id"] for r in new], "checkpoint": "ensemble-old.ckpt"},
        {"phase": "grid", "run_ids": [new[0]["run_id"]], "checkpoint": "ensemble-newer.ckpt"}]
    (out / "plan.json").write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    text = capsys.readouterr().out
    assert "and 1 ensemble(s) of the plan not started (1 runs)" in text, text


def test_status_counts_the_plans_runs_not_started_as_to_run(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", str(write_sweep(tmp_path, methods=("l2_init", "l2"), steps=5)), "--out",
                 str(out), "--data-dir", str(data_dir), "--workers", "1", "--no-progress", *INLINE]) == 0
    plan = json.loads((out / "plan.json").read_text())
    # three runs of the plan no worker has taken yet: no attempt in the store
    plan["runs"] += [{**r, "run_id": f"new-{i}", "seed": 10 + i}
                     for i, r in enumerate(plan["runs"][:3])]
    (out / "plan.json").write_text(json.dumps(plan))
    capsys.readouterr()
    assert main(["status", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{out}: 7 runs"
    assert lines[1].split()[2:] == ["finished", "running", "failed", "interrupted", "to", "run"]
    rows = {line.split()[1]: [int(n) for n in line.split()[2:]] for line in lines[2:4]}
    methods = [r["config"]["method"] for r in plan["runs"][4:]]
    for method, (done, running, failed, interrupted, to_run) in rows.items():
        assert (done, running, failed, interrupted) == (2, 0, 0, 0)
        assert to_run == methods.count(method)


def test_only_with_rerun_trains_again_just_the_matching_runs(data_dir, tmp_path, capsys):
    sweep = write_sweep(tmp_path, methods=("baseline", "l2_init"))
    out = tmp_path / "out"
    args = ["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--no-progress", *INLINE]
    assert main(args) == 0
    first = finished_runs(out)
    assert main([*args, "--rerun", "--only", "method=l2_init", "--only", "seed=1"]) == 0
    assert "--only method=l2_init seed=1: 1 of the grid's 4 runs" in capsys.readouterr().out
    with ResultStore(out) as store:
        attempts = {rid: len(store.attempts(rid)) for rid in first}
    again = [rid for rid, n in attempts.items() if n == 2]
    assert len(again) == 1 and sorted(attempts.values()) == [1, 1, 1, 2]
    assert (first[again[0]]["config"]["method"], first[again[0]]["seed"]) == ("l2_init", 1)
    # the same code, trained again: the same numbers
    assert (finished_runs(out)[again[0]]["summary"]["total_online_accuracy"]
            == first[again[0]]["summary"]["total_online_accuracy"])


def test_only_on_a_protocol_sweep_needs_the_rest_of_its_grid_finished(data_dir, tmp_path, capsys):
    sweep = write_sweep(tmp_path, methods=("l2_init",), extra=PROTOCOL)
    out = tmp_path / "out"
    args = ["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--no-progress", *INLINE]
    assert main([*args, "--only", "seed=0"]) == 2
    assert "selection needs its whole grid: 2 grid run(s) outside the filter" in capsys.readouterr().err
    assert not finished_runs(out)
    assert main(args) == 0
    assert main([*args, "--rerun", "--only", "seed=8"]) == 0  # an evaluation seed
    with ResultStore(out) as store:
        twice = [r for r in store.runs(status="finished") if len(store.attempts(r["run_id"])) == 2]
    assert [r["seed"] for r in twice] == [8]


ACROSS_SITTINGS = """
name = "sittings"
problem = "permuted_mnist"
method = "baseline"
seeds = "0-3"
tasks = 4
steps_per_task = 5
[problem_params]
examples_per_task = 160
"""


def test_sittings_under_different_filters_drop_an_ensemble_whose_checkpoint_saves_less_than_it_costs(
        data_dir, tmp_path, capsys):
    # A first sitting planned seeds 0-3 as one ensemble and stopped after its first task; the
    # next trained seeds 0 and 1 alone (--only seed=0-1), leaving that ensemble and its
    # checkpoint for seeds 2 and 3. The whole sweep then trains 2 and 3 anew: resuming the
    # ensemble would save 4 × 1 member-tasks and cost 2 × 4 (seeds 0 and 1 again).
    from plasticlab import checkpoint
    from plasticlab.experiments.orchestrate import plan, write_plan
    from plasticlab.experiments.sweep import expand
    from plasticlab.experiments.workflow import read_sweep_file

    path, out = tmp_path / "sweep.toml", tmp_path / "out"
    path.write_text(ACROSS_SITTINGS)
    runs = expand(read_sweep_file(path))
    write_plan(out, runs, "sittings", "grid", plan(runs, out, max_members=16).ensembles)
    (first,) = json.loads((out / "plan.json").read_text())["ensembles"]
    checkpoint.save(out / "checkpoints" / first["checkpoint"], "x", {"next_task": 1})
    args = ["sweep", str(path), "--out", str(out), "--data-dir", str(data_dir), "--no-progress", *INLINE]

    assert main([*args, "--only", "seed=0-1"]) == 0
    assert "removed checkpoint" not in "".join(capsys.readouterr())
    assert (out / "checkpoints" / first["checkpoint"]).is_file()  # seeds 2 and 3 may yet use it
    assert main([*args, "--dry-run"]) == 0
    assert (f"  would remove checkpoint {out / 'checkpoints' / first['checkpoint']} (at task 1): its "
            "unfinished runs train in other ensembles of this sweep") in capsys.readouterr().out
    assert main(args) == 0
    text = "".join(capsys.readouterr())
    assert (f"removed checkpoint {out / 'checkpoints' / first['checkpoint']} (at task 1): its unfinished "
            "runs train in other ensembles of this sweep") in text
    assert sorted(r["seed"] for r in finished_runs(out).values()) == [0, 1, 2, 3]
    stored = json.loads((out / "plan.json").read_text())["ensembles"]
    assert first["checkpoint"] not in {e["checkpoint"] for e in stored}
