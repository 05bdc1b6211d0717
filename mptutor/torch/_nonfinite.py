"""Where the first inf or NaN of a forward and backward pass appears, module by module.

Used through :mod:`mptutor.torch`::

    from mptutor import torch as mpt

    record = mpt.find_nonfinite(model, x, loss_fn=lambda out: F.cross_entropy(out.float(), y))
    print(record)                     # None when every activation and gradient is finite

It works on any ``torch.nn.Module``, on a CPU and on a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["NonFiniteRecord", "find_nonfinite"]

#: The name :func:`find_nonfinite` gives the loss function in its records.
LOSS_NAME = "<loss_fn>"


@dataclass(frozen=True)
class NonFiniteRecord:
    """Where the first inf or NaN appeared, as :func:`find_nonfinite` found it.

    Attributes
    ----------
    module : str
        Qualified name of the module, as in ``model.named_modules()`` (``"0"``,
        ``"layer1.0.conv2"``); ``""`` for the model's own forward code, ``"<loss_fn>"`` for
        the loss function.
    module_type : str
        The module's class name (``"loss_fn"`` for the loss function).
    phase : str
        ``"forward"`` or ``"backward"``.
    dtype : torch.dtype
        Dtype of the tensor that holds the first inf/NaN.
    op : str or None
        In the backward pass, the autograd operation that produced it (``"SqrtBackward0"``);
        ``None`` in the forward pass.
    n_inf, n_nan, numel : int
        How many values of the offending tensors are infinite, NaN, and how many there are.
    largest_finite : float
        The largest finite magnitude among the tensors that went in and came out there (the
        module's inputs and outputs; the operation's incoming and outgoing gradients); NaN if
        none is finite.
    detail : str
        What exactly held the inf/NaN, in words.
    """

    module: str
    module_type: str
    phase: str
    dtype: torch.dtype
    op: str | None
    n_inf: int
    n_nan: int
    numel: int
    largest_finite: float
    detail: str

    def __str__(self) -> str:
        if self.module == LOSS_NAME:
            where = "the loss function"
        elif self.module == "":
            where = f"the model's own forward code ({self.module_type})"
        else:
            where = f"module '{self.module}' ({self.module_type})"
        op = f", operation {self.op}" if self.op else ""
        dtype = str(self.dtype).removeprefix("torch.")
        limit = ""
        if self.dtype.is_floating_point:
            limit = f" ({dtype} holds magnitudes up to {torch.finfo(self.dtype).max:.6g})"
        return (
            f"first inf/NaN in the {self.phase} pass, in {where}{op}: {self.detail}, {dtype}, "
            f"{self.n_inf} inf and {self.n_nan} NaN of {self.numel} values; largest finite "
            f"magnitude there {self.largest_finite:.6g}{limit}"
        )


def _float_tensors(obj: Any) -> list[torch.Tensor]:
    """Collect the floating-point tensors in a tensor, or in lists, tuples and dicts of them."""
    if isinstance(obj, torch.Tensor):
        return [obj] if obj.is_floating_point() else []
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _float_tensors(item)]
    return []


def _counts(tensors: list[torch.Tensor]) -> tuple[int, int, int]:
    n_inf = sum(int(torch.isinf(t).sum()) for t in tensors)
    n_nan = sum(int(torch.isnan(t).sum()) for t in tensors)
    return n_inf, n_nan, sum(t.numel() for t in tensors)


def _largest_finite(tensors: list[torch.Tensor]) -> float:
    best = -math.inf
    for t in tensors:
        finite = t.detach()[torch.isfinite(t.detach())]
        if finite.numel():
            best = max(best, float(finite.abs().max()))
    return best if best > -math.inf else math.nan


def _has_nonfinite(tensors: list[torch.Tensor]) -> bool:
    return any(not bool(torch.isfinite(t).all()) for t in tensors)


def _next_sequence_nr() -> int:
    # Autograd numbers its nodes in the order they are created (per thread). The number of a
    # throw-away node marks "now", so that each node can later be traced to the module whose
    # forward created it.
    with torch.enable_grad():
        probe = torch.zeros((), requires_grad=True)
        return (probe * 1).grad_fn._sequence_nr()


class _Search:
    """State of one :func:`find_nonfinite` run: the module call stack and the first finding."""

    def __init__(self, model: nn.Module, track_nodes: bool) -> None:
        self.names = {m: name for name, m in model.named_modules()}
        self.types = {m: type(m).__name__ for m in self.names}
        self.track_nodes = track_nodes
        self.stack: list[tuple[nn.Module, int]] = []
        self.calls: list[tuple[int, int, nn.Module]] = []  # (first, last sequence nr, module)
        self.root = model
        self.record: NonFiniteRecord | None = None

    def _found(
        self,
        module: nn.Module | None,
        phase: str,
        bad: list[torch.Tensor],
        around: list[torch.Tensor],
        op: str | None,
        detail: str,
    ) -> None:
        n_inf, n_nan, numel = _counts(bad)
        self.record = NonFiniteRecord(
            module=LOSS_NAME if module is None else self.names[module],
            module_type="loss_fn" if module is None else self.types[module],
            phase=phase,
            dtype=next(t.dtype for t in bad if not bool(torch.isfinite(t).all())),
            op=op,
            n_inf=n_inf,
            n_nan=n_nan,
            numel=numel,
            largest_finite=_largest_finite(around),
            detail=detail,
        )

    # forward hooks
    def pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        inputs = _float_tensors((args, kwargs))
        if self.record is None and self.stack and _has_nonfinite(inputs):
            parent = self.stack[-1][0]
            self._found(
                parent,
                "forward",
                inputs,
                inputs,
                None,
                f"computed between its submodules, the input of "
                f"'{self.names[module]}' ({self.types[module]})",
            )
        start = _next_sequence_nr() if self.track_nodes else 0
        self.stack.append((module, start))

    def post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if not self.stack or self.stack[-1][0] is not module:
            return  # the forward raised inside a submodule; nothing to attribute
        _, start = self.stack.pop()
        if self.track_nodes:
            self.calls.append((start, _next_sequence_nr(), module))
        if self.record is None:
            outputs = _float_tensors(output)
            if _has_nonfinite(outputs):
                self._found(
                    module,
                    "forward",
                    outputs,
                    _float_tensors((args, kwargs)) + outputs,
                    None,
                    "its output",
                )

    # backward
    def owner(self, sequence_nr: int) -> nn.Module | None:
        inner = [(start, m) for start, end, m in self.calls if start < sequence_nr < end]
        return max(inner, key=lambda c: c[0])[1] if inner else None

    def node_hook(self, node: Any) -> Callable[[tuple, tuple], None]:
        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if self.record is not None:
                return
            incoming, produced = _float_tensors(grad_outputs), _float_tensors(grad_inputs)
            module = self.owner(node._sequence_nr())
            if _has_nonfinite(incoming):
                self._found(
                    module,
                    "backward",
                    incoming,
                    incoming + produced,
                    node.name(),
                    "the sum of the gradients that flow into this operation",
                )
            elif _has_nonfinite(produced):
                self._found(
                    module,
                    "backward",
                    produced,
                    incoming + produced,
                    node.name(),
                    "the gradient this operation computes",
                )

        return hook


def _graph_nodes(root: Any, first_sequence_nr: int) -> Iterator[Any]:
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.name().endswith("AccumulateGrad") or node._sequence_nr() < first_sequence_nr:
            continue  # parameters' accumulators, and graph built before the model ran
        yield node
        todo.extend(child for child, _ in node.next_functions)


def find_nonfinite(
    model: nn.Module,
    *inputs: Any,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
) -> NonFiniteRecord | None:
    """Run the model with hooks and report the first place that produced an inf or NaN.

    The forward pass runs with hooks on every module; with ``loss_fn`` the loss is computed from
    the model's output and differentiated (with :func:`torch.autograd.grad`, so no ``.grad`` is
    touched) with a hook on every autograd operation. The first module whose output holds an
    inf/NaN (or, in the backward pass, the first operation whose computed gradient does) is
    reported. Values computed in a module's forward between its submodules are blamed on that
    module. Intended infinities, such as attention masks filled with ``-inf``, are reported too.

    Hooks are removed afterwards, also when the forward raises; parameters, gradients,
    buffers (BatchNorm statistics) and the training mode are left as they were.

    Parameters
    ----------
    model : torch.nn.Module
        The model, in the mode (train/eval) and dtype you want to examine.
    *inputs : object
        The model's positional inputs (tensors or nested structures of tensors), on its device.
    loss_fn : callable, optional
        Maps the model's output to a scalar loss tensor, e.g.
        ``lambda out: F.cross_entropy(out.float(), y)``. Without it only the forward pass runs.

    Returns
    -------
    NonFiniteRecord or None
        ``None`` when every activation (and gradient) was finite.

    Raises
    ------
    TypeError
        If ``model`` is not a ``torch.nn.Module``, ``loss_fn`` is not callable, or it returns
        something other than a tensor.
    ValueError
        If an input already holds inf/NaN, or the loss is not a scalar that depends on
        something that requires a gradient.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(
            f"loss_fn must be a callable mapping the model's output to a loss, "
            f"got {type(loss_fn).__name__}"
        )
    for i, value in enumerate(inputs):
        n_inf, n_nan, _ = _counts(_float_tensors(value))
        if n_inf or n_nan:
            raise ValueError(
                f"input {i} already holds {n_inf} inf and {n_nan} NaN values before the model "
                "runs; find_nonfinite looks for the layer that produces them"
            )

    search = _Search(model, track_nodes=loss_fn is not None)
    handles = []
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    try:
        for module in search.names:
            handles.append(module.register_forward_pre_hook(search.pre_hook, with_kwargs=True))
            handles.append(
                module.register_forward_hook(search.post_hook, with_kwargs=True, always_call=True)
            )
        first = _next_sequence_nr()
        with torch.enable_grad() if loss_fn is not None else torch.no_grad():
            output = model(*inputs)
            if search.record is not None or loss_fn is None:
                return search.record
            loss = loss_fn(output)
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"loss_fn must return a tensor, got {type(loss).__name__}")
        if loss.numel() != 1:
            raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
        if loss.grad_fn is None:
            raise ValueError(
                "the loss does not require a gradient: no parameter of the model (and no input) "
                "has requires_grad=True, so there is no backward pass to examine"
            )
        if not bool(torch.isfinite(loss).all()):
            search._found(
                None,
                "forward",
                [loss],
                _float_tensors(output) + [loss],
                None,
                "the loss it returns",
            )
            return search.record
        for node in _graph_nodes(loss.grad_fn, first):
            handles.append(node.register_hook(search.node_hook(node)))
        targets = [p for p in model.parameters() if p.requires_grad]
        targets += [t for t in _float_tensors(inputs) if t.requires_grad]
        torch.autograd.grad(loss, targets, allow_unused=True)
        return search.record
    finally:
        for handle in handles:
            handle.remove()
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
