"""NVFP4 emulated in FP32: fake quantization, the random Hadamard transform, FP4 linear layers.

The quantization is :func:`mptutor.fp8.nvfp4_quantize` followed by
:func:`mptutor.fp8.nvfp4_dequantize`, written with torch operations so that it runs on the
device of the tensor (CPU or CUDA), bit for bit the same with round to nearest.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import torch
from torch import nn

from mptutor import fp8, hadamard
from mptutor._checks import _short, check_scalar, check_type
from mptutor.torch._fp8 import _linear
from mptutor.torch._headroom import _check_generator
from mptutor.torch._swap import swap_linears

_FP4_MAX = 6.0
_E4M3_MAX = 448.0
_TENSOR_MAX = _FP4_MAX * _E4M3_MAX  # a tensor's amax maps onto 6 x 448
_TINY = float(1 / np.finfo(np.float32).max)  # the smallest tensor scale (Transformer Engine's)
_WEIGHT_BLOCKS = ("1x16", "16x16")


def _check_tensor(t: Any, name: str = "t") -> None:
    check_type(t, name, torch.Tensor, "a floating-point torch.Tensor")
    if not t.is_floating_point() or t.dtype.itemsize < 2:
        raise TypeError(
            f"{name} must be a float64, float32, bfloat16 or float16 tensor, got dtype {t.dtype}"
        )


_CONSTANTS: dict[torch.device, dict[str, torch.Tensor]] = {}


def _constants(device: torch.device) -> dict[str, torch.Tensor]:
    """Return 0-dim tensors of the constants on ``device`` (a Python number is converted anew)."""
    if device not in _CONSTANTS:
        f32 = {"device": device, "dtype": torch.float32}
        _CONSTANTS[device] = {
            "exponent": torch.tensor(0x7F800000, dtype=torch.int32, device=device),
            "half": torch.tensor(0.5, **f32),
            "2**22": torch.tensor(2.0**22, **f32),
            "tiny": torch.tensor(_TINY, **f32),
            # divisors as tensors: CUDA divides by a Python number as a product with its
            # float32 reciprocal, a unit or two in the last place off NumPy's quotient at times
            "fp4_max": torch.tensor(_FP4_MAX, **f32),
            "tensor_max": torch.tensor(_TENSOR_MAX, **f32),
        }
    return _CONSTANTS[device]


def _round_fp4(
    s: torch.Tensor, generator: Any, stochastic: bool, work: torch.Tensor,
    signed_zero: bool = True,
) -> torch.Tensor:  # fmt: skip
    """Round float32 ``s`` to FP4 E2M1 (+-6 saturating) in place, to nearest even or at random."""
    # Arithmetic in the buffers s and work only: comparisons, where and new buffers cost more.
    c = _constants(s.device)
    s.clamp_(-_FP4_MAX, _FP4_MAX)
    # 2**floor(log2 |s|): the exponent bits alone; then 1, 2 or 4, twice the spacing
    binade = torch.bitwise_and(s.view(torch.int32), c["exponent"], out=work.view(torch.int32))
    binade = binade.view(torch.float32).clamp_(1.0, 4.0)
    if stochastic:
        step = torch.copysign(binade.mul_(c["half"]), s, out=binade)
        units = s.div_(step)  # |s| / step = n + f, >= 0
        # n + floor(f + u), u uniform in [0, 1): up with probability f, exact where |s| >= step
        # (f a multiple of 2**-24), within 2**-24 below; a value FP4 holds never moves
        up = torch.frac(units).add_(torch.rand(s.shape, generator=generator, device=s.device))
        return units.floor_().add_(up.floor_()).mul_(step)
    magic = torch.copysign(binade.mul_(c["2**22"]), s, out=binade)  # 2**23 x step, signed
    s.add_(magic).sub_(magic)  # its float32 spacing is step: rounds to a multiple, half to even
    return torch.copysign(s, magic, out=s) if signed_zero else s  # zeros keep their sign


def _nvfp4(
    t: torch.Tensor, block_shape: tuple[int, int] = (1, 16), stochastic: bool = False,
    generator: torch.Generator | None = None, dim: int = -1, signed_zero: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Quantize float32 ``t`` (checked) to NVFP4: (element x block scale, tensor scale)."""
    # Their product is fp8.nvfp4_dequantize's bit for bit (but the sign of zeros, with
    # signed_zero=False); dim=-2 blocks along the axis before the last. No host sync, and few
    # operations: on a CPU lesson's small tensors each costs more than its work.
    t, shape = t.contiguous(), t.shape
    *_, r, c = (1, *shape) if len(shape) == 1 else shape
    if block_shape == (16, 16):
        v = t.reshape(-1, r // 16, 16, c // 16, 16)
        size = v.abs()  # amax over the 16 rows (fast: long rows), then over 16 columns
        block_amax = size.amax(2, keepdim=True).amax(4, keepdim=True)
    elif dim == -1:
        v = t.reshape(-1, c // 16, 16)
        size = v.abs()  # max pooling: faster than amax over a short last axis on a CPU
        block_amax = nn.functional.max_pool1d(size.view(1, 1, -1), 16).view(*v.shape[:2], 1)
    else:
        v = t.reshape(-1, r // 16, 16, c)
        size = v.abs()
        block_amax = size.amax(2, keepdim=True)  # NaN where a NaN is in the block
    amax = torch.nan_to_num_(size, nan=0.0, posinf=0.0).amax()  # over the finite values
    # NumPy's tensor scale, but for a tensor of zeros (1 there, _TINY here: the same zeros)
    c = _constants(t.device)
    scale = torch.maximum(amax / c["tensor_max"], c["tiny"])
    wanted = block_amax / c["fp4_max"] / scale  # the same float32 steps as NumPy's
    wanted.add_(block_amax - block_amax)  # NaN where the block holds an inf or a NaN
    block = wanted.clamp_(max=_E4M3_MAX).to(torch.float8_e4m3fn).float()
    decode = block * scale
    # A block scale of 0 (flushed): NumPy's elements are +0; here the quotient by inf is
    # +-0, and adding +0 (-0 elsewhere, which changes nothing) drops the sign at the end.
    flushed = decode == 0
    scaled = v / decode.masked_fill_(flushed, torch.inf)
    q = _round_fp4(scaled, generator, stochastic, size, signed_zero).mul_(block)
    if signed_zero:
        q.add_(torch.where(flushed, 0.0, -0.0))
    return q.view(shape), scale


def nvfp4_fake_quantize(
    t: torch.Tensor, block_shape: Any = (1, 16), rounding: str = "nearest",
    generator: torch.Generator | None = None, dim: int = -1,
) -> torch.Tensor:  # fmt: skip
    """Quantize to NVFP4 and back: the float32 values an NVFP4 tensor stands for.

    :func:`mptutor.fp8.nvfp4_quantize` then :func:`mptutor.fp8.nvfp4_dequantize` (bit for bit
    with ``rounding="nearest"``) with torch, on ``t``'s device. A block holding NaN or inf comes
    back all NaN; a block whose E4M3 scale rounds to 0 comes back as zeros; ``-0.0`` stays.

    Parameters
    ----------
    t : torch.Tensor
        Floating-point values (taken in float32); the last axis a multiple of 16 (for
        ``(16, 16)``, the last two axes).
    block_shape : (1, 16) or (16, 16), optional
        As for :func:`mptutor.fp8.nvfp4_quantize`.
    rounding : {"nearest", "stochastic"}, optional
        As for :func:`mptutor.fp8.nvfp4_quantize`, but with a float32 uniform draw per element:
        exact for values of at least one FP4 spacing, within ``2**-24`` below.
    generator : torch.Generator, optional
        Source of the random draws, on ``t``'s device; PyTorch's global one by default.
    dim : {-1, -2}, optional
        With ``(1, 16)``: ``-2`` puts the blocks along the axis before the last, bit for bit
        ``nvfp4_fake_quantize(t.mT).mT`` without the transposed copy.

    Returns
    -------
    torch.Tensor
        float32, the shape and device of ``t``, with no gradient history.

    Raises
    ------
    TypeError, ValueError
        For a ``t`` that is not a floating-point tensor, a bad ``block_shape``, ``rounding``
        or ``generator``, or axes that are not multiples of 16, before any work.
    """
    _check_tensor(t)
    block_shape = fp8._block_shape(block_shape)
    stochastic = fp8._rounding(rounding) == "stochastic"
    _check_generator(generator, t, "t")
    if isinstance(dim, bool) or dim not in (-1, -2) or (dim == -2 and block_shape != (1, 16)):
        raise ValueError(f"dim must be -1, or -2 with block_shape (1, 16), got {_short(dim)}")
    if dim == -2 and t.dim() < 2:
        raise ValueError(f"dim=-2 needs a t of two axes or more, got shape {tuple(t.shape)}")
    fp8._check_nvfp4_shape(tuple((t if dim == -1 else t.mT).shape), block_shape, "t")
    with torch.no_grad():
        q, scale = _nvfp4(t.detach().float(), block_shape, stochastic, generator, dim)
        return q * scale


_MATRICES: dict[tuple[int, int | None, bool, torch.device, torch.dtype], torch.Tensor] = {}


def _hadamard(t: torch.Tensor, seed: int | None, block: int, inverse: bool) -> torch.Tensor:
    """Apply the random Hadamard matrix to blocks of the last axis (arguments checked)."""
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    key = (block, seed, inverse, t.device, dtype)
    if key not in _MATRICES:
        r = hadamard.random_hadamard(block, seed)
        _MATRICES[key] = torch.from_numpy(r if inverse else r.T).to(t.device, dtype)
    v = t.to(dtype).reshape(*t.shape[:-1], t.shape[-1] // block, block)
    return (v @ _MATRICES[key]).reshape(t.shape)


def hadamard_transform(
    t: torch.Tensor, seed: int | None = 0, block: int = 16, inverse: bool = False
) -> torch.Tensor:
    """Apply :func:`mptutor.hadamard.hadamard_transform` with torch, on ``t``'s device.

    The same matrix for the same ``seed`` and ``block``; differentiable.

    Parameters
    ----------
    t : torch.Tensor
        Floating-point values; the last axis a multiple of ``block``.
    seed, block, inverse
        As for :func:`mptutor.hadamard.hadamard_transform`.

    Returns
    -------
    torch.Tensor
        float32 (float64 for float64 input), the shape and device of ``t``.

    Raises
    ------
    TypeError, ValueError
        For a non-floating ``t``, or as :func:`mptutor.hadamard.hadamard_transform`.
    """
    _check_tensor(t)
    seed, block = hadamard._check(tuple(t.shape), seed, block, inverse, "t")
    return _hadamard(t, seed, block, inverse)


def _pad_tokens(t: torch.Tensor) -> torch.Tensor:
    """Return ``t`` (tokens on the first axis) zero-padded to a multiple of 16 tokens."""
    pad = -t.shape[0] % 16
    return nn.functional.pad(t, (0, 0, 0, pad)) if pad else t


def _hadamard_tokens(t: torch.Tensor, seed: int) -> torch.Tensor:
    """Apply the random Hadamard transform to each block of 16 tokens (the first axis)."""
    key = (16, seed, True, t.device, t.dtype)  # R itself: R @ block is (block.T @ R.T).T
    if key not in _MATRICES:
        _MATRICES[key] = torch.from_numpy(hadamard.random_hadamard(16, seed)).to(t)
    return (_MATRICES[key] @ t.view(-1, 16, t.shape[1])).view(t.shape)


class _FP4Matmul(torch.autograd.Function):
    """``x @ w.T`` and its two gradient products with NVFP4 operands, products in FP32."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, layer: FP4Linear) -> torch.Tensor:
        kind = x.device.type  # under autocast the output takes autocast's dtype, as nn.Linear's
        autocast = torch.is_autocast_enabled(kind)
        out_dtype = torch.get_autocast_dtype(kind) if autocast else x.dtype
        with torch.autocast(kind, enabled=False):
            xf, wf = x.float(), w.float()
            qx, sx = _nvfp4(xf, signed_zero=False)  # along in_features
            blocks = (16, 16) if layer.weight_blocks == "16x16" else (1, 16)
            qw, sw = _nvfp4(wf, blocks, signed_zero=False)
            out = (qx @ qw.t()).mul_(sx).mul_(sw)
        if layer.weight_blocks == "16x16":  # the same quantized weight goes into dx
            ctx.save_for_backward(xf, qw, sw)
        else:
            ctx.save_for_backward(xf, wf, sw)
        ctx.layer, ctx.x_dtype, ctx.w_dtype = layer, x.dtype, w.dtype
        return out.to(out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        xf, w_saved, sw = ctx.saved_tensors
        layer = ctx.layer
        g = grad.float()
        stochastic = layer.stochastic_gradients
        gen = layer._generator(g.device) if stochastic else None
        with torch.autocast(g.device.type, enabled=False):
            grad_x = None
            if ctx.needs_input_grad[0]:  # dx = Q(dy) @ Q(W), both along out_features
                qg, sg = _nvfp4(g, (1, 16), stochastic, gen, signed_zero=False)
                if layer.weight_blocks == "16x16":
                    qw = w_saved
                else:  # W's columns: blocks along its first axis
                    qw, sw = _nvfp4(w_saved, dim=-2, signed_zero=False)
                grad_x = (qg @ qw).mul_(sg).mul_(sw).to(ctx.x_dtype)
            grad_w = None
            if ctx.needs_input_grad[1]:  # dW = Q(H dy)^T @ Q(H x), along the tokens
                gt, xt = _pad_tokens(g), _pad_tokens(xf)
                if layer.hadamard:
                    gt, xt = _hadamard_tokens(gt, layer.seed), _hadamard_tokens(xt, layer.seed)
                qgt, sgt = _nvfp4(gt, (1, 16), stochastic, gen, -2, signed_zero=False)
                qxt, sxt = _nvfp4(xt, dim=-2, signed_zero=False)
                grad_w = (qgt.t() @ qxt).mul_(sgt).mul_(sxt).to(ctx.w_dtype)
        return grad_x, grad_w, None


class FP4Linear(nn.Linear):
    """A linear layer whose three matrix products take NVFP4 operands, emulated in FP32.

    Forward ``y = Q(x) @ Q(W).T + b``; backward ``dx = Q(dy) @ Q(W)`` and
    ``dW = Q(H dy).T @ Q(H x)``, each ``Q`` an NVFP4 quantization (:func:`nvfp4_fake_quantize`)
    along the product's reduction axis: ``in_features`` for the forward, ``out_features`` for
    ``dx``, the tokens (all leading axes flattened, zero-padded to a multiple of 16) for
    ``dW``. The products are FP32 products of ``element x block scale`` values times the two
    tensor scales; the bias is added unquantized; the FP32 weight is what the optimizer updates.
    Under autocast the products still run in FP32 and the output takes autocast's dtype.

    Parameters
    ----------
    in_features, out_features : int
        As for :class:`torch.nn.Linear`; both multiples of 16 (the blocks of each product).
    bias, device, dtype
        As for :class:`torch.nn.Linear`.
    hadamard : bool, optional
        Apply the random Hadamard transform (:func:`hadamard_transform`, blocks of 16, signs
        from ``seed``) to both inputs of ``dW`` along the tokens before they are quantized
        (it cancels in the product).
    weight_blocks : {"1x16", "16x16"}, optional
        ``"1x16"``: the weight is quantized along each product's reduction axis (rows for the
        forward, columns for ``dx``); ``"16x16"``: once, in 16x16 blocks, for both.
    stochastic_gradients : bool, optional
        Round ``dy`` to FP4 stochastically in both backward products (every other operand to
        nearest), from a generator of the layer seeded with ``seed`` (not in the state_dict).
    seed : int, optional
        Seed of the Hadamard signs and of the stochastic rounding, an int >= 0.

    Raises
    ------
    TypeError, ValueError
        For sizes or a ``seed`` that are not ints (sizes multiples of 16, ``seed`` >= 0), flags
        that are not bools, or an unknown ``weight_blocks``.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *,
        hadamard: bool = False, weight_blocks: str = "1x16", stochastic_gradients: bool = False,
        seed: int = 0, device: Any = None, dtype: Any = None,
    ) -> None:  # fmt: skip
        in_features = check_scalar(in_features, "in_features", int, min_val=1)
        out_features = check_scalar(out_features, "out_features", int, min_val=1)
        if in_features % 16 or out_features % 16:
            raise ValueError(
                "in_features and out_features must be multiples of 16 (NVFP4 blocks), got "
                f"{in_features} and {out_features}: keep such a layer out (to_fp4's skip)"
            )
        flags = {"hadamard": hadamard, "stochastic_gradients": stochastic_gradients}
        for name, value in flags.items():
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {_short(value)}")
        if not isinstance(weight_blocks, str) or weight_blocks not in _WEIGHT_BLOCKS:
            raise ValueError(f"weight_blocks must be '1x16' or '16x16', got {weight_blocks!r}")
        seed = check_scalar(seed, "seed", int, min_val=0, max_val=2**63 - 1)
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.hadamard, self.weight_blocks = hadamard, weight_blocks
        self.stochastic_gradients, self.seed = stochastic_gradients, seed
        self._generators: dict[torch.device, torch.Generator] = {}

    def _generator(self, device: torch.device) -> torch.Generator:
        """Return the layer's generator on ``device``, made from ``seed`` on first use."""
        if device not in self._generators:
            self._generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[device]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the layer: ``Q(x) @ Q(weight).T + bias``; refuse ``x`` as ``FP8Linear`` does."""
        return _linear(self, x, lambda x2: _FP4Matmul.apply(x2, self.weight, self))

    def extra_repr(self) -> str:
        """Describe the sizes and the recipe."""
        return (
            f"{super().extra_repr()}, hadamard={self.hadamard}, weight_blocks="
            f"{self.weight_blocks!r}, stochastic_gradients={self.stochastic_gradients}, "
            f"seed={self.seed}"
        )


def to_fp4(model: nn.Module, skip: Collection[str] = (), **options: Any) -> nn.Module:
    """Replace the model's ``torch.nn.Linear`` layers by :class:`FP4Linear` in place; return it.

    As :func:`mptutor.torch.to_fp8` (the new layers take over the old ones' ``Parameter``
    objects; ``skip`` names layers to keep); ``options`` go to :class:`FP4Linear`, but for
    ``seed`` (default 0): the k-th layer replaced, in the order of the names, gets ``seed + k``.

    Raises
    ------
    TypeError, ValueError
        As :func:`mptutor.torch.to_fp8`, and for a layer whose sizes are not multiples of 16.
    """
    seed = check_scalar(options.pop("seed", 0), "seed", int, min_val=0, max_val=2**62)

    def build(name: str, k: int, old: nn.Linear) -> FP4Linear:
        try:
            return FP4Linear(
                old.in_features, old.out_features, old.bias is not None, seed=seed + k,
                device=old.weight.device, dtype=old.weight.dtype, **options,
            )  # fmt: skip
        except ValueError as error:
            raise ValueError(f"layer {name!r}: {error}") from None

    return swap_linears(model, skip, build, "to_fp4", "FP4Linear")
