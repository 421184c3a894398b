"""plasticlab.monitor.plot: a monitor's history as a figure — one panel per measurement, runs
overlaid in colours, a line style per layer, task boundaries — written in the format asked."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import plasticlab
from plasticlab.monitor import MonitorHistory, plot
from plasticlab.monitor.figure import BOUNDARY


def curves(ax):
    return [line for line in ax.lines if line.get_label() != BOUNDARY]


def watched_run(l2_init: bool, steps: int = 12) -> plasticlab.Monitor:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    monitor = plasticlab.Monitor(model, probe=torch.randn(32, 6), every=2, thresholds=None)
    reg = plasticlab.L2Init(model, 1e-1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = model(torch.randn(8, 6)).pow(2).mean() + (reg() if l2_init else 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step()
    return monitor


@pytest.fixture(scope="module")
def runs():
    return {"Adam": watched_run(False), "Adam + L2 Init": watched_run(True)}


def test_runs_are_overlaid_one_panel_a_metric_whole_network_or_each_layer(runs):
    fig = plot(runs, metrics=("dead_fraction", "srank", "weight_drift"), task_steps=4)
    dead, srank, drift = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["Dead units", "Feature rank (srank)", "Drift from θ₀"]
    # the whole network's dead units and drift, a line a run; srank per layer (two hidden layers)
    assert [line.get_label() for line in curves(dead)] == ["Adam", "Adam + L2 Init"]
    assert [line.get_label() for line in curves(srank)] == [
        "Adam, layer 1", "Adam, layer 3", "Adam + L2 Init, layer 1", "Adam + L2 Init, layer 3"]
    adam1, adam3, l2_init1, _ = curves(srank)
    assert [line.get_linestyle() for line in curves(srank)] == ["-", "--", "-", "--"]
    assert adam1.get_color() == adam3.get_color() != l2_init1.get_color()
    # values as measured, fractions in %
    steps, values = runs["Adam"].history.series("dead_fraction")
    assert list(curves(dead)[0].get_xdata()) == steps
    assert list(curves(dead)[0].get_ydata()) == pytest.approx([100 * v for v in values])
    # task boundaries at 4 and 8 (the last step measured is 12): dotted lines behind the curves
    assert [line.get_xdata()[0] for line in drift.lines if line.get_label() == BOUNDARY] == [4, 8, 12]


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_a_figure_is_written_in_the_format_of_its_suffix(runs, tmp_path, suffix, magic):
    path = tmp_path / "sub" / f"plasticity{suffix}"
    runs["Adam"].plot(path, metrics=("grad_norm",))
    assert path.read_bytes().startswith(magic)


def test_one_history_needs_no_name_and_an_unmeasured_metric_is_an_error_listing_the_measured(runs):
    fig = plot(runs["Adam"].history, metrics=("weight_magnitude",))
    assert len(fig.axes[0].lines) == 1 and fig.axes[0].get_legend() is None  # no name, no legend
    with pytest.raises(ValueError, match=r"no run measured trainability; measured: dead_fraction, "):
        plot(runs, metrics=("trainability",))
    with pytest.raises(ValueError, match="give a MonitorHistory, or a dict"):
        plot({})
    assert isinstance(runs["Adam"].history, MonitorHistory)
