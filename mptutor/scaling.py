"""Loss scaling without a framework: the dynamic loss-scale state machine of mixed precision.

Small FP16 gradients underflow to zero. Loss scaling multiplies the loss by a factor ``S``
before the backward pass, so every gradient comes out ``S`` times larger, and divides the
gradients by ``S`` before the optimizer step. A *dynamic* scaler finds ``S`` by trial: it starts
high; when a step's gradients contain inf or NaN it skips that optimizer step and multiplies
``S`` by a backoff factor (0.5); after ``growth_interval`` consecutive clean steps it multiplies
``S`` by a growth factor (2). ``S`` so stays near the largest value that does not overflow.

:class:`DynamicLossScaler` reproduces ``torch.amp.GradScaler``'s scale trajectory bit for bit
and :class:`StaticLossScaler` keeps one scale; both record a :class:`ScaleHistory` to plot.
Only the standard library and NumPy are imported.

Framework defaults
------------------
Read in the installed sources (PyTorch 2.13, Keras 3.15.1, MXNet 1.9.1) and checked by running
them (``tests/test_scaling.py`` drives all three)::

    framework                    initial  growth  backoff  clean steps  bounds
    torch.amp.GradScaler         2**16    2.0     0.5      2000         none
    keras LossScaleOptimizer     2**15    2 *     0.5 *    2000         none
    mxnet contrib.amp LossScaler 2**16    2 *     0.5 *    2000         at most 2**24
    (* fixed in the code, not an argument)

- PyTorch, ``torch/amp/grad_scaler.py``: defaults at lines 123-131; only
  ``growth_factor > 1`` and ``backoff_factor < 1`` are checked (lines 143-146); the scale is a
  float32 tensor and the count of clean steps an int32 tensor (lines 176-179); gradients are
  checked and unscaled by ``torch._amp_foreach_non_finite_check_and_unscale_`` (lines
  294-298) with ``inv_scale`` computed in float64 and rounded to float32 (lines 351-355);
  ``update()`` calls the kernel ``torch._amp_update_scale_`` (lines 549-556).
- Keras, ``keras/src/optimizers/loss_scale_optimizer.py``: ``initial_scale=2.0**15,
  dynamic_growth_steps=2000`` (lines 46-53); ``dynamic_scale`` is a float32 variable
  (lines 112-118); it doubles when ``step_counter == dynamic_growth_steps - 1`` (lines 164,
  227-239), the same count as GradScaler, and halves on a non-finite gradient (lines 241-244).
  Nothing stops the scale at the ends of float32: doubling ``2**127`` gives inf, which halving
  leaves inf, so every later step is skipped; halving far enough gives 0, and then the zero
  gradients pass the finite check and are divided by 0, writing NaN into the weights.
- MXNet, ``mxnet/contrib/amp/loss_scaler.py``: ``2.**16``, ``_max_loss_scale = 2.**24`` and
  ``_scale_seq_len = 2000`` (lines 34-39); the scale is a Python float halved (line 59) or
  doubled up to ``2**24`` (line 66), with no lower bound. ``amp.scale_loss`` multiplies by
  ``loss_scale`` (``amp.py`` lines 272-280) and ``Trainer._update`` then calls
  ``has_overflow`` (``gluon/trainer.py`` line 433), which stores the new scale in
  ``_next_loss_scale``; it only becomes ``loss_scale`` at the next check (line 57). So a new
  scale takes effect one iteration late: the iteration after an overflow still runs with the
  old scale, and MXNet's scale at step ``k`` is GradScaler's at step ``k - 1``.

Float32 arithmetic, as GradScaler does it
-----------------------------------------
Found by experiment with ``torch._amp_update_scale_`` on the CPU: the new scale is the float32
scale times the factor computed in float64, rounded once to float32 (C++ ``float * double``
assigned to a ``float``). A float32 product ``float32(scale) * float32(factor)`` differs for
about a quarter of random non-power-of-two factors. At the ends of the range GradScaler

- keeps the scale when growing would overflow float32 to inf (and resets the count);
- lets backing off go through the subnormals down to exactly 0, which it never leaves
  (0 times the growth factor is 0);
- checks the *scaled* gradients for inf/NaN and only then multiplies them by
  ``float32(1 / scale)``. At or below about ``2**-128`` that reciprocal is inf, so finite
  gradients unscale to inf (zeros to NaN) after passing the check, and the optimizer step
  writes them into the weights; at a scale of 0 every step writes NaN. Keras does the same
  at 0 (``0 / 0``), and TensorFlow flushes subnormals, so its scale drops from ``2**-126``
  straight to 0.
- grows only when the count of clean steps reaches ``growth_interval`` exactly, so a count
  loaded at or above ``growth_interval`` never grows (:meth:`DynamicLossScaler.load_state_dict`
  refuses such a count).

The trajectory of :class:`DynamicLossScaler` is GradScaler's, bit for bit, except that its
scale never reaches 0: a backoff that would round to 0 keeps the current scale, mirroring
GradScaler's refusal to grow to inf. It adds optional ``min_scale`` / ``max_scale`` bounds,
which GradScaler lacks; ``min_scale=1.0`` keeps clear of the tiny scales above if you unscale
by a float32 reciprocal.

Examples
--------
>>> s = DynamicLossScaler(init_scale=8.0, growth_interval=2)
>>> [s.update(found_inf) for found_inf in (False, True, False, False)]
[True, False, True, True]
>>> s.scale, list(s.history.scales), list(s.history.skipped)
(8.0, [8.0, 8.0, 4.0, 4.0], [0, 1, 0, 0])
"""

