import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="not installed (the `plots` extra)")
matplotlib.use("Agg")

from mptutor import formats, plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def _right_labels(fig):
    side = fig.axes[1]  # the twin axis that labels each row on the right
    return [t.get_text() for t in side.get_yticklabels()]


def test_format_ranges_draws_one_row_per_format():
    fig = plots.format_ranges(["fp32", "fp16", "bf16"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bf16", "fp16", "fp32"]
    assert len(ax.patches) == 6  # subnormal + normal bar per format
    assert _right_labels(fig) == [
        "261 powers of 2 (2**-133 .. 2**127)",
        "40 powers of 2 (2**-24 .. 2**15)",
        "277 powers of 2 (2**-149 .. 2**127)",
    ]
    # fp16's normal bar spans 2**-14 .. log2(65504)
    fp16_normal = ax.patches[3]
    assert fp16_normal.get_x() == -14
    assert fp16_normal.get_width() == pytest.approx(np.log2(65504) + 14)
    # the subnormal and normal bars have clearly different colours
    subnormal, normal = (np.array(p.get_facecolor()[:3]) for p in ax.patches[2:4])
    assert np.abs(subnormal - normal).sum() > 0.5


def test_format_ranges_marks_the_bars_cut_by_the_axis():
    fig = plots.format_ranges(["fp32", "fp16"], xlim=(-40, 20))
    ax = fig.axes[0]
    marks = [
        (line.get_marker(), line.get_xdata()[0], line.get_ydata()[0])
        for line in ax.lines
        if line.get_marker() in ("<", ">")
    ]
    # fp32 (row 1) goes on beyond both edges, fp16 (row 0) fits
    assert sorted(marks) == [("<", -40, 1), (">", 20, 1)]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["normal values", "subnormal values", "goes on beyond the axis", "1 = 2**0"]
    (one,) = [line for line in ax.lines if line.get_linestyle() == ":"]  # the line the legend names
    assert list(one.get_xdata()) == [0, 0]
    # labels sit outside the plotting area, so no bar hides them
    assert not ax.texts


def test_format_ranges_without_limits_fits_fp32():
    fig = plots.format_ranges(["fp32"], xlim=None)
    ax = fig.axes[0]
    assert ax.get_xlim()[0] <= -149
    assert not [line for line in ax.lines if line.get_marker() in ("<", ">")]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "normal values",
        "subnormal values",
        "1 = 2**0",
    ]


def test_value_spacing_reports_the_gaps():
    fig = plots.value_spacing(16384, 65504, ["fp16"])
    (label,) = [t.get_text() for t in fig.axes[0].texts]
    assert label.startswith("2048 values")  # 1024 spaced 16 apart, then 1024 spaced 32 apart
    assert "spacing 16, 32" in label


def test_value_spacing_shows_both_ends_and_marks_powers_of_two():
    fig = plots.value_spacing(32000, 34000, ["fp16", "bf16"])
    ax = fig.axes[0]
    low, high = ax.get_xlim()
    assert low < 32000 and high > 34000  # values at the ends are drawn clear of the frame
    assert [line.get_xdata()[0] for line in ax.lines] == [32768]  # where the spacing changes
    (top,) = ax.child_axes
    assert [t.get_text() for t in top.get_xticklabels()] == ["32768 = 2**15"]
    assert plots.value_spacing(-3, -0.2).axes[0].lines  # negative intervals are marked too
    assert not plots.value_spacing(-1, 1).axes[0].lines  # across 0: no marks


def test_update_survival_marks_thresholds():
    ratios = np.exp2(np.linspace(-14, -6, 33))
    share = {
        name: np.array([formats.update_survives(1.0, r, name) for r in ratios], dtype=float)
        for name in ("fp16", "bf16")
    }
    ax = plots.update_survival(ratios, share).axes[0]
    assert [t.get_text() for t in ax.texts] == ["2**-12", "2**-11", "2**-9", "2**-8"]
    assert len(ax.lines) == 2  # one curve per format
    bands = [p.get_x() for p in ax.patches]  # the "lost or kept" band of each format
    assert np.exp2(-12) in bands and np.exp2(-9) in bands


def test_gradient_histogram_labels_the_flushed_share():
    from mptutor.gradients import gradient_stats

    grads = np.exp2(np.arange(-40, 0, dtype=float))  # one value per power of two
    stats = gradient_stats(grads, "fp16")
    fig = plots.gradient_histogram({"raw": stats, "x 2**16": stats.scaled(2.0**16)})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # 2**-40 .. 2**-25 round to zero in fp16 (2**-25, half the smallest subnormal, is a tie
    # that rounds to the even 0): 16 of 40
    assert "raw (40% flushed to zero)" in labels
    assert "x 2**16 (0% flushed to zero)" in labels
    assert labels[:4] == [
        "fp16: rounds to zero",
        "fp16: subnormal",
        "fp16: normal",
        "fp16: overflows",
    ]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "number of values"
    # four bands of four different colours, and no line drawn in a band's colour
    band_colours = {p.get_facecolor()[:3] for p in ax.patches if p.get_label().startswith("fp16")}
    assert len(band_colours) == 4
    line_colours = {p.get_edgecolor()[:3] for p in ax.patches if "flushed" in p.get_label()}
    assert len(line_colours) == 2 and not line_colours & band_colours


def test_gradient_histogram_refuses_mixed_formats():
    from mptutor.gradients import gradient_stats

    a, b = gradient_stats(np.ones(3), "fp16"), gradient_stats(np.ones(3), "bf16")
    with pytest.raises(ValueError, match="one format"):
        plots.gradient_histogram({"a": a, "b": b})


def test_loss_scale_trace_marks_skipped_steps():
    from mptutor.scaling import DynamicLossScaler

    scaler = DynamicLossScaler(init_scale=2.0**4, growth_interval=2)
    for found_inf in [False, False, True, False, True, False, False]:
        scaler.update(found_inf)
    ax = plots.loss_scale_trace(scaler.history).axes[0]
    line, crosses = ax.lines
    np.testing.assert_array_equal(line.get_ydata(), [16, 16, 32, 16, 16, 8, 8])
    np.testing.assert_array_equal(crosses.get_xdata(), [2, 4])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["loss scale", "loss scale: skipped steps (2)"]


def test_loss_curves_draws_each_run_smoothed():
    curves = {"a": [4.0, 2.0, 0.0, 2.0], "b": [1.0, float("nan"), 3.0, 5.0]}
    fig = plots.loss_curves(curves, window=2)
    ax = fig.axes[0]
    a, b = ax.lines
    np.testing.assert_allclose(a.get_ydata(), [4.0, 3.0, 1.0, 1.0])
    np.testing.assert_allclose(b.get_ydata(), [1.0, np.nan, 3.0, 4.0])  # the NaN is left out
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["a", "b (1 non-finite losses left out)"]
    assert a.get_color() != b.get_color() and a.get_linestyle() != b.get_linestyle()
    assert "mean of the last 2 steps" in ax.get_ylabel()


def test_loss_curves_rejects_a_bad_window():
    with pytest.raises(ValueError, match=r"window must be in \[1, inf\], got 0"):
        plots.loss_curves({"a": [1.0]}, window=0)
    with pytest.raises(TypeError, match="window must be an int, got 2.5"):
        plots.loss_curves({"a": [1.0]}, window=2.5)


# --- bad input: a clear error naming the argument, before anything is drawn ---------------------


def test_one_format_may_be_given_alone_but_not_none():
    assert len(plots.format_ranges("fp16").axes[0].patches) == 2  # one row: subnormal, normal
    assert plots.value_spacing(1, 2, fmts="bf16").axes[0].get_yticklabels()[0].get_text() == "bf16"
    for draw in (lambda f: plots.format_ranges(f), lambda f: plots.value_spacing(1, 2, fmts=f)):
        with pytest.raises(ValueError, match="fmts"):
            draw([])
        with pytest.raises(ValueError, match="unknown floating-point format"):
            draw(["fp16", "fp12"])


@pytest.mark.parametrize("xlim", [5, (5, 1), (0, 0), (0, float("inf")), ("a", "b"), (1, 2, 3)])
def test_format_ranges_needs_increasing_finite_limits(xlim):
    with pytest.raises((TypeError, ValueError), match="xlim"):
        plots.format_ranges(xlim=xlim)


def test_ax_must_be_matplotlib_axes():
    with pytest.raises(TypeError, match="ax must be"):
        plots.format_ranges(ax="a")
    with pytest.raises(TypeError, match="ax must be"):
        plots.loss_curves({"a": [1.0]}, ax=object())


def test_update_survival_checks_ratios_and_shares():
    ratios = 2.0 ** -np.arange(8.0, 14.0)
    good = np.linspace(1, 0, 6)
    for bad_ratios in (-ratios, np.zeros(6), ratios.reshape(2, 3)):
        with pytest.raises(ValueError, match="ratios"):
            plots.update_survival(bad_ratios, {"fp16": good})
    for survived in (None, {}, {"fp16": good[:4]}, {"fp16": good * 2}, {"fp16": "abc"}):
        with pytest.raises((TypeError, ValueError), match="survived"):
            plots.update_survival(ratios, survived)


def test_gradient_histogram_and_loss_scale_trace_check_what_they_draw():
    from mptutor.gradients import gradient_stats
    from mptutor.scaling import ScaleHistory

    for bad in (None, np.ones(3), {}, {"a": np.ones(3)}):
        with pytest.raises((TypeError, ValueError), match="stats"):
            plots.gradient_histogram(bad)
    with pytest.raises(ValueError, match="no non-zero finite"):
        plots.gradient_histogram(gradient_stats(np.zeros(4)))
    for bad in (None, [1, 2], {}, {"a": [1, 2]}):
        with pytest.raises((TypeError, ValueError), match="history"):
            plots.loss_scale_trace(bad)
    plots.loss_scale_trace(ScaleHistory())  # an empty run is an empty plot


@pytest.mark.parametrize(
    "curves", [None, [1.0, 2.0], {}, {"a": "xyz"}, {"a": [[1.0, 2.0], [3.0, 4.0]]}, {"a": None}]
)
def test_loss_curves_needs_runs_of_numbers(curves):
    with pytest.raises((TypeError, ValueError), match="curves"):
        plots.loss_curves(curves)


def test_loss_curves_refuses_a_run_without_losses():
    with pytest.raises(ValueError, match="hold no losses"):
        plots.loss_curves({"a": [1.0], "b": []})
