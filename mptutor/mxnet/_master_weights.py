"""float32 master weights: find the optimizer's copies, save and load them, survey optimizers.

A float16 network trained with ``multi_precision=True`` holds two copies of each float16
weight: the float16 one in the network and the float32 master in the optimizer's state. The
master holds the bits that the float16 copy has rounded away, so it is what a checkpoint keeps.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mptutor import formats
from mptutor._atomic import atomic_path
from mptutor._checks import check_scalar
from mptutor.mxnet._core import _params_of, gluon, mx
from mptutor.table import Table


def _is_half(param: gluon.Parameter) -> bool:
    """Whether a parameter is float16."""
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
    # Where create_state_multi_precision puts the float32 copy: the base Optimizer (Adam,
    # LAMB, LBSGD, ...) returns (master, state); SGD, NAG and LARS, which define their own,
    # return (state, master).
    own = type(optimizer).create_state_multi_precision
    master = state[0 if own is mx.optimizer.Optimizer.create_state_multi_precision else 1]
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


def master_weights(
    net: gluon.Block, trainer: gluon.Trainer | None = None
) -> tuple[dict[str, mx.nd.NDArray], set[str]]:
    """Collect the network's weights in float32: the optimizer's master copy where there is one.

    Parameters
    ----------
    net : mxnet.gluon.Block
        The network, its parameters initialised (run one batch first if shapes are deferred).
    trainer : mxnet.gluon.Trainer, optional
        Its trainer; required when the network has float16 parameters.

    Returns
    -------
    weights : dict of str to NDArray
        Every parameter (BatchNorm running statistics included) as a float32 CPU array, keyed
        by its structural name (``"features.1.weight"``, as ``save_parameters`` uses).
    from_master : set of str
        The names taken from master copies (a float16 parameter not updated yet has none).

    Raises
    ------
    ValueError
        If the network has float16 parameters and no trainer, or a trainer without
        ``multi_precision``, or a parameter is not initialised.
    """
    params = _params_of(net)
    half = [key for key, p in params.items() if _is_half(p)]
    if half and trainer is None:
        raise ValueError(
            f"the network has {len(half)} float16 parameters (e.g. {half[0]}): pass the "
            "Trainer, whose optimizer keeps their float32 master copies (multi_precision=True); "
            "saving the float16 copies would lose the bits the master weights exist for"
        )
    if half and not trainer._optimizer.multi_precision:  # type: ignore[union-attr]
        raise ValueError(
            "the trainer's optimizer has multi_precision=False, so it keeps no float32 master "
            "copy of the float16 parameters; create it with multi_precision=True"
        )
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
    """What :func:`save_master_weights` wrote: the file, its arrays, how many were masters."""

    path: Path
    arrays: int
    from_master: int
    bytes: int


def save_master_weights(
    net: gluon.Block, path: str | os.PathLike[str], trainer: gluon.Trainer | None = None
) -> Checkpoint:
    """Save :func:`master_weights` (``mx.nd.save`` format) atomically: old file or new one.

    Optimizer state such as momentum is not included (``trainer.save_states`` saves it).

    Parameters
    ----------
    net, trainer
        As for :func:`master_weights`.
    path : path-like
        Where to write; its folder must exist.

    Returns
    -------
    Checkpoint
        ``path``, ``arrays``, ``from_master`` (how many were master copies), ``bytes``.

    Raises
    ------
    ValueError, FileNotFoundError
        As :func:`master_weights`, or if the folder of ``path`` does not exist.
    """
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"folder {target.parent} does not exist: create it first")
    weights, from_master = master_weights(net, trainer)
    with atomic_path(target) as tmp:
        mx.nd.save(str(tmp), weights)
    return Checkpoint(target, len(weights), len(from_master), target.stat().st_size)


def _read_checkpoint(source: Path, params: Mapping[str, gluon.Parameter]) -> dict[str, Any]:
    """Load a file of named float32 arrays whose names and shapes match ``params``."""
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
    return loaded


def load_master_weights(
    net: gluon.Block, path: str | os.PathLike[str], trainer: gluon.Trainer | None = None
) -> int:
    """Load float32 master weights saved by :func:`save_master_weights` into a network.

    Each parameter gets the saved value cast to its type; with a ``trainer`` whose optimizer has
    ``multi_precision``, its master copies get the float32 values, so that training resumes
    from the exact master weights.

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
        Number of optimizer master copies set (one per float16 parameter and device).

    Raises
    ------
    FileNotFoundError, ValueError
        If ``path`` does not exist, the file is not a dict of float32 arrays whose names and
        shapes match the network's, or a ``trainer`` is given while parameters wait for deferred
        initialisation.
    """
    source = Path(path)
    params = _params_of(net)
    loaded = _read_checkpoint(source, params)
    updaters = []
    if trainer is not None:
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
        updaters = _updaters(trainer)
    set_masters = 0
    for key, param in params.items():
        value = loaded[key]
        if 0 in tuple(param.shape or ()):
            param.shape = value.shape
        param.set_data(value.astype(param.dtype))
        if trainer is None or not _is_half(param) or not trainer._optimizer.multi_precision:
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


# --------------------------------------------------------------------------------------------
# Which optimizers keep a float32 master copy of a float16 weight?


@dataclass
class OptimizerTrial:
    """What one optimizer did to a float16 weight of ones in :func:`multi_precision_survey`.

    ``error``: what it raised, shortened (empty if it ran); ``weight_moved``, ``weight_after``:
    whether the weight left 1.0, its first entry after; ``master``, ``master_moved``: whether
    its state holds a float32 copy of the weight, whether that left 1.0; ``own_code``: whether
    the class overrides ``update_multi_precision``; ``warnings``: a count per warning text.
    """

    optimizer: str
    multi_precision: bool
    error: str = ""
    weight_moved: bool | None = None
    weight_after: float | None = None
    master: bool | None = None
    master_moved: bool | None = None
    own_code: bool = False
    warnings: dict[str, int] = field(default_factory=dict)


def _find_master(state: Any, weight: mx.nd.NDArray) -> mx.nd.NDArray | None:
    """Find a float32 array in an optimizer state that rounds to the float16 weight."""
    if isinstance(state, tuple | list):
        for part in state:
            found = _find_master(part, weight)
            if found is not None:
                return found
        return None
    if (
        isinstance(state, mx.nd.NDArray)
        and formats.dtype_name(state) == "float32"
        and state.shape == weight.shape
        and bool((state.astype("float16") == weight).min().asscalar())
    ):
        return state
    return None


def _short_error(exc: BaseException) -> str:
    """Shorten an exception to its type and the end of its last line (80 characters)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join((lines[-1] if lines else "").split())
    return f"{type(exc).__name__}: {text.rsplit(': ', 1)[-1]}"[:80]


