"""Matrix products ``A @ B`` by precision (strict FP32, TF32, FP16, BF16, FP8) and their sweep."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mptutor.torch_perf._tf32 import tf32
from mptutor.torch_perf._timing import DeviceLike, is_cuda, time_calls

__all__ = [
    "Precision",
    "PRECISIONS",
    "gemm_flops",
    "why_not",
    "make_product",
    "measure_gemm",
    "gemm_sweep",
]


@dataclass(frozen=True)
class Precision:
    """A way to run ``C = A @ B`` and what it needs.

    Attributes
    ----------
    name : str
        ``"fp32-strict"``, ``"tf32"``, ``"fp16"``, ``"bf16"`` or ``"fp8-e4m3"``.
    dtype : torch.dtype
        The dtype of the inputs.
    tf32 : bool
        Whether TF32 is allowed while it runs (FP32 inputs on Tensor Cores).
    tensor_cores_from : tuple of int or None
        Compute capability from which Tensor Cores take it; ``None`` for strict FP32, which
        runs on the ordinary FP32 units by design.
    needs_capability : tuple of int or None
        Compute capability without which it is not measured on a GPU (TF32 and BF16 from
        Ampere, FP8 from Ada/Hopper); ``None`` when any CUDA GPU runs it.
    on_cpu : bool
        Whether it is measured on a CPU (TF32 and FP8 are measured on GPUs only).
    multiple_of : int
        Every dimension must be a multiple of this (16 for FP8 products).
    """

    name: str
    dtype: torch.dtype
    tf32: bool
    tensor_cores_from: tuple[int, int] | None
    needs_capability: tuple[int, int] | None
    on_cpu: bool
    multiple_of: int = 1


#: The precisions of the GEMM sweep, in the order they are shown.
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32-strict", torch.float32, False, None, None, True),
        Precision("tf32", torch.float32, True, (8, 0), (8, 0), False),
        Precision("fp16", torch.float16, False, (7, 0), None, True),
        Precision("bf16", torch.bfloat16, False, (8, 0), (8, 0), True),
        Precision("fp8-e4m3", torch.float8_e4m3fn, False, (8, 9), (8, 9), False, 16),
    )
}


def gemm_flops(m: int, n: int, k: int) -> int:
    """Floating-point operations of ``(m, k) @ (k, n)``: ``2*m*n*k`` (a multiply and an add).

    Parameters
    ----------
    m, n, k : int
        The dimensions.

    Returns
    -------
    int
        The operation count.
    """
    return 2 * m * n * k


def _precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; choose one of {list(PRECISIONS)}") from None


def why_not(precision: str, device: DeviceLike, shape: Sequence[int] = ()) -> str | None:
    """Say why a precision is not measured on this device (and shape), or ``None`` if it is.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    device : str or torch.device
        Where it would run.
    shape : sequence of int, optional
        The product's dimensions ``(m, n, k)``, checked against ``multiple_of``.

    Returns
    -------
    str or None
        The reason, or ``None`` when it can be measured.

    Raises
    ------
    ValueError
        For an unknown precision.
    """
    p = _precision(precision)
    if not is_cuda(device):
        return None if p.on_cpu else f"{p.name} is measured on CUDA GPUs only"
    major, minor = torch.cuda.get_device_capability(torch.device(device))
    if p.needs_capability is not None and (major, minor) < p.needs_capability:
        need = "{}.{}".format(*p.needs_capability)
        return f"{p.name} needs compute capability {need}, this GPU has {major}.{minor}"
    if p.name == "fp8-e4m3" and not hasattr(torch, "_scaled_mm"):
        return "this PyTorch has no torch._scaled_mm"
    if p.multiple_of > 1 and any(d % p.multiple_of for d in shape):
        return f"{p.name} products need dimensions divisible by {p.multiple_of}"
    return None


def make_product(
    precision: str,
    m: int,
    n: int,
    k: int,
    device: DeviceLike = "cpu",
    seed: int = 0,
    input_sets: int = 1,
    fp8_fast_accum: bool = False,
) -> Callable[[], torch.Tensor]:
    """Return a function that computes one product ``A @ B`` of the given precision and shape.

    The inputs are drawn once (standard normal, seeded) and converted to the precision's dtype.
    With ``input_sets`` above 1, that many pairs are drawn and the calls take them in turn, so
    that back-to-back calls do not find their inputs in the GPU's L2 cache. FP32 and TF32 share
    the same product: TF32 is a setting (:func:`tf32`) that must be on while the product runs
    (or is captured into a CUDA graph). FP8 E4M3 runs through ``torch._scaled_mm`` with ``A``
    row-major, ``B`` column-major (as the FP8 kernels require), per-tensor scales of 1, a BF16
    result, and FP32 accumulation unless ``fp8_fast_accum`` (``use_fast_accum``) is set.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    m, n, k : int
        ``A`` is ``(m, k)``, ``B`` is ``(k, n)``.
    device : str or torch.device, optional
        Where the inputs live.
    seed : int, optional
        Seed of the inputs.
    input_sets : int, optional
        Pairs of inputs that the calls cycle through.
    fp8_fast_accum : bool, optional
        ``use_fast_accum`` of ``torch._scaled_mm`` for FP8 (faster, less accurate sums).

    Returns
    -------
    callable
        Called with no arguments, returns ``C``.
    """
    p = _precision(precision)
    gen = torch.Generator(device=torch.device(device)).manual_seed(seed)
    pairs = []
    for _ in range(input_sets):
        a = torch.randn(m, k, device=device, generator=gen)
        b = torch.randn(k, n, device=device, generator=gen)
        if p.name == "fp8-e4m3":  # B column-major, as the FP8 kernels require
            a, b = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        elif p.dtype != torch.float32:
            a, b = a.to(p.dtype), b.to(p.dtype)
        pairs.append((a, b))
    order = itertools.cycle(pairs)
    if p.name != "fp8-e4m3":

        def product() -> torch.Tensor:
            a, b = next(order)
            return a @ b

        return product
    one = torch.ones((), device=device)

    def product_fp8() -> torch.Tensor:
        a, b = next(order)
        return torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fp8_fast_accum
        )

    return product_fp8


def _input_sets_past_l2(precision: str, m: int, n: int, k: int, device: DeviceLike) -> int:
    """Input pairs (1 to 64) whose bytes are twice the GPU's L2 cache; 1 on a CPU."""
    if not is_cuda(device):
        return 1
    l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0)
    pair = (m * k + k * n) * _precision(precision).dtype.itemsize
    return max(1, min(64, math.ceil(2 * l2 / pair))) if l2 else 1


