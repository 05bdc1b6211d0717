"""Layer sizes that keep FP16/BF16 matrix products off the Tensor Core fast path.

Used through :mod:`mptutor.torch`::

    from mptutor import torch as mpt

    mpt.tensor_core_audit(model)      # layers whose shapes keep FP16/BF16 GEMMs off Tensor Cores

It reads only the modules' sizes, so it works on any ``torch.nn.Module`` on any device.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from mptutor._checks import check_scalar
from mptutor.table import Table

__all__ = ["ShapeIssue", "TensorCoreAudit", "tensor_core_audit"]


@dataclass(frozen=True)
class ShapeIssue:
    """One layer size that keeps FP16/BF16 matrix products off the Tensor Core fast path.

    Attributes
    ----------
    module : str
        Qualified name, as in ``model.named_modules()``.
    layer : str
        The module's class name.
    setting : str
        The constructor argument at fault (``"out_features"``, ``"in_channels"``, ...).
    size : int
        Its value.
    pad_to : int
        The next multiple of the audit's ``multiple``: the size that fixes it.
    reason : str
        Why it matters, in words.
    """

    module: str
    layer: str
    setting: str
    size: int
    pad_to: int
    reason: str


class TensorCoreAudit(list):
    """The :class:`ShapeIssue` records of :func:`tensor_core_audit`, printed as a table."""

    def table(self) -> Table:
        """Return the records as a :class:`mptutor.table.Table`.

        Returns
        -------
        Table
            One row per record: module, layer, setting, size, pad to, reason.
        """
        return Table(
            {
                "module": r.module,
                "layer": r.layer,
                "setting": r.setting,
                "size": r.size,
                "pad to": r.pad_to,
                "reason": r.reason,
            }
            for r in self
        )

    def __repr__(self) -> str:
        if not self:
            return "no layer with a size off the Tensor Core fast path"
        return repr(self.table())

    def _repr_html_(self) -> str:
        if not self:
            return "<p>no layer with a size off the Tensor Core fast path</p>"
        return self.table()._repr_html_()


def _sizes(module: nn.Module) -> list[tuple[str, int, str]]:
    """Return (setting, size, what it is) for the GEMM dimensions a layer fixes."""
    if isinstance(module, nn.Linear):
        return [
            ("in_features", module.in_features, "a GEMM dimension (K)"),
            ("out_features", module.out_features, "a GEMM dimension (N)"),
        ]
    if isinstance(module, nn.modules.conv._ConvNd):
        groups = module.groups
        if groups > 1 and groups == module.in_channels:
            return []  # depthwise: not a matrix product
        per_group = " per group" if groups > 1 else ""
        return [
            ("in_channels", module.in_channels // groups, "input channels" + per_group),
            ("out_channels", module.out_channels // groups, "output channels" + per_group),
        ]
    if isinstance(module, nn.MultiheadAttention):
        return [
            ("embed_dim", module.embed_dim, "a GEMM dimension of every projection"),
            ("head_dim", module.head_dim, "the attention GEMMs' inner dimension"),
        ]
    if isinstance(module, nn.RNNBase):
        return [
            ("input_size", module.input_size, "a GEMM dimension of the input projection"),
            ("hidden_size", module.hidden_size, "a GEMM dimension of every step"),
        ]
    if isinstance(module, nn.Embedding):
        return [("num_embeddings", module.num_embeddings, "vocabulary")]
    return []


def tensor_core_audit(
    model: nn.Module, multiple: int = 8, vocabulary_min: int = 1000
) -> TensorCoreAudit:
    """List the layers whose sizes keep FP16/BF16 GEMMs off the Tensor Core fast path.

    cuBLAS and cuDNN reach their Tensor Core peak when every dimension of a matrix product is
    a multiple of 8 for FP16/BF16 (16 for FP8): the feature sizes of ``Linear`` layers, the
    channels of convolutions (per group), attention and recurrent sizes. Other sizes fall back
    to slower kernels or padding inside the library. Vocabulary-sized layers (``Linear`` outputs
    or ``Embedding`` rows of at least ``vocabulary_min``) are named as such: they are often the
    largest GEMM of a language model, and padding the vocabulary with unused entries is free.
    The batch size (times the sequence length) is a GEMM dimension too, but it is not part of
    the model; choose it a multiple of 8 as well. Only sizes are read; nothing runs.

    Parameters
    ----------
    model : torch.nn.Module
        Any model (on any device).
    multiple : int, optional
        The multiple to check (8 for FP16/BF16, 16 for FP8).
    vocabulary_min : int, optional
        Sizes at least this large are reported as vocabulary-sized.

    Returns
    -------
    TensorCoreAudit
        A list of :class:`ShapeIssue`, one per size at fault, in module order; it prints as a
        table (``.table()`` returns it as a :class:`mptutor.table.Table`). Empty when all sizes
        fit.

    Raises
    ------
    TypeError
        If ``model`` is not a ``torch.nn.Module``, or ``multiple`` or ``vocabulary_min`` is not
        an integer.
    ValueError
        If ``multiple`` or ``vocabulary_min`` is less than 1.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    multiple = check_scalar(multiple, "multiple", int, min_val=1)
    vocabulary_min = check_scalar(vocabulary_min, "vocabulary_min", int, min_val=1)
    issues = TensorCoreAudit()
    for name, module in model.named_modules():
        for setting, size, what in _sizes(module):
            if size % multiple == 0:
                continue
            pad_to = -(-size // multiple) * multiple
            if setting in ("out_features", "num_embeddings") and size >= vocabulary_min:
                reason = (
                    f"vocabulary-sized ({size} entries), not a multiple of {multiple}: "
                    f"pad with {pad_to - size} unused entries"
                )
            elif setting == "num_embeddings":
                continue  # a small lookup table is not a matrix product
            else:
                reason = f"{what}, not a multiple of {multiple}"
            issues.append(ShapeIssue(name, type(module).__name__, setting, size, pad_to, reason))
    return issues
