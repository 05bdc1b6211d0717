"""PyTorch performance helpers: TF32 switches, GEMMs by precision, timing, training steps.

One home for the code that the benchmarks (``benchmarks/gemm_sweep.py``,
``benchmarks/resnet50_amp.py``, ``benchmarks/scaler_overhead.py``) and the Tensor Core notebook
share. This package imports PyTorch (``import mptutor`` does not)::

    from mptutor import torch_perf as tp

This file only gathers the public names. The code lives in private modules, one per job:

``_tf32``
    :func:`set_tf32`, the context manager :func:`tf32` and :func:`tf32_settings` switch TF32 for
    FP32 matrix products and cuDNN convolutions together, through PyTorch's ``fp32_precision``
    settings where they exist (PyTorch 2.9 and later) and the older ``allow_tf32`` flags only
    where they do not.
``_timing``
    :func:`time_calls` times back-to-back calls. On a GPU each sample replays a CUDA graph of
    enough calls to take at least a few milliseconds and is timed with CUDA events, so that a
    small product is not measured by the rate at which the host launches kernels. Also
    :func:`is_cuda`, :func:`synchronize`, :data:`TIMING_METHODS`, :class:`CallTiming`.
``_gemm``
    :data:`PRECISIONS`, :func:`why_not`, :func:`make_product`, :func:`measure_gemm` and
    :func:`gemm_sweep` build and time ``A @ B`` in strict FP32, TF32, FP16, BF16 and FP8 E4M3;
    :func:`gemm_flops` counts their work.
``_training``
    :data:`TRAINING_MODES` and :func:`measure_training` time one training step in strict FP32,
    TF32, AMP FP16 (with ``torch.amp.GradScaler``) and AMP BF16; :func:`conv_step_times` times a
    convolution's first and later calls with ``cudnn.benchmark`` off or on, in a fresh process;
    :func:`stride_mismatches` checks that FP16 weights and their FP32 masters share a layout.

Saving the benchmarks' records, and the project's targets, belong to ``benchmarks/``.
"""

from mptutor.torch_perf._gemm import (
    PRECISIONS,
    Precision,
    gemm_flops,
    gemm_sweep,
    make_product,
    measure_gemm,
    why_not,
)
from mptutor.torch_perf._tf32 import set_tf32, tf32, tf32_settings
from mptutor.torch_perf._timing import (
    TIMING_METHODS,
    CallTiming,
    DeviceLike,
    is_cuda,
    synchronize,
    time_calls,
)
from mptutor.torch_perf._training import (
    TRAINING_MODES,
    TrainingMode,
    conv_step_times,
    measure_training,
    stride_mismatches,
)

__all__ = [
    "DeviceLike",
    "is_cuda",
    "synchronize",
    "tf32_settings",
    "set_tf32",
    "tf32",
    "Precision",
    "PRECISIONS",
    "gemm_flops",
    "why_not",
    "make_product",
    "TIMING_METHODS",
    "CallTiming",
    "time_calls",
    "measure_gemm",
    "gemm_sweep",
    "TrainingMode",
    "TRAINING_MODES",
    "measure_training",
    "conv_step_times",
    "stride_mismatches",
]
