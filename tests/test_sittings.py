"""Which code trained which tasks: a run resumed from a checkpoint lists every sitting that
trained it, so a run trained across code versions is never recorded as the last one's alone."""

from __future__ import annotations

import pytest

from plasticlab import checkpoint as ckpt
from plasticlab.engine import train_ensemble
from plasticlab.experiments.config import resolve_config
from plasticlab.experiments.manifest import (
    code_identity,
    from_other_code,
    resumed_code_note,
    trained_by,
    trained_by_text,
)
from plasticlab.experiments.recording import fill_unrecorded_code
from plasticlab.run_config import Members

SMALL = {"problem": "permuted_mnist", "method": "l2_init", "tasks": 3, "steps_per_task": 20,
         "problem_params": {"examples_per_task": 320}}
OLD, OLDER, NEW = "git:" + "a" * 40, "git:" + "c" * 40, "git:" + "b" * 40


class Crash(Exception):
    pass


def crash_after_first_task(task, accuracies):
    if task == 0:
        raise Crash


def crash_after_second_task(task, accuracies):
    if task == 1:
        raise Crash


@pytest.fixture
def interrupted(data_dir, tmp_path):
    """A checkpoint of a 3-task ensemble stopped after its first task by code OLD."""
    cfg = resolve_config(SMALL)
    path = tmp_path / "run.ckpt"
    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path, measure=False,
                       sitting={"code": OLD}, on_task_end=crash_after_first_task)
    return cfg, path


def test_an_ensemble_trained_in_one_go_has_one_sitting(data_dir):
    result = train_ensemble(Members.from_config(resolve_config(SMALL), [0]), data_dir=data_dir, measure=False,
                            sitting={"code": NEW, "device": "cpu"})
    assert result.extra["sittings"] == [{"from_task": 0, "code": NEW, "device": "cpu"}]


def test_a_resumed_ensemble_lists_each_sitting_with_the_first_task_it_trained(data_dir, interrupted):
    cfg, path = interrupted
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]),
                             data_dir=data_dir, checkpoint=path, measure=False,
                             sitting={"code": NEW})
    assert resumed.extra["sittings"] == [{"from_task": 0, "code": OLD}, {"from_task": 1, "code": NEW}]
    whole = train_ensemble(Members.from_config(cfg, [0, 1]),
                           data_dir=data_dir, measure=False, sitting={"code": NEW})
    for a, b in zip(whole.members, resumed.members, strict=True):  # the record changes nothing else
        assert a.task_online_accuracy == b.task_online_accuracy


def test_a_sitting_that_a_checkpoint_could_not_load_back_is_refused_before_training(data_dir):
    import torch

    with pytest.raises(TypeError, match=r"sitting\['torch'\].*str\(torch.__version__\)"):
        train_ensemble(Members.from_config(resolve_config(SMALL), [0]), data_dir=data_dir,
                       sitting={"torch": torch.__version__})


def test_a_checkpoint_from_before_sittings_were_recorded_leaves_its_tasks_unattributed(
        data_dir, interrupted):
    cfg, path = interrupted
    fingerprint = ckpt.read_header(path)["fingerprint"]
    state = ckpt.load(path, fingerprint, "cpu")
    del state["sittings"]  # as the checkpoints written before them
    ckpt.save(path, fingerprint, state)
    resumed = train_ensemble(Members.from_config(cfg, [0, 1]),
                             data_dir=data_dir, checkpoint=path, measure=False,
                             sitting={"code": NEW})
    assert resumed.extra["sittings"] == [{"from_task": 0}, {"from_task": 1, "code": NEW}]


def attempt(status, code):
    return {"status": status, "code": code}


def test_an_unattributed_sitting_takes_the_code_of_the_runs_earlier_attempts_where_they_agree():
    sittings = [{"from_task": 0}, {"from_task": 4, "code": NEW}]
    attempts = [attempt("finished", OLDER), attempt("interrupted", OLD),
                attempt("interrupted", OLD), attempt("running", NEW)]
    assert fill_unrecorded_code(sittings, attempts) == [
        {"from_task": 0, "code": OLD, "code_from": "attempts"}, {"from_task": 4, "code": NEW}]


