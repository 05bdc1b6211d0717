"""PyTorch performance helpers: the TF32 switch, GPU-correct timing, GEMMs, training steps.

The code the Tensor Core notebook and ``benchmarks/`` share, so that live and recorded figures
come from the same functions. Precisions and training modes are named as in
:data:`mptutor.formats.PRECISIONS` (``"fp32"`` is strict FP32, TF32 off).
"""

from mptutor.torch_perf._gemm import gemm_flops, gemm_sweep, measure_gemm
from mptutor.torch_perf._timing import tf32, tf32_settings, time_calls
from mptutor.torch_perf._training import conv_step_times, measure_training

__all__ = [
    "tf32", "tf32_settings", "time_calls",
    "gemm_flops", "measure_gemm", "gemm_sweep", "measure_training", "conv_step_times",
]  # fmt: skip
