"""Benchmark records: the device the benchmarks run on, and their results saved with provenance."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from mptutor import bench
from mptutor import torch as mpt
from mptutor.torch_perf._timing import DeviceLike, is_cuda

__all__ = ["default_device", "save_record"]


def default_device() -> str:
    """Return the device a benchmark measures when none is named: :func:`mptutor.torch.device`.

    Returns
    -------
    str
        ``"cuda"`` when PyTorch sees a CUDA GPU and ``MPTUTOR_DEVICE=cpu`` does not hide it,
        else ``"cpu"``.
    """
    return mpt.device()


def save_record(
    benchmark: str,
    device: DeviceLike,
    data: dict[str, Any],
    smoke: bool = False,
    out_dir: str | os.PathLike[str] | None = None,
    suffix: str = "",
) -> Path:
    """Save a benchmark's measurement with its provenance (:func:`mptutor.bench.save_result`).

    The record is named ``<benchmark>-<device type>[-<GPU name>][-<suffix>]``, or
    ``<benchmark>-smoke-<device type>[-<suffix>]`` for a smoke run, so that a smoke run never
    passes for a measurement. The data gains ``device``, ``smoke``, the PyTorch and cuDNN
    versions and, on a GPU, the device's name. A smoke run without ``out_dir`` goes to a new
    temporary folder, never to ``data/results``.

    Parameters
    ----------
    benchmark : str
        The benchmark's name, e.g. ``"gemm_sweep"``.
    device : str or torch.device
        The device it measured.
    data : dict
        The measurement, raw timings included.
    smoke : bool, optional
        Whether this was a tiny run that checks the code path only.
    out_dir : path-like, optional
        The folder (default: ``data/results`` of the checkout).
    suffix : str, optional
        Appended to the name (e.g. the model).

    Returns
    -------
    pathlib.Path
        The file written.
    """
    dev = torch.device(device)
    parts = [benchmark, "smoke", dev.type] if smoke else [benchmark, dev.type]
    extra: dict[str, Any] = {
        "device": str(dev),
        "smoke": smoke,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }
    if is_cuda(dev):
        extra["gpu"] = torch.cuda.get_device_name(dev)
        if not smoke:
            parts.append(extra["gpu"])
    if suffix:
        parts.append(suffix)
    name = "-".join("".join(c if c.isalnum() or c == "_" else "_" for c in part) for part in parts)
    if smoke and out_dir is None:
        out_dir = tempfile.mkdtemp(prefix="mptutor-smoke-")
    return bench.save_result(name, {**extra, **data}, out_dir=out_dir)
