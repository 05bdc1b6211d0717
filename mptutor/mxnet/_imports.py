"""MXNet (and tqdm) imported once for the whole package, with their import-time noise hidden.

Every other module of :mod:`mptutor.mxnet` takes MXNet from here, so the warning filters below
stand in one place only.

MXNet 1.9.1, the last release, emits ``DeprecationWarning`` from its own import code with the
NumPy 1.23 it needs (``np.bool``, the NEP 32 financial functions, distutils' ``Version``
classes). They concern MXNet's code, not the caller's, and cannot be acted upon: exactly those
are hidden, during the import only.

In Jupyter without ipywidgets, ``tqdm.auto`` warns on import that it falls back to a text bar;
the text bar works, and :func:`mptutor.mxnet.train` shows none unless asked
(``progress=True``), so that note is hidden too.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    for _message in (
        r"`np\.bool` is a deprecated alias",
        r"In accordance with NEP 32",
        r"distutils Version classes are deprecated",
    ):
        warnings.filterwarnings("ignore", message=_message, category=DeprecationWarning)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.contrib import amp
    from mxnet.gluon.data.vision import ImageFolderDataset, transforms
    from mxnet.gluon.model_zoo import vision

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    from tqdm.auto import tqdm

__all__ = ["mx", "autograd", "gluon", "amp", "ImageFolderDataset", "transforms", "vision", "tqdm"]
