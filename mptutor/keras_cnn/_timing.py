"""Timing a training step, profiling it layer by layer, and the step-time figure."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from mptutor import bench
from mptutor.keras_cnn._costs import layer_flops

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def block(value: Any) -> Any:
    """Wait until the backend has computed ``value`` (a GPU runs queued kernels later), return it.

    TensorFlow waits with ``tf.test.experimental.sync_devices()``, PyTorch with
    ``torch.cuda.synchronize()``, JAX with ``jax.block_until_ready``.

    Parameters
    ----------
    value : object
        What the timed call returned.
    """
    name = keras.backend.backend()
    if name == "jax":
        import jax

        return jax.block_until_ready(value)
    if name == "torch":
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    elif name == "tensorflow":
        import tensorflow as tf

        tf.test.experimental.sync_devices()
    return value


def _detach(x: Any) -> Any:
    """``x`` cut from the autograd graph on the PyTorch backend, else ``x``."""
    return x.detach() if keras.backend.backend() == "torch" else x


def time_step(
    model: keras.Model, x: Any, y: Any, repeats: int = 10, warmup: int = 2
) -> bench.Timing:
    """Time ``model.train_on_batch(x, y)`` (it waits for the device): warm-up calls, then timed.

    Parameters
    ----------
    model : keras.Model
        A compiled model.
    x, y : array_like or backend tensor
        A batch: NumPy arrays are converted at every call (and copied to a GPU), tensors made
        once are not.
    repeats, warmup : int, optional
        Timed calls (their median is the step time), and untimed ones first.
    """
    return bench.time_fn(lambda: model.train_on_batch(x, y), repeats=repeats, warmup=warmup)


def _forward_backward(
    layer: keras.layers.Layer, x: Any, input_grad: bool
) -> Callable[[], Any] | None:
    """Return a layer's forward and backward pass (``None`` on JAX, or nothing to differentiate)."""
    weights = list(layer.trainable_variables)
    if not weights and not input_grad:
        return None
    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        def step() -> Any:
            with tf.GradientTape() as tape:
                if input_grad:
                    tape.watch(x)
                total = tf.reduce_sum(tf.cast(layer(x, training=True), tf.float32))
            sources = ([x] if input_grad else []) + [w.value for w in weights]
            return block(tape.gradient(total, sources))

        return step
    if name == "torch":
        import torch

        xin = x.detach().requires_grad_(input_grad) if torch.is_floating_point(x) else x

        def step() -> Any:
            total = layer(xin, training=True).float().sum()
            sources = ([xin] if input_grad else []) + [w.value for w in weights]
            return block(torch.autograd.grad(total, sources))

        return step
    return None


def profile_layers(
    model: keras.Model, x: np.ndarray, repeats: int = 5, warmup: int = 1
) -> list[dict[str, Any]]:
    """Time each layer's forward pass, and its forward and backward pass, one layer at a time.

    Each layer runs on the previous one's output; the backward pass asks for its weights'
    gradients and, after a trainable layer, its input's. On TensorFlow, the gradient of a
    convolution computes its input's gradient as well, asked for or not (the registered
    ``Conv2D`` gradient returns both), so the first convolution's time includes a gradient that
    training does not need. Every call waits for the device (:func:`block`) and runs eagerly,
    with the per-call overhead a traced step avoids.

    Parameters
    ----------
    model : keras.Model
        A functional model.
    x : numpy.ndarray
        An input batch.
    repeats, warmup : int, optional
        Timed calls per measurement (their median is kept), and untimed ones first.

    Returns
    -------
    list of dict
        One row per layer after the input: ``layer, kind, output_shape, flops, forward_s,
        forward_backward_s`` (``None`` on JAX, where only the forward pass is timed).
    """
    rows = []
    h = keras.ops.convert_to_tensor(x)
    trained_before = False
    for layer in model.layers[1:]:
        current = h

        def forward(layer: keras.layers.Layer = layer, current: Any = current) -> Any:
            return block(layer(current, training=True))

        fwd = bench.time_fn(forward, repeats=repeats, warmup=warmup)
        both = _forward_backward(layer, current, input_grad=trained_before)
        rows.append(
            {
                "layer": layer.name,
                "kind": type(layer).__name__,
                "output_shape": [int(d) for d in layer.output.shape[1:]],
                "flops": layer_flops(layer, int(x.shape[0])),
                "forward_s": fwd.median,
                "forward_backward_s": None
                if both is None
                else bench.time_fn(both, repeats=repeats, warmup=warmup).median,
            }
        )
        h = _detach(layer(current, training=True))
        trained_before = trained_before or bool(layer.trainable_variables)
    return rows


