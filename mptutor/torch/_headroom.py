"""How close each module's outputs come to a format's largest value, and stochastic rounding.

Used through :mod:`mptutor.torch`::

    from mptutor import torch as mpt

    with mpt.headroom(model, fmt="fp16") as room:
        model(x)
    room.peaks                        # {"blocks.0.ffn": 0.31, ...}: largest |output| / 65504

    w16 = mpt.stochastic_round(w32, torch.bfloat16, generator=g)

Notebooks ``09-transformers-in-16-bits`` and ``10-pure-bf16-and-stochastic-rounding`` write the
same ideas out by hand first.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import torch
from torch import nn

from mptutor import formats
from mptutor._checks import check_type

__all__ = ["Headroom", "headroom", "stochastic_round"]

#: Target formats of :func:`stochastic_round`, as PyTorch dtypes.
ROUNDING_DTYPES = (torch.bfloat16, torch.float16)


def _float_tensors(obj: Any) -> list[torch.Tensor]:
    """Collect the floating-point tensors in a tensor, or in lists, tuples and dicts of them."""
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() and obj.numel() else []
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _float_tensors(item)]
    return []


class Headroom:
    """Forward hooks that keep each module's largest output magnitude; see :func:`headroom`.

    Attributes
    ----------
    fmt : mptutor.formats.Format
        The format whose largest finite value the magnitudes are divided by.
    """

    def __init__(self, model: nn.Module, fmt: Any = "fp16") -> None:
        self._model = check_type(model, "model", nn.Module, "a torch.nn.Module")
        self.fmt = formats.get(fmt)
        self._names = {module: name for name, module in model.named_modules()}
        self._amax: dict[str, torch.Tensor] = {}
        self._handles: list[Any] = []

    def _hook(self, module: nn.Module, args: tuple, output: Any) -> None:
        """Fold the largest |value| of each floating-point output into the module's running max."""
        name = self._names[module]
        for tensor in _float_tensors(output):
            # one pass over the values (aminmax), kept on the tensor's device: no host sync
            low, high = torch.aminmax(tensor.detach())
            amax = torch.maximum(low.neg(), high).float()
            seen = self._amax.get(name)
            self._amax[name] = amax if seen is None else torch.maximum(seen, amax.to(seen.device))

    def __enter__(self) -> Headroom:
        if self._handles:
            raise RuntimeError("this headroom monitor is already active; use a new one")
        try:
            for module in self._names:
                self._handles.append(module.register_forward_hook(self._hook))
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        """Remove every hook this monitor registered."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @property
    def peaks(self) -> dict[str, float]:
        """Largest |output| of each module seen so far, divided by the format's largest value.

        Returns
        -------
        dict of str to float
            Qualified module name (``""`` for the model itself) to that ratio, in the order of
            ``model.named_modules()``, for the modules that produced a floating-point output.
            Above 1 the format cannot hold the output; ``inf`` means an output was already
            infinite and ``nan`` that one held a NaN. Reading it makes the host wait for the
            device once.
        """
        names = [name for name in self._names.values() if name in self._amax]
        if not names:
            return {}
        first = self._amax[names[0]].device
        values = torch.stack([self._amax[name].to(first) for name in names]).double()
        return dict(zip(names, (values / self.fmt.max).tolist(), strict=True))


def headroom(model: nn.Module, fmt: Any = "fp16") -> Headroom:
    """Watch how close every module's outputs come to the largest value of a format.

    A context manager: on entry it puts a forward hook on every module of ``model`` (the model
    itself included, named ``""``); each hook reduces every floating-point output of its module
    to its largest magnitude, one reduction per output that stays on the device (no host sync),
    and keeps the running maximum. On exit, also when the body raises, the hooks are removed.
    :attr:`Headroom.peaks` then maps each module's qualified name to its largest output
    magnitude divided by the format's largest finite value: a ratio that creeps towards 1 over
    training is an overflow on its way, seen before the first inf. Run the model in FP32 (or
    BF16) inside it to ask what FP16 would do; run it under FP16 autocast to see an overflow
    that has already happened (``inf``). Cheap enough to wrap one step in every N.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose modules to watch.
    fmt : str or dtype, optional
        The format to measure against, any spelling :func:`mptutor.formats.get` knows:
        ``"fp16"`` (largest value 65504, the default), ``"bf16"``, ``"fp8_e4m3"``, ...

    Returns
    -------
    Headroom
        Use it in a ``with`` statement; read ``.peaks`` inside or after it.

    Raises
    ------
    TypeError
        If ``model`` is not a ``torch.nn.Module``.
    ValueError
        If ``fmt`` is not a known format; the message lists them.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from mptutor import torch as mpt
    >>> model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.ReLU())
    >>> with torch.no_grad():
    ...     _ = model[0].weight.copy_(torch.eye(2))
    ...     with mpt.headroom(model, fmt="fp16") as room:
    ...         _ = model(torch.tensor([[32752.0, -1e5]]))
    >>> {name: round(ratio, 3) for name, ratio in room.peaks.items()}
    {'': 0.5, '0': 1.527, '1': 0.5}
    """
    return Headroom(model, fmt)


def _rounding_dtype(dtype: Any) -> torch.dtype:
    """Return the PyTorch dtype to round to; a ValueError naming the accepted ones if none."""
    accepted = ", ".join(str(d) for d in ROUNDING_DTYPES)
    try:
        name = formats.dtype_name(dtype)
    except (TypeError, ValueError):
        name = None
    found = getattr(torch, name, None) if isinstance(name, str) else None
    if found not in ROUNDING_DTYPES:
        raise ValueError(
            f"dtype must be one of {accepted} (or a spelling such as 'bf16', 'fp16'), got {dtype!r}"
        )
    return found


def stochastic_round(
    x: torch.Tensor,
    dtype: Any = torch.bfloat16,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Round each value to one of its two neighbours in ``dtype``, unbiased on average.

    A value ``x`` between the neighbours ``lo < x < hi`` of ``dtype`` becomes ``hi`` with
    probability ``(x - lo) / (hi - lo)`` and ``lo`` otherwise, so the expected result is ``x``
    itself: small updates added to 16-bit weights survive on average instead of being rounded
    away every time. Values that ``dtype`` holds exactly come back unchanged (``-0.0`` and
    ``inf`` included); NaN stays NaN. A finite value beyond the largest finite value of
    ``dtype`` is treated as if infinity were the next value up, one spacing above that largest
    value: it becomes the largest value or ``inf`` (always ``inf`` from one spacing above on),
    with the sign kept. No gradient flows through the result.

    The probability of rounding up is exact up to the resolution of the uniform random numbers
    drawn, ``2**-24`` for float32 and lower-precision input and ``2**-53`` for float64; from
    float32 to bfloat16 (probabilities in steps of ``2**-16``) and to float16 normal values
    (``2**-13``) it is exact.

    Parameters
    ----------
    x : torch.Tensor
        Floating-point values (float64, float32, float16 or bfloat16), on any device.
    dtype : torch.dtype or str, optional
        ``torch.bfloat16`` (default) or ``torch.float16``; the spellings of
        :mod:`mptutor.formats` (``"bf16"``, ``"fp16"``, ...) work too.
    generator : torch.Generator, optional
        Source of the random numbers, on ``x``'s device; a generator seeded the same way gives
        the same result. Without it PyTorch's global generator is used (``torch.manual_seed``).

    Returns
    -------
    torch.Tensor
        A new tensor of ``dtype`` with ``x``'s shape and device.

    Raises
    ------
    TypeError
        If ``x`` is not a floating-point tensor or ``generator`` is not a ``torch.Generator``.
    ValueError
        If ``dtype`` is not one of the accepted dtypes (the message lists them), or the
        generator is on another device than ``x``.

    Examples
    --------
    >>> import torch
    >>> from mptutor import torch as mpt
    >>> x = torch.full((100_000,), 1 + 2**-9)  # a quarter of the way from 1 to 1 + 2**-7
    >>> r = mpt.stochastic_round(x, generator=torch.Generator().manual_seed(0))
    >>> sorted(set(r.float().tolist()))
    [1.0, 1.0078125]
    >>> round((r > 1).float().mean().item(), 2)
    0.25
    """
    check_type(x, "x", torch.Tensor, "a floating-point torch.Tensor")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point torch.Tensor, got dtype {x.dtype}")
    target = _rounding_dtype(dtype)
    if generator is not None:
        check_type(generator, "generator", torch.Generator, "a torch.Generator or None")
        if generator.device.type != x.device.type:
            raise ValueError(
                f"generator is on {generator.device}, x on {x.device}: pass a generator made "
                f"with torch.Generator(device={x.device.type!r})"
            )
    fmt = formats.get(target)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        value = x.to(work)
        size = value.abs()
        nearest = size.to(target)  # one of the two neighbours of |x| (or inf, or NaN)
        nearest_w = nearest.to(work)
        # for the non-negative magnitudes here, the next value up or down is the next bit pattern
        bits = nearest.view(torch.int16)
        below = nearest_w <= size  # nearest is the lower neighbour
        low = torch.where(below, nearest, (bits - 1).view(target))
        high = torch.where(below, (bits + 1).view(target), nearest)
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
