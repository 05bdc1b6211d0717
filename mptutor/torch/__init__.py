"""PyTorch helpers: FP32 master weights, loss scaling, BatchNorm in FP32, debugging, profiling.

Use it the d2l way (this package imports PyTorch; ``import mptutor`` does not)::

    from mptutor import torch as mpt

    model = mpt.network_to_half(model).to(mpt.device())

The notebooks write each mechanism out by hand first; these helpers are the tested versions of
the same code, named after the functions of the GTC 2018 talk "Training Neural Networks with
Mixed Precision" (``prep_param_lists``, ``model_grads_to_master_grads``,
``master_params_to_model_params``, ``BN_convert_float``) and bundled in
:class:`MasterWeightOptimizer`. For everyday training prefer PyTorch's own ``torch.autocast``
with ``torch.amp.GradScaler`` (notebook 05).

This file only gathers the public names. The code lives in private modules, one per job:

``_device``
    :func:`device`: ``"cuda"`` or ``"cpu"``, honouring ``MPTUTOR_DEVICE``.
``_master_weights``
    :func:`prep_param_lists`, :func:`model_grads_to_master_grads`,
    :func:`master_params_to_model_params`, :class:`MasterWeightOptimizer`.
``_conversion``
    :func:`bn_to_float`, :func:`network_to_half`.
``_gradients``
    :func:`gradient_stats` of a model's ``.grad`` (the PyTorch side of
    :mod:`mptutor.gradients`).
``_profiling``
    :func:`tensor_core_kernels` (kernel names judged by :mod:`mptutor.kernels`) and
    :func:`count_host_syncs`; both need a CUDA GPU.
``_nonfinite``
    :func:`find_nonfinite`: the first module whose output or gradient held an inf or NaN.
``_tensor_core_audit``
    :func:`tensor_core_audit`: layer sizes that keep FP16/BF16 GEMMs off Tensor Cores.
``_distributed``
    :class:`Workers` and :func:`launch`: functions run in a few ``torch.distributed``
    processes on one machine (notebook 08).
``_fp8``
    :class:`FP8Linear` and :func:`to_fp8`: linear layers whose products run in FP8 through
    ``torch._scaled_mm``, with none, current or delayed scaling (notebook 11).
``_headroom``
    :func:`headroom`: each module's largest output relative to a format's largest value
    (notebook 09); :func:`stochastic_round` to bfloat16 or float16 (notebook 10).

Timing, the TF32 switch, GEMM sweeps and training-step measurements are in
:mod:`mptutor.torch_perf`.
"""

from mptutor.torch._conversion import bn_to_float, network_to_half
from mptutor.torch._device import device
from mptutor.torch._distributed import (
    DistributedRun,
    WorkerError,
    Workers,
    choose_backend,
    launch,
)
from mptutor.torch._fp8 import FP8Linear, to_fp8
from mptutor.torch._gradients import gradient_stats
from mptutor.torch._headroom import Headroom, headroom, stochastic_round
from mptutor.torch._master_weights import (
    LOW_PRECISION_DTYPES,
    MasterWeightOptimizer,
    master_params_to_model_params,
    model_grads_to_master_grads,
    prep_param_lists,
)
from mptutor.torch._nonfinite import NonFiniteRecord, find_nonfinite
from mptutor.torch._profiling import count_host_syncs, tensor_core_kernels
from mptutor.torch._tensor_core_audit import ShapeIssue, TensorCoreAudit, tensor_core_audit

__all__ = [
    "device",
    "LOW_PRECISION_DTYPES",
    "prep_param_lists",
    "model_grads_to_master_grads",
    "master_params_to_model_params",
    "MasterWeightOptimizer",
    "bn_to_float",
    "network_to_half",
    "gradient_stats",
    "tensor_core_kernels",
    "count_host_syncs",
    "find_nonfinite",
    "NonFiniteRecord",
    "tensor_core_audit",
    "TensorCoreAudit",
    "ShapeIssue",
    "Workers",
    "launch",
    "DistributedRun",
    "WorkerError",
    "choose_backend",
    "headroom",
    "Headroom",
    "stochastic_round",
    "FP8Linear",
    "to_fp8",
]
