"""mptutor: helpers for the mixed-precision training notebooks.

Importing ``mptutor`` imports no deep-learning framework. The framework helpers live in one
module per framework and are imported by name when you want them::

    from mptutor import formats, hardware, plots     # framework-free
    from mptutor import torch as mpt                 # imports PyTorch

Modules
-------
formats
    FP32, FP16, BF16 and FP8 formats: range, spacing, rounding, lost updates.
hardware
    What this machine can do (GPU, Tensor Cores, BF16/FP8) and package versions.
plots
    matplotlib figures drawn from what the other modules compute.
notebooks
    Execute notebooks into a build folder with HTML copies and a summary.
"""

from mptutor import formats, hardware, plots
from mptutor.table import Table

__version__ = "0.1.0"

__all__ = ["formats", "hardware", "plots", "Table", "__version__"]
