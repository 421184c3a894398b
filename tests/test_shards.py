"""A sweep shared out over N commands (``sweep --shard I/N``: N machines, or a batch system's
array tasks), each into its own folder, then brought together with ``plasticlab import``: every
run trained once, and the whole the sweep one command trains — the protocol's selection and
evaluation included."""

from __future__ import annotations

import json

import pytest

from plasticlab.cli import main
from plasticlab.experiments.store import ResultStore
from plasticlab.experiments.sweep import parse_shard, shard_runs

SWEEP = """
name = "shared"
problem = "permuted_mnist"
methods = ["baseline", "l2_init"]
seeds = "0-2"
tasks = 2
steps_per_task = 10
[problem_params]
examples_per_task = 160
[grid.l2_init]
strength = [1e-1, 1e-3]
"""
PROTOCOL = """
[protocol]
evaluation_seeds = "7-8"
"""


def _sweep(tmp_path, data_dir, out, *extra, protocol=False) -> str:
    path = tmp_path / ("protocol.toml" if protocol else "sweep.toml")
    path.write_text(SWEEP + (PROTOCOL if protocol else ""))
    assert main(["sweep", str(path), "--out", str(tmp_path / out), "--data-dir", str(data_dir),
                 "--executor", "inline", "--no-progress", *extra]) == 0
    return str(tmp_path / out)


def _finished(out) -> dict[str, float]:
    with ResultStore(out) as store:
        return {r["run_id"]: r["summary"]["total_online_accuracy"] for r in store.runs(status="finished")}


def test_the_shares_of_a_sweep_train_every_run_once_and_together_are_the_whole_sweep(
        tmp_path, data_dir, capsys):
    whole = _finished(_sweep(tmp_path, data_dir, "whole"))
    shards = [_finished(_sweep(tmp_path, data_dir, f"shard{i}", "--shard", f"{i}/3")) for i in (1, 2, 3)]
    assert sum(len(s) for s in shards) == len(whole) == 9  # (1 + 2 configurations) × 3 seeds
    assert [len(s) for s in shards] == [3, 3, 3]
    # a share's folder plans its share alone: `status` and `report` find nothing of it left to run
    planned = json.loads((tmp_path / "shard2" / "plan.json").read_text())["runs"]
    assert sorted(p["run_id"] for p in planned) == sorted(shards[1])
    assert main(["import", *(str(tmp_path / f"shard{i}") for i in (1, 2, 3)), "--out",
                 str(tmp_path / "all")]) == 0
    assert _finished(tmp_path / "all") == whole  # the same runs, the same numbers, bit for bit
    assert "--shard 2/3: 3 of the grid's 9 runs" in capsys.readouterr().out


def test_a_protocol_sweeps_shares_train_its_grid_and_the_selection_waits_for_the_whole_grid(
        tmp_path, data_dir, capsys):
    whole = _sweep(tmp_path, data_dir, "whole", protocol=True)
    capsys.readouterr()
    for i in (1, 2):
        _sweep(tmp_path, data_dir, f"shard{i}", "--shard", f"{i}/2", protocol=True)
        assert not (tmp_path / f"shard{i}" / "selection.json").exists()
    assert capsys.readouterr().out.count("the protocol selects on the whole grid: import every "
                                         "shard's folder into one") == 2
    assert main(["import", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out",
                 str(tmp_path / "grid")]) == 0
    # the evaluation shared out too: each share's folder holds the whole grid
    for i in (1, 2):
        assert main(["import", str(tmp_path / "grid"), "--out", str(tmp_path / f"eval{i}")]) == 0
        _sweep(tmp_path, data_dir, f"eval{i}", "--shard", f"{i}/2", protocol=True)
    selected = [json.loads((tmp_path / f / "selection.json").read_text())["selected"]
                for f in ("whole", "eval1", "eval2")]
    assert selected[0] == selected[1] == selected[2]
    evaluation = [{k: v for k, v in _finished(tmp_path / f"eval{i}").items()
                   if k not in _finished(tmp_path / "grid")} for i in (1, 2)]
    assert [len(e) for e in evaluation] == [2, 2]  # 2 methods × 2 evaluation seeds, shared out
    assert main(["import", str(tmp_path / "eval1"), str(tmp_path / "eval2"), "--out",
                 str(tmp_path / "all")]) == 0
    assert _finished(tmp_path / "all") == _finished(whole)


def test_a_share_is_every_nth_run_from_the_ith():
    assert shard_runs(list("abcdefg"), (2, 3)) == ["b", "e"]
    assert shard_runs(list("abcdefg"), None) == list("abcdefg")
    assert [len(shard_runs(range(10), (i, 4))) for i in (1, 2, 3, 4)] == [3, 3, 2, 2]
    assert parse_shard("3/8") == (3, 8)


@pytest.mark.parametrize("text", ["0/4", "5/4", "1-4", "a/b", "1/0", "2", "/4"])
def test_a_shard_that_is_not_i_of_n_is_an_error_saying_what_it_takes(text):
    with pytest.raises(ValueError, match=r"--shard expects I/N with 1 <= I <= N \(the I-th of N "
                                         rf"shares: 1/4 … 4/4\), got '{text}'"):
        parse_shard(text)
