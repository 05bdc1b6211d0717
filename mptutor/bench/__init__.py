"""Timing, measurement records and the project's performance targets.

Framework-free: this package never imports a deep-learning framework. A CUDA device is
synchronised through PyTorch only when the caller has already imported it (it is then in
``sys.modules``). Results are saved as JSON under ``data/results/`` with what is needed to trust
them later: the machine (:func:`mptutor.hardware.report`), package versions, date, command, git
commit and the raw timings. :data:`TARGETS` states the project's performance targets, and
:func:`check_targets` holds recorded runs against them.

The targets, as a Markdown table (for the README)::

    python -m mptutor.bench
"""

from mptutor.bench._cli import add_record_options
from mptutor.bench._records import (
    RESULTS_DIR,
    find_records,
    load_result,
    provenance,
    record_device,
    record_kind,
    save_result,
)
from mptutor.bench._targets import (
    TARGET_GEMM_SIZE,
    TARGETS,
    Target,
    check_targets,
    record_figures,
    targets_markdown,
    targets_table,
)
from mptutor.bench._timing import Timing, time_fn

__all__ = [
    "Timing",
    "time_fn",
    "save_result",
    "load_result",
    "RESULTS_DIR",
    "TARGET_GEMM_SIZE",
    "Target",
    "TARGETS",
    "targets_table",
    "targets_markdown",
    "record_kind",
    "record_device",
    "find_records",
    "provenance",
    "record_figures",
    "check_targets",
    "add_record_options",
]
