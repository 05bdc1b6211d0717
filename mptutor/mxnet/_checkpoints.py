"""Checkpoints of the float32 master weights: find the optimizer's copies, save and load them.

A float16 network trained with ``multi_precision=True`` holds two copies of each float16
weight: the float16 one in the network and the float32 master in the optimizer's state. The
master holds the bits that the float16 copy has rounded away, so it is what a checkpoint keeps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mptutor import formats
from mptutor.atomic import atomic_path
from mptutor.mxnet._imports import gluon, mx
from mptutor.mxnet._networks import params_of

__all__ = ["Checkpoint", "master_weights", "save_master_weights", "load_master_weights"]


def _is_half(param: gluon.Parameter) -> bool:
    return formats.dtype_name(param.dtype) == "float16"


def _updaters(trainer: gluon.Trainer) -> list[Any]:
    """List the optimizer updaters whose ``states`` hold the master copies, one per device."""
    if not isinstance(trainer, gluon.Trainer):
        raise TypeError(f"trainer: expected a gluon.Trainer, got {type(trainer).__name__}")
    if not trainer._kv_initialized:
        trainer._init_kvstore()
    if trainer._kvstore is not None and trainer._update_on_kvstore:
        return [trainer._kvstore._updater]
    return list(trainer._updaters)


def _master_index(optimizer: mx.optimizer.Optimizer) -> int:
    # Where create_state_multi_precision puts the float32 copy in the state tuple: the base
    # Optimizer (Adam, LAMB, ...) returns (master, state); SGD, NAG, LARS, LBSGD, which define
    # their own, return (state, master).
    own = type(optimizer).create_state_multi_precision
    return 0 if own is mx.optimizer.Optimizer.create_state_multi_precision else 1


def _master_copy(
    trainer: gluon.Trainer, param: gluon.Parameter, device: int = 0
) -> mx.nd.NDArray | None:
    """Find the optimizer's float32 master copy of a float16 parameter (None: none yet)."""
    optimizer = trainer._optimizer
    if not _is_half(param) or not optimizer.multi_precision:
        return None
    index = trainer._param2idx.get(param.name)
    if index is None:
        return None
    state = _updaters(trainer)[device].states.get(index)
    if state is None:
        return None
    master = state[_master_index(optimizer)]
    if not (
        isinstance(master, mx.nd.NDArray)
        and formats.dtype_name(master) == "float32"
        and master.shape == param.shape
    ):
        raise RuntimeError(
            f"cannot find the float32 master copy of {param.name} in the state of "
            f"{type(optimizer).__name__}; this helper knows MXNet 1.9's optimizers"
        )
    return master


def _check_trainer_for(net_params: Mapping[str, gluon.Parameter], trainer: Any) -> None:
    half = [key for key, p in net_params.items() if _is_half(p)]
    if not half:
        return
    if trainer is None:
        raise ValueError(
            f"the network has {len(half)} float16 parameters (e.g. {half[0]}): pass the "
            "Trainer, whose optimizer keeps their float32 master copies (multi_precision=True); "
            "saving the float16 copies would lose the bits the master weights exist for"
        )
    if not trainer._optimizer.multi_precision:
        raise ValueError(
            "the trainer's optimizer has multi_precision=False, so it keeps no float32 master "
            "copy of the float16 parameters; create it with multi_precision=True"
        )


def master_weights(
    net: gluon.Block, trainer: gluon.Trainer | None = None
) -> tuple[dict[str, mx.nd.NDArray], set[str]]:
    """Collect the network's weights in float32: the optimizer's master copy where there is one.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, its parameters initialised (run one batch first if shapes are deferred).
    trainer : mxnet.gluon.Trainer, optional
        The trainer of a float16 network. Required when the network has float16 parameters.

    Returns
    -------
    weights : dict of str to NDArray
        Every parameter (BatchNorm running statistics included) as a float32 CPU array, keyed
        by its structural name (``"features.1.weight"``, as ``save_parameters`` uses).
    from_master : set of str
        The names whose values came from the optimizer's float32 master copies. A float16
        parameter that has not been updated yet has no master copy; its value, cast to
        float32, is exactly what the optimizer will start from.

    Raises
    ------
    ValueError
        If the network has float16 parameters and no trainer, or a trainer without
        ``multi_precision``, or a parameter is not initialised.
    """
    params = params_of(net)
    _check_trainer_for(params, trainer)
    weights: dict[str, mx.nd.NDArray] = {}
    from_master: set[str] = set()
    for key, param in params.items():
        try:
            value = param.data(param.list_ctx()[0])
        except (RuntimeError, gluon.parameter.DeferredInitializationError) as exc:
            raise ValueError(
                f"parameter {key} has no value yet ({type(exc).__name__}): initialise the "
                "network and run one batch through it first"
            ) from exc
        master = _master_copy(trainer, param) if trainer is not None else None
        if master is not None:
            value = master
            from_master.add(key)
        weights[key] = value.astype("float32").copyto(mx.cpu())
    return weights, from_master


@dataclass(frozen=True)
class Checkpoint:
    """What :func:`save_master_weights` wrote.

    Attributes
    ----------
    path : pathlib.Path
        The file.
    arrays : int
        Number of float32 arrays in it.
    from_master : int
        How many came from the optimizer's float32 master copies.
    bytes : int
        File size.
    """

    path: Path
    arrays: int
    from_master: int
    bytes: int


