"""Gradient statistics of a PyTorch model, counted by the framework-free mptutor.gradients."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from mptutor import gradients
from mptutor.torch._master_weights import _tensors

__all__ = ["gradient_stats"]


def gradient_stats(
    model: nn.Module | Iterable[torch.Tensor], fmt: Any = "fp16"
) -> gradients.GradientStats:
    """Measure the gradients now held in a model's ``.grad`` attributes against a format.

    The PyTorch side of :func:`mptutor.gradients.gradient_stats`: each gradient is copied to
    the host in FP32 (BF16 has no NumPy dtype) and counted there.

    Parameters
    ----------
    model : torch.nn.Module or iterable of torch.Tensor
        The model, or its parameters; parameters without a gradient are left out.
    fmt : str or dtype, optional
        A format name or dtype that :func:`mptutor.formats.get` knows (``"fp16"``,
        ``torch.bfloat16``, ...).

    Returns
    -------
    mptutor.gradients.GradientStats
        Counts of zeros, infs/NaNs, values that ``fmt`` would flush or overflow, and the
        exponents.

    Raises
    ------
    TypeError
        If ``model`` is neither a module nor an iterable of tensors.
    ValueError
        If ``fmt`` is not a format :func:`mptutor.formats.get` knows.
    """
    params = _tensors(model, "model")
    grads = [p.grad.detach().float().cpu().numpy() for p in params if p.grad is not None]
    return gradients.gradient_stats(grads, fmt)
