"""The Keras CNN experiment: the models, their costs, timing, profiling and the records.

The Keras track's second notebook and ``benchmarks/keras_cnn_experiment.py`` both use this
package, so that the live figures of the notebook and the recorded GPU figures of the script
come from the same models and the same code::

    from mptutor import keras_cnn as kc

    model = kc.build_model("blog", 256, "mixed_float16")
    kc.layer_costs(model)                     # FLOPs, bytes, arithmetic intensity per layer

It imports Keras, on whichever backend is active (``KERAS_BACKEND``: ``tensorflow``, ``torch``
or ``jax``), and imports TensorFlow only when TensorFlow is that backend: a GPU host with
PyTorch and Keras but no TensorFlow runs it as it is. ``import mptutor`` does not import it.
It sets ``TF_CPP_MIN_LOG_LEVEL=3`` (unless already set) before Keras loads, which keeps
TensorFlow's C++ logs quiet on the TensorFlow backend.

This file only gathers the public names. The code lives in private modules, one per job:

``_models``
    :func:`build_model` (the post's ``blog`` CNN and the ``changed`` one, under a dtype
    policy), :class:`PadChannels`, :func:`make_batch`.
``_costs``
    Counts from the layer shapes: :func:`layer_flops`, :func:`layer_costs`,
    :func:`training_passes`, :func:`training_flops`, :func:`tensor_core_check`, and a roofline
    estimate from NVIDIA's data sheets (:data:`DATASHEETS`, :func:`roofline`,
    :func:`roofline_table`).
``_backend``
    What differs between backends: :func:`backend_version`, :func:`device_kind`,
    :func:`set_tf32`, :func:`block` (wait for the device), :func:`detach`,
    :func:`free_memory`.
``_profiling``
    :func:`time_step` (``train_on_batch`` through :func:`mptutor.bench.time_fn`),
    :func:`profile_layers` (forward and backward per layer, the device waited for) and
    :func:`kernel_profile` (CUDA kernels of a step, PyTorch backend only).
``_records``
    The records of ``benchmarks/keras_cnn_experiment.py --out``: :func:`find_records`,
    :func:`provenance`, :func:`speedup_rows`, :func:`tensor_core_shares`, and
    :func:`plot_step_times` for live and recorded step times alike.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from mptutor.keras_cnn._backend import (  # noqa: E402
    backend_version,
    block,
    detach,
    device_kind,
    free_memory,
    set_tf32,
)
from mptutor.keras_cnn._costs import (  # noqa: E402
    DATASHEETS,
    FLOPS_PER_VALUE,
    PRECISIONS,
    layer_costs,
    layer_flops,
    roofline,
    roofline_table,
    tensor_core_check,
    training_flops,
    training_passes,
)
from mptutor.keras_cnn._models import (  # noqa: E402
    CLASSES,
    CONVOLUTIONS,
    MODELS,
    PadChannels,
    build_model,
    make_batch,
)
from mptutor.keras_cnn._profiling import (  # noqa: E402
    kernel_profile,
    profile_layers,
    time_step,
    timing_device,
)
from mptutor.keras_cnn._records import (  # noqa: E402
    EXPERIMENT,
    VARIANT_ORDER,
    find_records,
    plot_step_times,
    provenance,
    speedup_rows,
    step_time_runs,
    tensor_core_shares,
)

__all__ = [
    "CLASSES",
    "CONVOLUTIONS",
    "MODELS",
    "PadChannels",
    "build_model",
    "make_batch",
    "FLOPS_PER_VALUE",
    "DATASHEETS",
    "PRECISIONS",
    "layer_flops",
    "layer_costs",
    "training_passes",
    "training_flops",
    "tensor_core_check",
    "roofline",
    "roofline_table",
    "backend_version",
    "device_kind",
    "set_tf32",
    "block",
    "detach",
    "free_memory",
    "timing_device",
    "time_step",
    "profile_layers",
    "kernel_profile",
    "EXPERIMENT",
    "VARIANT_ORDER",
    "find_records",
    "provenance",
    "speedup_rows",
    "tensor_core_shares",
    "step_time_runs",
    "plot_step_times",
]