def save_master_weights(
    net: gluon.Block, path: str | os.PathLike[str], trainer: gluon.Trainer | None = None
) -> Checkpoint:
    """Save the float32 master weights of a network, atomically.

    The file holds one float32 array per parameter (``mx.nd.save`` format), the optimizer's
    master copy for every float16 parameter that has one, so a float16 run loses nothing when
    it is saved. It is written to a temporary file in the same folder and renamed into place:
    a crash leaves the old file or the new one, never half of one. Optimizer state such as
    momentum is not included (``trainer.save_states`` saves it).

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network.
    path : path-like
        Where to write; its folder must exist.
    trainer : mxnet.gluon.Trainer, optional
        The trainer; required when the network has float16 parameters.

    Returns
    -------
    Checkpoint
        Path, number of arrays, how many were master copies, size in bytes.

    Raises
    ------
    ValueError
        See :func:`master_weights`.
    FileNotFoundError
        If the folder of ``path`` does not exist.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder {target.parent} does not exist: create it first")
    weights, from_master = master_weights(net, trainer)
    with atomic_path(target) as tmp:
        mx.nd.save(str(tmp), weights)
    return Checkpoint(
        path=target,
        arrays=len(weights),
        from_master=len(from_master),
        bytes=target.stat().st_size,
    )


def _require_initialised(params: Mapping[str, Any], source: Path) -> None:
    """Refuse a network whose parameters still wait for their first forward pass."""
    waiting = []
    for key, param in params.items():
        try:
            param.data()
        except gluon.parameter.DeferredInitializationError:
            waiting.append(key)
    if waiting:
        raise ValueError(
            f"cannot load {source} with a trainer into a network whose parameters are not "
            f"initialised yet ({waiting[:3]}{' ...' if len(waiting) > 3 else ''}: deferred "
            "initialisation). Pass one batch through the network first, or give its layers "
            "their input sizes (in_units, in_channels)."
        )


def load_master_weights(
    net: gluon.Block,
    path: str | os.PathLike[str],
    trainer: gluon.Trainer | None = None,
) -> int:
    """Load float32 master weights saved by :func:`save_master_weights` into a network.

    Each parameter gets the saved value cast to its own type (float16 parameters get the master
    rounded to float16). With a ``trainer`` whose optimizer has ``multi_precision``, the
    optimizer's master copies are set to the saved float32 values too, so training resumes
    from the exact master weights rather than from their float16 rounding.

    Parameters
    ----------
    net : mxnet.gluon.Block
        A network of the same architecture (float32, float16 or bfloat16 AMP), initialised.
    path : path-like
        The file.
    trainer : mxnet.gluon.Trainer, optional
        The trainer that will continue training ``net``.

    Returns
    -------
    int
        Number of optimizer master copies set, one per float16 parameter and device (0
        without a trainer or without float16 parameters).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a dict of float32 arrays, or its names or shapes do not match the
        network's parameters (the message lists the differences), or if a ``trainer`` is given
        while the network's parameters still wait for their first forward pass (deferred
        initialisation).
    """
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"no checkpoint at {source}")
    try:
        loaded = mx.nd.load(str(source))
    except mx.base.MXNetError as exc:
        raise ValueError(f"{source} is not an MXNet array file: {exc}") from exc
    if not isinstance(loaded, dict) or any(
        formats.dtype_name(v) != "float32" for v in loaded.values()
    ):
        raise ValueError(
            f"{source} is not a master-weights checkpoint: expected named float32 arrays, as "
            "save_master_weights writes"
        )
    params = params_of(net)
    missing = sorted(set(params) - set(loaded))
    extra = sorted(set(loaded) - set(params))
    if missing or extra:
        raise ValueError(
            f"{source} does not match the network: missing {missing[:5]}"
            f"{' ...' if len(missing) > 5 else ''}, unexpected {extra[:5]}"
            f"{' ...' if len(extra) > 5 else ''} (is it the same architecture and classes?)"
        )
    for key, param in params.items():
        known = tuple(param.shape or ())
        shape = tuple(loaded[key].shape)
        if 0 not in known and known != shape:
            raise ValueError(f"{key}: the file has shape {shape}, the network {known}")
    if trainer is not None:
        _require_initialised(params, source)
    set_masters = 0
    updaters = _updaters(trainer) if trainer is not None else []
    for key, param in params.items():
        value = loaded[key]
        if 0 in tuple(param.shape or ()):
            param.shape = value.shape
        param.set_data(value.astype(param.dtype))
        if trainer is None or not _is_half(param):
            continue
        if not trainer._optimizer.multi_precision:
            continue
        index = trainer._param2idx.get(param.name)
        if index is None:
            continue
        for device, (updater, weight) in enumerate(zip(updaters, param.list_data(), strict=False)):
            if index not in updater.states:
                updater.states[index] = trainer._optimizer.create_state_multi_precision(
                    index, weight
                )
                updater.states_synced[index] = True
            master = _master_copy(trainer, param, device)
            if master is not None:
                master[:] = value.as_in_context(master.context)
                set_masters += 1
    return set_masters
