"""What each layer costs, counted from its shapes (no model runs): FLOPs, bytes, a roofline."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from mptutor import formats
from mptutor._checks import check_scalar

# FLOPs per value of the other layers: BatchNorm's mean, variance, normalisation, scale and
# shift; a softmax (per output value); pooling's one addition (per input value); a rescaling.
_FLOPS_PER_VALUE = {
    "BatchNormalization": 5,
    "GlobalAveragePooling2D": 1,
    "Activation": 5,
    "Rescaling": 1,
}

#: Peak rates from NVIDIA's data sheets (dense, without sparsity), not measurements: FLOP/s of
#: the FP32 units, of the TF32 and FP16 Tensor Cores, and bytes/s of the GPU memory and of the
#: host link in one direction (PCIe 3.0 x16 for the V100s, PCIe 5.0 x16 for the H100).
DATASHEETS: dict[str, dict[str, float | None]] = {
    gpu: dict(zip(("fp32", "tf32", "fp16 tensor", "memory", "host link"), rates, strict=True))
    for gpu, rates in (
        ("V100 SXM2", (15.7e12, None, 125e12, 900e9, 16e9)),
        ("V100 PCIe", (14e12, None, 112e12, 900e9, 16e9)),
        ("H100 SXM5", (67e12, 495e12, 990e12, 3.35e12, 64e9)),
    )
}

# A precision of formats.PRECISIONS: (the data sheet rate of the layers that meet the channel
# rule, bytes per value). fp32 is the float32 policy, TF32 off; amp_fp16 mixed_float16.
_RATES = {"fp32": ("fp32", 4), "tf32": ("tf32", 4), "amp_fp16": ("fp16 tensor", 2)}


def _values(shape: Any) -> int:
    return int(np.prod([int(d) for d in shape[1:]]))


def layer_flops(layer: keras.layers.Layer, batch_size: int = 1) -> int:
    """Count the FLOPs of one forward pass of a layer.

    ``2 * kh * kw * C_in`` per output value of a convolution, ``2 * C_in`` of a dense layer (bias
    and fused ReLU not counted); BatchNorm and softmax 5, pooling and rescaling 1 per value.

    Parameters
    ----------
    layer : keras.layers.Layer
        A layer of a built functional model (its ``input`` and ``output`` are known).
    batch_size : int, optional
        Images in the batch.
    """
    batch_size = check_scalar(batch_size, "batch_size", int, min_val=1)
    n_out = batch_size * _values(layer.output.shape)
    c_in = int(layer.input.shape[-1])
    if isinstance(layer, keras.layers.Conv2D):
        kh, kw = layer.kernel_size
        return 2 * n_out * kh * kw * c_in
    if isinstance(layer, keras.layers.Dense):
        return 2 * n_out * c_in
    kind = type(layer).__name__
    if kind == "GlobalAveragePooling2D":
        return _FLOPS_PER_VALUE[kind] * batch_size * _values(layer.input.shape)
    return _FLOPS_PER_VALUE.get(kind, 0) * n_out


def layer_costs(model: keras.Model, batch_size: int = 128) -> list[dict[str, Any]]:
    """Tabulate FLOPs, bytes moved and arithmetic intensity of each layer's forward pass.

    The bytes: one read of the input and all weights, one write of the output, in the compute
    dtype (the least any implementation moves).

    Parameters
    ----------
    model, batch_size : keras.Model, int
        A functional model, and the images in its batch.

    Returns
    -------
    list of dict
        One row per layer after the input: ``layer, kind, GFLOP, MB moved fp32, MB moved fp16,
        FLOP/byte fp32, FLOP/byte fp16, share of FLOPs``.
    """
    rows = []
    for layer in model.layers[1:]:
        flops = layer_flops(layer, batch_size)
        values = (
            batch_size * (_values(layer.input.shape) + _values(layer.output.shape))
            + layer.count_params()
        )
        rows.append(
            {
                "layer": layer.name,
                "kind": type(layer).__name__,
                "GFLOP": flops / 1e9,
                "MB moved fp32": 4 * values / 1e6,
                "MB moved fp16": 2 * values / 1e6,
                "FLOP/byte fp32": flops / (4 * values),
                "FLOP/byte fp16": flops / (2 * values),
            }
        )
    total = sum(r["GFLOP"] for r in rows)
    for r in rows:
        r["share of FLOPs"] = r["GFLOP"] / total
    return rows


def _training_passes(model: keras.Model) -> dict[str, int]:
    """Each layer's work in a training step, in forward passes (see :func:`training_flops`)."""
    passes, trained_before = {}, False
    for layer in model.layers[1:]:
        trainable = bool(layer.trainable_weights)
        passes[layer.name] = 1 + trainable + trained_before
        trained_before = trained_before or trainable
    return passes


def training_flops(model: keras.Model, batch_size: int = 1) -> int:
    """Count the FLOPs of one training step: forward and backward passes of every layer.

    A backward pass computes the weights' gradient (one forward pass's arithmetic) and, after a
    trainable layer, the input's (as much again): a layer counts 1 to 3 forward passes.

    Parameters
    ----------
    model, batch_size : keras.Model, int
        A functional model, and the images in its batch.

    Returns
    -------
    int
        The sum over the layers of their passes times :func:`layer_flops`.
    """
    passes = _training_passes(model)
    return sum(passes[layer.name] * layer_flops(layer, batch_size) for layer in model.layers[1:])


