"""FP8 linear layers: E4M3 x E4M3 forward through ``torch._scaled_mm``, FP8 output gradients."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import torch
from torch import nn

from mptutor import formats
from mptutor.checks import check_scalar

__all__ = ["FP8Linear", "to_fp8"]

_DTYPES = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
_SCALINGS = ("none", "current", "delayed")
_ALGOS = ("max", "most_recent")
_ROLES = ("input", "weight", "grad")
_FP32_MAX = torch.finfo(torch.float32).max


def _cast(t: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast ``t * scale`` to an FP8 dtype, saturating at +-max (casts differ across versions)."""
    big = torch.finfo(dtype).max
    return (t.float() * scale).clamp(-big, big).to(dtype)


def _amax(t: torch.Tensor) -> torch.Tensor:
    """Return the largest magnitude of a tensor as a 0-dim float32 tensor (no host sync)."""
    return t.detach().abs().amax().float()


def _mm(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, out_dtype):
    """Return ``(a / sa) @ (b / sb).T`` through ``torch._scaled_mm`` (b.T is column-major)."""
    return torch._scaled_mm(
        a, b.t(), scale_a=sa.reciprocal(), scale_b=sb.reciprocal(), out_dtype=out_dtype
    )


class _FP8Matmul(torch.autograd.Function):
    """``x @ w.T`` with both operands in E4M3; gradients with the output gradient in FP8."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, layer: FP8Linear) -> torch.Tensor:
        sx, sw = layer._scale("input", x), layer._scale("weight", w)
        xq, wq = _cast(x, sx, torch.float8_e4m3fn), _cast(w, sw, torch.float8_e4m3fn)
        ctx.save_for_backward(xq, wq, sx, sw)
        ctx.layer, ctx.out_dtype, ctx.w_dtype = layer, x.dtype, w.dtype
        return _mm(xq, wq, sx, sw, x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor, None]:
        xq, wq, sx, sw = ctx.saved_tensors
        layer = ctx.layer
        grad = grad.contiguous()
        sg = layer._scale("grad", grad)
        gq = _cast(grad, sg, _DTYPES[layer.grad_format])
        # dx = g @ w: w's transpose, laid out column-major; dw = g.T @ x, likewise.
        need_x = ctx.needs_input_grad[0]
        grad_x = _mm(gq, wq.t().contiguous(), sg, sw, ctx.out_dtype) if need_x else None
        grad_w = _mm(gq.t().contiguous(), xq.t().contiguous(), sg, sx, ctx.w_dtype)
        return grad_x, grad_w, None


class FP8Linear(nn.Linear):
    """A linear layer whose matrix products run in FP8 through ``torch._scaled_mm``.

    The forward pass casts the input and the weight (the FP32 master copy stays as it is) to
    E4M3, each with its own per-tensor scale; the backward pass casts the output gradient to
    ``grad_format`` (E5M2 by default: the hybrid recipe) and computes both gradients from the
    saved FP8 operands. Casts saturate at the format's largest value. The scales (``*_scale``
    buffers, quantize with ``x * scale``) follow ``scaling``:

    - ``"none"``: scale 1, the tensor cast as it is;
    - ``"current"``: ``max / amax`` of the tensor being cast (a full pass over it first);
    - ``"delayed"``: :class:`mptutor.fp8.DelayedScaling` on the device, without a host sync:
      the scale comes from a window of the last ``history_len`` amaxes (``*_amax_history``,
      newest last) of the steps before, and each training step's amax joins it after its cast.

    Parameters
    ----------
    in_features, out_features : int
        Sizes, as for :class:`torch.nn.Linear`. On a GPU, ``torch._scaled_mm`` needs them and
        the number of input rows to be multiples of 16.
    bias : bool, optional
        Add a bias (in the output's dtype, outside the FP8 product).
    scaling : {"delayed", "current", "none"}, optional
        How the scales are chosen.
    history_len : int, optional
        Amaxes kept for delayed scaling.
    algo : {"max", "most_recent"}, optional
        Which amax of the window delayed scaling uses.
    margin : int, optional
        Powers of two of headroom: ``scale = max / amax / 2**margin``.
    grad_format : {"fp8_e5m2", "fp8_e4m3"}, optional
        The output gradient's format.
    device, dtype : optional
        For the parameters, as for :class:`torch.nn.Linear`.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        scaling: str = "delayed",
        history_len: int = 16,
        algo: str = "max",
        margin: int = 0,
        grad_format: Any = "fp8_e5m2",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        for name, value, allowed in (("scaling", scaling, _SCALINGS), ("algo", algo, _ALGOS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        try:
            grad_name = formats.get(grad_format).name
        except ValueError:
            grad_name = None
        if grad_name not in _DTYPES:
            raise ValueError(f"grad_format must be fp8_e5m2 or fp8_e4m3, got {grad_format!r}")
        history_len = check_scalar(history_len, "history_len", int, min_val=1)
        margin = check_scalar(margin, "margin", int, min_val=0)
        self.scaling, self.algo, self.margin, self.grad_format = scaling, algo, margin, grad_name
        for role in _ROLES:
            self.register_buffer(f"{role}_scale", torch.ones((), device=device))
            self.register_buffer(f"{role}_amax_history", torch.zeros(history_len, device=device))

    def _scale(self, role: str, t: torch.Tensor) -> torch.Tensor:
        """Return the scale to cast ``t`` with, updating the delayed-scaling state in training."""
        fmt = self.grad_format if role == "grad" else "fp8_e4m3"
        big = torch.finfo(_DTYPES[fmt]).max / 2.0**self.margin
        if self.scaling == "none":
            return torch.ones((), device=t.device)
        if self.scaling == "current":
            amax = _amax(t)
            ok = torch.isfinite(amax) & (amax > 0)
            return torch.where(ok, (big / amax).clamp(max=_FP32_MAX), 1.0)
        scale = getattr(self, f"{role}_scale")
        used = scale.clone()
        if self.training:
            self._record(role, _amax(t), big)
        return used

    @torch.no_grad()
    def _record(self, role: str, amax: torch.Tensor, big: float) -> None:
        """Put ``amax`` into the window (unless 0 or not finite) and compute the next scale."""
        history, scale = getattr(self, f"{role}_amax_history"), getattr(self, f"{role}_scale")
        ok = torch.isfinite(amax) & (amax > 0)
        history.copy_(torch.where(ok, torch.cat([history[1:], amax.view(1)]), history))
        window = history.max() if self.algo == "max" else history[-1]
        fresh = (big / window).clamp(max=_FP32_MAX)
        scale.copy_(torch.where(ok & (window > 0), fresh, scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer: ``x @ weight.T + bias`` with the product in FP8."""
        out = _FP8Matmul.apply(x.reshape(-1, self.in_features), self.weight, self)
        out = out.reshape(*x.shape[:-1], self.out_features)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def extra_repr(self) -> str:
        """Describe the sizes and the scaling recipe."""
        recipe = f"scaling={self.scaling!r}, grad_format={self.grad_format!r}"
        if self.scaling == "delayed":
            history_len = self.input_amax_history.numel()
            recipe += f", history_len={history_len}, algo={self.algo!r}, margin={self.margin}"
        return f"{super().extra_repr()}, {recipe}"


def to_fp8(model: nn.Module, skip: Collection[str] = (), **options: Any) -> nn.Module:
    """Replace the model's :class:`torch.nn.Linear` layers by :class:`FP8Linear`, in place.

    Each new layer takes over the old one's parameters (the same ``Parameter`` objects, so an
    optimizer made before still updates them).

    Parameters
    ----------
    model : torch.nn.Module
        The model.
    skip : collection of str, optional
        Qualified names of linear layers to keep as they are (``"head"``, ``"blocks.0.fc1"``);
        each must name a linear layer of the model.
    **options
        Passed to :class:`FP8Linear` (``scaling``, ``history_len``, ``grad_format``, ...).

    Returns
    -------
    torch.nn.Module
        ``model`` itself.
    """
    linear = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    unknown = set(skip) - linear
    if unknown:
        raise ValueError(f"skip names no linear layer of the model: {sorted(unknown)}")
    for name in sorted(linear - set(skip)):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, child)
        new = FP8Linear(
            old.in_features,
            old.out_features,
            old.bias is not None,
            device=old.weight.device,
            dtype=old.weight.dtype,
            **options,
        )
        new.weight, new.bias = old.weight, old.bias
        setattr(parent, child, new)
    return model
