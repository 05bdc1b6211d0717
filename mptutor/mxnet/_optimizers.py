"""Which optimizers keep a float32 master copy of a float16 weight? Try every registered one.

MXNet's ``multi_precision=True`` asks an optimizer to keep a float32 master copy of each float16
weight. Some optimizers have fused kernels for it, others inherit the base class's generic
wrapper, and some refuse float16 weights without it: :func:`multi_precision_survey` finds out
for each name in MXNet's registry.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mptutor import formats
from mptutor._checks import check_scalar
from mptutor.mxnet._imports import mx
from mptutor.table import Table

__all__ = ["OptimizerTrial", "try_multi_precision", "multi_precision_survey"]


@dataclass
class OptimizerTrial:
    """What one optimizer did to a float16 weight in :func:`try_multi_precision`.

    Attributes
    ----------
    optimizer : str
        Its registered name.
    multi_precision : bool
        Whether it was created with ``multi_precision=True``.
    error : str
        The error it raised, shortened (empty when it ran).
    weight_moved : bool or None
        Whether any entry of the float16 weight left 1.0 (``None`` after an error).
    weight_after : float or None
        The first entry of the float16 weight after the updates.
    master : bool or None
        Whether its state holds a float32 array of the weight's shape that rounds to the
        float16 weight: the master copy.
    master_moved : bool or None
        Whether that master copy left 1.0.
    own_code : bool
        Whether the class overrides ``update_multi_precision`` (fused multi-precision kernels)
        rather than inheriting the base class's generic version.
    warnings : dict of str to int
        Each warning raised during the updates (``"Category: message"``) and how often.
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
    """Find a float32 array in an optimizer state that rounds to the float16 weight (or None)."""
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
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join((lines[-1] if lines else "").split())
    return f"{type(exc).__name__}: {text.rsplit(': ', 1)[-1]}"[:80]


def try_multi_precision(
    name: str,
    multi_precision: bool = True,
    *,
    steps: int = 100,
    learning_rate: float = 3e-5,
    seed: int = 0,
) -> OptimizerTrial:
    """Update a float16 weight of ones with a gradient of ones, ``steps`` times.

    The optimizer is created with ``mx.optimizer.create(name, learning_rate=...,
    multi_precision=...)`` and applied through ``mx.optimizer.get_updater`` on a CPU to a
    2x4 float16 weight (2-D, because GroupAdaGrad takes only matrices). A step of about the
    learning rate is far below half the float16 spacing just below 1.0 (``2**-12``) for the
    default learning rate, so an optimizer that updates the float16 weight directly leaves it
    at 1.0, while a float32 master copy accumulates the steps. Every exception the
    optimizer raises is recorded as the result, not raised; every warning is counted.

    Parameters
    ----------
    name : str
        A name registered in ``mx.optimizer.Optimizer.opt_registry``.
    multi_precision : bool, default True
        Create the optimizer with ``multi_precision``.
    steps : int, default 100
        Number of updates (at least 1).
    learning_rate : float, default 3e-5
        The optimizer's learning rate.
    seed : int, default 0
        Seed of MXNet's generator (SGLD adds random noise).

    Returns
    -------
    OptimizerTrial
        What happened.

    Raises
    ------
    TypeError
        If ``steps`` or ``seed`` is not an int, or ``learning_rate`` not a real number.
    ValueError
        If ``name`` is not a registered optimizer, ``steps`` is below 1, ``learning_rate`` is
        not positive and finite, or ``seed`` is out of NumPy's range (0 to ``2**32 - 1``).
    """
    registry = mx.optimizer.Optimizer.opt_registry
    if name not in registry:
        raise ValueError(f"unknown optimizer {name!r}; registered: {', '.join(sorted(registry))}")
    steps = check_scalar(steps, "steps", int, min_val=1)
    learning_rate = check_scalar(
        learning_rate, "learning_rate", min_val=0, include_boundaries="neither"
    )
    seed = check_scalar(seed, "seed", int, min_val=0, max_val=2**32 - 1)
    cls = registry[name]
    trial = OptimizerTrial(
        optimizer=name,
        multi_precision=bool(multi_precision),
        own_code=cls.update_multi_precision is not mx.optimizer.Optimizer.update_multi_precision,
    )
    mx.random.seed(seed)
    weight = mx.nd.ones((2, 4), ctx=mx.cpu(), dtype="float16")
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
    names: Iterable[str] | None = None,
    *,
    steps: int = 100,
    learning_rate: float = 3e-5,
) -> tuple[Table, list[tuple[OptimizerTrial, OptimizerTrial]]]:
    """Try every registered optimizer on a float16 weight with and without ``multi_precision``.

    Parameters
    ----------
    names : iterable of str, optional
        Optimizer names; default every name in ``mx.optimizer.Optimizer.opt_registry``, sorted.
    steps : int, default 100
        Updates per trial, as for :func:`try_multi_precision`.
    learning_rate : float, default 3e-5
        The optimizers' learning rate, as for :func:`try_multi_precision`.

    Returns
    -------
    table : Table
        One row per optimizer: ``optimizer``; ``code`` (``own`` fused multi-precision kernels
        or the base class's ``generic`` wrapper); ``fp32 master`` (``moved``, ``unchanged``,
        ``none`` or the error) and ``fp16 weight after`` with ``multi_precision=True``;
        ``warnings`` (how many were raised with it); ``without multi_precision`` (whether the
        float16 weight ``moved``, stayed ``unchanged``, or the error).
    trials : list of (OptimizerTrial, OptimizerTrial)
        The trials with and without ``multi_precision``, in the table's order.

    Raises
    ------
    TypeError, ValueError
        For a name that is not registered or a bad ``steps`` or ``learning_rate`` (see
        :func:`try_multi_precision`).
    """
    chosen = sorted(mx.optimizer.Optimizer.opt_registry) if names is None else list(names)
    rows, trials = [], []
    for name in chosen:
        with_mp = try_multi_precision(name, True, steps=steps, learning_rate=learning_rate)
        without = try_multi_precision(name, False, steps=steps, learning_rate=learning_rate)
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
