"""FP32 master weights for an FP16/BF16 model: the talk's helpers and the optimizer.

The functions are named after those of the GTC 2018 talk "Training Neural Networks with Mixed
Precision"; :class:`MasterWeightOptimizer` adds loss scaling, skipped steps and checkpoints.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mptutor import gradients
from mptutor._atomic import atomic_path
from mptutor._checks import _short, check_type, optional_positive
from mptutor.scaling import FLOAT32_MAX, DynamicLossScaler, LossScaler

Factory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]

_SCALER = "None or a LossScaler such as DynamicLossScaler() or StaticLossScaler(128.0)"
_KEYS = {"master_params", "optimizer", "optimizer_type", "loss_scaler"}


def bn_to_float(module: nn.Module) -> nn.Module:
    """Convert a module's BatchNorm layers (batch sums) to FP32 in place; return the module.

    The talk's ``BN_convert_float``; a BatchNorm module itself is converted too.

    Raises
    ------
    TypeError
        If ``module`` is not a ``torch.nn.Module``.
    """
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    for sub in module.modules():
        if isinstance(sub, nn.modules.batchnorm._BatchNorm):
            sub.float()
    return module


def network_to_half(module: nn.Module) -> nn.Module:
    """Convert a module to FP16 in place, except its BatchNorm layers (FP32); return it.

    Raises
    ------
    TypeError
        If ``module`` is not a ``torch.nn.Module``.
    """
    check_type(module, "module", nn.Module, "a torch.nn.Module")
    return bn_to_float(module.half())


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


def _check_copies(model_params: Any, master_params: Any) -> None:
    """Check that the two lists of :func:`prep_param_lists` fit each other."""
    shapes = [tuple(p.shape) for p in _tensors(model_params, "model_params")]
    masters = [tuple(m.shape) for m in _tensors(master_params, "master_params")]
    if shapes != masters:
        raise ValueError(f"model_params and master_params differ: shapes {shapes} and {masters}")


def prep_param_lists(
    model: nn.Module | Iterable[torch.Tensor],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Make FP32 master copies of a model's trainable parameters.

    Returns
    -------
    model_params, master_params : list of torch.Tensor
        The trainable parameters of ``model`` (a module or its parameters), and an FP32 leaf
        copy of each with ``requires_grad=True``.

    Raises
    ------
    TypeError, ValueError
        If ``model`` is neither a module nor an iterable of tensors, or none is trainable.
    """
    model_params = [p for p in _tensors(model, "model") if p.requires_grad]
    if not model_params:
        raise ValueError(
            "no trainable parameters: the model (or list) has no parameter with requires_grad=True"
        )
    return model_params, [nn.Parameter(p.detach().clone().float()) for p in model_params]


def model_grads_to_master_grads(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor]
) -> None:
    """Copy the model's (FP16) gradients into the FP32 masters' ``.grad`` (None stays None).

    Parameters
    ----------
    model_params, master_params : sequence of torch.Tensor
        As returned by :func:`prep_param_lists`.

    Raises
    ------
    TypeError, ValueError
        If an argument is not a sequence of tensors, or the two differ in count or shapes.
    """
    _check_copies(model_params, master_params)
    _grads_to_masters(model_params, master_params)


def _grads_to_masters(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor]
) -> None:
    """Copy gradients to the masters, one fused converting copy for those that have a buffer."""
    targets, sources = [], []
    for model, master in zip(model_params, master_params, strict=True):
        if model.grad is None:
            master.grad = None
        elif master.grad is None:
            master.grad = model.grad.detach().float()
        else:
            targets.append(master.grad)
            sources.append(model.grad.detach())
    if targets:
        torch._foreach_copy_(targets, sources)


def master_params_to_model_params(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor]
) -> None:
    """Copy the FP32 master weights back into the model's parameters (rounding to their dtype).

    Parameters
    ----------
    model_params, master_params : sequence of torch.Tensor
        As returned by :func:`prep_param_lists`; ``model_params`` are overwritten in place.

    Raises
    ------
    TypeError, ValueError
        As :func:`model_grads_to_master_grads`.
    """
    _check_copies(model_params, master_params)
    _masters_to_model(model_params, master_params)


@torch.no_grad()
def _masters_to_model(
    model_params: Sequence[torch.Tensor], master_params: Sequence[torch.Tensor]
) -> None:
    """Copy the masters into the model's parameters in one fused copy."""
    torch._foreach_copy_(list(model_params), [m.detach() for m in master_params])


def gradient_stats(
    model: nn.Module | Iterable[torch.Tensor], fmt: Any = "fp16"
) -> gradients.GradientStats:
    """:func:`mptutor.gradients.gradient_stats` of the gradients now in a model's ``.grad``.

    Parameters
    ----------
    model : torch.nn.Module or iterable of torch.Tensor
        The model, or its parameters; parameters without a gradient are left out.
    fmt : str or dtype, optional
        A format :func:`mptutor.formats.get` knows (``"fp16"``, ``torch.bfloat16``, ...).

    Raises
    ------
    TypeError, ValueError
        If ``model`` is neither a module nor an iterable of tensors, or ``fmt`` is unknown.
    """
    params = _tensors(model, "model")
    grads = [p.grad.detach().float().cpu().numpy() for p in params if p.grad is not None]
    return gradients.gradient_stats(grads, fmt)