def tensor_core_check(model: keras.Model, batch_size: int = 128) -> list[dict[str, Any]]:
    """List the GEMMs of the convolutions and dense layers, and NVIDIA's channel rule.

    A convolution is an implicit GEMM, ``M = batch * H_out * W_out``, ``N = C_out``,
    ``K = kh * kw * C_in``; a dense layer ``M = batch``, ``N = units``, ``K = C_in``. The rule
    for FP16 Tensor Cores: ``C_in`` and ``C_out`` multiples of 8.

    Parameters
    ----------
    model, batch_size : keras.Model, int
        A functional model, and the images in its batch.

    Returns
    -------
    list of dict
        ``layer, kernel, C_in, C_out, GEMM M x N x K, C_in, C_out multiples of 8,
        share of FLOPs``.
    """
    share = {r["layer"]: r["share of FLOPs"] for r in layer_costs(model, batch_size)}
    rows = []
    for layer in model.layers[1:]:
        c_in = int(layer.input.shape[-1])
        if isinstance(layer, keras.layers.Conv2D):
            kh, kw = layer.kernel_size
            c_out, kernel, k = layer.filters, f"{kh}x{kw}", kh * kw * c_in
            m = batch_size * int(layer.output.shape[1]) * int(layer.output.shape[2])
        elif isinstance(layer, keras.layers.Dense):
            c_out, kernel, k, m = layer.units, "-", c_in, batch_size
        else:
            continue
        rows.append(
            {
                "layer": layer.name,
                "kernel": kernel,
                "C_in": c_in,
                "C_out": c_out,
                "GEMM M x N x K": f"{m} x {c_out} x {k}",
                "C_in, C_out multiples of 8": c_in % 8 == 0 and c_out % 8 == 0,
                "share of FLOPs": share[layer.name],
            }
        )
    return rows


def roofline(
    model: keras.Model, gpu: str, precision: str, batch_size: int = 128
) -> dict[str, float]:
    """Estimate the seconds of one training step on a GPU from its data sheet, by part: a best case.

    Each layer takes the longer of its FLOPs at the peak rate (the precision's for convolutions
    and dense layers meeting the channel rule, else FP32's) and its bytes at the memory
    bandwidth, times its passes; the host copy is the input batch over the host link.

    Parameters
    ----------
    model, batch_size : keras.Model, int
        A functional model, and the images in its batch.
    gpu : str
        A key of :data:`DATASHEETS`.
    precision : {"fp32", "tf32", "amp_fp16"}
        A precision of :data:`mptutor.formats.PRECISIONS` (``amp_fp16``: ``mixed_float16``).

    Returns
    -------
    dict
        Seconds of ``conv/dense meeting the rule``, ``conv/dense breaking it``,
        ``elementwise and pooling`` and ``host copy``.

    Raises
    ------
    TypeError, ValueError
        If ``gpu`` or ``precision`` is unknown (or not a string), or the data sheet of ``gpu``
        has no rate for ``precision``.
    """
    if gpu not in DATASHEETS:
        raise ValueError(f"unknown GPU {gpu!r}; data sheets: {', '.join(DATASHEETS)}")
    precision = formats.precision(precision)
    if precision not in _RATES:
        raise ValueError(f"no roofline for {precision!r}; choose from {', '.join(_RATES)}")
    rates = DATASHEETS[gpu]
    rate_name, nbytes = _RATES[precision]
    if rates[rate_name] is None:
        raise ValueError(f"the {gpu} data sheet has no {rate_name} rate")
    meets_rule = {
        r["layer"] for r in tensor_core_check(model, batch_size) if r["C_in, C_out multiples of 8"]
    }
    parts = dict.fromkeys(
        ("conv/dense meeting the rule", "conv/dense breaking it", "elementwise and pooling"), 0.0
    )
    passes = _training_passes(model)
    for r in layer_costs(model, batch_size):
        if r["kind"] not in ("Conv2D", "Dense"):
            part = "elementwise and pooling"
        elif r["layer"] in meets_rule:
            part = "conv/dense meeting the rule"
        else:
            part = "conv/dense breaking it"
        fast = part == "conv/dense meeting the rule"
        rate = rates[rate_name] if fast else rates["fp32"]
        moved = r[f"MB moved fp{8 * nbytes}"] * 1e6
        seconds = max(r["GFLOP"] * 1e9 / rate, moved / rates["memory"])
        parts[part] += passes[r["layer"]] * seconds
    input_bytes = batch_size * _values(model.input.shape) * np.dtype(model.input.dtype).itemsize
    parts["host copy"] = input_bytes / rates["host link"]
    return parts


def roofline_table(
    model: keras.Model, gpus: tuple[str, ...] = ("V100 SXM2", "H100 SXM5"), batch_size: int = 128
) -> list[dict[str, Any]]:
    """Tabulate :func:`roofline` for every precision a GPU's data sheet has, with speedups.

    Parameters
    ----------
    model, batch_size : keras.Model, int
        A functional model, and the images in its batch.
    gpus : tuple of str, optional
        Keys of :data:`DATASHEETS`.

    Returns
    -------
    list of dict
        ``GPU (data sheet), precision``, milliseconds of each part, and the speedup over
        ``fp32`` on the same GPU, for the layers only and with the host copy.
    """
    rows = []
    for gpu in gpus:
        base = roofline(model, gpu, "fp32", batch_size)
        base_layers = sum(base.values()) - base["host copy"]
        for precision, (rate_name, _) in _RATES.items():
            if DATASHEETS[gpu][rate_name] is None:
                continue
            parts = roofline(model, gpu, precision, batch_size)
            layers = sum(parts.values()) - parts["host copy"]
            row: dict[str, Any] = {"GPU (data sheet)": gpu, "precision": precision}
            row.update({f"{part} ms": 1e3 * seconds for part, seconds in parts.items()})
            row["speedup, layers only"] = base_layers / layers
            row["speedup with host copy"] = sum(base.values()) / sum(parts.values())
            rows.append(row)
    return rows
