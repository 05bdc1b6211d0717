"""FP8 linear layers: E4M3 x E4M3 forward through ``torch._scaled_mm``, FP8 output gradients."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn

from mptutor import hardware
from mptutor._checks import check_scalar, check_type
from mptutor.torch._swap import swap_linears

_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
_SCALINGS = ("none", "current", "delayed")
_FP32_MAX = torch.finfo(torch.float32).max
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_MAX_HISTORY = 2**20  # as mptutor.fp8.DelayedScaling


def _cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast ``t * scale`` to an FP8 dtype, saturating at +-max (casts differ across versions)."""
    big = torch.finfo(dtype).max
    return (t.float() * scale).clamp(-big, big).to(dtype)


def _amax(t: torch.Tensor) -> torch.Tensor:
    """Return the largest magnitude of a tensor as a 0-dim float32 tensor (no host sync)."""
    return t.detach().abs().amax().float()


def _from_amax(amax: torch.Tensor, big: float, previous: torch.Tensor | float) -> torch.Tensor:
    """Return ``big / amax``, or ``previous`` where amax is 0 or not finite (on the device)."""
    ok = torch.isfinite(amax) & (amax > 0)
    quotient = torch.full_like(amax, big) / amax  # (big / amax is reciprocal, then product)
    return torch.where(ok, quotient.clamp(max=_FP32_MAX), previous)


def _mm(a, b, sa, sb, dtype: torch.dtype, fast: bool = False) -> torch.Tensor:
    """Return ``(a / sa) @ (b / sb).T`` through ``torch._scaled_mm`` (b.T is column-major)."""
    return torch._scaled_mm(
        a, b.t(), scale_a=sa.reciprocal(), scale_b=sb.reciprocal(), out_dtype=dtype,
        use_fast_accum=fast,
    )  # fmt: skip


class _FP8Matmul(torch.autograd.Function):
    """``x @ w.T`` with both operands in E4M3; gradients with the output gradient in FP8."""

    @staticmethod
    def forward(ctx: Any, x, w, sx, sw, sg, grad_amax, layer: FP8Linear) -> torch.Tensor:
        xq, wq = _cast(x, sx, torch.float8_e4m3fn), _cast(w, sw, torch.float8_e4m3fn)
        ctx.save_for_backward(xq, wq, sx, sw, sg)
        ctx.grad_amax, ctx.layer, ctx.x_dtype, ctx.w_dtype = grad_amax, layer, x.dtype, w.dtype
        kind = x.device.type  # under autocast the output takes autocast's dtype, as nn.Linear's
        out = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
        return _mm(xq, wq, sx, sw, out, layer.fast_accum)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        xq, wq, sx, sw, sg = ctx.saved_tensors
        grad, dtype = grad.contiguous(), _DTYPES[ctx.layer.grad_format]
        if ctx.layer.scaling == "current":
            sg = _from_amax(_amax(grad), ctx.layer._big("grad"), 1.0)
        elif ctx.layer.scaling == "delayed" and ctx.grad_amax is not None:
            ctx.grad_amax.copy_(_amax(grad))  # joins the window at the next training forward
        gq = _cast(grad, sg, dtype)
        # dx = g @ w and dw = g.T @ x, each second operand laid out column-major
        need_x = ctx.needs_input_grad[0]
        grad_x = _mm(gq, wq.t().contiguous(), sg, sw, ctx.x_dtype) if need_x else None
        grad_w = _mm(gq.t().contiguous(), xq.t().contiguous(), sg, sx, ctx.w_dtype)
        return grad_x, grad_w, None, None, None, None, None


