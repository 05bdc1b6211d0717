"""Which CUDA kernels ran on Tensor Cores, told from their names alone (framework-free).

A profiler (PyTorch's, Nsight Systems, TensorFlow's) reports kernel names;
:func:`mptutor.torch.tensor_core_kernels` judges them here.

>>> is_tensor_core_kernel("volta_h884gemm_64x64_ldg8_nn"), is_tensor_core_kernel("sgemm_nn")
(True, False)
"""

from __future__ import annotations

import re

__all__ = ["is_tensor_core_kernel"]

# MMA instruction shapes in cuBLAS/cuDNN kernel names: Volta "884", Turing "1688",
# Ampere and later "16816" (also 1684, 16832 and int8 8816/8832), as in "s884gemm", "h1688gemm".
_MMA_SHAPE = re.compile(r"[a-z](884|1688|1684|16816|16832|8816|8832)(gemm|cudnn|_|$)")
# Names that say "Tensor Core" outright: CUTLASS tensorop/wmma, Hopper warpgroup MMA, xmma tiles.
_TC_WORDS = ("tensorop", "wmma", "wgmma", "gmma", "hmma", "imma", "tensor16x8", "tensor8x8")
# Low-precision operand types in GEMM/convolution kernel names (xmma, cutlass, cudnn, sm80+).
_TC_TYPES = re.compile(
    r"(?<![a-z])(b?f16|tf32|e4m3|e5m2|fp8|s8|i8)(?![0-9])|(?<=[0-9x_])(b?f16|tf32)"
)
_GEMM_LIKE = ("gemm", "xmma", "conv", "fprop", "dgrad", "wgrad", "nvjet", "cutlass")
# cuBLAS "nvjet" kernels (Hopper and later) spell the types as letters: nvjet_hsh_..., nvjet_tst_...
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]{3,5})_")


def is_tensor_core_kernel(name: str) -> bool:
    """Whether a CUDA kernel name denotes a Tensor Core kernel.

    Told by MMA shapes (``884``, ``1688``, ``16816``), words (``tensorop``, ``wmma``,
    ``wgmma``), 16-bit/TF32/FP8/INT8 operand types in GEMM and convolution kernels, or
    ``nvjet`` type letters; not ``sgemm``, ``ffma`` or element-wise kernels.

    Parameters
    ----------
    name : str
        The kernel name as the profiler reports it.

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a kernel name (str), got {type(name).__name__}")
    low = name.lower()
    if _MMA_SHAPE.search(low) or any(word in low for word in _TC_WORDS):
        return True
    if not any(word in low for word in _GEMM_LIKE):
        return False
    nvjet = _NVJET.search(low)
    if nvjet:
        return "tf32" in low or any(c in nvjet.group(1) for c in "hbtqe")
    if "ffma" in low:
        return False
    return bool(_TC_TYPES.search(low))
