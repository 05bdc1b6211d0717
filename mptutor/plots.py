"""Figures for the notebooks, drawn with matplotlib from what :mod:`mptutor.formats` computes.

matplotlib is imported when a figure is drawn, not when this module is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mptutor import formats

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mptutor.gradients import GradientStats
    from mptutor.scaling import ScaleHistory

__all__ = [
    "format_ranges",
    "value_spacing",
    "update_survival",
    "gradient_histogram",
    "loss_scale_trace",
]

_NORMAL = "#1f77b4"
_SUBNORMAL = "#9ecae1"


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    fig, new_ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, new_ax


def format_ranges(
    fmts: Sequence[Any] = ("fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3"),
    xlim: tuple[float, float] | None = (-40, 20),
    ax: Axes | None = None,
) -> Figure:
    """Range of each format on a log2 axis: subnormals, normals, and the number of powers of 2.

    Parameters
    ----------
    fmts : sequence of str or dtype, optional
        Formats to draw, top to bottom.
    xlim : tuple of float or None, optional
        Limits of the log2 axis; ``None`` fits every format (fp32 spans about 277 powers of 2,
        which dwarfs fp16's 40).
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    chosen = [formats.get(f) for f in fmts]
    fig, ax = _axes(ax, (9, 0.7 * len(chosen) + 1.2))
    for row, f in enumerate(chosen):
        y = len(chosen) - 1 - row
        lo = f.min_exponent - f.mantissa_bits
        normal = f.min_exponent
        hi = math.log2(f.max)
        ax.barh(y, normal - lo, left=lo, color=_SUBNORMAL, height=0.6)
        ax.barh(y, hi - normal, left=normal, color=_NORMAL, height=0.6)
        label_x = hi if xlim is None else min(hi, xlim[1])
        ax.text(label_x + 0.5, y, f"{f.powers_of_two} powers of 2", va="center", fontsize=9)
    ax.set_yticks(range(len(chosen)), [f.name for f in reversed(chosen)])
    ax.set_xlabel("log2 |value|")
    if xlim is not None:
        ax.set_xlim(xlim[0], xlim[1] + 8)
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_title("Representable range: subnormals (light) and normal values (dark)")
    ax.grid(axis="x", alpha=0.3)
    return fig


def value_spacing(
    low: float,
    high: float,
    fmts: Sequence[Any] = ("fp16",),
    ax: Axes | None = None,
) -> Figure:
    """Every representable value of one or more formats in ``[low, high]``, one row each.

    Parameters
    ----------
    low, high : float
        The interval to show.
    fmts : sequence of str or dtype, optional
        Formats to show, one row each.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.

    Returns
    -------
    matplotlib.figure.Figure
        The figure; each row is labelled with the spacings found in the interval.
    """
    chosen = [formats.get(f) for f in fmts]
    fig, ax = _axes(ax, (9, 0.8 * len(chosen) + 1.2))
    for row, f in enumerate(chosen):
        y = len(chosen) - 1 - row
        values = formats.representable_values(low, high, f)
        ax.vlines(values, y - 0.3, y + 0.3, color=_NORMAL, lw=1)
        gaps = sorted({float(g) for g in np.diff(values)})
        shown = ", ".join(f"{g:g}" for g in gaps[:4]) + (", ..." if len(gaps) > 4 else "")
        ax.text(high, y + 0.38, f"{values.size} values, spacing {shown}", ha="right", fontsize=9)
    ax.set_yticks(range(len(chosen)), [f.name for f in reversed(chosen)])
    ax.set_ylim(-0.6, len(chosen) - 0.2)
    ax.set_xlim(low, high)
    ax.set_xlabel("value")
    ax.set_title(f"Representable values in [{low:g}, {high:g}]")
    return fig


def update_survival(
    ratios: np.ndarray,
    survived: Mapping[str, np.ndarray],
    ax: Axes | None = None,
) -> Figure:
    """Share of updates that change the weight, against ``update / weight``, per format.

    Parameters
    ----------
    ratios : numpy.ndarray
        The ``update / weight`` ratios swept (x axis, log2 scale).
    survived : mapping of str to numpy.ndarray
        For each format name, the share (0 to 1) of weights the update changed at each ratio.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.

    Returns
    -------
    matplotlib.figure.Figure
        The figure, with each format's lost-update threshold ``2**-(mantissa_bits+1)`` marked.
    """
    fig, ax = _axes(ax, (8, 3.5))
    for i, (name, share) in enumerate(survived.items()):
        color = f"C{i}"
        ax.plot(ratios, share, label=name, color=color)
        threshold = formats.lost_update_ratio(name)
        ax.axvline(threshold, color=color, ls="--", lw=0.8)
        ax.text(
            threshold,
            1.02,
            f"2**{int(math.log2(threshold))}",
            color=color,
            ha="center",
            fontsize=8,
            transform=ax.get_xaxis_transform(),
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("update / weight")
    ax.set_ylabel("share of weights changed")
    ax.set_ylim(-0.03, 1.03)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def gradient_histogram(
    stats: GradientStats | Mapping[str, GradientStats],
    ax: Axes | None = None,
) -> Figure:
    """Histogram of gradient exponents against the range of the format they were measured for.

    Parameters
    ----------
    stats : GradientStats or mapping of str to GradientStats
        From :func:`mptutor.gradients.gradient_stats`; several (e.g. before and after loss
        scaling) are drawn on one axis with their labels. All must use the same format.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.

    Returns
    -------
    matplotlib.figure.Figure
        Bars count the values per power of two; the shaded bands are the format's zero
        (flushed), subnormal and normal ranges; the legend gives each set's share flushed to zero.

    Raises
    ------
    ValueError
        If the statistics were measured against different formats.
    """
    series = {"gradients": stats} if not isinstance(stats, Mapping) else dict(stats)
    names = {s.fmt for s in series.values()}
    if len(names) != 1:
        raise ValueError(f"all statistics must use one format, got {sorted(names)}")
    f = formats.get(names.pop())
    fig, ax = _axes(ax, (9, 3.6))
    tiny = f.min_exponent - f.mantissa_bits
    lows = [int(s.exponents.min()) for s in series.values() if s.exponents.size]
    highs = [int(s.exponents.max()) for s in series.values() if s.exponents.size]
    left = min([tiny - 8, *lows]) - 1
    right = max([f.max_exponent + 2, *highs]) + 2
    ax.axvspan(left, tiny - 1, color="#d62728", alpha=0.08, label=f"{f.name}: rounds to zero")
    ax.axvspan(tiny - 1, f.min_exponent, color=_SUBNORMAL, alpha=0.3, label=f"{f.name}: subnormal")
    ax.axvspan(
        f.min_exponent, f.max_exponent + 1, color=_NORMAL, alpha=0.1, label=f"{f.name}: normal"
    )
    ax.axvspan(f.max_exponent + 1, right, color="#ff7f0e", alpha=0.1, label=f"{f.name}: overflow")
    bins = np.arange(left, right + 1)
    for i, (label, s) in enumerate(series.items()):
        ax.hist(
            s.exponents,
            bins=bins,
            histtype="step",
            lw=1.5,
            color=f"C{i}",
            label=f"{label} ({100 * s.share('underflow'):.3g}% flushed to zero)",
        )
    ax.set_xlim(left, right)
    ax.set_yscale("log")
    ax.set_xlabel("log2 |gradient|")
    ax.set_ylabel("values")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def loss_scale_trace(
    history: ScaleHistory | Mapping[str, ScaleHistory],
    ax: Axes | None = None,
) -> Figure:
    """Plot the loss scale over a run on a log2 axis, with the skipped (overflowed) steps marked.

    Parameters
    ----------
    history : ScaleHistory or mapping of str to ScaleHistory
        ``scaler.history`` of a :class:`~mptutor.scaling.DynamicLossScaler` or
        :class:`~mptutor.scaling.StaticLossScaler`; several runs are drawn with their labels.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new figure otherwise.

    Returns
    -------
    matplotlib.figure.Figure
        A step line of the scale used at each step, and a cross at each skipped step.
    """
    runs = {"loss scale": history} if not isinstance(history, Mapping) else dict(history)
    fig, ax = _axes(ax, (9, 3.4))
    for i, (label, h) in enumerate(runs.items()):
        steps, scales, skipped = h.arrays()
        mask = np.asarray(skipped, dtype=bool)
        ax.step(steps, scales, where="post", color=f"C{i}", label=label)
        ax.plot(
            steps[mask],
            scales[mask],
            "x",
            color=f"C{i}",
            ms=6,
            label=f"{label}: skipped steps ({int(mask.sum())})",
        )
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
