"""Where the first inf or NaN of a forward and backward pass appears, module by module."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mptutor._checks import check_type

_LOSS = "<loss_fn>"  # the name the loss function gets in a record


@dataclass(frozen=True)
class _Record:
    """Where the first inf or NaN appeared; ``str()`` says it in one sentence."""

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
        if self.module == _LOSS:
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
    """Return the number of infs, of NaNs and of values."""
    n_inf = sum(int(torch.isinf(t).sum()) for t in tensors)
    n_nan = sum(int(torch.isnan(t).sum()) for t in tensors)
    return n_inf, n_nan, sum(t.numel() for t in tensors)


def _largest_finite(tensors: list[torch.Tensor]) -> float:
    """Return the largest finite magnitude, NaN if there is none."""
    best = -math.inf
    for t in tensors:
        finite = t.detach()[torch.isfinite(t.detach())]
        if finite.numel():
            best = max(best, float(finite.abs().max()))
    return best if best > -math.inf else math.nan


def _has_nonfinite(tensors: list[torch.Tensor]) -> bool:
    """Whether any tensor holds an inf or NaN."""
    return any(not bool(torch.isfinite(t).all()) for t in tensors)


def _next_sequence_nr() -> int:
    """Mark "now" in autograd's numbering of nodes (a throw-away node's number)."""
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
        self.record: _Record | None = None

    def _found(
        self,
        module: nn.Module | None,
        phase: str,
        bad: list[torch.Tensor],
        around: list[torch.Tensor],
        op: str | None,
        detail: str,
    ) -> None:
        """Keep the first finding."""
        name = _LOSS if module is None else self.names[module]
        kind = "loss_fn" if module is None else self.types[module]
        dtype = next(t.dtype for t in bad if not bool(torch.isfinite(t).all()))
        largest = _largest_finite(around)
        self.record = _Record(name, kind, phase, dtype, op, *_counts(bad), largest, detail)

    def pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Blame inf/NaN in a module's inputs on its parent; push the module."""
        inputs = _float_tensors((args, kwargs))
        if self.record is None and self.stack and _has_nonfinite(inputs):
            parent = self.stack[-1][0]
            where = f"'{self.names[module]}' ({self.types[module]})"
            detail = f"computed between its submodules, the input of {where}"
            self._found(parent, "forward", inputs, inputs, None, detail)
        start = _next_sequence_nr() if self.track_nodes else 0
        self.stack.append((module, start))

    def post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        """Pop the module, note the nodes its forward created, check its output."""
        if not self.stack or self.stack[-1][0] is not module:
            return  # the forward raised inside a submodule; nothing to attribute
        _, start = self.stack.pop()
        if self.track_nodes:
            self.calls.append((start, _next_sequence_nr(), module))
        if self.record is None:
            outputs = _float_tensors(output)
            if _has_nonfinite(outputs):
                around = _float_tensors((args, kwargs)) + outputs
                self._found(module, "forward", outputs, around, None, "its output")

    def owner(self, sequence_nr: int) -> nn.Module | None:
        """Return the innermost module whose forward created the node."""
        inner = [(start, m) for start, end, m in self.calls if start < sequence_nr < end]
        return max(inner, key=lambda c: c[0])[1] if inner else None

    def node_hook(self, node: Any) -> Callable[[tuple, tuple], None]:
        """Return a hook that checks the gradients flowing into and out of ``node``."""

        def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
            if self.record is not None:
                return
            incoming, produced = _float_tensors(grad_outputs), _float_tensors(grad_inputs)
            module = self.owner(node._sequence_nr())
            if _has_nonfinite(incoming):
                detail = "the sum of the gradients that flow into this operation"
                self._found(module, "backward", incoming, incoming + produced, node.name(), detail)
            elif _has_nonfinite(produced):
                detail = "the gradient this operation computes"
                self._found(module, "backward", produced, incoming + produced, node.name(), detail)

        return hook


def _graph_nodes(root: Any, first_sequence_nr: int) -> Iterator[Any]:
    """Yield the autograd nodes the model's forward created (no accumulators)."""
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
) -> _Record | None:
    """Run the model with hooks and report the first place that produced an inf or NaN.

    Hooks on every module watch the forward pass; with ``loss_fn`` the loss is differentiated
    (no ``.grad`` is touched) with a hook on every autograd operation. Values computed between
    submodules are blamed on the parent; ``-inf`` masks count too. Afterwards the hooks are gone
    and the buffers as they were.

    Parameters
    ----------
    model : torch.nn.Module
        The model, in the mode (train/eval) and dtype to examine.
    *inputs : object
        The model's positional inputs (tensors or nested structures of them), on its device.
    loss_fn : callable, optional
        Maps the model's output to a scalar loss tensor; without it only the forward pass runs.

    Returns
    -------
    record or None
        ``None`` when all was finite; else a record that prints as a sentence, with ``module``
        (``""``: the model's own code; ``"<loss_fn>"``), ``module_type``, ``phase``, ``dtype``,
        ``op`` (backward only), ``n_inf``, ``n_nan``, ``numel``, ``largest_finite``, ``detail``.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is not a module, ``loss_fn`` not callable or returns no scalar tensor that
        requires a gradient, or an input already holds inf/NaN.
    """
    check_type(model, "model", nn.Module, "a torch.nn.Module")
    if loss_fn is not None:
        check_type(loss_fn, "loss_fn", Callable, "a callable mapping the model's output to a loss")
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
            around = _float_tensors(output) + [loss]
            search._found(None, "forward", [loss], around, None, "the loss it returns")
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