def test_attempts_of_code_that_records_its_sittings_are_not_taken_for_the_unattributed_one():
    # resumed by NEW twice: NEW's attempts are its own sittings, the first is OLD's
    sittings = [{"from_task": 0}, {"from_task": 4, "code": NEW}, {"from_task": 6, "code": NEW}]
    attempts = [attempt("interrupted", OLD), attempt("interrupted", NEW), attempt("running", NEW)]
    assert fill_unrecorded_code(sittings, attempts)[0] == {"from_task": 0, "code": OLD,
                                                            "code_from": "attempts"}


@pytest.mark.parametrize("earlier", [[], [attempt("interrupted", OLD), attempt("interrupted", OLDER)],
                                     [attempt("interrupted", None)],
                                     [attempt("interrupted", OLD), attempt("finished", OLD)]],
                         ids=["no-earlier-attempt", "two-codes", "unrecorded", "only-a-finished-one"])
def test_an_unattributed_sitting_stays_so_where_the_earlier_attempts_do_not_say(earlier):
    sittings = [{"from_task": 0}, {"from_task": 4, "code": NEW}]
    assert fill_unrecorded_code(sittings, [*earlier, attempt("running", NEW)]) == sittings


def run(code, *sittings):
    return {"code": code, "manifest": {"sittings": list(sittings)} if sittings else {}}


def test_trained_by_gives_each_sittings_code_once_in_order_and_of_the_first_tasks_if_asked():
    resumed = run(NEW, {"from_task": 0, "code": OLD}, {"from_task": 3, "code": OLD},
                  {"from_task": 7, "code": NEW})
    assert trained_by(resumed) == [OLD, NEW]
    assert trained_by(resumed, tasks=3) == [OLD]
    assert trained_by(resumed, tasks=8) == [OLD, NEW]
    assert trained_by(run(OLD)) == [OLD]  # recorded before sittings were
    assert trained_by(run(NEW, {"from_task": 0}, {"from_task": 2, "code": NEW})) == [None, NEW]
    assert trained_by_text(run(NEW, {"from_task": 0}, {"from_task": 2, "code": NEW})) == (
        f"unrecorded code then {NEW}")  # as status and verify print it


def test_a_run_resumed_by_this_code_after_other_code_counts_as_other_code():
    now = code_identity()
    alone = run(now, {"from_task": 0, "code": now})
    resumed = run(now, {"from_task": 0, "code": OLD}, {"from_task": 5, "code": now})
    unattributed = run(now, {"from_task": 0}, {"from_task": 5, "code": now})
    assert from_other_code([alone, resumed, unattributed]) == [resumed, unattributed]


def test_a_checkpoint_header_lists_its_sittings_so_a_resume_can_tell_whose_tasks_it_holds(interrupted):
    _, path = interrupted
    assert ckpt.read_header(path)["sittings"] == [{"from_task": 0, "code": OLD}]


def test_a_checkpoint_header_says_where_its_sitting_began_for_that_sittings_pace(data_dir, interrupted):
    cfg, path = interrupted
    first = ckpt.read_header(path)
    assert first["sitting_start"] == {"task": 0.0, "wall": 0.0} and first["wall"] > 0
    # the next sitting begins at the first one's task end, with its training time so far
    with pytest.raises(Crash):
        train_ensemble(Members.from_config(cfg, [0, 1]), data_dir=data_dir, checkpoint=path,
                       measure=False, sitting={"code": NEW},
                       on_task_end=crash_after_second_task)
    second = ckpt.read_header(path)
    assert second["next_task"] == 2 and second["sitting_start"] == {"task": 1.0, "wall": first["wall"]}