class MasterWeightOptimizer:
    """Train an FP16 (or BF16) model with FP32 master weights, loss scaling and skipped steps.

    A step copies the gradients to the FP32 masters, unscales and checks them in one fused
    kernel, reads the flag (one host sync), then skips the update or clips, steps and copies the
    masters into the model.

    Parameters
    ----------
    optimizer : callable
        Takes the list of FP32 master parameters and returns an optimizer over them
        (``lambda params: torch.optim.SGD(params, lr=0.1)``).
    model : torch.nn.Module
        The model; at least one trainable parameter must be FP16 or BF16.
    loss_scaler : mptutor.scaling.LossScaler, optional
        Decides the scale; by default a :class:`~mptutor.scaling.DynamicLossScaler`. Optimizers
        that share one scaler are stepped together with :meth:`step_all`.
    clip_norm : float, optional
        Clip the global norm of the unscaled FP32 gradients to this value before each step.

    Raises
    ------
    TypeError, ValueError
        If an argument is not of its kind (a number is no loss scaler), the model has no
        FP16/BF16 trainable parameter, ``clip_norm`` is not positive and finite, the factory
        ignored its argument, or the scaler's floor is below ``2**-126``.
    """

    def __init__(
        self,
        optimizer: Factory,
        model: nn.Module,
        loss_scaler: LossScaler | None = None,
        clip_norm: float | None = None,
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
        self.clip_norm = optional_positive("clip_norm", clip_norm)
        self.model_params, self.master_params = prep_param_lists(model)
        if not any(p.dtype in (torch.float16, torch.bfloat16) for p in self.model_params):
            dtypes = sorted({str(p.dtype) for p in self.model_params})
            raise ValueError(
                f"the model's trainable parameters are {', '.join(dtypes)}; MasterWeightOptimizer "
                "keeps FP32 master copies of float16/bfloat16 weights, so convert the model first "
                "(mptutor.torch.network_to_half(model)) or train it in FP32 with torch.autocast"
            )
        self.model = model
        self.loss_scaler: LossScaler = loss_scaler
        self.optimizer = self._attach(optimizer)
        device = self.master_params[0].device
        self._found_inf = torch.zeros(1, device=device)
        self._inv_scale = torch.ones(1, device=device)
        self._scaler_steps = loss_scaler.history.steps  # to notice a scaler updated elsewhere

    def _attach(self, factory: Factory) -> torch.optim.Optimizer:
        """Return the optimizer the factory builds over the master parameters."""
        if not callable(factory) or isinstance(factory, torch.optim.Optimizer):
            raise TypeError(
                "optimizer must be a factory taking the master parameters, such as "
                f"lambda params: torch.optim.SGD(params, lr=0.1), got {type(factory).__name__}"
            )
        built = factory(self.master_params)
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
        """Return ``loss.float() * scale``, to call ``.backward()`` on.

        Raises
        ------
        TypeError, ValueError
            If ``loss`` is not a tensor of one element.
        """
        check_type(loss, "loss", torch.Tensor, "a torch.Tensor with one element")
        if loss.numel() != 1:
            raise ValueError(
                f"loss must have one element, got shape {tuple(loss.shape)}: reduce it first "
                "(loss.mean() or loss.sum())"
            )
        return loss.float() * self.loss_scaler.scale

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate the scaled loss into the model's gradients (see :meth:`scale_loss`)."""
        self.scale_loss(loss).backward()

    def zero_grad(self) -> None:
        """Clear the model's gradients (the masters keep their FP32 buffers for the next step)."""
        for p in self.model_params:
            p.grad = None

    def step(self) -> bool:
        """Unscale, check, apply or skip one update, update the loss scale, clear the gradients.

        Returns
        -------
        bool
            ``False`` if the update was skipped because a gradient was inf or NaN.

        Raises
        ------
        RuntimeError
            Before anything changes: if no parameter has a gradient, the loss scaler was
            updated elsewhere (use :meth:`step_all`), or ``1 / scale`` overflows float32.
        """
        return MasterWeightOptimizer.step_all(self)[0]

    @staticmethod
    def step_all(*optimizers: MasterWeightOptimizer) -> list[bool]:
        """Step optimizers that share one loss scaler, updating the scale once (one host sync).

        As ``torch.amp.GradScaler``: each steps unless its own gradients hold inf or NaN.

        Returns
        -------
        list of bool
            For each optimizer, whether its update was applied.

        Raises
        ------
        TypeError, ValueError
            If an argument is not a :class:`MasterWeightOptimizer`, none is given, one is given
            twice, or they do not share one scaler.
        RuntimeError
            As :meth:`step`.
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
        found = torch.cat(flags).tolist()  # one host sync
        took = scaler.update(any(found))
        takes = [not f and (took or any(found)) for f in found]
        for opt, take in zip(optimizers, takes, strict=True):
            opt._scaler_steps = scaler.history.steps
            if take:
                opt._apply()
            opt.zero_grad()
        return takes

    def _unscale(self, inv_scale: float) -> None:
        """Copy the gradients to the masters, unscale them and set the inf/NaN flag."""
        _grads_to_masters(self.model_params, self.master_params)
        grads = [p.grad for p in self.master_params if p.grad is not None]
        self._found_inf.zero_()
        self._inv_scale.fill_(inv_scale)
        if grads:
            torch._amp_foreach_non_finite_check_and_unscale_(
                grads, self._found_inf, self._inv_scale
            )

    def _apply(self) -> None:
        """Clip, step the optimizer and copy the masters into the model."""
        if self.clip_norm is not None:
            nn.utils.clip_grad_norm_(self.master_params, self.clip_norm, foreach=True)
        self.optimizer.step()
        _masters_to_model(self.model_params, self.master_params)

    def state_dict(self) -> dict[str, Any]:
        """Return what resumes training bit-exactly: master weights, optimizer and scaler state."""
        kind = type(self.optimizer)
        return {
            "master_params": [p.detach().clone() for p in self.master_params],
            "optimizer": self.optimizer.state_dict(),
            "optimizer_type": f"{kind.__module__}.{kind.__qualname__}",
            "loss_scaler": self.loss_scaler.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict` and copy the master weights into the model.

        Raises
        ------
        ValueError
            If the state does not fit this optimizer (keys, master weights, optimizer, scaler);
            nothing has changed then.
        """
        if not isinstance(state, Mapping) or set(state) != _KEYS:
            have = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
            raise ValueError(
                f"not a MasterWeightOptimizer state: need keys {sorted(_KEYS)}, got {have}"
            )
        saved, shapes = state["master_params"], [tuple(p.shape) for p in self.master_params]
        ok = isinstance(saved, (list, tuple)) and all(isinstance(p, torch.Tensor) for p in saved)
        want = [(torch.float32, shape) for shape in shapes]
        if not ok or [(p.dtype, tuple(p.shape)) for p in saved] != want:
            if ok:
                got = [
                    tuple(p.shape) if p.dtype == torch.float32 else (str(p.dtype), tuple(p.shape))
                    for p in saved
                ]
            else:
                got = _short(saved)
            raise ValueError(
                f"state['master_params'] must be float32 tensors of shapes {shapes} (this "
                f"model's), got {got}"
            )
        if not all(torch.isfinite(p).all() for p in saved):
            raise ValueError("state['master_params'] hold inf or NaN")
        kind = type(self.optimizer)
        name = f"{kind.__module__}.{kind.__qualname__}"
        if state["optimizer_type"] != name:
            raise ValueError(
                f"the state was saved from a {state['optimizer_type']}, this optimizer is a {name}"
            )
        trial = copy.deepcopy(self.loss_scaler)  # the scaler checks its state: try it on a copy
        try:
            trial.load_state_dict(state["loss_scaler"])
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"state['loss_scaler'] does not fit this scaler: {exc}") from exc
        try:  # torch checks the groups before it changes anything
            self.optimizer.load_state_dict(state["optimizer"])
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"state['optimizer'] does not fit this optimizer: {exc}") from exc
        self.loss_scaler.load_state_dict(state["loss_scaler"])
        self._scaler_steps = self.loss_scaler.history.steps
        with torch.no_grad():
            for master, value in zip(self.master_params, saved, strict=True):
                master.copy_(value)
        _masters_to_model(self.model_params, self.master_params)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` to a file atomically: never a half-written file at ``path``.

        Raises
        ------
        TypeError, IsADirectoryError
            If ``path`` is not a ``str`` or path-like, or is a directory.
        """
        check_type(path, "path", (str, os.PathLike), "a str or path-like file name")
        if Path(path).is_dir():
            raise IsADirectoryError(f"{path} is a directory: give a file name, e.g. {path}/ckpt.pt")
        with atomic_path(path) as tmp:
            torch.save(self.state_dict(), tmp)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Read a checkpoint written by :meth:`save`; on any error nothing changes.

        Raises
        ------
        TypeError, FileNotFoundError
            If ``path`` is not a ``str`` or path-like, or there is no such file.
        ValueError
            If it is not a readable checkpoint or does not fit (see :meth:`load_state_dict`).
        """
        check_type(path, "path", (str, os.PathLike), "a str or path-like file name")
        if not Path(path).is_file():
            raise FileNotFoundError(f"no checkpoint at {path}")
        try:
            state = torch.load(path, map_location=self.master_params[0].device, weights_only=True)
        except OSError:
            raise  # names the file already
        except Exception as exc:  # noqa: BLE001 - a corrupt file fails in many ways inside torch
            reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            raise ValueError(f"{path} is not a readable checkpoint ({reason})") from exc
        try:
            self.load_state_dict(state)
        except ValueError as exc:
            raise ValueError(f"checkpoint {path}: {exc}") from exc
