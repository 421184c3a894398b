"""Report figures: each figure function draws from small synthetic inputs and saves to PNG/SVG/PDF."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from plasticlab.report import figures
from plasticlab.report.figures import (
    METHOD_COLORS,
    Band,
    Estimate,
    SweepLine,
    heatmap_figure,
    interval_figure,
    line_figure,
    method_color,
    method_style,
    plot_online_accuracy,
    poi_figure,
    save_figure,
    sweep_figure,
    use_log_x,
    x_scale,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_files(written: dict, formats=("png", "svg", "pdf")) -> None:
    assert sorted(written) == sorted(formats)
    for fmt, path in written.items():
        data = path.read_bytes()
        assert len(data) > 500, (fmt, len(data))
        if fmt == "png":
            assert data.startswith(PNG_MAGIC)
        elif fmt == "svg":
            assert b"<svg" in data[:2000]
        elif fmt == "pdf":
            assert data.startswith(b"%PDF")


def legend_texts(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def all_texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))


# --- palette --------------------------------------------------------------------------------------

def test_palette_is_fixed_and_l2_init_stands_out():
    for method, colour in METHOD_COLORS.items():
        assert method_color(method) == colour
        assert method_style(method).color == colour
    assert len(set(METHOD_COLORS.values())) == len(METHOD_COLORS)  # every method its own colour
    assert METHOD_COLORS["l2_init"] == "#d62728"
    l2_init = method_style("l2_init")
    for method in [*METHOD_COLORS, "some_new_method"]:
        if method == "l2_init":
            continue
        other = method_style(method)
        assert other.color != l2_init.color
        assert other.linewidth < l2_init.linewidth
        assert other.zorder < l2_init.zorder


def test_every_registered_method_has_its_own_fixed_colour():
    from plasticlab.methods import METHODS

    assert set(METHODS) <= set(METHOD_COLORS)  # the field-* figures draw them all at once
    assert not set(METHOD_COLORS.values()) & set(figures.EXTRA_COLORS)  # nor shared with a new one


def test_unknown_method_colour_is_deterministic():
    colour = method_color("my_new_method")
    assert colour == method_color("my_new_method")
    assert colour.startswith("#") and colour not in METHOD_COLORS.values()
    # Chosen by a CRC of the name, not Python's per-process randomised hash(): the same in every run.
    expected = figures.EXTRA_COLORS[zlib.crc32(b"my_new_method") % len(figures.EXTRA_COLORS)]
    assert colour == expected
    assert len({method_color(f"method_{i}") for i in range(40)}) > 4  # spread over the extra colours


def test_log_x_rule():
    assert use_log_x([1e-4, 1e-3, 1e-2])  # exactly two decades
    assert use_log_x([0.5, 5, 500])
    assert not use_log_x([1, 10, 50])  # under two decades
    assert not use_log_x([0, 1e-3, 1])  # zero cannot go on a log axis
    assert not use_log_x([-1e-3, 1])
    assert not use_log_x([3])
    assert use_log_x([1e-4, float("nan"), 1e-1])


# --- figures ----------------------------------------------------------------------------------------

def test_line_figure_500_points_single_seed_and_note(tmp_path):
    x = np.arange(500)
    rng = np.random.default_rng(0)
    mean = 0.9 - 0.0004 * x + 0.01 * rng.standard_normal(500)
    bands = [
        Band("l2_init", "l2_init", x, mean, mean - 0.02, mean + 0.02, 5),
        Band("baseline", "baseline", x, mean - 0.1, mean - 0.12, mean - 0.08, 5),
        Band("cbp (one seed)", "cbp", x, mean - 0.05, None, None, 1),
    ]
    note = "tasks 0–499 in 50 bins of 10; hard tasks only"
    fig = line_figure(bands, xlabel="task", ylabel="average online accuracy", title="Permuted MNIST",
                      note=note)
    assert legend_texts(fig) == ["l2_init (n=5)", "baseline (n=5)", "cbp (one seed) (n=1)"]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "average online accuracy (%)"
    lines = ax.get_lines()
    assert all(line.get_marker() in (None, "None", "") for line in lines)  # 500 points: no markers
    l2 = next(line for line in lines if line.get_label().startswith("l2_init"))
    assert l2.get_color() == METHOD_COLORS["l2_init"]
    assert np.allclose(l2.get_ydata(), 100 * mean)  # drawn in percent
    assert len(ax.collections) == 2  # bands for the two multi-seed curves only
    assert note in all_texts(fig).replace("\n", " ")
    assert_files(save_figure(fig, tmp_path, "line"))


def test_line_figure_few_points_get_markers_and_plain_units(tmp_path):
    x = [0, 50, 100, 150]
    band = Band("l2", "l2", x, [1.0, 2.0, 3.0, 4.0], [0.5, 1.5, 2.5, 3.5], [1.5, 2.5, 3.5, 4.5], 3)
    fig = line_figure([band], xlabel="task", ylabel="weight norm", percent=False)
    (line,) = fig.axes[0].get_lines()
    assert line.get_marker() not in (None, "None", "")
    assert fig.axes[0].get_ylabel() == "weight norm"
    assert np.allclose(line.get_ydata(), [1, 2, 3, 4])
    assert_files(save_figure(fig, tmp_path, "few", formats=("png",)), formats=("png",))


def test_band_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        Band("x", "l2", [0, 1, 2], [0.1, 0.2], None, None, 1)


def test_interval_figure_rows_in_order_with_n(tmp_path):
    estimates = [Estimate("l2_init", "l2_init", 0.81, 0.79, 0.83, 5),
                 Estimate("baseline", "baseline", 0.70, 0.66, 0.74, 5),
                 Estimate("redo (1 seed)", "redo", 0.75, math.nan, math.nan, 1)]
    fig = interval_figure(estimates, xlabel="average online accuracy", title="Total", note="IQM over seeds")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["l2_init", "baseline", "redo (1 seed)"]
    ylim = ax.get_ylim()
    assert ylim[0] > ylim[1]  # first estimate on top
    right = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    assert right[0] == "81.0 [79.0, 83.0]  n=5"
    assert right[2] == "75.0  n=1"
    assert "IQM over seeds" in all_texts(fig)
    assert_files(save_figure(fig, tmp_path, "interval"))


def test_poi_figure_on_unit_interval_with_half_line(tmp_path):
    estimates = [Estimate("l2_init > baseline", "l2_init", 0.83, 0.70, 0.93, 5),
                 Estimate("l2 > baseline", "l2", 0.45, 0.30, 0.60, 5)]
    fig = poi_figure(estimates, title="Probability of improvement")
    ax = fig.axes[0]
    assert ax.get_xlim() == (0.0, 1.0)
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and np.allclose(dashed[0].get_xdata(), 0.5)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["l2_init > baseline", "l2 > baseline"]
    assert [t.get_text() for t in fig.axes[1].get_yticklabels()][0] == "0.83 [0.70, 0.93]  n=5"
    assert_files(save_figure(fig, tmp_path, "poi", formats=("svg",)), formats=("svg",))


def test_sweep_figure_log_axis_and_selected_value(tmp_path):
    values = [1e-5, 1e-4, 1e-3, 1e-2]
    lines = [SweepLine("l2_init", "l2_init", values, [0.7, 0.8, 0.85, 0.6], [0.68, 0.78, 0.83, 0.55],
                       [0.72, 0.82, 0.87, 0.65], 3, selected=1e-3),
             SweepLine("l2", "l2", values, [0.6, 0.7, 0.75, 0.5], None, None, [3, 3, 2, 3])]
    fig = sweep_figure(lines, param="λ", ylabel="average online accuracy", title="sweep")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert legend_texts(fig) == ["l2_init (n=3)", "l2 (n=2–3)", "selected value"]
    ringed = [line for line in ax.get_lines() if line.get_markerfacecolor() == "none"
              and len(line.get_xdata()) == 1]
    assert len(ringed) == 1 and ringed[0].get_xdata()[0] == 1e-3 and ringed[0].get_ydata()[0] == 85.0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1e-5", "0.0001", "0.001", "0.01"]
    assert_files(save_figure(fig, tmp_path, "sweep", formats=("png",)), formats=("png",))

    narrow = sweep_figure([SweepLine("cbp", "cbp", [1, 2, 5, 10], [0.5, 0.6, 0.7, 0.6], None, None, 2)],
                          param="replacement rate", ylabel="accuracy", title="")
    assert narrow.axes[0].get_xscale() == "linear"
    forced = sweep_figure([SweepLine("cbp", "cbp", [1, 2, 5, 10], [0.5, 0.6, 0.7, 0.6], None, None, 2)],
                          param="p", ylabel="accuracy", log_x=True)
    assert forced.axes[0].get_xscale() == "log"


def test_a_sweep_from_zero_across_decades_gets_a_symlog_axis_with_zero_first(tmp_path):
    values = [0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]  # the λ-sensitivity study
    assert x_scale(values) == "symlog" and x_scale(values[1:]) == "log"
    assert x_scale([0, 1, 2, 5]) == "linear" and x_scale([-1, 1e-3, 1]) == "linear"
    assert x_scale([0, 1, 2], log_x=True) == "symlog" and x_scale(values, log_x=False) == "linear"
    fig = sweep_figure([SweepLine("l2_init", "l2_init", values, [0.66, 0.77, 0.79, 0.81, 0.83, 0.8],
                                  None, None, 3, selected=1e-2)],
                       param="strength", ylabel="average online accuracy")
    ax = fig.axes[0]
    assert ax.get_xscale() == "symlog"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1e-5", "0.0001", "0.001", "0.01", "0.1"]
    # on the drawn axis the decades are evenly spaced and 0 sits just left of the smallest
    ticks = ax.transData.transform([(v, 0.7) for v in values])[:, 0]
    decades = np.diff(ticks[1:])
    assert np.allclose(decades, decades[0], rtol=1e-6) and 0 < ticks[1] - ticks[0] < decades[0]
    assert_files(save_figure(fig, tmp_path, "symlog", formats=("png",)), formats=("png",))


def test_heatmap_figure_blank_above_diagonal(tmp_path):
    n = 6
    matrix = np.tril(np.linspace(0.5, 1.0, n * n).reshape(n, n))
    matrix[np.triu_indices(n, 1)] = np.nan
    fig = heatmap_figure(matrix, title="accuracy matrix")
    image = fig.axes[0].get_images()[0]
    data = image.get_array()
    assert np.ma.is_masked(data) and data.mask[0, 1] and not data.mask[1, 0]
    assert np.isclose(data[n - 1, 0], 100 * matrix[n - 1, 0])  # shown in percent
    assert "%" in fig.axes[1].get_ylabel()  # the colour bar
    assert fig.axes[0].get_xlabel() == "task m" and fig.axes[0].get_ylabel() == "after task j"
    assert_files(save_figure(fig, tmp_path, "heat"))

    ragged = heatmap_figure([[0.9], [0.8, 0.7], [0.6, 0.5, 0.4]], title="ragged rows")
    assert ragged.axes[0].get_images()[0].get_array().shape == (3, 3)
    empty = heatmap_figure([[math.nan]], title="no values")
    assert_files(save_figure(empty, tmp_path, "empty", formats=("png",)), formats=("png",))


def test_save_figure_rejects_unknown_format_and_is_reproducible(tmp_path):
    fig = line_figure([Band("l2", "l2", [0, 1], [0.5, 0.6], None, None, 1)], xlabel="task", ylabel="acc")
    with pytest.raises(ValueError):
        save_figure(fig, tmp_path, "bad", formats=("png", "docx"))
    first = save_figure(fig, tmp_path / "a", "same", formats=("svg", "pdf"))
    again = line_figure([Band("l2", "l2", [0, 1], [0.5, 0.6], None, None, 1)], xlabel="task", ylabel="acc")
    second = save_figure(again, tmp_path / "b", "same", formats=("svg", "pdf"))
    for fmt in ("svg", "pdf"):
        assert first[fmt].read_bytes() == second[fmt].read_bytes()  # no timestamps in the files


def test_plot_online_accuracy_still_works(tmp_path):
    curves = {"l2_init": [[0.9, 0.8, 0.85, 0.8], [0.88, 0.82, 0.8, 0.79]],
              "baseline lr=0.01": [[0.9, 0.7, 0.6, 0.5]]}
    out = plot_online_accuracy(curves, tmp_path / "sub" / "online.png", title="demo")
    assert out == tmp_path / "sub" / "online.png"
    assert out.read_bytes().startswith(PNG_MAGIC)
    reported = plot_online_accuracy(curves, tmp_path / "reported.pdf", reported=[1, 3])
    assert reported.read_bytes().startswith(b"%PDF")
    assert figures.plot_online_accuracy is plot_online_accuracy


@pytest.mark.parametrize("label,method", [
    ("L2 Init λ=0.01", "l2_init"), ("L2 Init + EWC anchor=last", "l2_init_ewc"), ("L2", "l2"),
    ("Shrink & Perturb", "shrink_perturb"), ("baseline lr=0.01", "baseline"), ("l2_init", "l2_init"),
    ("a method of mine", "a")])
def test_a_label_alone_is_drawn_in_the_colours_of_the_method_it_names(label, method):
    # the demo's curves are keyed by labels alone ("Baseline", "L2 Init λ=0.01"): each must keep
    # its method's colour, not a colour hashed from its first word
    assert figures.method_in_label(label) == method
    fig = figures.line_figure([figures.Band(label, None, [0, 1], [0.5, 0.6], None, None, 1)],
                              xlabel="task", ylabel="acc")
    assert fig.axes[0].lines[0].get_color() == figures.method_color(method)