from __future__ import annotations

import math
import numbers
from array import array
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "LossScaler",
    "DynamicLossScaler",
    "StaticLossScaler",
    "ScaleHistory",
    "FLOAT32_MAX",
]

#: Largest finite float32 value: the scale is held in float32, like GradScaler's.
FLOAT32_MAX: float = float(np.finfo(np.float32).max)

#: GradScaler counts clean steps in an int32 tensor.
_INT32_MAX = 2**31 - 1


def _f32(x: float) -> float:
    """Round a float to the nearest float32 (ties to even); may give inf or 0."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(x))


def _f32_up(x: float) -> float:
    """Round up to a float32 value (the smallest float32 >= x)."""
    y = _f32(x)
    if y < x:
        y = float(np.nextafter(np.float32(y), np.float32(np.inf)))
    return y


def _f32_down(x: float) -> float:
    """Round down to a float32 value (the largest float32 <= x)."""
    y = _f32(x)
    if y > x:
        y = float(np.nextafter(np.float32(y), np.float32(-np.inf)))
    return y


def _real(name: str, value: Any) -> float:
    """Return ``value`` as a float, refusing bools, non-numbers and NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"{name} must be a real number (int or float), got {value!r} "
            f"of type {type(value).__name__}"
        )
    x = float(value)
    if math.isnan(x):
        raise ValueError(f"{name} must not be NaN")
    return x


