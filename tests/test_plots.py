import matplotlib
import numpy as np
import pytest

from mptutor import formats, plots

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def test_format_ranges_draws_one_row_per_format():
    fig = plots.format_ranges(["fp32", "fp16", "bf16"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["bf16", "fp16", "fp32"]
    assert len(ax.patches) == 6  # subnormal + normal bar per format
    labels = [t.get_text() for t in ax.texts]
    assert "40 powers of 2" in labels
    # fp16's normal bar spans 2**-14 .. log2(65504)
    fp16_normal = ax.patches[3]
    assert fp16_normal.get_x() == -14
    assert fp16_normal.get_width() == pytest.approx(np.log2(65504) + 14)


def test_format_ranges_without_limits_fits_fp32():
    ax = plots.format_ranges(["fp32"], xlim=None).axes[0]
    assert ax.get_xlim()[0] <= -149


def test_value_spacing_reports_the_gaps():
    fig = plots.value_spacing(16384, 65504, ["fp16"])
    (label,) = [t.get_text() for t in fig.axes[0].texts]
    assert label.startswith("2048 values")  # 1024 spaced 16 apart, then 1024 spaced 32 apart
    assert "spacing 16, 32" in label


def test_update_survival_marks_thresholds():
    ratios = np.exp2(np.linspace(-14, -6, 33))
    share = {
        name: np.array([formats.update_survives(1.0, r, name) for r in ratios], dtype=float)
        for name in ("fp16", "bf16")
    }
    ax = plots.update_survival(ratios, share).axes[0]
    assert {t.get_text() for t in ax.texts} == {"2**-11", "2**-8"}
    assert len(ax.lines) == 4  # two curves, two threshold lines


def test_gradient_histogram_labels_the_flushed_share():
    from mptutor.gradients import gradient_stats

    grads = np.exp2(np.arange(-40, 0, dtype=float))  # one value per power of two
    stats = gradient_stats(grads, "fp16")
    fig = plots.gradient_histogram({"raw": stats, "x 2**16": stats.scaled(2.0**16)})
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    # 2**-40 .. 2**-26 are below half the smallest fp16 subnormal (2**-25): 15 of 40
    assert "raw (37.5% flushed to zero)" in labels
    assert "x 2**16 (0% flushed to zero)" in labels


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
