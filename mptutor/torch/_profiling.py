"""What ran on the GPU: the CUDA kernels of a call (Tensor Core or not) and its host syncs.

Both need a CUDA GPU and say so on a CPU. The kernel names are judged by the framework-free
:func:`mptutor.kernels.is_tensor_core_kernel`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from inspect import signature
from typing import Any

import torch

from mptutor._checks import check_scalar
from mptutor.kernels import KernelRecord

__all__ = ["tensor_core_kernels", "count_host_syncs"]


def tensor_core_kernels(fn: Callable[[], Any], warmup: int = 1) -> list[KernelRecord]:
    """Run ``fn`` under the PyTorch profiler and list the CUDA kernels it launched.

    Parameters
    ----------
    fn : callable
        Called with no arguments; it should launch the GPU work to inspect.
    warmup : int, optional
        Unprofiled calls first (so that cuDNN autotuning and lazy initialisation are not
        profiled).

    Returns
    -------
    list of mptutor.kernels.KernelRecord
        Kernels by descending device time, each marked Tensor Core or not
        (:func:`mptutor.kernels.is_tensor_core_kernel`).

    Raises
    ------
    RuntimeError
        If no CUDA GPU is available: Tensor Cores exist only there.
    TypeError, ValueError
        If ``warmup`` is not an integer of at least 0.
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
    # One profiling cycle: with acc_events=False (the default) PyTorch 2.11 and later warn once
    # that events are cleared after each cycle, a warning that tests turn into an error.
    options = {"acc_events": True} if "acc_events" in signature(profile).parameters else {}
    with profile(activities=[ProfilerActivity.CUDA], **options) as prof:
        fn()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += event.device_time_total
    records = [
        KernelRecord.from_name(name, calls, us)
        for name, (calls, us) in totals.items()
        if not name.startswith(("Memcpy", "Memset", "[memory]"))
    ]
    return sorted(records, key=lambda r: -r.cuda_time_us)


def count_host_syncs(fn: Callable[[], Any]) -> int:
    """Count the times ``fn`` makes the host wait for the GPU (``torch.cuda.set_sync_debug_mode``).

    Parameters
    ----------
    fn : callable
        Called once with no arguments, after the device has been synchronised.

    Returns
    -------
    int
        The synchronising calls PyTorch reported (``.item()``, ``.cpu()``, ...).

    Raises
    ------
    RuntimeError
        If no CUDA GPU is available: on a CPU there is no device to wait for.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("count_host_syncs needs a CUDA GPU: a CPU run has no device to wait for")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)
