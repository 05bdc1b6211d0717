"""Figures for the notebooks, drawn with matplotlib (imported when a figure is drawn).

Every function takes ``ax``, the matplotlib Axes to draw into (``None``: a new figure), and
returns the figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mptutor import formats
from mptutor._checks import check_scalar, check_type

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from mptutor.gradients import GradientStats
    from mptutor.scaling import ScaleHistory

__all__ = [
    "format_ranges", "value_spacing", "update_survival",
    "gradient_histogram", "loss_scale_trace", "loss_curves",
]  # fmt: skip

_NORMAL, _SUBNORMAL = "#1f77b4", "#fdae6b"
_BANDS = ("#bdbdbd", "#fdd0a2", "#c7e9c0", "#fc9272")  # flushed to zero, subnormal, normal, over
_LINES = ("#1f77b4", "#000000", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """Return the figure of ``ax``, or a new figure and axes when it is ``None``."""
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    if ax is not None:
        return check_type(ax, "ax", Axes, "matplotlib Axes or None").figure, ax
    return plt.subplots(figsize=figsize, layout="constrained")


def _formats(fmts: Any) -> list[formats.Format]:
    """Look up the formats to draw, given as a list or one alone; refuse none."""
    if isinstance(fmts, (str, formats.Format)) or not isinstance(fmts, Iterable):
        fmts = [fmts]
    chosen = [formats.get(f) for f in fmts]
    if not chosen:
        raise ValueError("fmts is empty: name at least one format, e.g. ('fp16', 'bf16')")
    return chosen


def _runs(runs: Any, name: str, kind: type, what: str) -> dict[str, Any]:
    """Return one ``kind`` object as ``{what: it}``, or a non-empty mapping of labels to them."""
    if isinstance(runs, kind):
        return {what: runs}
    if not isinstance(runs, Mapping) or not runs:
        wanted = f"a {kind.__name__} or a non-empty dict of label to {kind.__name__}"
        raise TypeError(f"{name} must be {wanted}, got {runs!r:.80}")
    for label, run in runs.items():
        check_type(run, f"{name}[{label!r}]", kind, f"a {kind.__name__}")
    return dict(runs)


def _numbers(values: Any, name: str) -> np.ndarray:
    """Read a 1-D sequence of numbers as floats; name the argument if it is not one."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a 1-D sequence of numbers, got {values!r:.80}") from None
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got shape {array.shape}")
    return array


def format_ranges(
    fmts: Sequence[Any] = ("fp32", "bf16", "fp16", "fp8_e5m2", "fp8_e4m3"),
    xlim: tuple[float, float] | None = (-40, 20),
    ax: Axes | None = None,
) -> Figure:
    """Range of each format on a log2 axis: subnormals, normals, and the number of powers of 2.

    Parameters
    ----------
    fmts : str, dtype or sequence of them, optional
        Formats to draw, top to bottom.
    xlim : tuple of float or None, optional
        Limits of the log2 axis (a bar beyond one ends in an arrow head); ``None`` fits them all.

    Returns
    -------
    matplotlib.figure.Figure
        The right-hand axis labels each row with its powers of 2 and its range.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    chosen = _formats(fmts)
    if xlim is not None:
        if not isinstance(xlim, (tuple, list)) or len(xlim) != 2:
            raise TypeError(f"xlim must be (left, right) or None, got {xlim!r}")
        left = check_scalar(xlim[0], "xlim[0]")
        right = check_scalar(
            xlim[1], "xlim[1] (above xlim[0])", min_val=left, include_boundaries="right"
        )
    fig, ax = _axes(ax, (9, 0.7 * len(chosen) + 1.6))
    lows = [f.min_exponent - f.mantissa_bits for f in chosen]
    highs = [math.log2(f.max) for f in chosen]
    if xlim is None:
        left, right = min(lows) - 2, max(highs) + 2
    clipped = False
    for row, (f, lo, hi) in enumerate(zip(chosen, lows, highs, strict=True)):
        y = len(chosen) - 1 - row
        normal = f.min_exponent
        ax.barh(y, normal - lo, left=lo, color=_SUBNORMAL, height=0.6)
        ax.barh(y, hi - normal, left=normal, color=_NORMAL, height=0.6)
        for beyond, edge, marker in ((lo < left, left, "<"), (hi > right, right, ">")):
            if beyond:  # an arrow head where the bar leaves the axes
                clipped = True
                ax.plot(edge, y, marker=marker, ms=11, color="k", mec="w", clip_on=False, zorder=3)
    ax.set_yticks(range(len(chosen)), [f.name for f in reversed(chosen)])
    ax.set_ylim(-0.6, len(chosen) - 0.4)
    ax.set_xlim(left, right)
    side = ax.twinx()
    side.set_ylim(ax.get_ylim())
    rows = zip(reversed(chosen), reversed(lows), strict=True)
    side.set_yticks(
        range(len(chosen)),
        [f"{f.powers_of_two} powers of 2 (2**{lo} .. 2**{f.max_exponent})" for f, lo in rows],
    )
    side.tick_params(axis="y", length=0, pad=9)
    ax.tick_params(axis="y", pad=9)
    ax.set_xlabel("log2 |value|")
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_title("Representable range of each format")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=_NORMAL, label="normal values")]
    handles.append(Patch(color=_SUBNORMAL, label="subnormal values"))
    if clipped:
        beyond = "goes on beyond the axis"
        handles.append(Line2D([], [], ls="", marker=">", ms=8, color="black", label=beyond))
    handles.append(Line2D([], [], color="grey", lw=0.8, ls=":", label="1 = 2**0"))
    ax.legend(handles=handles, loc="lower left", fontsize=8, framealpha=0.95)
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
    fmts : str, dtype or sequence of them, optional
        Formats to show, one row each.

    Returns
    -------
    matplotlib.figure.Figure
        Rows labelled with their spacings; a dotted line at each power of two inside.
    """
    chosen = _formats(fmts)
    fig, ax = _axes(ax, (9, 0.8 * len(chosen) + 1.2))
    for row, f in enumerate(chosen):
        y = len(chosen) - 1 - row
        values = formats.representable_values(low, high, f)
        ax.vlines(values, y - 0.3, y + 0.3, color=_NORMAL, lw=1)
        gaps = sorted({float(g) for g in np.diff(values)})
        shown = ", ".join(f"{g:g}" for g in gaps[:4]) + (", ..." if len(gaps) > 4 else "")
        box = {"facecolor": "white", "edgecolor": "none", "pad": 1}
        label = f"{values.size} values, spacing {shown}"
        ax.text(high, y + 0.38, label, ha="right", fontsize=9, bbox=box)
    ax.set_yticks(range(len(chosen)), [f.name for f in reversed(chosen)])
    ax.set_ylim(-0.6, len(chosen) - 0.2)
    margin = 0.02 * (high - low)
    ax.set_xlim(low - margin, high + margin)
    powers = _powers_of_two_inside(low, high)
    if powers:
        for p in powers:
            ax.axvline(p, color="grey", ls=":", lw=1.2, zorder=0)
        top = ax.secondary_xaxis("top")
        top.set_xticks(powers, [f"{p:g} = 2**{int(math.log2(abs(p)))}" for p in powers])
        top.tick_params(labelsize=8, colors="grey")
    ax.set_xlabel("value")
    ax.set_title(f"Representable values in [{low:g}, {high:g}]")
    return fig


