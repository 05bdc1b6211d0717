"""Convert a network to FP16 while its BatchNorm layers stay FP32 (as the talk's helpers do)."""

from __future__ import annotations

from torch import nn

from mptutor._checks import check_type

__all__ = ["bn_to_float", "network_to_half"]


def bn_to_float(module: nn.Module) -> nn.Module:
    """Convert every BatchNorm layer of a module to FP32 in place (the talk's ``BN_convert_float``).

    BatchNorm reduces over the batch to compute its statistics; in FP32 those sums keep their
    precision. PyTorch's BatchNorm accepts FP16 input with FP32 parameters.

    Parameters
    ----------
    module : torch.nn.Module
        Any module; its BatchNorm descendants (and itself, if it is one) are converted.

    Returns
    -------
    torch.nn.Module
        The same module.

    Raises
    ------
    TypeError
        If ``module`` is not a ``torch.nn.Module``.
    """
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    for sub in module.modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            sub.float()
    return module


def network_to_half(module: nn.Module) -> nn.Module:
    """Convert a module to FP16 except its BatchNorm layers, which stay FP32 (in place).

    Parameters
    ----------
    module : torch.nn.Module
        The network.

    Returns
    -------
    torch.nn.Module
        The same module, ready for FP16 inputs.

    Raises
    ------
    TypeError
        If ``module`` is not a ``torch.nn.Module``.
    """
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    return bn_to_float(module.half())