def _try_multi_precision(
    name: str, multi_precision: bool = True, steps: int = 100, learning_rate: float = 3e-5
) -> OptimizerTrial:
    """Update a 2x4 float16 weight of ones with a gradient of ones ``steps`` times, on a CPU."""
    registry = mx.optimizer.Optimizer.opt_registry
    if name not in registry:
        raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(sorted(registry))}")
    cls = registry[name]
    trial = OptimizerTrial(
        optimizer=name,
        multi_precision=bool(multi_precision),
        own_code=cls.update_multi_precision is not mx.optimizer.Optimizer.update_multi_precision,
    )
    mx.random.seed(0)  # SGLD adds random noise
    weight = mx.nd.ones((2, 4), ctx=mx.cpu(), dtype="float16")  # 2-D: GroupAdaGrad's need
    grad = mx.nd.ones((2, 4), ctx=mx.cpu(), dtype="float16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            optimizer = mx.optimizer.create(
                name, learning_rate=learning_rate, multi_precision=bool(multi_precision)
            )
            updater = mx.optimizer.get_updater(optimizer)
            for _ in range(steps):
                updater(0, grad, weight)
            mx.nd.waitall()
        except Exception as exc:  # noqa: BLE001 - any failure is a result of the survey
            trial.error = _short_error(exc)
        else:
            master = _find_master(updater.states[0], weight)
            trial.weight_moved = bool((weight != 1).max().asscalar())
            trial.weight_after = float(weight[0, 0].asscalar())
            trial.master = master is not None
            if master is not None:
                trial.master_moved = bool((master != 1).max().asscalar())
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        trial.warnings[text] = trial.warnings.get(text, 0) + 1
    return trial


def multi_precision_survey(
    names: Iterable[str] | None = None, *, steps: int = 100, learning_rate: float = 3e-5
) -> tuple[Table, list[tuple[OptimizerTrial, OptimizerTrial]]]:
    """Try every registered optimizer on a float16 weight with and without ``multi_precision``.

    Each updates a 2x4 float16 weight of ones with a gradient of ones, ``steps`` times, on a
    CPU. At the default learning rate a step is far below half the float16 spacing below 1.0
    (``2**-12``): an update of the float16 weight leaves it at 1.0, a float32 master copy
    accumulates the steps. An exception is recorded as the result; warnings are counted.

    Parameters
    ----------
    names : iterable of str, optional
        Optimizer names; default every name in ``mx.optimizer.Optimizer.opt_registry``, sorted.
    steps : int, default 100
        Updates per trial (at least 1).
    learning_rate : float, default 3e-5
        The optimizers' learning rate.

    Returns
    -------
    table : Table
        One row per optimizer: ``code`` (``own`` fused kernels or the ``generic`` wrapper);
        with ``multi_precision``, ``fp32 master`` (``moved``, ``unchanged``, ``none`` or the
        error), ``fp16 weight after`` and ``warnings``; ``without multi_precision`` (``moved``,
        ``unchanged`` or the error).
    trials : list of (OptimizerTrial, OptimizerTrial)
        With and without ``multi_precision``, in the table's order.

    Raises
    ------
    TypeError, ValueError
        For a name not registered, ``steps`` not an int of at least 1, or a ``learning_rate``
        not positive and finite.
    """
    steps = check_scalar(steps, "steps", int, min_val=1)
    learning_rate = check_scalar(
        learning_rate, "learning_rate", min_val=0, include_boundaries="neither"
    )
    chosen = sorted(mx.optimizer.Optimizer.opt_registry) if names is None else list(names)
    rows, trials = [], []
    for name in chosen:
        with_mp = _try_multi_precision(name, True, steps, learning_rate)
        without = _try_multi_precision(name, False, steps, learning_rate)
        trials.append((with_mp, without))
        if with_mp.error:
            master = with_mp.error
        elif not with_mp.master:
            master = "none"
        else:
            master = "moved" if with_mp.master_moved else "unchanged"
        rows.append(
            {
                "optimizer": name,
                "code": "own" if with_mp.own_code else "generic",
                "fp32 master": master,
                "fp16 weight after": with_mp.weight_after,
                "warnings": sum(with_mp.warnings.values()),
                "without multi_precision": without.error
                or ("moved" if without.weight_moved else "unchanged"),
            }
        )
    return Table(rows, float_format=".5g"), trials
