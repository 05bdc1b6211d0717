"""mptutor: helpers for the mixed-precision training notebooks.

Importing ``mptutor`` imports no deep-learning framework. The framework helpers live in one
module per framework and are imported by name when you want them::

    from mptutor import formats, hardware, plots     # framework-free
    from mptutor import torch as mpt                 # imports PyTorch
    from mptutor import mxnet as mmx                 # imports MXNet

Modules
-------
Framework-free (NumPy and ml_dtypes only):

formats
    FP32, FP16, BF16 and FP8 formats: range, spacing, rounding, lost updates; one vocabulary of
    dtype spellings (``SPELLINGS``, ``dtype_name``); the MX element formats FP6, FP4 and E8M0.
fp8
    FP8 scaling: scales from amax, saturating quantize, delayed scaling; MX and NVFP4 blocks.
hardware
    What this machine can do (GPU, Tensor Cores, BF16/FP8), package versions, and the one reader
    of ``MPTUTOR_DEVICE``; asks a framework only if the caller has already imported it.
scaling
    Static and dynamic loss scaling as a framework-free state machine, and the ``LossScaler``
    protocol that every framework adapter accepts.
gradients
    Gradient statistics against a format: zeros, infs, what would underflow.
kernels
    Which GPU kernel names are Tensor Core kernels (pure string rules).
plots
    matplotlib figures drawn from what the other modules compute.
data
    Caltech101 through a checksum-verified download; a small digits image folder for CPUs.
bench
    Timing a function; reading the measurement records that ``benchmarks/`` wrote.
table
    A small table that prints as text and renders as HTML in a notebook.
atomic
    Files and folders written atomically: complete or absent, never half-written.
notebooks
    Execute notebooks into a build folder with HTML copies and a summary.

One adapter per framework, imported by name, with the same names for the same things
(``device()``/``context()``, ``gradient_stats``, ``LossScaledStep``):

torch
    PyTorch: device choice, FP32 master weights, BatchNorm in FP32, gradient statistics,
    ``find_nonfinite``, ``tensor_core_audit``, Tensor Core kernel profiles, several processes.
torch_perf
    PyTorch measurements: the TF32 switch, GEMM sweeps, training-step and scaler timings.
tensorflow
    TensorFlow and Keras: device choice, a loss-scaled ``GradientTape`` step, gradient statistics.
keras_cnn
    The Keras track's CNN experiment: models, FLOP and byte counts, timing, records (imports
    Keras, not TensorFlow).
mxnet
    MXNet Gluon: context, networks, loaders, training loop, checkpoints, loss scaling.
"""

from mptutor import formats, gradients, hardware, plots, scaling
from mptutor.table import Table

__version__ = "0.1.0"

__all__ = ["formats", "gradients", "hardware", "plots", "scaling", "Table", "__version__"]
