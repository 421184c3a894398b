"""``plasticlab report DIR --figure MEASURE --out FILE``: one figure of a study for a paper, the
methods you name, each curve the report's (mean over seeds, 95 % bootstrap band)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from plasticlab.cli import main
from plasticlab.report.data import load_results
from plasticlab.report.study_figure import FIGURE_MEASURES, save_study_figure, study_figure

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reproduction"
CIFAR = PAGE / "best-random_label_cifar-adam"  # 10 tasks, 10 seeds


@pytest.fixture(scope="module")
def cifar():
    return load_results(CIFAR)


def _lines_of(ax) -> dict[str, np.ndarray]:
    """Each curve's label and y values (the legend's ``label (n=…)``)."""
    return {line.get_label(): np.asarray(line.get_ydata()) for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def _lines(fig) -> dict[str, np.ndarray]:
    """The curves of a figure of one panel."""
    (ax,) = fig.axes
    return _lines_of(ax)


def test_each_curve_is_the_mean_over_seeds_of_the_measure_per_task(cifar):
    fig = study_figure(cifar, "srank", methods=["l2_init", "baseline"], reps=200)
    lines = _lines(fig)
    assert sorted(lines) == ["Baseline (n=10)", "L2 Init (n=10)"]
    baseline = next(c for c in cifar.headline("random_label_cifar", "adam")[0] if c.method == "baseline")
    # a layered measurement by its last hidden layer, as the report draws it
    np.testing.assert_allclose(lines["Baseline (n=10)"], baseline.metrics["srank"][:, :, -1].mean(0))
    assert fig.axes[0].get_ylabel() == "feature srank (last hidden layer)"


def test_the_online_figure_is_the_studys_measure_in_percent(cifar):
    fig = study_figure(cifar, "online", methods=["concat_relu"], reps=200)
    concat = next(c for c in cifar.headline("random_label_cifar", "adam")[0] if c.method == "concat_relu")
    np.testing.assert_allclose(_lines(fig)["Concat ReLU (n=10)"], 100 * concat.online.mean(0))
    assert fig.axes[0].get_ylabel() == "average online accuracy (%)"
    assert fig.axes[0].get_title() == "Random Label CIFAR · Adam"


def test_a_measure_it_does_not_know_or_the_runs_did_not_record_is_an_error(cifar):
    assert "online" in FIGURE_MEASURES and "weight_magnitude" in FIGURE_MEASURES
    with pytest.raises(ValueError, match="figure 'srnk' is not one of: online, weight_magnitude"):
        study_figure(cifar, "srnk")
    with pytest.raises(ValueError, match="figure 'churn': .* did not measure it"):
        study_figure(cifar, "churn")


def test_the_figure_is_written_in_the_format_its_file_names(cifar, tmp_path):
    assert save_study_figure(study_figure(cifar, "weight_magnitude", reps=200), tmp_path / "w.pdf") \
        == tmp_path / "w.pdf"
    assert (tmp_path / "w.pdf").read_bytes().startswith(b"%PDF")
    with pytest.raises(ValueError, match="name a .pdf, .png or .svg file"):
        save_study_figure(study_figure(cifar, "weight_magnitude", reps=200), tmp_path / "w.jpeg")


def test_the_command_draws_the_figure_and_nothing_else(tmp_path, capsys):
    out = tmp_path / "figs" / "online.png"
    assert main(["report", str(CIFAR), "--figure", "online", "--methods", "l2_init,baseline",
                 "--out", str(out), "--reps", "200"]) == 0
    assert capsys.readouterr().out == f"figure: {out}\n"
    assert out.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in out.parent.iterdir()) == ["online.png"]
    assert main(["report", str(CIFAR), "--figure", "online"]) == 2
    assert "give --out FILE" in capsys.readouterr().err


def test_several_problems_give_a_panel_each_with_one_legend(tmp_path):
    from plasticlab.report.data import combine_results

    studies = [PAGE / "best-permuted_mnist-adam", CIFAR]
    fig = study_figure(combine_results([load_results(s) for s in studies]), "online",
                       methods=["l2_init", "baseline"], reps=200)
    assert [ax.get_title() for ax in fig.axes] == ["Permuted MNIST", "Random Label CIFAR"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["average online accuracy (%)", ""]
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["Baseline (n=10)", "L2 Init (n=10)"]
    # the binning is said of the panel it applies to: 500 tasks in 50 points, 10 tasks as they are
    assert "Permuted MNIST: each point the mean of 10 consecutive tasks" in "".join(
        t.get_text().replace("\n", " ") for t in fig.texts)
    cifar = _lines_of(fig.axes[1])
    l2_init = next(c for c in load_results(CIFAR).headline("random_label_cifar", "adam")[0]
                   if c.method == "l2_init")
    np.testing.assert_allclose(cifar["L2 Init (n=10)"], 100 * l2_init.online.mean(0))


def test_the_readmes_figure_is_what_its_command_draws(tmp_path, capsys):
    """The README shows docs/figures/three-problems-online-accuracy.png and the command that
    draws it from the committed exports: the command runs, and draws a figure of that size."""
    import re
    import struct

    readme = (PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "](docs/figures/three-problems-online-accuracy.png)" in readme
    (command,) = re.findall(r"`(plasticlab report[^`]*--figure online --out FILE\.png)`", readme)
    args = command.split()[1:]
    args[args.index("FILE.png")] = str(tmp_path / "f.png")
    assert main([a.replace("docs/", f"{PAGE.parent}/", 1) if a.startswith("docs/") else a
                 for a in args]) == 0

    def size(png: Path) -> tuple[int, int]:
        return struct.unpack(">II", png.read_bytes()[16:24])  # the IHDR chunk's width, height

    assert size(tmp_path / "f.png") == size(PAGE.parent / "figures" / "three-problems-online-accuracy.png")


def test_problems_of_different_measures_are_not_drawn_on_one_axis_label(tmp_path):
    from plasticlab.report.data import combine_results

    assert main(["run", "--problem", "slowly_changing_regression", "--method", "l2_init", "--seeds", "0-1",
                 "--tasks", "3", "--steps-per-task", "10", "--no-progress", "--out", str(tmp_path)]) == 0
    both = combine_results([load_results(tmp_path), load_results(CIFAR)])
    with pytest.raises(ValueError, match="these problems measure different things .*online squared "
                                         "error.*; draw each kind in a figure of its own"):
        study_figure(both, "online", reps=100)
    assert len(study_figure(both, "weight_magnitude", reps=100).axes) == 2  # one measurement: one label


def test_with_latex_the_command_prints_a_float_of_the_file_it_drew(tmp_path, capsys):
    out = tmp_path / "srank.pdf"
    assert main(["report", str(CIFAR), "--figure", "srank", "--out", str(out), "--latex",
                 "--reps", "100"]) == 0
    float_ = capsys.readouterr().out
    assert out.read_bytes().startswith(b"%PDF")
    assert float_.startswith("\\begin{figure}[htbp]")
    assert f"\\includegraphics[width=\\linewidth]{{{out}}}" in float_
    assert ("\\caption{Random Label CIFAR $\\cdot$ Adam: feature srank (last hidden layer) per task; line: "
            "the mean over seeds, band: its 95 \\% bootstrap interval.}") in float_
    assert "\\label{fig:random-label-cifar-adam-srank}" in float_


def test_a_methods_two_forms_are_two_curves_of_its_colour_one_dashed():
    from plasticlab.report.data import combine_results

    both = combine_results([load_results(CIFAR), load_results(PAGE / "reference-modes-random_label_cifar")])
    (ax,) = study_figure(both, "online", methods=["cbp"], reps=100).axes
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert sorted(line.get_label() for line in lines) == [
        "CBP adam_variant=reference replacement_init=kaiming (n=10)",
        "CBP adam_variant=standard replacement_init=network (n=10)"]
    assert len({line.get_color() for line in lines}) == 1
    assert sorted(line.get_linestyle() for line in lines) == ["-", "--"]


def test_a_folder_of_several_streams_is_refused_pointing_to_the_report():
    with pytest.raises(ValueError, match=r"several streams \(batch sizes or task lengths\); a figure is "
                                         r"of one \(`plasticlab report` gives a section to each\)"):
        study_figure(load_results(PAGE / "batch-size"), "online")