def _ramp_clocks(device: DeviceLike, seconds: float) -> int:
    """Run FP16 products on a GPU for ``seconds`` so its clocks are up; return how many."""
    if not is_cuda(device) or seconds <= 0:
        return 0
    x = torch.randn(4096, 4096, device=device, dtype=torch.float16)
    done, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            x @ x  # noqa: B018 - the work is the point
        torch.cuda.synchronize(torch.device(device))
        done += 20
    return done


def measure_gemm(
    precision: str,
    m: int,
    n: int,
    k: int,
    device: DeviceLike = "cpu",
    repeats: int = 10,
    min_sample_s: float | None = None,
    graph: bool = True,
    fp8_fast_accum: bool = False,
) -> dict[str, Any]:
    """Time one product shape in one precision; a row of a GEMM sweep.

    TF32 is switched on for ``"tf32"`` and off for every other precision while the product is
    built, warmed up, captured and timed (:func:`tf32`), then restored. On a GPU the calls cycle
    through enough input pairs to fill twice the L2 cache (:func:`_input_sets_past_l2`), so a
    small product is not timed on inputs the cache already holds.

    Parameters
    ----------
    precision : str
        A key of :data:`PRECISIONS`.
    m, n, k : int
        The product's dimensions.
    device : str or torch.device, optional
        Where it runs.
    repeats : int, optional
        Timed samples.
    min_sample_s : float, optional
        Shortest sample (see :func:`time_calls`).
    graph : bool, optional
        Use a CUDA graph on a GPU.
    fp8_fast_accum : bool, optional
        ``use_fast_accum`` for FP8 (see :func:`make_product`).

    Returns
    -------
    dict
        ``precision, m, n, k`` and either ``skipped`` (the reason) or ``seconds`` (median per
        product), ``tflops``, ``input_sets``, ``timing`` (method, calls per sample, raw times);
        FP8 rows also ``use_fast_accum``.
    """
    p = _precision(precision)
    row: dict[str, Any] = {"precision": precision, "m": m, "n": n, "k": k}
    if p.name == "fp8-e4m3":
        row["use_fast_accum"] = fp8_fast_accum
    reason = why_not(precision, device, (m, n, k))
    if reason is not None:
        return {**row, "skipped": reason}
    sets = _input_sets_past_l2(precision, m, n, k, device)
    with tf32(p.tf32):
        product = make_product(
            precision, m, n, k, device, input_sets=sets, fp8_fast_accum=fp8_fast_accum
        )
        try:
            timing = time_calls(
                product, device, repeats=repeats, min_sample_s=min_sample_s, graph=graph
            )
        except RuntimeError as err:  # torch._scaled_mm is a private API and may refuse
            if p.name != "fp8-e4m3":
                raise
            return {**row, "skipped": f"torch._scaled_mm failed: {str(err).splitlines()[0]}"}
    seconds = timing.median_s
    return {
        **row,
        "seconds": seconds,
        "tflops": gemm_flops(m, n, k) / seconds / 1e12,
        "input_sets": sets,
        "timing": timing.as_dict(),
    }


def gemm_sweep(
    sizes: Sequence[int],
    device: DeviceLike = "cpu",
    precisions: Sequence[str] | None = None,
    repeats: int = 10,
    min_sample_s: float | None = None,
    graph: bool = True,
    fp8_fast_accum: bool = False,
    clock_warmup_s: float = 2.0,
) -> list[dict[str, Any]]:
    """Square products ``n x n x n`` for each size and the size minus one, in each precision.

    Each size ``n`` is measured next to ``n - 1``: when ``n`` is a multiple of 8, the pair
    shows what alignment is worth. On a GPU, FP16 products run for ``clock_warmup_s`` first
    (:func:`_ramp_clocks`), so that the first rows are not timed while the clocks ramp up.

    Parameters
    ----------
    sizes : sequence of int
        The sizes ``n`` (each at least 2).
    device : str or torch.device, optional
        Where the products run.
    precisions : sequence of str, optional
        Keys of :data:`PRECISIONS` (default: all).
    repeats, min_sample_s, graph, fp8_fast_accum
        As in :func:`measure_gemm`.
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
            for precision in precisions or list(PRECISIONS):
                rows.append(
                    measure_gemm(
                        precision, n, n, n, device, repeats, min_sample_s, graph, fp8_fast_accum
                    )
                )
                if is_cuda(device):
                    torch.cuda.empty_cache()
    return rows