def _int(name: str, value: Any, low: int, high: int) -> int:
    """Return ``value`` as an int in ``[low, high]``, refusing bools, floats and non-numbers."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {value!r} of type {type(value).__name__}")
    n = int(value)
    if not low <= n <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {n}")
    return n


def _scale_value(name: str, value: Any) -> float:
    """Validate a positive finite scale and round it to the nearest float32."""
    x = _real(name, value)
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    y = _f32(x)
    if math.isinf(y):
        raise ValueError(
            f"{name}={x!r} overflows float32 (largest {FLOAT32_MAX:.8g}); the scale is held "
            "in float32"
        )
    if y == 0:
        raise ValueError(f"{name}={x!r} rounds to 0 in float32; the scale is held in float32")
    return y


def _found_inf(found_inf: Any) -> bool:
    """Turn ``found_inf`` into a bool, refusing values whose truth is not a yes/no answer."""
    # Containers and strings are truthy when non-empty, and plain objects always: refuse them.
    if (
        found_inf is None
        or isinstance(found_inf, (str, bytes, bytearray, list, tuple, range, Mapping, Set))
        or not hasattr(type(found_inf), "__bool__")
    ):
        raise TypeError(
            "found_inf must be a bool, or a number or one-element array/tensor that bool() "
            f"converts, got {found_inf!r:.80} of type {type(found_inf).__name__}"
        )
    try:
        return bool(found_inf)
    except (TypeError, ValueError, RuntimeError) as exc:  # e.g. a tensor of several elements
        raise TypeError(
            f"found_inf must convert to one bool, but bool() of a {type(found_inf).__name__} "
            f"failed: {exc}"
        ) from exc


def _keys(state: Any, kind: str, required: set[str], optional: set[str]) -> None:
    """Check that ``state`` is a mapping for ``kind`` with exactly the allowed keys."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state_dict must be a dict, got {type(state).__name__}")
    if state.get("type") != kind:
        raise ValueError(
            f"state_dict has type={state.get('type')!r}; a {kind} loads only a state_dict "
            f"with type={kind!r}"
        )
    missing = sorted(required - set(state))
    unknown = sorted(set(state) - required - optional, key=str)
    if missing or unknown:
        raise ValueError(
            f"state_dict for {kind}: missing keys {missing}, unexpected keys {unknown}; "
            f"expected {sorted(required)} and optionally {sorted(optional)}"
        )


