"""The Keras CNN experiment of notebook keras/02 and ``benchmarks/keras_cnn_experiment.py``.

The post's CNN and a changed one, their layers' costs counted from the shapes, and a training
step timed and profiled layer by layer. It imports Keras on the active backend
(``KERAS_BACKEND``), and TensorFlow only when that is the backend.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before Keras loads TensorFlow, if it does

from mptutor.keras_cnn._costs import (  # noqa: E402
    DATASHEETS,
    layer_costs,
    layer_flops,
    roofline,
    roofline_table,
    tensor_core_check,
    training_flops,
)
from mptutor.keras_cnn._models import CONVOLUTIONS, PadChannels, build_model, make_batch  # noqa: E402
from mptutor.keras_cnn._timing import block, plot_step_times, profile_layers, time_step  # noqa: E402

__all__ = [
    "CONVOLUTIONS", "PadChannels", "build_model", "make_batch",
    "DATASHEETS", "layer_flops", "layer_costs", "training_flops", "tensor_core_check",
    "roofline", "roofline_table",
    "block", "time_step", "profile_layers", "plot_step_times",
]  # fmt: skip
