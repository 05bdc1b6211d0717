"""FP32 master weights for an FP16/BF16 model: the talk's three functions and the optimizer.

:func:`prep_param_lists`, :func:`model_grads_to_master_grads` and
:func:`master_params_to_model_params` are named after the functions of the GTC 2018 talk
"Training Neural Networks with Mixed Precision"; :class:`MasterWeightOptimizer` bundles them
with loss scaling, skipped steps, clipping and checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from mptutor.atomic import atomic_path
from mptutor.checks import optional_positive
from mptutor.scaling import DynamicLossScaler, LossScaler

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


def _trainable(model: nn.Module | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    params = model.parameters() if isinstance(model, nn.Module) else model
    found = [p for p in params if p.requires_grad]
    if not found:
        raise ValueError(
            "no trainable parameters: the model (or list) has no parameter with requires_grad=True"
        )
    return found


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
    ValueError
        If there is no trainable parameter, or ``flat_master`` is asked for parameters of
        mixed dtypes or devices.
    """
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
    """
    if flat_master:
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


@torch.no_grad()
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
    ValueError
        If the two lists differ in length (without ``flat_master``).
    """
    if flat_master:
        pieces = _unflatten_dense_tensors(master_params[0].detach(), list(model_params))
        for model, piece in zip(model_params, pieces, strict=True):
            model.copy_(piece)
        return
    if len(model_params) != len(master_params):
        raise ValueError(
            f"{len(model_params)} model parameters but {len(master_params)} master parameters"
        )
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
        optimizer (``lambda params: torch.optim.SGD(params, lr=0.1)``), or an optimizer built
        on the model's parameters with no state yet; its parameters are swapped for the masters.
    model : torch.nn.Module
        The model; at least one trainable parameter must be FP16 or BF16.
    loss_scaler : mptutor.scaling.LossScaler, optional
        Decides the scale (a :class:`~mptutor.scaling.DynamicLossScaler`,
        :class:`~mptutor.scaling.StaticLossScaler` or anything with their protocol); a
        ``DynamicLossScaler`` with PyTorch's defaults when omitted.
    clip_norm : float, optional
        Clip the global norm of the unscaled FP32 gradients to this value before each step.
    flat_master : bool, optional
        Keep the master weights as one flat FP32 tensor.

    Raises
    ------
    ValueError
        If the model has no trainable parameter, all of them are FP32 (nothing to keep a
        master copy of: convert with :func:`mptutor.torch.network_to_half`, or use
        ``torch.autocast``), ``clip_norm`` is not a positive finite number, or the optimizer
        already has state or holds tensors that are not the model's parameters.
    TypeError
        If ``optimizer`` is neither callable nor an optimizer.

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
        model_params = _trainable(model)
        low = [p for p in model_params if p.dtype in LOW_PRECISION_DTYPES]
        if not low:
            dtypes = sorted({str(p.dtype) for p in model_params})
            raise ValueError(
                f"the model's trainable parameters are {', '.join(dtypes)}; MasterWeightOptimizer "
                "keeps FP32 master copies of float16/bfloat16 weights, so convert the model first "
                "(mptutor.torch.network_to_half(model)) or train it in FP32 with torch.autocast"
            )
        clip_norm = optional_positive("clip_norm", clip_norm)
        self.model = model
        self.flat_master = flat_master
        self.model_params, self.master_params = prep_param_lists(model_params, flat_master)
        self.loss_scaler: LossScaler = (
            loss_scaler if loss_scaler is not None else DynamicLossScaler()
        )
        self.clip_norm = clip_norm
        self.optimizer = self._attach(optimizer)
        device = self.master_params[0].device
        self._found_inf = torch.zeros(1, device=device)
        self._inv_scale = torch.ones(1, device=device)

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
            for group in optimizer.param_groups:
                missing = [p for p in group["params"] if id(p) not in swap]
                if missing:
                    raise ValueError(
                        f"the optimizer holds {len(missing)} tensor(s) that are not trainable "
                        "parameters of the model"
                    )
                group["params"] = [swap[id(p)] for p in group["params"]]
            return optimizer
        if callable(optimizer):
            built = optimizer(self.master_params)
            if not isinstance(built, torch.optim.Optimizer):
                raise TypeError(
                    f"the optimizer factory returned {type(built).__name__}, not an optimizer"
                )
            return built
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer or a factory taking the master parameters, "
            f"got {type(optimizer).__name__}"
        )

    @property
    def scale(self) -> float:
        """The current loss scale."""
        return self.loss_scaler.scale

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Return the loss in FP32, multiplied by the current scale.

        Parameters
        ----------
        loss : torch.Tensor
            A scalar loss.

        Returns
        -------
        torch.Tensor
            ``loss.float() * scale``; call ``.backward()`` on it.
        """
        return loss.float() * self.loss_scaler.scale

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate the scaled loss into the model's gradients.

        Parameters
        ----------
        loss : torch.Tensor
            A scalar loss (not yet scaled).
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
            gradient was inf or NaN. Gradients are cleared either way.
        """
        model_grads_to_master_grads(self.model_params, self.master_params, self.flat_master)
        grads = [p.grad for p in self.master_params if p.grad is not None]
        self._found_inf.zero_()
        self._inv_scale.fill_(1.0 / self.loss_scaler.scale)
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(
                grads, self._found_inf, self._inv_scale
            )
        found_inf = bool(self._found_inf.item())  # the one host sync of the step
        take = self.loss_scaler.update(found_inf)
        if take:
            if self.clip_norm is not None:
                nn.utils.clip_grad_norm_(self.master_params, self.clip_norm, foreach=True)
            self.optimizer.step()
            master_params_to_model_params(self.model_params, self.master_params, self.flat_master)
        self.zero_grad()
        return take

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume bit-exactly: master weights, optimizer and scaler state.

        Returns
        -------
        dict
            ``{"master_params", "optimizer", "loss_scaler", "flat_master"}``; the FP16 model
            weights are not saved, they are recomputed from the masters.
        """
        return {
            "master_params": [p.detach().clone() for p in self.master_params],
            "optimizer": self.optimizer.state_dict(),
            "loss_scaler": self.loss_scaler.state_dict(),
            "flat_master": self.flat_master,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` and copy the master weights into the model.

        Parameters
        ----------
        state : dict
            From :meth:`state_dict`.

        Raises
        ------
        ValueError
            If the state does not fit this model (keys, count or shapes of master weights).
        """
        needed = {"master_params", "optimizer", "loss_scaler", "flat_master"}
        if not isinstance(state, dict) or not needed <= set(state):
            have = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ValueError(
                f"not a MasterWeightOptimizer state: need keys {sorted(needed)}, got {have}"
            )
        if state["flat_master"] != self.flat_master:
            raise ValueError(
                f"state has flat_master={state['flat_master']}, this optimizer {self.flat_master}"
            )
        saved = state["master_params"]
        shapes = [tuple(p.shape) for p in self.master_params]
        if [tuple(p.shape) for p in saved] != shapes:
            raise ValueError(
                f"master weight shapes differ: saved {[tuple(p.shape) for p in saved]}, "
                f"model {shapes}"
            )
        with torch.no_grad():
            for master, value in zip(self.master_params, saved, strict=True):
                master.copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
        self.loss_scaler.load_state_dict(state["loss_scaler"])
        master_params_to_model_params(self.model_params, self.master_params, self.flat_master)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write a checkpoint atomically: a crash never leaves a half-written file at ``path``.

        Parameters
        ----------
        path : path-like
            Destination file.
        """
        with atomic_path(path) as tmp:
            torch.save(self.state_dict(), tmp)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Read a checkpoint written by :meth:`save`.

        Parameters
        ----------
        path : path-like
            The checkpoint file.

        Raises
        ------
        FileNotFoundError
            If there is no such file.
        ValueError
            If it does not fit this model.
        """
        if not Path(path).is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        state = torch.load(path, map_location=self.master_params[0].device, weights_only=True)
        self.load_state_dict(state)
