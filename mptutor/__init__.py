"""mptutor: helpers for the mixed-precision training notebooks.

Importing ``mptutor`` imports no deep-learning framework. The framework helpers live in one
module per framework and are imported by name when you want them::

    from mptutor import formats, hardware, plots     # framework-free
    from mptutor import torch as mpt                 # imports PyTorch
    from mptutor import mxnet as mmx                 # imports MXNet

Modules
-------
formats
    FP32, FP16, BF16 and FP8 formats: range, spacing, rounding, lost updates; one vocabulary of
    dtype names (``dtype_name``).
hardware
    What this machine can do (GPU, Tensor Cores, BF16/FP8) and package versions.
scaling
    Static and dynamic loss scaling as a framework-free state machine.
gradients
    Gradient statistics against a format: zeros, infs, what would underflow.
plots
    matplotlib figures drawn from what the other modules compute.
data
    Caltech101 through a checksum-verified download; a small digits image folder for CPUs.
bench
    Timing, measurement records with their provenance, the project's performance targets.
table, atomic, checks
    A small printable table; files and folders written atomically; argument checks.
torch, tensorflow, mxnet
    Framework helpers (master weights, loss scaling, BatchNorm in FP32, training loops).
notebooks
    Execute notebooks into a build folder with HTML copies and a summary.
"""

from mptutor import formats, gradients, hardware, plots, scaling
from mptutor.table import Table

__version__ = "0.1.0"

__all__ = ["formats", "gradients", "hardware", "plots", "scaling", "Table", "__version__"]
