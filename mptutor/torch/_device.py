"""Where PyTorch work should run: the GPU when there is one and it is not hidden, else the CPU."""

from __future__ import annotations

import torch

from mptutor import hardware

__all__ = ["device"]


def device() -> str:
    """Return ``"cuda"`` when PyTorch sees a CUDA GPU that ``MPTUTOR_DEVICE`` does not hide.

    d2l's ``try_gpu`` idea, with this project's override: ``MPTUTOR_DEVICE=cpu`` forces the CPU
    (read through :func:`mptutor.hardware._device_override`, the one place that reads it). Asking
    for ``cuda`` cannot conjure a GPU: without one the answer is still ``"cpu"``.

    Returns
    -------
    str
        ``"cuda"`` or ``"cpu"``, to pass as ``device=`` or to ``.to(...)``.

    Raises
    ------
    ValueError
        If ``MPTUTOR_DEVICE`` holds something other than ``cpu``, ``cuda`` or nothing.

    Examples
    --------
    >>> import torch
    >>> from mptutor import torch as mpt
    >>> x = torch.ones(2, device=mpt.device())
    """
    if hardware._device_override() == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
