"""mptutor: helpers for the mixed-precision training notebooks.

Importing ``mptutor`` imports no deep-learning framework; each framework has its own module,
imported by name::

    from mptutor import formats, hardware, plots     # framework-free
    from mptutor import torch as mpt                 # imports PyTorch

The framework modules: ``torch`` and ``torch_perf`` (PyTorch and its measurements),
``tensorflow`` and ``keras_cnn`` (TensorFlow and Keras), ``mxnet`` (MXNet Gluon).
"""

# `import mptutor` loads the framework-free modules most lessons use.
from mptutor import formats, gradients, hardware, plots, scaling  # noqa: F401

__version__ = "0.1.0"
