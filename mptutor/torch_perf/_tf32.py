"""The TF32 switch: FP32 matrix products and cuDNN convolutions on Tensor Cores, or strict FP32.

Through PyTorch's ``fp32_precision`` settings where they exist (PyTorch 2.9 and later), the older
``allow_tf32`` flags only where they do not; the two are never mixed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["tf32_settings", "set_tf32", "tf32"]


def _new_tf32_api() -> tuple[Any, Any] | None:
    """Return the objects carrying ``fp32_precision`` (cuBLAS, cuDNN convolutions), if any."""
    matmul = torch.backends.cuda.matmul
    conv = getattr(torch.backends.cudnn, "conv", None)
    try:
        matmul.fp32_precision  # noqa: B018 - probing the attribute
        conv.fp32_precision  # noqa: B018
    except AttributeError:
        return None
    return matmul, conv


def tf32_settings() -> dict[str, Any]:
    """PyTorch's current TF32 settings for FP32 matrix products and cuDNN convolutions.

    Returns
    -------
    dict
        ``api``: ``"fp32_precision"`` (PyTorch 2.9 and later) or ``"allow_tf32"`` (older);
        ``matmul`` and ``cudnn_conv``: the raw settings, ``"ieee"``, ``"tf32"`` or ``"none"``
        (inherit the global setting) with the first API, booleans with the second.
    """
    new = _new_tf32_api()
    if new is not None:
        matmul, conv = new
        return {
            "api": "fp32_precision",
            "matmul": matmul.fp32_precision,
            "cudnn_conv": conv.fp32_precision,
        }
    return {
        "api": "allow_tf32",
        "matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_conv": bool(torch.backends.cudnn.allow_tf32),
    }


def _restore_tf32(settings: dict[str, Any]) -> None:
    new = _new_tf32_api()
    if settings["api"] == "fp32_precision" and new is not None:
        new[0].fp32_precision = settings["matmul"]
        new[1].fp32_precision = settings["cudnn_conv"]
    else:
        torch.backends.cuda.matmul.allow_tf32 = bool(settings["matmul"])
        torch.backends.cudnn.allow_tf32 = bool(settings["cudnn_conv"])


def set_tf32(enabled: bool) -> dict[str, Any]:
    """Allow TF32 for FP32 matrix products and cuDNN convolutions, or forbid it (strict FP32).

    Uses ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` (``"tf32"`` or ``"ieee"``) where this PyTorch
    has them, so no deprecation warning is raised; the older ``allow_tf32`` flags only where it
    does not. The two APIs are never mixed. It changes nothing on a CPU: TF32 is a GPU format.

    Parameters
    ----------
    enabled : bool
        ``True`` for TF32 Tensor Core math, ``False`` for IEEE FP32.

    Returns
    -------
    dict
        The settings before the change (as :func:`tf32_settings` gives them).
    """
    before = tf32_settings()
    new = _new_tf32_api()
    if new is not None:
        mode = "tf32" if enabled else "ieee"
        new[0].fp32_precision = mode
        new[1].fp32_precision = mode
    else:  # PyTorch older than the fp32_precision settings
        torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
        torch.backends.cudnn.allow_tf32 = bool(enabled)
    return before


@contextlib.contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """Context manager: :func:`set_tf32` inside, the previous settings restored on exit.

    Parameters
    ----------
    enabled : bool
        ``True`` for TF32, ``False`` for strict (IEEE) FP32.

    Yields
    ------
    None
        Control returns to the ``with`` block while the setting holds.

    Examples
    --------
    >>> with tf32(False):
    ...     tf32_settings()["matmul"] in ("ieee", False)
    True
    """
    before = set_tf32(enabled)
    try:
        yield
    finally:
        _restore_tf32(before)