def _powers_of_two_inside(low: float, high: float) -> list[float]:
    """Return the powers of two strictly between ``low`` and ``high`` (an interval of one sign)."""
    if low <= 0 <= high:  # every power of two down to the smallest would be inside
        return []
    sign = 1.0 if low > 0 else -1.0
    a, b = sorted((sign * low, sign * high))
    inside = [2.0**e for e in range(math.floor(math.log2(a)) + 1, math.ceil(math.log2(b)))]
    return sorted(sign * p for p in inside if a < p < b)


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

    Returns
    -------
    matplotlib.figure.Figure
        With a band per format where an update is lost or kept depending on the weight.
    """
    ratios = _numbers(ratios, "ratios")
    if not np.all(np.isfinite(ratios) & (ratios > 0)):
        raise ValueError("ratios must be positive finite numbers (a log2 axis)")
    if not isinstance(survived, Mapping) or not survived:
        raise TypeError(
            f"survived must be a non-empty dict of format to shares, got {survived!r:.80}"
        )
    for name, share in survived.items():
        share = _numbers(share, f"survived[{name!r}]")
        if share.shape != ratios.shape or not np.all((share >= 0) & (share <= 1)):
            raise ValueError(
                f"survived[{name!r}] must hold one share in [0, 1] per ratio ({ratios.size})"
            )
        formats.get(name)
    fig, ax = _axes(ax, (8, 3.5))
    for i, (name, share) in enumerate(survived.items()):
        color = _LINES[i % len(_LINES)]
        always, can = formats.always_lost_update_ratio(name), formats.lost_update_ratio(name)
        ax.axvspan(always, can, color=color, alpha=0.12, lw=0)
        ax.plot(ratios, share, label=name, color=color, marker=".", ms=4)
        for x in (always, can):
            label, where = f"2**{int(math.log2(x))}", ax.get_xaxis_transform()
            ax.text(x, 1.02, label, color=color, ha="center", fontsize=8, transform=where)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("update / weight")
    ax.set_ylabel("share of weights changed")
    ax.set_ylim(-0.03, 1.03)
    title = "shaded: lost or kept,\ndepending on the weight"
    ax.legend(loc="lower right", title=title, title_fontsize=8, fontsize=8)
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
        From :func:`mptutor.gradients.gradient_stats`, several with their labels, one format.

    Returns
    -------
    matplotlib.figure.Figure
        Values per power of two over bands of the format's flushed, subnormal and normal ranges.

    Raises
    ------
    TypeError, ValueError
        If ``stats`` is not a GradientStats or a non-empty dict of them in one format, or they
        count no non-zero finite value.
    """
    from mptutor.gradients import GradientStats

    series = _runs(stats, "stats", GradientStats, "gradients")
    names = {s.fmt for s in series.values()}
    if len(names) != 1:
        raise ValueError(f"all statistics must use one format, got {sorted(names)}")
    if not any(s.exponents.size for s in series.values()):
        raise ValueError("the statistics count no non-zero finite value: nothing to draw")
    f = formats.get(names.pop())
    fig, ax = _axes(ax, (9, 3.6))
    tiny = f.min_exponent - f.mantissa_bits
    lows = [int(s.exponents.min()) for s in series.values() if s.exponents.size]
    highs = [int(s.exponents.max()) for s in series.values() if s.exponents.size]
    left = min([tiny - 8, *lows]) - 1
    right = max([f.max_exponent + 2, *highs]) + 2
    edges = (left, tiny - 1, f.min_exponent, f.max_exponent + 1, right)
    names = ("rounds to zero", "subnormal", "normal", "overflows")
    for lo, hi, color, name in zip(edges, edges[1:], _BANDS, names, strict=False):
        ax.axvspan(lo, hi, color=color, alpha=0.6, lw=0, label=f"{f.name}: {name}")
    bins = np.arange(left, right + 1)
    for i, (label, s) in enumerate(series.items()):
        label = f"{label} ({100 * s.share('underflow'):.3g}% flushed to zero)"
        color = _LINES[i % len(_LINES)]
        ax.hist(s.exponents, bins=bins, histtype="step", lw=1.6, color=color, label=label)
    ax.set_xlim(left, right)
    ax.set_yscale("log")
    ax.set_xlabel("log2 |gradient|  (a bar counts the values in [2**k, 2**(k+1)))")
    ax.set_ylabel("number of values")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def loss_scale_trace(
    history: ScaleHistory | Mapping[str, ScaleHistory],
    ax: Axes | None = None,
) -> Figure:
    """Plot the loss scale over a run on a log2 axis, with the skipped (overflowed) steps marked.

    Parameters
    ----------
    history : ScaleHistory or mapping of str to ScaleHistory
        A scaler's ``history``; several runs with their labels.

    Returns
    -------
    matplotlib.figure.Figure
        The scale used at each step, and a cross at each skipped step.

    Raises
    ------
    TypeError
        If ``history`` is not a ScaleHistory or a non-empty dict of them.
    """
    from mptutor.scaling import ScaleHistory

    runs = _runs(history, "history", ScaleHistory, "loss scale")
    fig, ax = _axes(ax, (9, 3.4))
    for i, (label, h) in enumerate(runs.items()):
        steps, scales, skipped = h.arrays()
        mask = np.asarray(skipped, dtype=bool)
        ax.step(steps, scales, where="post", color=f"C{i}", label=label)
        crosses = f"{label}: skipped steps ({int(mask.sum())})"
        ax.plot(steps[mask], scales[mask], "x", color=f"C{i}", ms=6, label=crosses)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def loss_curves(
    curves: Mapping[str, Sequence[float]],
    window: int = 1,
    ax: Axes | None = None,
) -> Figure:
    """Training loss per step of several runs on one axis, optionally as a running mean.

    Parameters
    ----------
    curves : mapping of str to sequence of float
        For each run's label, its loss at every step; non-finite losses are left out, counted
        in the legend.
    window : int, optional
        Steps of the trailing running mean; 1 draws the raw losses.

    Returns
    -------
    matplotlib.figure.Figure
        One line per run; the first (the reference) wide and light, so no run hides it.

    Raises
    ------
    TypeError, ValueError
        If ``window`` is not an int of at least 1, or ``curves`` not a non-empty dict of
        non-empty 1-D number sequences.
    """
    window = check_scalar(window, "window", int, min_val=1)
    if not isinstance(curves, Mapping) or not curves:
        raise TypeError(f"curves must be a non-empty dict of label to losses, got {curves!r:.80}")
    losses = {label: _numbers(v, f"curves[{label!r}]") for label, v in curves.items()}
    empty = [label for label, loss in losses.items() if not loss.size]
    if empty:
        raise ValueError(f"curves {empty} hold no losses: nothing to draw")
    fig, ax = _axes(ax, (8, 3.6))
    styles = ("-", "--", "-.", ":")
    for i, (label, loss) in enumerate(losses.items()):
        finite = np.isfinite(loss)
        kernel = np.ones(window)
        sums = np.convolve(np.where(finite, loss, 0.0), kernel)[: loss.size]
        counts = np.convolve(finite.astype(float), kernel)[: loss.size]
        with np.errstate(invalid="ignore", divide="ignore"):
            smooth = np.where(counts > 0, sums / counts, np.nan)
        smooth[~finite] = np.nan
        bad = int(np.count_nonzero(~finite))
        ax.plot(
            np.arange(1, loss.size + 1),
            smooth,
            color=_LINES[i % len(_LINES)],
            ls=styles[i % len(styles)],
            lw=3.5 if i == 0 else 1.8,  # a wide first line stays visible under the others
            alpha=0.5 if i == 0 else 1.0,
            label=label + (f" ({bad} non-finite losses left out)" if bad else ""),
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss" + (f" (mean of the last {window} steps)" if window > 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    return fig
