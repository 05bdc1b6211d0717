"""Floating-point formats used in mixed-precision training, through NumPy and ml_dtypes.

Every fact here is read from the format's own definition (``ml_dtypes.finfo``) or computed by
rounding in that format, so the notebooks can show numbers instead of quoting them.

Formats can be named by a short name (``"fp16"``), NumPy's name (``"float16"``), another
spelling (``"half"``), a NumPy or ml_dtypes dtype, a framework dtype such as ``torch.float16``
or ``tf.bfloat16`` (matched by name, so no framework is imported here), or an array or tensor
of that dtype. :data:`SPELLINGS` is the one table of these spellings; :func:`dtype_name` gives
the dtype of anything one plain name from it. :data:`PRECISIONS` names the ways of computing
the lessons compare (strict FP32, TF32, FP16, BF16, FP8, the AMP modes), one spelling each.

Examples
--------
>>> from mptutor import formats
>>> formats.get("fp16").max
65504.0
>>> float(formats.ulp(32768, "fp16"))
32.0
>>> bool(formats.update_survives(1.0, 1e-4, "fp16"))
False
"""

from mptutor.formats._format import FORMAT_NAMES, Format, all_formats, get, table
from mptutor.formats._names import PRECISIONS, SPELLINGS, dtype_name, precision
from mptutor.formats._rounding import (
    always_lost_update_ratio,
    lost_update_ratio,
    representable_values,
    round_to,
    ulp,
    update_survives,
)

__all__ = [
    "Format",
    "FORMAT_NAMES",
    "SPELLINGS",
    "PRECISIONS",
    "precision",
    "get",
    "all_formats",
    "ulp",
    "round_to",
    "update_survives",
    "lost_update_ratio",
    "always_lost_update_ratio",
    "representable_values",
    "table",
    "dtype_name",
]