def test_resuming_tasks_that_other_code_trained_is_noted_and_this_codes_own_are_not(interrupted):
    _, path = interrupted
    note = resumed_code_note(ckpt.read_header(path))
    now = code_identity()
    assert note.startswith(f"of its first 1 task(s), some were trained by other code than this ({now}): "
                           f"{OLD}; the runs it finishes will list each sitting's code")
    assert "docs/results.md#resume" in note
    assert resumed_code_note({"next_task": 4, "sittings": [{"from_task": 0, "code": now}]}) is None
    # only the other code is named, and a sitting that left no record is
    mixed = {"next_task": 6, "sittings": [{"from_task": 0}, {"from_task": 2, "code": now},
                                          {"from_task": 4, "code": OLD}]}
    assert f"({now}): unrecorded code, {OLD}; " in resumed_code_note(mixed)
    assert resumed_code_note({"next_task": 4}) is None  # a header from before headers listed them


# SMALL on seeds 0-1 as a sweep file: the plan below and `plasticlab sweep` read the same text.
SMALL_SWEEP = ('name = "two-codes"\nproblem = "permuted_mnist"\nmethod = "l2_init"\nseeds = "0-1"\n'
               'tasks = 3\nsteps_per_task = 20\n[problem_params]\nexamples_per_task = 320\n')


def sweep_plan(out):
    """The plan a sweep of SMALL_SWEEP makes in ``out``: one ensemble."""
    from plasticlab.cli.common import tomllib
    from plasticlab.experiments.orchestrate import plan
    from plasticlab.experiments.sweep import expand

    sweep = tomllib.loads(SMALL_SWEEP)
    assert {k: v for k, v in sweep.items() if k not in ("name", "seeds")} == SMALL
    return plan(expand(sweep), out, max_members=16)


def checkpoint_first_task_as_old_code(p, out, data_dir):
    """Train the first task of ``p``'s ensemble as a sitting of code OLD, leaving the checkpoint
    a sweep resumes; return its path."""
    from plasticlab.experiments.recording import checkpoint_path

    (ensemble,) = p.ensembles
    m = ensemble.members
    path = checkpoint_path(out, m, kind="ensemble")
    with pytest.raises(Crash):
        train_ensemble(m, data_dir=data_dir, sitting={"code": OLD}, checkpoint=path,
                       on_task_end=crash_after_first_task)
    return path


def test_a_sweep_and_status_name_an_ensemble_whose_checkpoint_other_code_trained(data_dir, tmp_path):
    from plasticlab.experiments.orchestrate import resumed_by_other_code
    from plasticlab.experiments.progress import ensemble_progress

    p = sweep_plan(tmp_path)
    assert resumed_by_other_code(tmp_path, p) == []  # nothing to resume
    path = checkpoint_first_task_as_old_code(p, tmp_path, data_dir)
    (note,) = resumed_by_other_code(tmp_path, p)
    assert note.startswith(f"note: {path.name} (l2_init")
    assert f"other code than this ({code_identity()}): {OLD};" in note
    (line,) = ensemble_progress(tmp_path, {})
    assert "1 of ? tasks done" in line and "; note: of its first 1 task(s), some were trained by" in line


def test_a_resumed_sweep_says_so_before_it_trains_and_its_runs_list_both_codes(data_dir, tmp_path, capsys):
    from plasticlab.cli import main
    from plasticlab.experiments.store import ResultStore

    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SMALL_SWEEP)
    out = tmp_path / "out"
    checkpoint_first_task_as_old_code(sweep_plan(out), out, data_dir)
    # inline: what is said and recorded is the driver's and the store's (a worker process would
    # take ~2 s of a core to start)
    args = ["sweep", str(sweep), "--out", str(out), "--data-dir", str(data_dir), "--workers", "1",
            "--executor", "inline", "--no-progress"]
    for extra in (["--dry-run"], []):
        assert main(args + extra) == 0
        assert f"other code than this ({code_identity()}): {OLD};" in capsys.readouterr().out
    with ResultStore(out) as store:
        runs = store.runs("finished")
    assert len(runs) == 2 and all(trained_by(r) == [OLD, code_identity()] for r in runs)
