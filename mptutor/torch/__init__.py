"""PyTorch helpers: FP32 master weights, debugging, profiling, FP8, FP4, several processes, a model.

Use it the d2l way (this package imports PyTorch; ``import mptutor`` does not)::

    from mptutor import torch as mpt

    model = mpt.network_to_half(model).to(mpt.device())

The notebooks write each mechanism out by hand first; these are the tested versions. Timing and
the TF32 switch are in :mod:`mptutor.torch_perf`.
"""

import torch

from mptutor import hardware
from mptutor.torch._decoder import Decoder, MarkovChain, next_token_loss
from mptutor.torch._distributed import WorkerError, Workers, choose_backend, launch
from mptutor.torch._fp4 import FP4Linear, hadamard_transform, nvfp4_fake_quantize, to_fp4
from mptutor.torch._fp8 import FP8Linear, scaled_mm_accumulation, scaled_mm_kernel, to_fp8
from mptutor.torch._headroom import headroom, stochastic_round
from mptutor.torch._master_weights import (
    MasterWeightOptimizer,
    bn_to_float,
    gradient_stats,
    master_params_to_model_params,
    model_grads_to_master_grads,
    network_to_half,
    prep_param_lists,
)
from mptutor.torch._nonfinite import find_nonfinite
from mptutor.torch._tensor_cores import count_host_syncs, tensor_core_audit, tensor_core_kernels
from mptutor.torch._torchao import import_torchao

__all__ = [
    "device",
    "prep_param_lists", "model_grads_to_master_grads", "master_params_to_model_params",
    "MasterWeightOptimizer", "bn_to_float", "network_to_half", "gradient_stats",
    "tensor_core_kernels", "count_host_syncs", "find_nonfinite", "tensor_core_audit",
    "Workers", "launch", "WorkerError", "choose_backend",
    "headroom", "stochastic_round",
    "FP8Linear", "to_fp8", "scaled_mm_accumulation", "scaled_mm_kernel",
    "FP4Linear", "to_fp4", "nvfp4_fake_quantize", "hadamard_transform",
    "import_torchao", "Decoder", "MarkovChain", "next_token_loss",
]  # fmt: skip


def device() -> str:
    """Return ``"cuda"`` if PyTorch sees a GPU not hidden by ``MPTUTOR_DEVICE``, else ``"cpu"``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu``, ``cuda`` or nothing.
    """
    if hardware._device_override() == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
