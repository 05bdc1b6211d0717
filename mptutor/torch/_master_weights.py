"""FP32 master weights for an FP16/BF16 model: the talk's three functions and the optimizer.

:func:`prep_param_lists`, :func:`model_grads_to_master_grads` and
:func:`master_params_to_model_params` are named after the functions of the GTC 2018 talk
"Training Neural Networks with Mixed Precision"; :class:`MasterWeightOptimizer` bundles them
with loss scaling, skipped steps, clipping and checkpoints.
"""

from __future__ import annotations

import copy
import inspect
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from mptutor.atomic import atomic_path
from mptutor._checks import check_type, optional_positive
from mptutor.scaling import FLOAT32_MAX, DynamicLossScaler, LossScaler

__all__ = [
    "LOW_PRECISION_DTYPES",
    "prep_param_lists",
    "model_grads_to_master_grads",
    "master_params_to_model_params",
    "MasterWeightOptimizer",
]

#: Parameter dtypes that :class:`MasterWeightOptimizer` keeps an FP32 master copy of.
LOW_PRECISION_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)

OptimizerOrFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer] | torch.optim.Optimizer

_FLAG = "True or False"
_SCALER = "None or a LossScaler such as DynamicLossScaler() or StaticLossScaler(128.0)"
_KEYS = {"master_params", "optimizer", "loss_scaler", "flat_master"}


def _tensors(values: Any, name: str) -> list[torch.Tensor]:
    """Return the parameters of a module or the tensors of an iterable; refuse anything else."""
    if isinstance(values, nn.Module):
        return list(values.parameters())
    accepted = "a torch.nn.Module or an iterable of tensors"
    if isinstance(values, (torch.Tensor, str, bytes)) or not isinstance(values, Iterable):
        check_type(values, name, (), accepted)
    found = list(values)
    for i, t in enumerate(found):
        check_type(t, f"{name}[{i}]", torch.Tensor, "a torch.Tensor")
    return found


def _trainable(model: Any) -> list[torch.Tensor]:
    found = [p for p in _tensors(model, "model") if p.requires_grad]
    if not found:
        raise ValueError(
            "no trainable parameters: the model (or list) has no parameter with requires_grad=True"
        )
    return found


def _check_copies(model_params: Any, master_params: Any, flat_master: Any) -> None:
    """Check that the two lists of :func:`prep_param_lists` fit each other."""
    check_type(flat_master, "flat_master", bool, _FLAG)
    model_params = _tensors(model_params, "model_params")
    master_params = _tensors(master_params, "master_params")
    if flat_master:
        total = sum(p.numel() for p in model_params)
        if len(master_params) != 1 or master_params[0].numel() != total:
            raise ValueError(
                f"flat_master=True needs one flat master tensor of {total} elements, got "
                f"{[m.numel() for m in master_params]} elements in {len(master_params)} tensors"
            )
        return
    shapes = [tuple(p.shape) for p in model_params]
    if shapes != [tuple(m.shape) for m in master_params]:
        raise ValueError(
            f"model_params and master_params differ: shapes {shapes} and "
            f"{[tuple(m.shape) for m in master_params]}"
        )


