"""Matrix products ``A @ B`` by precision (strict FP32, TF32, FP16, BF16, FP8 E4M3) and a sweep."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mptutor import formats
from mptutor.hardware import _TENSOR_CORES_FROM
from mptutor.torch_perf._timing import _is_cuda, tf32, time_calls

#: The precisions of the sweep (keys of :data:`mptutor.formats.PRECISIONS`), in the order
#: shown: the dtype of the inputs, and whether a CPU is measured (TF32 and FP8: GPUs only).
_GEMMS: dict[str, tuple[torch.dtype, bool]] = {
    "fp32": (torch.float32, True),
    "tf32": (torch.float32, False),
    "fp16": (torch.float16, True),
    "bf16": (torch.bfloat16, True),
    "fp8_e4m3": (torch.float8_e4m3fn, False),
}


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of ``(m, k) @ (k, n)``: ``2*m*n*k`` (a multiply and an add).

    Parameters
    ----------
    m, n, k : int
        The dimensions.
    """
    return 2 * m * n * k


def _gemm(precision: str) -> str:
    """Return the one spelling of a precision of the sweep; ValueError for any other."""
    name = formats.precision(precision)
    if name not in _GEMMS:
        raise ValueError(f"{precision!r} is not a precision of the sweep; choose one of "
                         f"{list(_GEMMS)}")  # fmt: skip
    return name


def _why_not(precision: str, device: str | torch.device, shape: Sequence[int] = ()) -> str | None:
    """Say why a precision is not measured on this device and shape; ``None`` if it is."""
    name = _gemm(precision)
    if not _is_cuda(device):
        return None if _GEMMS[name][1] else f"{name} is measured on CUDA GPUs only"
    have = torch.cuda.get_device_capability(torch.device(device))
    need = _TENSOR_CORES_FROM.get(name) if name != "fp16" else None  # FP16 runs on any GPU
    if need is not None and have < need:
        return "{} needs compute capability {}.{}, this GPU has {}.{}".format(name, *need, *have)
    if name == "fp8_e4m3" and not hasattr(torch, "_scaled_mm"):
        return "this PyTorch has no torch._scaled_mm"
    if name == "fp8_e4m3" and any(d % 16 for d in shape):
        return f"{name} products need dimensions divisible by 16"
    return None


def _make_product(
    precision: str, m: int, n: int, k: int, device: str | torch.device = "cpu", seed: int = 0,
    input_sets: int = 1, fp8_fast_accum: bool = False,
) -> Callable[[], torch.Tensor]:  # fmt: skip
    """Return a function computing ``A @ B``, cycling through ``input_sets`` seeded pairs."""
    # TF32 is a setting while the product runs; FP8 runs through torch._scaled_mm: B
    # column-major, scales of 1, a BF16 result; fp8_fast_accum skips cuBLAS's periodic promotion
    # of the partial sums to higher precision (on Ada and Hopper).
    name = _gemm(precision)
    dtype = _GEMMS[name][0]
    gen = torch.Generator(device=torch.device(device)).manual_seed(seed)
    pairs = []
    for _ in range(input_sets):
        a = torch.randn(m, k, device=device, generator=gen).to(dtype)
        b = torch.randn(k, n, device=device, generator=gen)
        b = b.t().contiguous().to(dtype).t() if name == "fp8_e4m3" else b.to(dtype)
        pairs.append((a, b))
    order = itertools.cycle(pairs)
    if name != "fp8_e4m3":
        return lambda: torch.matmul(*next(order))
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(
        *next(order), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
        use_fast_accum=fp8_fast_accum,
    )  # fmt: skip


def _input_sets_past_l2(precision: str, m: int, n: int, k: int, device: Any) -> int:
    """Input pairs (1 to 64) whose bytes are twice the GPU's L2 cache; 1 on a CPU."""
    if not _is_cuda(device):
        return 1
    l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0)
    pair = (m * k + k * n) * _GEMMS[_gemm(precision)][0].itemsize
    return max(1, min(64, math.ceil(2 * l2 / pair))) if l2 else 1


def _ramp_clocks(device: str | torch.device, seconds: float) -> None:
    """Run FP16 products on a GPU for ``seconds``, so that its clocks are up."""
    if not _is_cuda(device) or seconds <= 0:
        return
    x = torch.randn(4096, 4096, device=device, dtype=torch.float16)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            x @ x  # noqa: B018 - the work is the point
        torch.cuda.synchronize(torch.device(device))


