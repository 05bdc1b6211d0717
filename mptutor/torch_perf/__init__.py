"""PyTorch performance helpers: the TF32 switch, GPU-correct timing, GEMMs, training steps.

The code that the Tensor Core notebook and the scripts in ``benchmarks/`` share, so that live
and recorded figures come from the same functions. This package imports PyTorch (``import
mptutor`` does not)::

    from mptutor import torch_perf as tp

Precisions and training modes are named as in :data:`mptutor.formats.PRECISIONS` (``"fp32"`` is
strict FP32, TF32 off; ``"fp8-e4m3"`` reads as ``"fp8_e4m3"``). The code lives in three private
modules:

``_timing``
    :func:`tf32` (a context manager) and :func:`tf32_settings` switch TF32 for FP32 matrix
    products and cuDNN convolutions together; :func:`time_calls` times back-to-back calls, on a
    GPU from a CUDA graph timed with CUDA events.
``_gemm``
    :func:`measure_gemm` and :func:`gemm_sweep` time ``A @ B`` in strict FP32, TF32, FP16, BF16
    and FP8 E4M3; :func:`gemm_flops` counts their work.
``_training``
    :func:`measure_training` times a training step in strict FP32, TF32, AMP FP16 and AMP BF16;
    :func:`conv_step_times` times a convolution's first and later calls, ``cudnn.benchmark`` off
    or on, in a fresh process.
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