class FP8Linear(nn.Linear):
    """A linear layer whose matrix products run in FP8 through ``torch._scaled_mm``.

    The input and the weight are cast to E4M3 (the FP32 weight stays), the output gradient to
    ``grad_format``, each as ``x * scale`` with its own per-tensor scale, saturating; both
    gradients come from the saved FP8 operands.

    Parameters
    ----------
    in_features, out_features, bias, device, dtype
        As for :class:`torch.nn.Linear` (the bias is added outside the FP8 product). On a GPU,
        the sizes and the number of input rows must be multiples of 16.
    scaling : {"delayed", "current", "none"}, optional
        ``"none"``: 1; ``"current"``: ``max / amax`` of the tensor being cast; ``"delayed"``:
        :class:`mptutor.fp8.DelayedScaling` on the device, in the buffers ``<role>_scale`` and
        ``<role>_amax_history`` (roles ``input``, ``weight``, ``grad``).
    history_len : int, optional
        Amaxes kept for delayed scaling (the largest gives the scale).
    grad_format : {"fp8_e5m2", "fp8_e4m3"}, optional
        The output gradient's format.
    fast_accum : bool, optional
        ``use_fast_accum`` of ``torch._scaled_mm`` for the forward product only.

    Raises
    ------
    TypeError, ValueError
        For sizes or a ``history_len`` (1 to ``2**20``) that are not positive ints, or an
        unknown ``scaling`` or ``grad_format``.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *,
        scaling: str = "delayed", history_len: int = 16, grad_format: str = "fp8_e5m2",
        fast_accum: bool = False, device: Any = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        in_features = check_scalar(in_features, "in_features", int, min_val=1)
        out_features = check_scalar(out_features, "out_features", int, min_val=1)
        if not isinstance(scaling, str) or scaling not in _SCALINGS:
            raise ValueError(f"scaling must be one of {', '.join(_SCALINGS)}, got {scaling!r}")
        if not isinstance(grad_format, str) or grad_format not in _DTYPES:
            raise ValueError(f"grad_format must be fp8_e5m2 or fp8_e4m3, got {grad_format!r}")
        history_len = check_scalar(history_len, "history_len", int, min_val=1, max_val=_MAX_HISTORY)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.scaling, self.grad_format, self.fast_accum = scaling, grad_format, bool(fast_accum)
        for role in ("input", "weight", "grad"):
            self.register_buffer(f"{role}_scale", torch.ones((), device=device))
            self.register_buffer(f"{role}_amax_history", torch.zeros(history_len, device=device))
        self.register_buffer("grad_amax", torch.zeros((), device=device))  # not yet in window

    def _big(self, role: str) -> float:
        """Return the largest value of the role's format."""
        return torch.finfo(_DTYPES[self.grad_format if role == "grad" else "fp8_e4m3"]).max

    @torch.no_grad()
    def _next(self, role: str, amax: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return new tensors (set by :meth:`_commit` later): the window with ``amax``, scale."""
        history, scale = getattr(self, f"{role}_amax_history"), getattr(self, f"{role}_scale")
        ok = torch.isfinite(amax) & (amax > 0)
        history = torch.where(ok, torch.cat([history[1:], amax.view(1)]), history)
        scale = torch.where(ok, _from_amax(history.max(), self._big(role), scale), scale)
        return {f"{role}_amax_history": history, f"{role}_scale": scale}

    def _commit(self, state: dict[str, torch.Tensor]) -> None:
        """Set the buffers :meth:`_next` computed."""
        for name, value in state.items():
            setattr(self, name, value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer: ``x @ weight.T + bias``, the product in FP8 (empty batch: empty output).

        Raises
        ------
        TypeError, ValueError
            If ``x`` is not a floating-point tensor with ``in_features`` values on its last axis,
            on the layer's device; nothing changes then.
        """
        return _linear(self, x, self._product)

    def _product(self, x2: torch.Tensor) -> torch.Tensor:
        """Return ``x2 @ weight.T`` in FP8 for the rows of a checked, non-empty input."""
        w, one = self.weight, torch.ones((), device=x2.device)
        delayed, pending, state = self.scaling == "delayed", None, {}
        if self.scaling == "current":
            sx = _from_amax(_amax(x2), self._big("input"), 1.0)
            sw = _from_amax(_amax(w), self._big("weight"), 1.0)
            sg = one
        elif delayed:
            sx, sw, sg = self.input_scale, self.weight_scale, self.grad_scale  # never mutated
            if self.training:  # the gradient amax of the step before joins its window
                state = self._next("grad", self.grad_amax)
                sg, pending = state["grad_scale"], self.grad_amax
        else:
            sx = sw = sg = one
        out = _FP8Matmul.apply(x2, w, sx, sw, sg, pending, self)
        if delayed and self.training:  # the product went through: the call's records land
            state |= self._next("input", _amax(x2)) | self._next("weight", _amax(w))
            self._commit(state)
            self.grad_amax.zero_()  # filled by this step's backward
        return out

    def extra_repr(self) -> str:
        """Describe the sizes and the scaling recipe."""
        recipe = f"scaling={self.scaling!r}, grad_format={self.grad_format!r}"
        if self.scaling == "delayed":
            recipe += f", history_len={self.input_amax_history.numel()}"
        return f"{super().extra_repr()}, {recipe}"


def _linear(layer: nn.Linear, x: Any, product: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Check ``x``, ``product`` of its rows (empty batch: plain), reshape it, add the bias."""
    check_type(x, "x", torch.Tensor, "a floating-point torch.Tensor")
    if x.dtype not in _INPUT_DTYPES:  # FP8 itself included: the layer does the cast
        raise TypeError(
            "x must be a floating-point tensor (float32, bfloat16, float16 or float64), got "
            f"dtype {x.dtype} (cast it first, e.g. x.float())"
        )
    if x.dim() == 0 or x.shape[-1] != layer.in_features:
        raise ValueError(
            f"x must have {layer.in_features} values on its last axis (in_features), got shape "
            f"{tuple(x.shape)}"
        )
    if x.device != layer.weight.device:
        raise ValueError(
            f"x is on {x.device}, the layer on {layer.weight.device}: move one of them"
        )
    x2 = x.reshape(-1, layer.in_features)
    if x2.shape[0]:
        out = product(x2)
    else:  # an empty batch: an empty output, as nn.Linear gives; nothing measured or recorded
        kind = x.device.type
        dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype
        out = x2.to(dtype) @ layer.weight.to(dtype).t()
    out = out.reshape(*x.shape[:-1], layer.out_features)
    return out if layer.bias is None else out + layer.bias.to(out.dtype)


def to_fp8(model: nn.Module, skip: Collection[str] = (), **options: Any) -> nn.Module:
    """Replace the model's ``torch.nn.Linear`` layers by :class:`FP8Linear` in place; return it.

    The new layers take over the old ones' ``Parameter`` objects (an optimizer still updates
    them); ``skip`` names layers to keep (``"head"``); ``options`` go to :class:`FP8Linear`.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a ``torch.nn.Module`` or is itself a ``torch.nn.Linear``, ``skip``
        is not a collection of names of its linear layers, or an option is refused; the model
        is then unchanged.
    """

    def build(name: str, k: int, old: nn.Linear) -> FP8Linear:
        return FP8Linear(
            old.in_features, old.out_features, old.bias is not None, device=old.weight.device,
            dtype=old.weight.dtype, **options,
        )  # fmt: skip

    return swap_linears(model, skip, build, "to_fp8", "FP8Linear")


def scaled_mm_kernel(
    a_dtype: torch.dtype, b_dtype: torch.dtype, device: str | torch.device = "cpu"
) -> str:
    """Name the kernel ``torch._scaled_mm`` runs for FP8 operands of these types on ``device``.

    On a CPU, PyTorch's ``_scaled_mm_out_cpu`` (``aten/src/ATen/native/Blas.cpp``) takes oneDNN's
    FP8 kernel while oneDNN is enabled (``torch.backends.mkldnn``) and the CPU has AMX-INT8 (both
    operands of one format) or AMX-FP16 (E4M3 times E5M2); otherwise it converts the operands to
    FP32, multiplies them by their scales and runs an FP32 matrix product, whose result an FP32
    product of the same numbers reproduces bit for bit. The CPU's flags are read from
    :func:`mptutor.hardware.report` (``/proc/cpuinfo``: on another system it sees no AMX and
    answers ``"emulated"``). The answer is for one scale per operand (tensorwise scaling); recent
    PyTorch sources send per-row scales to the emulation on every CPU. On a CUDA device the
    answer is ``"cuda"`` whatever the GPU: cuBLASLt's FP8 kernels need FP8 Tensor Cores (Ada,
    Hopper or later) and refuse two E5M2 operands, and ``torch._scaled_mm`` raises there.

    Parameters
    ----------
    a_dtype, b_dtype : torch.dtype
        The operands' types: ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``.
    device : str or torch.device, optional
        ``"cpu"`` or a CUDA device.

    Returns
    -------
    str
        ``"emulated"`` (the FP32 product), ``"onednn"`` or ``"cuda"``.

    Raises
    ------
    TypeError, ValueError
        For an operand type that is not one of the two FP8 types, or another device.
    """
    fp8 = tuple(_DTYPES.values())
    for name, dtype in (("a_dtype", a_dtype), ("b_dtype", b_dtype)):
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"{name} must be a torch.dtype, got {dtype!r}")
        if dtype not in fp8:
            raise ValueError(f"{name} must be float8_e4m3fn or float8_e5m2, got {dtype}")
    device = _check_device(device)
    if device.type == "cuda":
        return "cuda"
    flags = hardware.report().cpu_features
    amx = flags.get("amx_int8") if a_dtype == b_dtype else flags.get("amx_fp16")
    onednn = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    return "onednn" if onednn and amx else "emulated"


def _check_device(device: str | torch.device) -> torch.device:
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError as err:
            raise ValueError(f"device must be 'cpu' or a CUDA device, got {device!r}") from err
    check_type(device, "device", torch.device, "a torch.device or its name")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {str(device)!r}")
    return device


def scaled_mm_accumulation(
    device: str | torch.device = "cpu", ks: Collection[int] = (1024, 4096, 16384), rows: int = 32
) -> list[dict[str, Any]]:
    """Measure how ``torch._scaled_mm`` sums FP8 products, with and without ``use_fast_accum``.

    For each inner dimension K: two ``(rows, K)`` matrices of uniform values in [0, 1), cast to
    E4M3 (none negative, a few rounded to 0, as activations after a ReLU: the worst case for a
    narrow accumulator, whose partial sum never falls), seeded by K; their product through
    ``torch._scaled_mm`` with scales of 1 and an FP32 result, against the exact (float64) product
    of the same FP8 values.
    Then the same operands with scales that are not powers of two (0.37 and 1.9), against the FP32
    product of the operands converted to FP32 and multiplied by their scales (what PyTorch
    computes on a CPU where :func:`scaled_mm_kernel` says ``"emulated"``).

    Parameters
    ----------
    device : str or torch.device, optional
        Where ``_scaled_mm`` runs: ``"cpu"`` or a CUDA GPU with FP8 Tensor Cores (Ada, Hopper or
        later).
    ks : collection of int, optional
        Inner dimensions, each a positive multiple of 16.
    rows : int, optional
        Rows of each operand (the product is ``rows x rows``), a positive multiple of 16.

    Returns
    -------
    list of dict
        One row per K: ``K``, ``fast_accum=False: max relative error`` and
        ``fast_accum=True: max relative error`` (the largest ``|out - exact| / exact`` over the
        product), ``identical`` (whether the two results are equal) and ``= FP32 emulation``
        (whether the scaled product equals the FP32 one bit for bit).

    Raises
    ------
    TypeError, ValueError
        For a bad ``device``, ``ks`` or ``rows``, before any work.
    RuntimeError
        Before any work, if ``device`` is a CUDA device and PyTorch sees no GPU; from
        ``torch._scaled_mm``, on a GPU without FP8 Tensor Cores.
    """
    device = _check_device(device)
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Collection) or not ks:
        raise TypeError(f"ks must be a non-empty collection of ints, got {ks!r}")
    sizes = [check_scalar(k, "each of ks", int, min_val=16) for k in ks]
    rows = check_scalar(rows, "rows", int, min_val=16)
    for name, value in [*(("each of ks", k) for k in sizes), ("rows", rows)]:
        if value % 16:
            raise ValueError(f"{name} must be a multiple of 16 (torch._scaled_mm), got {value}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {str(device)!r}: PyTorch sees no CUDA GPU here")
    f32 = {"device": device, "dtype": torch.float32}  # _scaled_mm's scales are float32
    one = torch.ones((), **f32)
    scale_a, scale_b = torch.tensor(0.37, **f32), torch.tensor(1.9, **f32)
    table = []
    for k in sizes:
        gen = torch.Generator().manual_seed(k)
        a = torch.rand(rows, k, generator=gen).to(torch.float8_e4m3fn)
        b = torch.rand(rows, k, generator=gen).to(torch.float8_e4m3fn)
        exact = a.double() @ b.double().T
        row: dict[str, Any] = {"K": k}
        outs = {}
        for fast in (False, True):
            outs[fast] = torch._scaled_mm(
                a.to(device), b.to(device).T, scale_a=one, scale_b=one, out_dtype=torch.float32,
                use_fast_accum=fast,
            ).double().cpu()  # fmt: skip
            error = ((outs[fast] - exact) / exact).abs().max()
            row[f"fast_accum={fast}: max relative error"] = float(error)
        row["identical"] = bool(torch.equal(outs[False], outs[True]))
        scaled = torch._scaled_mm(
            a.to(device), b.to(device).T, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.float32
        ).cpu()
        emulation = (a.float() * scale_a.cpu()) @ (b.float() * scale_b.cpu()).T
        row["= FP32 emulation"] = bool(torch.equal(scaled, emulation))
        table.append(row)
    return table
