"""How close each module's outputs come to a format's largest value; stochastic rounding."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mptutor import formats
from mptutor._checks import check_format, check_type
from mptutor.torch._nonfinite import _float_tensors


class _Headroom:
    """Forward hooks that keep each module's largest output magnitude; see :func:`headroom`."""

    def __init__(self, model: nn.Module, fmt: Any = "fp16") -> None:
        check_type(model, "model", nn.Module, "a torch.nn.Module")
        self.fmt = check_format(fmt)
        self._names = {module: name for name, module in model.named_modules()}
        self._amax: dict[str, torch.Tensor] = {}
        self._handles: list[Any] = []

    def _hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        """Fold the largest |value| of each floating-point output into the module's running max."""
        name = self._names[module]
        for tensor in filter(torch.numel, _float_tensors(output)):
            # one pass over the values (aminmax), kept on the tensor's device: no host sync
            low, high = torch.aminmax(tensor.detach())
            amax = torch.maximum(low.abs(), high.abs()).float()  # +0.0 for zeros, never -0.0
            seen = self._amax.get(name)
            self._amax[name] = amax if seen is None else torch.maximum(seen, amax.to(seen.device))

    def __enter__(self) -> _Headroom:
        if self._handles:
            raise RuntimeError("this headroom monitor is already active; use a new one")
        self._handles = [module.register_forward_hook(self._hook) for module in self._names]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def peaks(self) -> dict[str, float]:
        """Each module's largest |output| so far over the format's largest value (one host sync).

        By name (``""``: the model), in ``named_modules()`` order; above 1 the format cannot hold
        it; ``inf``, ``nan``: an output was infinite, or held a NaN.
        """
        names = [name for name in self._names.values() if name in self._amax]
        if not names:
            return {}
        first = self._amax[names[0]].device
        values = torch.stack([self._amax[name].to(first) for name in names]).double()
        return dict(zip(names, (values / self.fmt.max).tolist(), strict=True))


def headroom(model: nn.Module, fmt: Any = "fp16") -> _Headroom:
    """Watch how close every module's outputs come to the largest value of a format.

    A context manager: inside it a forward hook on every module keeps its outputs' largest
    magnitude on the device (the hooks go on exit). ``.peaks`` gives each module's over the
    format's largest value: a ratio creeping towards 1 is an overflow on its way.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose modules to watch.
    fmt : str or dtype, optional
        A format :func:`mptutor.formats.get` knows (``"fp16"``, ``"bf16"``, ``"fp8_e4m3"``...).

    Returns
    -------
    context manager
        With ``.peaks`` (a dict of str to float) and ``.fmt`` (the format).

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a ``torch.nn.Module``, or ``fmt`` not a known format.
    """
    return _Headroom(model, fmt)


def _check_generator(generator: Any, t: torch.Tensor, name: str) -> None:
    """Refuse a ``generator`` that is neither None nor a torch.Generator on ``t``'s device."""
    if generator is None:
        return
    check_type(generator, "generator", torch.Generator, "a torch.Generator or None")
    if generator.device.type != t.device.type:
        raise ValueError(
            f"generator is on {generator.device}, {name} on {t.device}: pass a generator made "
            f"with torch.Generator(device={t.device.type!r})"
        )


def stochastic_round(
    x: torch.Tensor, dtype: torch.dtype = torch.bfloat16, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Round each value to one of its two neighbours in ``dtype``, unbiased on average.

    ``lo < x < hi`` becomes ``hi`` with probability ``(x - lo) / (hi - lo)``: small updates to
    16-bit weights survive on average. Values ``dtype`` holds (``-0.0``, ``inf``) and NaN stay;
    beyond the largest value ``inf`` is the next one up. No gradient flows.

    Parameters
    ----------
    x : torch.Tensor
        Floating-point values, on any device.
    dtype : torch.dtype, optional
        ``torch.bfloat16`` or ``torch.float16``.
    generator : torch.Generator, optional
        Source of the random numbers, on ``x``'s device; PyTorch's global one by default.

    Returns
    -------
    torch.Tensor
        A new tensor of ``dtype`` with ``x``'s shape and device.

    Raises
    ------
    TypeError, ValueError
        If ``x`` is not a floating-point tensor, ``dtype`` neither 16-bit type, or ``generator``
        not a ``torch.Generator`` on ``x``'s device.
    """
    check_type(x, "x", torch.Tensor, "a floating-point torch.Tensor")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got dtype {x.dtype}")
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype!r}")
    _check_generator(generator, x, "x")
    fmt = formats.get(dtype)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        value = x.to(work)
        size = value.abs()
        nearest = size.to(dtype)  # one of the two neighbours of |x| (or inf, or NaN)
        nearest_w = nearest.to(work)
        # for the non-negative magnitudes here, the next value up or down is the next bit pattern
        bits = nearest.view(torch.int16)
        below = nearest_w <= size  # nearest is the lower neighbour
        low = torch.where(below, nearest, (bits - 1).view(dtype))
        high = torch.where(below, (bits + 1).view(dtype), nearest)
        low_w, high_w = low.to(work), high.to(work)
        # above the largest finite value, inf plays the next value: one spacing further up
        spacing_at_max = 2.0 ** (fmt.max_exponent - fmt.mantissa_bits)
        gap = torch.where(torch.isinf(high_w), spacing_at_max, high_w - low_w)
        chance_up = (size - low_w) / gap
        draw = torch.rand(x.shape, generator=generator, dtype=work, device=x.device)
        rounded = torch.where(draw < chance_up, high, low)
        keep = (nearest_w == size) | torch.isnan(size)
        rounded = torch.where(keep, nearest, rounded)
        return torch.where(torch.signbit(value), -rounded, rounded)
