"""PyTorch performance helpers: the TF32 switch, GPU-correct timing, GEMMs, training steps.

The code that the Tensor Core notebook and ``benchmarks/`` share, so that live and recorded
figures come from the same functions; it imports PyTorch (``import mptutor`` does not).
Precisions and training modes are named as in :data:`mptutor.formats.PRECISIONS` (``"fp32"``
is strict FP32, TF32 off). ``_timing`` holds :func:`tf32`, :func:`tf32_settings` and
:func:`time_calls` (back-to-back calls, on a GPU replayed from a CUDA graph timed with CUDA
events); ``_gemm`` :func:`gemm_flops`, :func:`measure_gemm` and :func:`gemm_sweep`;
``_training`` :func:`measure_training` and :func:`conv_step_times`.
"""

from mptutor.torch_perf._gemm import gemm_flops, gemm_sweep, measure_gemm
from mptutor.torch_perf._timing import tf32, tf32_settings, time_calls
from mptutor.torch_perf._training import conv_step_times, measure_training

__all__ = [
    "tf32",
    "tf32_settings",
    "time_calls",
    "gemm_flops",
    "measure_gemm",
    "gemm_sweep",
    "measure_training",
    "conv_step_times",
]
