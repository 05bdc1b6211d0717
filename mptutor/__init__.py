"""mptutor: helpers for the mixed-precision training notebooks.

Importing ``mptutor`` imports no deep-learning framework; each framework has its own module,
imported by name::

    from mptutor import formats, hardware, plots     # framework-free
    from mptutor import torch as mpt                 # imports PyTorch

Framework-free (NumPy and ml_dtypes): ``formats`` (FP32, FP16, BF16, FP8 and the block formats:
range, spacing, rounding, lost updates), ``fp8`` (FP8 scales, delayed scaling, MX and NVFP4
blocks), ``scaling`` (static and dynamic loss scaling), ``gradients`` (gradient statistics
against a format), ``hardware`` (what this machine can do), ``kernels`` (Tensor Core kernel
names), ``plots`` (matplotlib figures), ``table`` (a table for notebooks), ``bench`` (timing
and the benchmark records), ``data`` (the datasets), ``notebooks`` (``python -m
mptutor.notebooks`` runs notebooks).

One module per framework: ``torch`` and ``torch_perf`` (PyTorch and its measurements),
``tensorflow`` and ``keras_cnn`` (TensorFlow and Keras), ``mxnet`` (MXNet Gluon).
"""

# `import mptutor` loads the framework-free modules most lessons use.
from mptutor import formats, gradients, hardware, plots, scaling  # noqa: F401

__version__ = "0.1.0"