_LINES = {"fp32": "-", "tf32": ":", "amp_fp16": "--", "amp_bf16": "-."}  # by precision
_MARKERS = "o^sDv"


def plot_step_times(runs: dict[str, list[dict[str, Any]]], title: str) -> Figure:
    """Plot step time and throughput against batch size.

    Batch sizes within a factor of 4 of each other (a CPU run's few sizes) get linear axes, the y
    axis from zero, and a legend on each panel; a wider range (a GPU run's 32 to 512) gets a
    logarithmic batch axis, a logarithmic y axis where its values span a factor of 4 or more (linear
    from zero otherwise), round tick values and the legend on the left panel. One colour and marker
    shape per run, a line style per precision (``fp32`` solid, ``tf32`` dotted, ``amp_fp16``
    dashed, ``amp_bf16`` and any other dash-dot); no marker hides another where two series meet:
    ``fp32`` has small filled markers edged in white, drawn over the open markers of each other
    precision, which grow for each further precision, and the points move a little to either side
    of their batch size, in fractions of the largest batch size (on log axes, of the span in
    octaves): the runs' points 4% apart, centred on the batch size, the first run to the left, and
    within a run the precisions spread over 1.6%, centred on the run's place, ``fp32`` to the left.

    Parameters
    ----------
    runs : dict
        Label (a model's name, say): rows with ``precision`` (a name of
        :data:`mptutor.formats.PRECISIONS`), ``batch``, ``ms/step`` and ``images/s``.
    title : str
        The figure's title: say where the numbers were measured.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels: milliseconds per step, and images per second; each line is labelled
        ``"<run>, <precision>"``.

    Raises
    ------
    ValueError
        If no row has a positive batch size, before anything is drawn.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    batches = sorted({r["batch"] for rows in runs.values() for r in rows})
    if not batches or batches[0] <= 0:
        raise ValueError(f"runs must hold rows with positive batch sizes, got {batches}")
    log = batches[-1] > 4 * batches[0]
    span = np.log2(batches[-1] / batches[0]) if log else batches[-1]
    order = {}  # each run's precisions, the known ones first
    for label, rows in runs.items():
        present = {r["precision"] for r in rows}
        order[label] = [p for p in _LINES if p in present] + sorted(present - set(_LINES))
    rings = [p for p in dict.fromkeys(p for ps in order.values() for p in ps) if p != "fp32"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    for i, (label, rows) in enumerate(runs.items()):
        shift = 0.02 * span * (2 * i - (len(runs) - 1))
        n = len(order[label])  # the run's precisions spread over 1.6%, whatever their number
        spread = np.linspace(-0.008, 0.008, n) if n > 1 else np.zeros(n)
        for precision, offset in zip(order[label], spread, strict=True):
            sel = sorted((r for r in rows if r["precision"] == precision), key=lambda r: r["batch"])
            x = np.array([r["batch"] for r in sel], float)
            x = x * 2 ** (shift + offset * span) if log else x + shift + offset * span
            if precision == "fp32":
                marker = {"ms": 6.5, "mfc": f"C{i}", "mec": "white", "mew": 0.6, "zorder": 3}
            else:
                marker = {"ms": 12 + 4 * rings.index(precision), "mfc": "none", "mew": 1.5}
            for ax, key in zip(axes, ("ms/step", "images/s"), strict=True):
                ax.plot(x, [r[key] for r in sel], _LINES.get(precision, "-."), color=f"C{i}",
                        marker=_MARKERS[i % len(_MARKERS)], label=f"{label}, {precision}",
                        **marker)  # fmt: skip
    for ax, key in zip(axes, ("ms/step", "images/s"), strict=True):
        values = [r[key] for rows in runs.values() for r in rows]
        log_y = log and max(values) >= 4 * min(values)  # a log axis only over a wide range
        if log:
            ax.set_xscale("log", base=2)
        if log_y:  # 1, 2, 3 and 5 times each power of ten
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(10, subs=(1, 2, 3, 5)))
        else:  # evenly spaced round values, from zero, with room above the largest marker
            ax.yaxis.set_major_locator(MaxNLocator(6, steps=[1, 2, 2.5, 5, 10]))
            ax.set_ylim(0, 1.12 * max(values))
        ax.set_xticks(batches, [str(n) for n in batches])
        ax.set_xticks([], minor=True)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter("")
        if not log:  # a quarter of the batch sizes' range on either side
            pad = 0.25 * ((batches[-1] - batches[0]) or batches[0])
            ax.set_xlim(batches[0] - pad, batches[-1] + pad)
            ax.legend(fontsize=8)
        ax.set_xlabel("batch size")
        ax.set_ylabel({"ms/step": "ms per training step", "images/s": "images per second"}[key])
        ax.grid(alpha=0.3, which="both")
    if log:
        axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig
