"""Tensor Cores: which CUDA kernels of a call ran on them, which layer sizes keep GEMMs off them.

Profiling needs a CUDA GPU (and says so on a CPU); the audit reads only the layers' sizes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from inspect import signature
from typing import Any, NamedTuple

import torch
from torch import nn

from mptutor._checks import check_scalar
from mptutor.kernels import is_tensor_core_kernel
from mptutor.table import Table

_MULTIPLE = 8  # cuBLAS/cuDNN reach the Tensor Core peak when FP16/BF16 GEMM sizes are multiples
_VOCABULARY = 1000  # sizes at least this large are named vocabulary-sized


class _Kernel(NamedTuple):
    """One CUDA kernel: its name, launches, device time (us) and Tensor Core verdict."""

    name: str
    calls: int
    cuda_time_us: float
    tensor_core: bool


def _kernels(events: Iterable[Any]) -> list[_Kernel]:
    """Sum profiler events into one record per CUDA kernel, by descending device time."""
    totals: dict[str, list[float]] = {}
    for event in events:
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += event.device_time_total
    records = [
        _Kernel(name, calls, float(us), is_tensor_core_kernel(name))
        for name, (calls, us) in totals.items()
        if not name.startswith(("Memcpy", "Memset", "[memory]"))
    ]
    return sorted(records, key=lambda r: -r.cuda_time_us)


def tensor_core_kernels(fn: Callable[[], Any], warmup: int = 1) -> list[_Kernel]:
    """Run ``fn()`` under the PyTorch profiler and list the CUDA kernels it launched.

    Parameters
    ----------
    fn : callable
        Launches the GPU work to inspect.
    warmup : int, optional
        Unprofiled calls first.

    Returns
    -------
    list of named tuples
        ``(name, calls, cuda_time_us, tensor_core)`` per kernel, by descending device time.

    Raises
    ------
    RuntimeError, TypeError, ValueError
        If no CUDA GPU is available, or ``warmup`` is not an integer of at least 0.
    """
    warmup = check_scalar(warmup, "warmup", int, min_val=0)
    if not torch.cuda.is_available():
        raise RuntimeError(
            "tensor_core_kernels needs a CUDA GPU: Tensor Cores are GPU units, and a CPU run "
            "launches no CUDA kernels to inspect"
        )
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # With acc_events=False (the default) PyTorch 2.11 and later warn once that events are
    # cleared after each cycle, a warning that tests turn into an error.
    options = {"acc_events": True} if "acc_events" in signature(profile).parameters else {}
    with profile(activities=[ProfilerActivity.CUDA], **options) as prof:
        fn()
        torch.cuda.synchronize()
    return _kernels(prof.events())


_SYNC_WARNING = "called a synchronizing CUDA operation"  # c10/cuda/CUDAFunctions.cpp


def count_host_syncs(fn: Callable[[], Any]) -> int:
    """Count the times ``fn()`` makes the host wait for the GPU (``.item()``, ``.cpu()``, ...).

    Returns
    -------
    int
        The synchronising calls ``torch.cuda.set_sync_debug_mode("warn")`` reported (its
        warnings "called a synchronizing CUDA operation"; the mode is reset to "default" however
        ``fn`` ends).

    Raises
    ------
    RuntimeError
        If no CUDA GPU is available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("count_host_syncs needs a CUDA GPU: a CPU run has no device to wait for")
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:  # setting the mode may itself warn (a prototype feature): caught, not counted
            torch.cuda.set_sync_debug_mode("warn")
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum(str(w.message).startswith(_SYNC_WARNING) for w in caught)


class _ShapeIssue(NamedTuple):
    """One layer size off the Tensor Core fast path, and the padded size that fixes it."""

    module: str
    layer: str
    setting: str
    size: int
    pad_to: int
    reason: str


class _Audit(list):
    """The issues of :func:`tensor_core_audit`, shown as a table."""

    _NONE = "no layer with a size off the Tensor Core fast path"

    def table(self) -> Table:
        """Return the issues as a :class:`mptutor.table.Table`."""
        names = ("module", "layer", "setting", "size", "pad to", "reason")
        return Table(dict(zip(names, issue, strict=True)) for issue in self)

    def __repr__(self) -> str:
        return repr(self.table()) if self else self._NONE

    def _repr_html_(self) -> str:
        return self.table()._repr_html_() if self else f"<p>{self._NONE}</p>"


def _sizes(module: nn.Module) -> list[tuple[str, int, str]]:
    """Return (setting, size, what it is) for the GEMM dimensions a layer fixes."""
    m = module
    if isinstance(m, nn.Linear):
        return [("in_features", m.in_features, "a GEMM dimension (K)"),
                ("out_features", m.out_features, "a GEMM dimension (N)")]  # fmt: skip
    if isinstance(m, nn.modules.conv._ConvNd) and not 1 < m.groups == m.in_channels:  # depthwise
        per = " per group" if m.groups > 1 else ""
        return [("in_channels", m.in_channels // m.groups, "input channels" + per),
                ("out_channels", m.out_channels // m.groups, "output channels" + per)]  # fmt: skip
    if isinstance(m, nn.MultiheadAttention):
        return [("embed_dim", m.embed_dim, "a GEMM dimension of every projection"),
                ("head_dim", m.head_dim, "the attention GEMMs' inner dimension")]  # fmt: skip
    if isinstance(m, nn.RNNBase):
        return [("input_size", m.input_size, "a GEMM dimension of the input projection"),
                ("hidden_size", m.hidden_size, "a GEMM dimension of every step")]  # fmt: skip
    if isinstance(m, nn.Embedding):
        return [("num_embeddings", m.num_embeddings, "vocabulary")]
    return []


def tensor_core_audit(model: nn.Module) -> _Audit:
    """List the layers whose sizes keep FP16/BF16 GEMMs off the Tensor Core fast path.

    Every GEMM dimension a multiple of 8: ``Linear`` features, convolution channels (per
    group), attention and recurrent sizes; outputs and ``Embedding`` rows of 1000 or more are
    vocabulary-sized (padding with unused entries is free). Nothing runs.

    Returns
    -------
    list of named tuples
        ``(module, layer, setting, size, pad_to, reason)`` per size at fault, in module order;
        the list prints as a table (``.table()`` gives the :class:`mptutor.table.Table`).

    Raises
    ------
    TypeError
        If ``model`` is not a ``torch.nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    issues = _Audit()
    for name, module in model.named_modules():
        for setting, size, what in _sizes(module):
            if size % _MULTIPLE == 0:
                continue
            pad_to = -(-size // _MULTIPLE) * _MULTIPLE
            if setting in ("out_features", "num_embeddings") and size >= _VOCABULARY:
                reason = (
                    f"vocabulary-sized ({size} entries), not a multiple of {_MULTIPLE}: "
                    f"pad with {pad_to - size} unused entries"
                )
            elif setting == "num_embeddings":
                continue  # a small lookup table is not a matrix product
            else:
                reason = f"{what}, not a multiple of {_MULTIPLE}"
            issues.append(_ShapeIssue(name, type(module).__name__, setting, size, pad_to, reason))
    return issues