@dataclass(repr=False)
class ScaleHistory:
    """The scale used at every update and whether that step was skipped, for plotting.

    Each update adds 5 bytes (one float32 and one byte), so a million steps take 5 MB.

    Attributes
    ----------
    scales : array.array of float (typecode ``"f"``)
        The scale in force at each recorded step: the one the loss was multiplied by, before
        :meth:`DynamicLossScaler.update` changed it. Float32 storage holds it exactly.
    skipped : array.array of int (typecode ``"B"``)
        1 where the step found inf/NaN gradients and the optimizer step was skipped, else 0.
    first_step : int
        Step number of ``scales[0]``: 0, or the step a scaler resumed at from a state dict
        saved without its history.

    Examples
    --------
    >>> h = ScaleHistory()
    >>> h.append(1024.0, False); h.append(1024.0, True)
    >>> h.steps, h.skipped_steps().tolist()
    (2, [1])
    """

    scales: array = field(default_factory=lambda: array("f"))
    skipped: array = field(default_factory=lambda: array("B"))
    first_step: int = 0

    @property
    def steps(self) -> int:
        """Number of updates made so far, including any before ``first_step``.

        Returns
        -------
        int
            ``first_step + len(scales)``.
        """
        return self.first_step + len(self.scales)

    def __len__(self) -> int:
        return len(self.scales)

    def __repr__(self) -> str:
        return (
            f"ScaleHistory(steps={self.steps}, first_step={self.first_step}, "
            f"skipped={sum(self.skipped)})"
        )

    def append(self, scale: float, skipped: bool) -> None:
        """Record one step.

        Parameters
        ----------
        scale : float
            The scale used in the step.
        skipped : bool
            Whether the optimizer step was skipped.
        """
        self.scales.append(scale)
        self.skipped.append(1 if skipped else 0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return the history as NumPy arrays, ready for ``plt.step(steps, scales)``.

        Returns
        -------
        steps : numpy.ndarray of int64
            Step numbers, ``first_step`` onwards.
        scales : numpy.ndarray of float64
            The scale used at each step.
        skipped : numpy.ndarray of bool
            Whether each step was skipped.
        """
        steps = np.arange(self.first_step, self.steps, dtype=np.int64)
        scales = np.frombuffer(self.scales, dtype=np.float32).astype(np.float64)
        skipped = np.frombuffer(self.skipped, dtype=np.uint8).astype(bool)
        return steps, scales, skipped

    def skipped_steps(self) -> np.ndarray:
        """Return the step numbers of the skipped steps.

        Returns
        -------
        numpy.ndarray of int64
            Step numbers (counted like :attr:`steps`) where inf/NaN was found.
        """
        steps, _, skipped = self.arrays()
        return steps[skipped]

    def _state(self) -> dict[str, Any]:
        return {
            "first_step": self.first_step,
            "scales": list(self.scales),
            "skipped": [bool(s) for s in self.skipped],
        }

    @classmethod
    def _from_state(cls, state: Any, steps: int) -> ScaleHistory:
        if not isinstance(state, Mapping) or set(state) != {"first_step", "scales", "skipped"}:
            raise ValueError(
                "state_dict['history'] must be a dict with keys 'first_step', 'scales', "
                f"'skipped', got {state!r:.200}"
            )
        first = _int("state_dict['history']['first_step']", state["first_step"], 0, steps)
        for key in ("scales", "skipped"):
            if not isinstance(state[key], (list, tuple, array)):
                raise ValueError(
                    f"state_dict['history'][{key!r}] must be a list, "
                    f"got {type(state[key]).__name__}"
                )
        scales, skipped = list(state["scales"]), list(state["skipped"])
        if len(scales) != len(skipped) or first + len(scales) != steps:
            raise ValueError(
                f"state_dict['history'] is inconsistent: {len(scales)} scales, "
                f"{len(skipped)} skipped flags and first_step={first}, but steps={steps}"
            )
        history = cls(first_step=first)
        for i, (scale, skip) in enumerate(zip(scales, skipped, strict=True)):
            if not (isinstance(skip, (bool, np.bool_)) or skip in (0, 1)):
                raise ValueError(
                    f"state_dict['history']['skipped'][{i}] must be a bool, got {skip!r}"
                )
            scale = _scale_value(f"state_dict['history']['scales'][{i}]", scale)
            history.append(scale, bool(skip))
        return history


@runtime_checkable
class LossScaler(Protocol):
    """What every framework adapter needs of a loss scaler (both scalers here provide it).

    A framework module multiplies the loss by :attr:`scale`, checks the scaled gradients for
    inf/NaN, calls :meth:`update` with the answer, and applies the step only when it returns
    ``True``. ``state_dict``/``load_state_dict`` put the scaler in checkpoints.
    """

    @property
    def scale(self) -> float:
        """The scale to multiply the loss by."""
        ...

    @property
    def history(self) -> ScaleHistory:
        """The scales used and the steps skipped so far."""
        ...

    def update(self, found_inf: Any) -> bool:
        """Record a step's overflow check and return whether to apply the step."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Return the scaler's state, for a checkpoint."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""
        ...


class _Scaler:
    """Shared part of the two scalers: the scale, the history and the skip decision."""

    _scale: float
    _history: ScaleHistory

    @property
    def scale(self) -> float:
        """The current scale: multiply the loss by it before the backward pass.

        Returns
        -------
        float
            A float32 value held in a Python float.
        """
        return self._scale

    @property
    def history(self) -> ScaleHistory:
        """Every update so far: the scale used and whether the step was skipped.

        Returns
        -------
        ScaleHistory
            The live record (not a copy).
        """
        return self._history

    def _record(self, found_inf: Any) -> bool:
        found = _found_inf(found_inf)
        self._history.append(self._scale, found)
        return found

    def _history_state(self, state: dict[str, Any], include_history: bool) -> dict[str, Any]:
        state["steps"] = self._history.steps
        if include_history:
            state["history"] = self._history._state()
        return state

    @staticmethod
    def _load_history(state: Mapping[str, Any]) -> ScaleHistory:
        steps = _int("state_dict['steps']", state["steps"], 0, 2**63 - 1)
        if "history" in state:
            return ScaleHistory._from_state(state["history"], steps)
        return ScaleHistory(first_step=steps)


class DynamicLossScaler(_Scaler):
    """A dynamic loss scale with exactly the trajectory of ``torch.amp.GradScaler``.

    Call :meth:`update` once per step with whether the (scaled) gradients held inf or NaN; it
    returns whether to take the optimizer step. Read :attr:`scale` for the next step's scale.

    Parameters
    ----------
    init_scale : float, optional
        Starting scale, rounded to float32 like GradScaler's (default ``2**16``).
    growth_factor : float, optional
        Factor > 1 applied after ``growth_interval`` consecutive clean steps (default 2).
    backoff_factor : float, optional
        Factor in (0, 1) applied on every step with inf/NaN gradients (default 0.5).
    growth_interval : int, optional
        Number of consecutive clean steps before growing, 1 to ``2**31 - 1`` (default 2000).
    min_scale, max_scale : float, optional
        Bounds GradScaler does not have: a backoff below ``min_scale`` or growth above
        ``max_scale`` stops at the bound. ``min_scale`` is rounded up and ``max_scale`` down
        to float32, so the scale never leaves the interval given. ``None`` (default): no bound.

    Raises
    ------
    ValueError
        If an argument is not a number (``True`` is refused too), is NaN, infinite, out of
        range, or the arguments disagree: ``min_scale > max_scale`` or ``init_scale``
        outside ``[min_scale, max_scale]``. The message names the argument.

    Notes
    -----
    On a clean step the count of clean steps grows by one; when it reaches
    ``growth_interval`` the scale is multiplied by ``growth_factor`` and the count restarts.
    On an inf/NaN step the scale is multiplied by ``backoff_factor`` and the count restarts.
    Products are computed in float64 and rounded once to float32, as GradScaler's CPU kernel
    does (found by experiment; the CUDA kernel was not checked). Growth that would overflow
    float32 keeps the scale (as GradScaler does) and a backoff that would round to 0 keeps
    the scale (GradScaler goes to 0 and stays there).

    Examples
    --------
    >>> s = DynamicLossScaler(init_scale=1000.0, growth_factor=1.1, growth_interval=1)
    >>> s.update(False), s.scale  # float32(1000.0 * 1.1) in float64, then rounded
    (True, 1100.0)
    >>> s.update(True), s.scale
    (False, 550.0)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        min_scale: float | None = None,
        max_scale: float | None = None,
    ) -> None:
        settings = self._settings(
            growth_factor, backoff_factor, growth_interval, min_scale, max_scale
        )
        scale = _scale_value("init_scale", init_scale)
        low, high = min_scale, max_scale  # compare the values given, not the rounded ones
        if low is not None and float(init_scale) < float(low):
            raise ValueError(f"init_scale={init_scale!r} is below min_scale={low!r}")
        if high is not None and float(init_scale) > float(high):
            raise ValueError(f"init_scale={init_scale!r} is above max_scale={high!r}")
        self._apply(settings, self._clamp(scale, settings), 0, ScaleHistory())

    @staticmethod
    def _settings(
        growth_factor: Any,
        backoff_factor: Any,
        growth_interval: Any,
        min_scale: Any,
        max_scale: Any,
    ) -> dict[str, Any]:
        """Validate the settings shared by ``__init__`` and ``load_state_dict``."""
        growth = _real("growth_factor", growth_factor)
        if not (growth > 1 and math.isfinite(growth)):
            raise ValueError(f"growth_factor must be finite and > 1, got {growth!r}")
        backoff = _real("backoff_factor", backoff_factor)
        if not 0 < backoff < 1:
            raise ValueError(f"backoff_factor must be in the open interval (0, 1), got {backoff!r}")
        interval = _int("growth_interval", growth_interval, 1, _INT32_MAX)
        low = high = None
        if min_scale is not None:
            low = _real("min_scale", min_scale)
            if not (low > 0 and math.isfinite(low)):
                raise ValueError(f"min_scale must be a finite number > 0 or None, got {low!r}")
            low = _f32_up(low)
            if math.isinf(low):
                raise ValueError(f"min_scale={min_scale!r} is above the float32 range")
        if max_scale is not None:
            high = _real("max_scale", max_scale)
            if not (high > 0 and math.isfinite(high)):
                raise ValueError(
                    f"max_scale must be a finite number > 0 or None (no bound), got {high!r}"
                )
            high = _f32_down(high)
            if high == 0:
                raise ValueError(f"max_scale={max_scale!r} is below the smallest float32 > 0")
        if low is not None and high is not None and low > high:
            if min_scale > max_scale:
                raise ValueError(f"min_scale={min_scale!r} must not exceed max_scale={max_scale!r}")
            raise ValueError(
                f"no float32 value lies in [min_scale, max_scale] = [{min_scale!r}, "
                f"{max_scale!r}]; the scale is held in float32, so widen the interval"
            )
        return {
            "growth_factor": growth,
            "backoff_factor": backoff,
            "growth_interval": interval,
            "min_scale": low,
            "max_scale": high,
        }

    @staticmethod
    def _clamp(scale: float, settings: Mapping[str, Any]) -> float:
        if settings["min_scale"] is not None:
            scale = max(scale, settings["min_scale"])
        if settings["max_scale"] is not None:
            scale = min(scale, settings["max_scale"])
        return scale

    def _apply(
        self, settings: Mapping[str, Any], scale: float, tracker: int, history: ScaleHistory
    ) -> None:
        self._growth_factor: float = settings["growth_factor"]
        self._backoff_factor: float = settings["backoff_factor"]
        self._growth_interval: int = settings["growth_interval"]
        self._min_scale: float | None = settings["min_scale"]
        self._max_scale: float | None = settings["max_scale"]
        self._scale = scale
        self._growth_tracker = tracker
        self._history = history

    @property
    def growth_factor(self) -> float:
        """Factor applied after ``growth_interval`` clean steps."""
        return self._growth_factor

    @property
    def backoff_factor(self) -> float:
        """Factor applied on a step with inf/NaN gradients."""
        return self._backoff_factor

    @property
    def growth_interval(self) -> int:
        """Consecutive clean steps before the scale grows."""
        return self._growth_interval

    @property
    def min_scale(self) -> float | None:
        """Lower bound (float32, rounded up from the argument), or ``None``."""
        return self._min_scale

    @property
    def max_scale(self) -> float | None:
        """Upper bound (float32, rounded down from the argument), or ``None``."""
        return self._max_scale

    @property
    def growth_tracker(self) -> int:
        """Clean steps since the scale last changed, like GradScaler's ``_growth_tracker``."""
        return self._growth_tracker

    def update(self, found_inf: Any) -> bool:
        """Record one step and move the scale; say whether to take the optimizer step.

        Parameters
        ----------
        found_inf : bool
            Whether the scaled gradients of this step held any inf or NaN. Anything that
            ``bool()`` turns into one answer works: a NumPy bool, a count of non-finite values,
            a one-element array or tensor.

        Returns
        -------
        bool
            ``True`` to take the optimizer step (``not found_inf``), ``False`` to skip it.

        Raises
        ------
        TypeError
            If ``found_inf`` is ``None``, a string, a container, or an array/tensor of several
            elements; nothing is recorded then.
        """
        found = self._record(found_inf)
        scale = self._scale
        if found:
            new = _f32(scale * self._backoff_factor)
            if self._min_scale is not None:
                new = max(new, self._min_scale)
            self._scale = new if new > 0 else scale
            self._growth_tracker = 0
            return False
        clean = self._growth_tracker + 1
        if clean == self._growth_interval:
            new = _f32(scale * self._growth_factor)
            if self._max_scale is not None:
                new = min(new, self._max_scale)
            self._scale = new if math.isfinite(new) else scale
            clean = 0
        self._growth_tracker = clean
        return True

    def state_dict(self, include_history: bool = False) -> dict[str, Any]:
        """Return everything needed to resume this scaler bit for bit.

        Parameters
        ----------
        include_history : bool, optional
            Also store the history as plain lists (about 30 bytes a step once pickled). Without
            it a resumed scaler keeps counting steps but its history starts empty, at the step
            it resumed from (:attr:`ScaleHistory.first_step`).

        Returns
        -------
        dict
            ``type`` (``"DynamicLossScaler"``), ``scale``, ``growth_tracker`` (clean steps since
            the last change), ``growth_factor``, ``backoff_factor``, ``growth_interval``,
            ``min_scale``, ``max_scale``, ``steps`` and, if asked for, ``history``. All values
            are plain Python numbers, ``None`` or lists, so the dict pickles and JSON-encodes.
        """
        state = {
            "type": type(self).__name__,
            "scale": self._scale,
            "growth_tracker": self._growth_tracker,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "min_scale": self._min_scale,
            "max_scale": self._max_scale,
        }
        return self._history_state(state, include_history)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict`, settings included.

        Parameters
        ----------
        state_dict : dict
            The saved state. The scaler is changed only if all of it is valid.

        Raises
        ------
        ValueError
            If it is not a dict, was saved by another kind of scaler, lacks a key or has an
            unknown one, or holds a value the constructor would refuse, a scale outside
            ``[min_scale, max_scale]`` or a ``growth_tracker`` outside
            ``[0, growth_interval)``.
        """
        required = {
            "type",
            "scale",
            "growth_tracker",
            "growth_factor",
            "backoff_factor",
            "growth_interval",
            "min_scale",
            "max_scale",
            "steps",
        }
        _keys(state_dict, type(self).__name__, required, {"history"})
        s = state_dict
        settings = self._settings(
            s["growth_factor"],
            s["backoff_factor"],
            s["growth_interval"],
            s["min_scale"],
            s["max_scale"],
        )
        scale = _scale_value("state_dict['scale']", s["scale"])
        if self._clamp(scale, settings) != scale:
            raise ValueError(
                f"state_dict['scale']={scale!r} lies outside [min_scale, max_scale] = "
                f"[{settings['min_scale']}, {settings['max_scale']}]"
            )
        tracker = _int(
            "state_dict['growth_tracker']", s["growth_tracker"], 0, settings["growth_interval"] - 1
        )
        self._apply(settings, scale, tracker, self._load_history(s))

    def __repr__(self) -> str:
        return (
            f"DynamicLossScaler(scale={self._scale!r}, clean steps {self._growth_tracker}"
            f"/{self._growth_interval}, growth_factor={self._growth_factor!r}, "
            f"backoff_factor={self._backoff_factor!r}, min_scale={self._min_scale!r}, "
            f"max_scale={self._max_scale!r}, steps={self._history.steps})"
        )


class StaticLossScaler(_Scaler):
    """A loss scale that never changes, with the same interface as :class:`DynamicLossScaler`.

    A step whose gradients overflowed must still be skipped: :meth:`update` says so, and the
    history records it, but the scale stays.

    Parameters
    ----------
    scale : float
        The scale, a finite number > 0, rounded to float32.

    Raises
    ------
    ValueError
        If ``scale`` is not a number, is not finite and > 0, or is outside the float32 range.

    Examples
    --------
    >>> s = StaticLossScaler(128)
    >>> s.update(True), s.update(False), s.scale
    (False, True, 128.0)
    """

    def __init__(self, scale: float) -> None:
        self._scale = _scale_value("scale", scale)
        self._history = ScaleHistory()

    def update(self, found_inf: Any) -> bool:
        """Record one step; say whether to take the optimizer step.

        Parameters
        ----------
        found_inf : bool
            Whether this step's gradients held any inf or NaN (see
            :meth:`DynamicLossScaler.update` for what is accepted).

        Returns
        -------
        bool
            ``not found_inf``.

        Raises
        ------
        TypeError
            If ``found_inf`` does not convert to one bool.
        """
        return not self._record(found_inf)

    def state_dict(self, include_history: bool = False) -> dict[str, Any]:
        """Return the state: ``type``, ``scale``, ``steps`` and optionally ``history``.

        Parameters
        ----------
        include_history : bool, optional
            Also store the history, as for :meth:`DynamicLossScaler.state_dict`.

        Returns
        -------
        dict
            Plain Python values.
        """
        state = {"type": type(self).__name__, "scale": self._scale}
        return self._history_state(state, include_history)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict`.

        Parameters
        ----------
        state_dict : dict
            The saved state.

        Raises
        ------
        ValueError
            If it is not a dict, was saved by another kind of scaler, lacks a key or has an
            unknown one, or holds an invalid scale, step count or history.
        """
        _keys(state_dict, type(self).__name__, {"type", "scale", "steps"}, {"history"})
        scale = _scale_value("state_dict['scale']", state_dict["scale"])
        history = self._load_history(state_dict)
        self._scale, self._history = scale, history

    def __repr__(self) -> str:
        return f"StaticLossScaler(scale={self._scale!r}, steps={self._history.steps})"