def prep_param_lists(
    model: nn.Module | Iterable[torch.Tensor], flat_master: bool = False
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Make FP32 master copies of a model's trainable parameters.

    Parameters
    ----------
    model : torch.nn.Module or iterable of torch.Tensor
        The (usually FP16) model, or its parameters.
    flat_master : bool, optional
        Keep the master copy as one flat FP32 tensor (all parameters must then share a dtype
        and device). Fewer, larger kernels in the optimizer.

    Returns
    -------
    model_params : list of torch.Tensor
        The model's trainable parameters.
    master_params : list of torch.Tensor
        FP32 leaf tensors with ``requires_grad=True``: one per parameter, or a single flat one.

    Raises
    ------
    TypeError
        If ``model`` is neither a module nor an iterable of tensors, or ``flat_master`` is not
        a bool.
    ValueError
        If there is no trainable parameter, or ``flat_master`` is asked for parameters of
        mixed dtypes or devices.
    """
    check_type(flat_master, "flat_master", bool, _FLAG)
    model_params = _trainable(model)
    if flat_master:
        kinds = {(p.dtype, p.device) for p in model_params}
        if len(kinds) > 1:
            raise ValueError(f"flat_master needs parameters of one dtype and device, got {kinds}")
        flat = _flatten_dense_tensors([p.detach() for p in model_params]).float()
        master = nn.Parameter(flat)
        master.grad = torch.zeros_like(master)
        return model_params, [master]
    masters = [nn.Parameter(p.detach().clone().float()) for p in model_params]
    return model_params, masters


def model_grads_to_master_grads(
    model_params: Sequence[torch.Tensor],
    master_params: Sequence[torch.Tensor],
    flat_master: bool = False,
) -> None:
    """Copy the model's (FP16) gradients into the FP32 master parameters' ``.grad``.

    A parameter without a gradient gives its master ``grad = None`` (zeros in the flat case).

    Parameters
    ----------
    model_params, master_params : sequence of torch.Tensor
        As returned by :func:`prep_param_lists`.
    flat_master : bool, optional
        Whether ``master_params`` is a single flat tensor.

    Raises
    ------
    TypeError
        If an argument is not a sequence of tensors, or ``flat_master`` not a bool.
    ValueError
        If the two lists do not fit each other (count, shapes, or the flat tensor's size).
    """
    _check_copies(model_params, master_params, flat_master)
    _grads_to_masters(model_params, master_params, flat_master)


def _grads_to_masters(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor], flat: bool
) -> None:
    if flat:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model_params]
        master_params[0].grad = _flatten_dense_tensors([g.detach() for g in grads]).float()
        return
    targets, sources = [], []
    for model, master in zip(model_params, master_params, strict=True):
        if model.grad is None:
            master.grad = None
        elif master.grad is None:
            master.grad = model.grad.detach().float()
        else:
            targets.append(master.grad)
            sources.append(model.grad.detach())
    if targets:  # one fused, converting copy instead of a kernel per tensor
        torch._foreach_copy_(targets, sources)


def master_params_to_model_params(
    model_params: Sequence[torch.Tensor],
    master_params: Sequence[torch.Tensor],
    flat_master: bool = False,
) -> None:
    """Copy the FP32 master weights back into the model's parameters (rounding to their dtype).

    Parameters
    ----------
    model_params : sequence of torch.Tensor
        The model's parameters, overwritten in place (the first list of
        :func:`prep_param_lists`).
    master_params : sequence of torch.Tensor
        The FP32 master weights to copy from (its second list).
    flat_master : bool, optional
        Whether ``master_params`` holds one flat tensor for all the parameters.

    Raises
    ------
    TypeError
        If an argument is not a sequence of tensors, or ``flat_master`` not a bool.
    ValueError
        If the two lists do not fit each other (count, shapes, or the flat tensor's size).
    """
    _check_copies(model_params, master_params, flat_master)
    _masters_to_model(model_params, master_params, flat_master)


@torch.no_grad()
def _masters_to_model(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor], flat: bool
) -> None:
    if flat:
        pieces = _unflatten_dense_tensors(master_params[0].detach(), list(model_params))
        for model, piece in zip(model_params, pieces, strict=True):
            model.copy_(piece)
        return
    torch._foreach_copy_(list(model_params), [m.detach() for m in master_params])


class MasterWeightOptimizer:
    """Train an FP16 (or BF16) model with FP32 master weights, loss scaling and skipped steps.

    The optimizer updates FP32 copies of the weights; the model keeps low-precision copies for
    the forward and backward passes. Each step: copy the model's gradients to the FP32 masters,
    unscale them and look for inf/NaN in one fused kernel
    (``torch._amp_foreach_non_finite_check_and_unscale_``), read that one flag on the host,
    skip the step if it is set, otherwise clip (if asked), step the optimizer and copy the
    masters back into the model. The loss scaler then adjusts the scale.

    Parameters
    ----------
    optimizer : callable or torch.optim.Optimizer
        Either a factory that takes the list of FP32 master parameters and returns an
        optimizer over them (``lambda params: torch.optim.SGD(params, lr=0.1)``), or an
        optimizer built on the model's parameters with no state yet; its parameters are swapped
        for the masters.
    model : torch.nn.Module
        The model; at least one trainable parameter must be FP16 or BF16.
    loss_scaler : mptutor.scaling.LossScaler, optional
        Decides the scale (a :class:`~mptutor.scaling.DynamicLossScaler`,
        :class:`~mptutor.scaling.StaticLossScaler` or anything with their protocol); a
        ``DynamicLossScaler`` with PyTorch's defaults and a floor of 1 when omitted. Several
        optimizers may share one scaler: step them together with :meth:`step_all`.
    clip_norm : float, optional
        Clip the global norm of the unscaled FP32 gradients to this value before each step.
    flat_master : bool, optional
        Keep the master weights as one flat FP32 tensor.

    Raises
    ------
    TypeError
        If ``model`` is not a module, ``optimizer`` is neither callable nor an optimizer or the
        factory returns something else, ``loss_scaler`` is not a loss scaler (a number is
        not: pass ``StaticLossScaler(128.0)``), or ``flat_master`` is not a bool.
    ValueError
        If the model has no trainable parameter, all of them are FP32 (nothing to keep a
        master copy of: convert with :func:`mptutor.torch.network_to_half`, or use
        ``torch.autocast``), ``clip_norm`` is not a positive finite number, the optimizer
        already has state or holds tensors that are not the model's parameters, the factory
        built its optimizer on tensors other than the master parameters it was given, or the
        scaler's floor is below ``2**-126`` (its reciprocal would overflow float32).

    Examples
    --------
    >>> import torch
    >>> from mptutor import torch as mpt
    >>> model = mpt.network_to_half(torch.nn.Linear(8, 4))
    >>> opt = mpt.MasterWeightOptimizer(lambda p: torch.optim.SGD(p, lr=0.1), model)
    >>> loss = model(torch.randn(2, 8, dtype=torch.half)).float().pow(2).mean()
    >>> opt.backward(loss)
    >>> opt.step()
    True
    """

    def __init__(
        self,
        optimizer: OptimizerOrFactory,
        model: nn.Module,
        loss_scaler: LossScaler | None = None,
        clip_norm: float | None = None,
        flat_master: bool = False,
    ) -> None:
        check_type(model, "model", nn.Module, "a torch.nn.Module")
        if loss_scaler is None:
            loss_scaler = DynamicLossScaler()
        check_type(loss_scaler, "loss_scaler", LossScaler, _SCALER)
        floor = getattr(loss_scaler, "min_scale", None)
        if isinstance(floor, float) and floor < 2.0**-126:
            raise ValueError(
                f"the loss scaler's min_scale={floor!r} is below 2**-126: the gradients are "
                "unscaled by float32(1 / scale), which overflows there; use a higher floor"
            )
        clip_norm = optional_positive("clip_norm", clip_norm)
        model_params = _trainable(model)
        if not any(p.dtype in LOW_PRECISION_DTYPES for p in model_params):
            dtypes = sorted({str(p.dtype) for p in model_params})
            raise ValueError(
                f"the model's trainable parameters are {', '.join(dtypes)}; MasterWeightOptimizer "
                "keeps FP32 master copies of float16/bfloat16 weights, so convert the model first "
                "(mptutor.torch.network_to_half(model)) or train it in FP32 with torch.autocast"
            )
        self.model_params, self.master_params = prep_param_lists(model_params, flat_master)
        self.model = model
        self.flat_master = flat_master
        self.loss_scaler: LossScaler = loss_scaler
        self.clip_norm = clip_norm
        self.optimizer = self._attach(optimizer)
        device = self.master_params[0].device
        self._found_inf = torch.zeros(1, device=device)
        self._inv_scale = torch.ones(1, device=device)
        self._scaler_steps = loss_scaler.history.steps  # to notice a scaler updated elsewhere

    def _attach(self, optimizer: OptimizerOrFactory) -> torch.optim.Optimizer:
        if isinstance(optimizer, torch.optim.Optimizer):
            if optimizer.state:
                raise ValueError(
                    "the optimizer already has state; pass a fresh optimizer or a factory"
                )
            if self.flat_master:
                raise ValueError("flat_master needs an optimizer factory, not an optimizer")
            swap = {
                id(m): master
                for m, master in zip(self.model_params, self.master_params, strict=True)
            }
            held = [p for group in optimizer.param_groups for p in group["params"]]
            missing = [p for p in held if id(p) not in swap]
            if missing:  # checked for every group before any group is changed
                raise ValueError(
                    f"the optimizer holds {len(missing)} tensor(s) that are not trainable "
                    "parameters of the model"
                )
            for group in optimizer.param_groups:
                group["params"] = [swap[id(p)] for p in group["params"]]
            return optimizer
        if not callable(optimizer):
            raise TypeError(
                "optimizer must be a torch.optim.Optimizer or a factory taking the master "
                f"parameters, got {optimizer!r:.80} of type {type(optimizer).__name__}"
            )
        built = optimizer(self.master_params)
        if not isinstance(built, torch.optim.Optimizer):
            raise TypeError(
                f"the optimizer factory returned {type(built).__name__}, not an optimizer"
            )
        masters = {id(m) for m in self.master_params}
        held = [p for group in built.param_groups for p in group["params"]]
        strangers = sum(id(p) not in masters for p in held)
        if strangers:
            raise ValueError(
                f"the optimizer factory built its optimizer on {strangers} tensor(s) that are "
                "not the FP32 master parameters it was given, so the master weights would never "
                "change: build it from the factory's argument, e.g. "
                "lambda params: torch.optim.SGD(params, lr=0.1)"
            )
        return built

    @property
    def scale(self) -> float:
        """The current loss scale."""
        return self.loss_scaler.scale

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Return the loss in FP32, multiplied by the current scale.

        Parameters
        ----------
        loss : torch.Tensor
            A loss with one element.

        Returns
        -------
        torch.Tensor
            ``loss.float() * scale``; call ``.backward()`` on it.

        Raises
        ------
        TypeError
            If ``loss`` is not a tensor.
        ValueError
            If it has more than one element (reduce it first, e.g. with ``.mean()``).
        """
        check_type(loss, "loss", torch.Tensor, "a torch.Tensor with one element")
        if loss.numel() != 1:
            raise ValueError(
                f"loss must have one element, got shape {tuple(loss.shape)}: reduce it first "
                "(loss.mean() or loss.sum())"
            )
        return loss.float() * self.loss_scaler.scale

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate the scaled loss into the model's gradients.

        Parameters
        ----------
        loss : torch.Tensor
            A loss with one element (not yet scaled).

        Raises
        ------
        TypeError, ValueError
            As :meth:`scale_loss`.
        """
        self.scale_loss(loss).backward()

    def zero_grad(self) -> None:
        """Clear the model's gradients.

        The master weights keep their FP32 gradient buffers, which the next :meth:`step`
        overwrites; keeping them saves an allocation per parameter and step.
        """
        for p in self.model_params:
            p.grad = None

    def step(self) -> bool:
        """Unscale, check, and apply (or skip) one update; then update the loss scale.

        Returns
        -------
        bool
            ``True`` if the update was applied, ``False`` if it was skipped because a
            gradient was inf or NaN (or the scaler said so). Gradients are cleared either way.

        Raises
        ------
        RuntimeError
            Before anything changes: if no parameter has a gradient (call :meth:`backward`
            first; ``GradScaler.step`` refuses the same), if the loss scaler was updated
            elsewhere since this optimizer's last step (a scaler shared with another
            optimizer: use :meth:`step_all`), or if ``1 / scale`` overflows float32.
        """
        return MasterWeightOptimizer.step_all(self)[0]

    @staticmethod
    def step_all(*optimizers: MasterWeightOptimizer) -> list[bool]:
        """Step several optimizers that share one loss scaler, updating the scale once.

        As ``torch.amp.GradScaler`` with several optimizers: each optimizer's gradients are
        unscaled by the same scale and checked; each optimizer steps unless its own gradients
        hold inf or NaN; then the scaler is updated once, with an overflow if any optimizer
        found one. One host sync in all.

        Parameters
        ----------
        *optimizers : MasterWeightOptimizer
            One or more, all with the same ``loss_scaler`` object.

        Returns
        -------
        list of bool
            For each optimizer, whether its update was applied.

        Raises
        ------
        TypeError
            If an argument is not a :class:`MasterWeightOptimizer`.
        ValueError
            If none is given, one is given twice, or they do not share one scaler.
        RuntimeError
            As :meth:`step`, before anything changes.
        """
        for i, opt in enumerate(optimizers):
            check_type(opt, f"optimizers[{i}]", MasterWeightOptimizer, "a MasterWeightOptimizer")
        if not optimizers or len({id(o) for o in optimizers}) != len(optimizers):
            raise ValueError(f"step_all needs distinct optimizers, got {len(optimizers)}")
        scaler = optimizers[0].loss_scaler
        if any(o.loss_scaler is not scaler for o in optimizers):
            raise ValueError("step_all steps optimizers that share one loss_scaler object")
        scale, steps = scaler.scale, scaler.history.steps
        for opt in optimizers:
            if all(p.grad is None for p in opt.model_params):
                raise RuntimeError(
                    "step() found no gradient in the model: call backward(loss) before step() "
                    "(torch.amp.GradScaler.step refuses the same)"
                )
            if opt._scaler_steps != steps:
                raise RuntimeError(
                    f"the loss scaler was updated {steps - opt._scaler_steps} time(s) since this "
                    "optimizer's last step, elsewhere: it is shared with another optimizer (or "
                    "updated by hand). Step optimizers that share a scaler together, once per "
                    "iteration: MasterWeightOptimizer.step_all(opt_a, opt_b)"
                )
        if not (scale > 0 and 1.0 / scale <= FLOAT32_MAX):
            raise RuntimeError(
                f"the loss scale {scale!r} is too small: 1 / scale overflows float32, so the "
                "gradients cannot be unscaled; give the scaler a floor of 2**-126 or more"
            )
        for opt in optimizers:
            opt._unscale(1.0 / scale)
        flags = [o._found_inf.to(optimizers[0]._found_inf.device) for o in optimizers]
        found = (flags[0] if len(flags) == 1 else torch.cat(flags)).tolist()  # one host sync
        took = scaler.update(any(found))
        takes = [not f and (took or any(found)) for f in found]
        for opt, take in zip(optimizers, takes, strict=True):
            opt._scaler_steps = scaler.history.steps
            if take:
                opt._apply()
            opt.zero_grad()
        return takes

    def _unscale(self, inv_scale: float) -> None:
        _grads_to_masters(self.model_params, self.master_params, self.flat_master)
        grads = [p.grad for p in self.master_params if p.grad is not None]
        self._found_inf.zero_()
        self._inv_scale.fill_(inv_scale)
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(
                grads, self._found_inf, self._inv_scale
            )

    def _apply(self) -> None:
        if self.clip_norm is not None:
            nn.utils.clip_grad_norm_(self.master_params, self.clip_norm, foreach=True)
        self.optimizer.step()
        _masters_to_model(self.model_params, self.master_params, self.flat_master)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume bit-exactly: master weights, optimizer and scaler state.

        Returns
        -------
        dict
            ``{"master_params", "optimizer", "optimizer_type", "loss_scaler", "flat_master"}``;
            the FP16 model weights are not saved, they are recomputed from the masters.
        """
        kind = type(self.optimizer)
        return {
            "master_params": [p.detach().clone() for p in self.master_params],
            "optimizer": self.optimizer.state_dict(),
            "optimizer_type": f"{kind.__module__}.{kind.__qualname__}",
            "loss_scaler": self.loss_scaler.state_dict(),
            "flat_master": self.flat_master,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` and copy the master weights into the model.

        Everything is checked before anything changes: on an error the master weights, the
        model, the optimizer and the scaler are as they were.

        Parameters
        ----------
        state : dict
            From :meth:`state_dict` (one saved without ``optimizer_type`` loads too).

        Raises
        ------
        ValueError
            If the state does not fit this optimizer: keys, ``flat_master``, the count, shapes
            or dtype of the master weights, a non-finite master weight, an optimizer of another
            type or with other parameter groups, or a scaler state its scaler refuses.
        """
        if not isinstance(state, Mapping) or not _KEYS <= set(state):
            have = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(
                f"not a MasterWeightOptimizer state: need keys {sorted(_KEYS)} (and optionally "
                f"'optimizer_type'), got {have}"
            )
        unknown = set(state) - _KEYS - {"optimizer_type"}
        if unknown:
            raise ValueError(
                f"not a MasterWeightOptimizer state: unexpected keys {sorted(unknown)}"
            )
        if state["flat_master"] is not self.flat_master:
            raise ValueError(
                f"state has flat_master={state['flat_master']!r}, this optimizer {self.flat_master}"
            )
        saved = state["master_params"]
        shapes = [tuple(p.shape) for p in self.master_params]
        if not isinstance(saved, (list, tuple)) or not all(
            isinstance(p, torch.Tensor) for p in saved
        ):
            raise ValueError(f"state['master_params'] must be a list of tensors, got {saved!r:.80}")
        if [tuple(p.shape) for p in saved] != shapes:
            raise ValueError(
                f"master weight shapes differ: saved {[tuple(p.shape) for p in saved]}, "
                f"model {shapes}"
            )
        for i, p in enumerate(saved):
            if p.dtype != torch.float32 or not torch.isfinite(p).all():
                raise ValueError(
                    f"state['master_params'][{i}] must be finite float32, got {p.dtype}"
                    + ("" if p.dtype != torch.float32 else " holding inf or NaN")
                )
        self._check_optimizer_state(state["optimizer"], state.get("optimizer_type"))
        trial = copy.deepcopy(self.loss_scaler)  # the scaler checks its state: try it on a copy
        try:
            trial.load_state_dict(state["loss_scaler"])
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"state['loss_scaler'] does not fit this scaler: {exc}") from exc
        self.optimizer.load_state_dict(state["optimizer"])  # torch checks before it changes
        self.loss_scaler.load_state_dict(state["loss_scaler"])
        self._scaler_steps = self.loss_scaler.history.steps
        with torch.no_grad():
            for master, value in zip(self.master_params, saved, strict=True):
                master.copy_(value)
        _masters_to_model(self.model_params, self.master_params, self.flat_master)

    def _check_optimizer_state(self, saved: Any, saved_type: Any) -> None:
        kind = type(self.optimizer)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if saved_type is not None and saved_type != name:
            raise ValueError(f"the state was saved from a {saved_type}, this optimizer is a {name}")
        if not isinstance(saved, Mapping) or set(saved) != {"state", "param_groups"}:
            raise ValueError("state['optimizer'] must be an optimizer's state_dict()")
        groups, ours = saved["param_groups"], self.optimizer.param_groups
        if not isinstance(groups, list) or len(groups) != len(ours):
            count = len(groups) if isinstance(groups, list) else type(groups).__name__
            raise ValueError(
                f"the saved optimizer has {count} parameter groups, this one {len(ours)}"
            )
        # A state saved without its type: settings that other torch.optim optimizers take and
        # this one does not (an older torch may have fewer; LR schedulers add others) betray it.
        others = {
            arg
            for cls in vars(torch.optim).values()
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)
            for arg in inspect.signature(cls).parameters
        }
        for i, (group, own) in enumerate(zip(groups, ours, strict=True)):
            if not isinstance(group, Mapping) or len(group.get("params", ())) != len(own["params"]):
                raise ValueError(
                    f"saved parameter group {i} does not hold {len(own['params'])} tensors"
                )
            alien = sorted((set(group) - set(own)) & others)
            if saved_type is None and alien:
                raise ValueError(
                    f"saved parameter group {i} has settings {alien} that this {name} does not "
                    "take: the state was saved from another kind of optimizer"
                )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a checkpoint atomically: a crash never leaves a half-written file at ``path``.

        Parameters
        ----------
        path : path-like
            Destination file.

        Raises
        ------
        TypeError
            If ``path`` is not a ``str`` or path-like.
        IsADirectoryError
            If ``path`` is a directory.
        """
        check_type(path, "path", (str, os.PathLike), "a str or path-like file name")
        if Path(path).is_dir():
            raise IsADirectoryError(f"{path} is a directory: give a file name, e.g. {path}/ckpt.pt")
        with atomic_path(path) as tmp:
            torch.save(self.state_dict(), tmp)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Read a checkpoint written by :meth:`save`; on any error nothing changes.

        Parameters
        ----------
        path : path-like
            The checkpoint file.

        Raises
        ------
        TypeError
            If ``path`` is not a ``str`` or path-like.
        FileNotFoundError
            If there is no such file.
        ValueError
            If it is not a readable checkpoint, or does not fit this optimizer (see
            :meth:`load_state_dict`); the message names the file.
        """
        check_type(path, "path", (str, os.PathLike), "a str or path-like file name")
        if not Path(path).is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        device = self.master_params[0].device
        try:
            state = torch.load(path, map_location=device, weights_only=True)
        except OSError:
            raise  # names the file already
        except Exception as exc:  # noqa: BLE001 - a corrupt file fails in many ways inside torch
            reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            raise ValueError(f"{path} is not a readable checkpoint ({reason})") from exc
        try:
            self.load_state_dict(state)
        except ValueError as exc:
            raise ValueError(f"checkpoint {path}: {exc}") from exc