def measure_gemm(
    precision: str, m: int, n: int, k: int, device: str | torch.device = "cpu", repeats: int = 10,
    min_sample_s: float | None = None, graph: bool = True, fp8_fast_accum: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Time one product shape in one precision; a row of a GEMM sweep.

    Seeded standard normal inputs; TF32 on for ``"tf32"`` only, throughout (:func:`tf32`). On a
    GPU the calls cycle through input pairs filling twice the L2 cache (no cached inputs). FP8
    E4M3 runs through ``torch._scaled_mm`` (per-tensor scales of 1, a BF16 result).

    Parameters
    ----------
    precision : str
        ``"fp32"`` (strict), ``"tf32"``, ``"fp16"``, ``"bf16"`` or ``"fp8_e4m3"``, as
        :func:`mptutor.formats.precision` reads it.
    m, n, k : int
        ``A`` is ``(m, k)``, ``B`` is ``(k, n)``.
    device, repeats, min_sample_s, graph
        As for :func:`time_calls`.
    fp8_fast_accum : bool, optional
        ``use_fast_accum`` of ``torch._scaled_mm`` for FP8 (faster, less accurate sums).

    Returns
    -------
    dict
        ``precision, m, n, k`` and either ``skipped`` (why not measured here: TF32 and FP8 on a
        CPU, a GPU too old, FP8 dimensions not multiples of 16) or ``seconds`` (median),
        ``tflops``, ``input_sets``, ``timing`` (``Timing.as_dict``); FP8 also ``use_fast_accum``.

    Raises
    ------
    ValueError
        For a precision that is not one of the five above.
    """
    name = _gemm(precision)
    row: dict[str, Any] = {"precision": name, "m": m, "n": n, "k": k}
    if name == "fp8_e4m3":
        row["use_fast_accum"] = fp8_fast_accum
    reason = _why_not(name, device, (m, n, k))
    if reason is not None:
        return {**row, "skipped": reason}
    sets = _input_sets_past_l2(name, m, n, k, device)
    with tf32(name == "tf32"):
        product = _make_product(name, m, n, k, device, input_sets=sets,
                                fp8_fast_accum=fp8_fast_accum)  # fmt: skip
        try:
            timing = time_calls(product, device, repeats, min_sample_s=min_sample_s, graph=graph)
        except RuntimeError as err:  # torch._scaled_mm is a private API and may refuse
            if name != "fp8_e4m3":
                raise
            return {**row, "skipped": f"torch._scaled_mm failed: {str(err).splitlines()[0]}"}
    seconds = timing.median
    return {**row, "seconds": seconds, "tflops": gemm_flops(m, n, k) / seconds / 1e12,
            "input_sets": sets, "timing": timing.as_dict()}  # fmt: skip


def gemm_sweep(
    sizes: Sequence[int], device: str | torch.device = "cpu", precisions: Sequence[str] | None =
    None, repeats: int = 10, min_sample_s: float | None = None, graph: bool = True, fp8_fast_accum:
    bool = False, clock_warmup_s: float = 2.0,
) -> list[dict[str, Any]]:  # fmt: skip
    """Square products ``n x n x n`` for each size and the size minus one, in each precision.

    Each ``n`` next to ``n - 1`` shows what alignment is worth; on a GPU, FP16 products run for
    ``clock_warmup_s`` first, so that no row is timed while the clocks ramp up.

    Parameters
    ----------
    sizes : sequence of int
        The sizes ``n`` (each at least 2).
    precisions : sequence of str, optional
        Precisions of :func:`measure_gemm` (default: all five, strict FP32 first).
    device, repeats, min_sample_s, graph, fp8_fast_accum
        As for :func:`measure_gemm`.
    clock_warmup_s : float, optional
        Seconds of FP16 products on a GPU before the first row (0: none).

    Returns
    -------
    list of dict
        One row per size and precision (:func:`measure_gemm`).
    """
    rows = []
    _ramp_clocks(device, clock_warmup_s)
    for size in sizes:
        for n in (size, size - 1):
            for p in precisions or list(_GEMMS):
                rows.append(
                    measure_gemm(p, n, n, n, device, repeats, min_sample_s, graph, fp8_fast_accum)
                )
                if _is_cuda(device):
                    torch.cuda.empty_cache()
    return rows
