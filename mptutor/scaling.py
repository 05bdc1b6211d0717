"""Loss scaling without a framework: the dynamic loss-scale state machine of mixed precision.

The loss is multiplied by ``S`` before backward (small FP16 gradients do not underflow), the
gradients divided by ``S`` before the step. A dynamic scaler skips a step whose gradients hold
inf or NaN and halves ``S``, and doubles it after ``growth_interval`` clean steps, as
``torch.amp.GradScaler`` does bit for bit (above its floor). Both scalers provide
:class:`LossScaler`, the protocol the PyTorch, Keras and MXNet modules accept;
``docs/loss-scaling-notes.md`` compares the frameworks' own scalers.

>>> s = DynamicLossScaler(init_scale=8.0, growth_interval=2)
>>> [s.update(found_inf) for found_inf in (False, True, False, False)]
[True, False, True, True]
>>> s.scale, list(s.history.scales), list(s.history.skipped)
(8.0, [8.0, 8.0, 4.0, 4.0], [0, 1, 0, 0])
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mptutor._checks import check_scalar, check_type

__all__ = ["LossScaler", "DynamicLossScaler", "StaticLossScaler", "ScaleHistory"]

#: Largest finite float32 value: the scale is held in float32, like GradScaler's.
FLOAT32_MAX: float = float(np.finfo(np.float32).max)
_MAX_STEPS = 2**62  # step counts stay within int64, in which ScaleHistory.arrays numbers them
_INT32_MAX = 2**31 - 1  # GradScaler counts clean steps in an int32


def _f32(x: float, direction: int = 0) -> float:
    """Round to float32: to nearest (``direction`` 0), up (1) or down (-1); may give inf or 0."""
    with np.errstate(over="ignore", under="ignore"):
        y = np.float32(x)
    if direction and (float(y) - x) * direction < 0:
        y = np.nextafter(y, np.float32(direction * np.inf))
    return float(y)


def _scale_value(name: str, value: Any) -> float:
    """Check a scale (a finite number > 0) and round it to the nearest float32."""
    x = check_scalar(value, name, min_val=0, include_boundaries="neither")
    y = _f32(x)
    if math.isinf(y):
        raise ValueError(f"{name}={x!r} overflows float32 (largest {FLOAT32_MAX:.8g})")
    if y == 0:
        raise ValueError(f"{name}={x!r} rounds to 0 in float32; the scale is held in float32")
    return y


def _found_inf(found_inf: Any) -> bool:
    """Turn ``found_inf`` into a bool, refusing values whose truth is not a yes/no answer."""
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
        raise TypeError(f"found_inf must convert to one bool: {exc}") from exc


def _check_keys(state: Any, kind: str, required: set[str], optional: set[str]) -> None:
    """Check that ``state`` is a mapping for ``kind`` with exactly the allowed keys."""
    if not isinstance(state, Mapping):
        raise ValueError(f"state_dict must be a dict, got {type(state).__name__}")
    if state.get("type") != kind:
        raise ValueError(f"state_dict has type={state.get('type')!r}; a {kind} loads type={kind!r}")
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

    Attributes
    ----------
    first_step : int
        Step number of ``scales[0]``: 0, or where a scaler resumed from a state without history.
    scales, skipped : array.array
        The scale of each recorded step (``"f"``), and 1 where the step was skipped (``"B"``).

    Examples
    --------
    >>> h = ScaleHistory()
    >>> h.append(1024.0, False); h.append(1024.0, True)
    >>> h.steps, h.skipped_steps().tolist()
    (2, [1])
    """

    first_step: int = 0
    scales: array = field(default_factory=lambda: array("f"), init=False)
    skipped: array = field(default_factory=lambda: array("B"), init=False)

    def __post_init__(self) -> None:
        name, most = "first_step", _MAX_STEPS
        self.first_step = check_scalar(self.first_step, name, int, min_val=0, max_val=most)

    @property
    def steps(self) -> int:
        """Number of updates so far, those before ``first_step`` included."""
        return self.first_step + len(self.scales)

    def __len__(self) -> int:
        return len(self.scales)

    def __repr__(self) -> str:
        return (
            f"ScaleHistory(steps={self.steps}, first_step={self.first_step}, "
            f"skipped={sum(self.skipped)})"
        )

    def append(self, scale: float, skipped: bool) -> None:
        """Record one step: the scale used (> 0, stored in float32), whether it was skipped.

        Raises
        ------
        TypeError, ValueError
            If ``scale`` is not a float32 scale or ``skipped`` not a bool (nothing recorded).
        """
        scale = _scale_value("scale", scale)
        check_type(skipped, "skipped", (bool, np.bool_), "True or False")
        self._add(scale, bool(skipped))

    def _add(self, scale: float, skipped: bool) -> None:
        """Record one step, unchecked."""
        self.scales.append(scale)
        self.skipped.append(1 if skipped else 0)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return the step numbers (int64), scales (float64) and skipped flags (bool) as arrays."""
        steps = np.arange(self.first_step, self.steps, dtype=np.int64)
        scales = np.frombuffer(self.scales, dtype=np.float32).astype(np.float64)
        return steps, scales, np.frombuffer(self.skipped, dtype=np.uint8).astype(bool)

    def skipped_steps(self) -> np.ndarray:
        """Return the step numbers (int64, counted like :attr:`steps`) of the skipped steps."""
        steps, _, skipped = self.arrays()
        return steps[skipped]

    def _state(self) -> dict[str, Any]:
        """Return the history as plain lists, for a state dict."""
        skipped = [bool(s) for s in self.skipped]
        return {"first_step": self.first_step, "scales": list(self.scales), "skipped": skipped}

    @classmethod
    def _from_state(cls, state: Any, steps: int) -> ScaleHistory:
        """Rebuild a history from ``state_dict()['history']`` of a scaler at ``steps``."""
        name = "state_dict['history']"
        if not isinstance(state, Mapping) or set(state) != {"first_step", "scales", "skipped"}:
            raise ValueError(
                f"{name} must be a dict with keys 'first_step', 'scales', 'skipped', "
                f"got {state!r:.200}"
            )
        first = check_scalar(state["first_step"], f"{name}['first_step']", int, min_val=0)
        scales, skipped = state["scales"], state["skipped"]
        lists = all(isinstance(v, (list, tuple, array)) for v in (scales, skipped))
        if not (lists and len(scales) == len(skipped) == steps - first):
            raise ValueError(
                f"{name} must hold lists of steps - first_step = {steps - first} scales and "
                "skipped flags"
            )
        history = cls(first_step=first)
        for i, (scale, skip) in enumerate(zip(scales, skipped, strict=True)):
            if not (isinstance(skip, (bool, np.bool_)) or skip in (0, 1)):
                raise ValueError(f"{name}['skipped'][{i}] must be a bool, got {skip!r}")
            history._add(_scale_value(f"{name}['scales'][{i}]", scale), bool(skip))
        return history


@runtime_checkable
class LossScaler(Protocol):
    """What the framework modules need of a loss scaler: multiply by :attr:`scale`, :meth:`update`.

    A step is applied only when :meth:`update` (told whether the gradients held inf/NaN) returns
    ``True``; ``state_dict``/``load_state_dict`` put the scaler in checkpoints.
    """

    scale: float  # the scale to multiply the loss by
    history: ScaleHistory  # the scales used and the steps skipped so far

    def update(self, found_inf: Any) -> bool:
        """Record a step's overflow check and return whether to apply the step."""

    def state_dict(self) -> dict[str, Any]:
        """Return the scaler's state, for a checkpoint."""

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from :meth:`state_dict`."""


class _Scaler:
    """The two scalers' shared part: the scale, the history and the state dict's steps."""

    @property
    def scale(self) -> float:
        """The current scale (a float32 value): multiply the loss by it before backward."""
        return self._scale

    @property
    def history(self) -> ScaleHistory:
        """Every update so far: the scale used and whether the step was skipped (live)."""
        return self._history

    def _record(self, found_inf: Any) -> bool:
        """Check ``found_inf``, add the step to the history and return it as a bool."""
        found = _found_inf(found_inf)
        self._history._add(self._scale, found)
        return found

    def _with_history(self, state: dict[str, Any], include_history: bool) -> dict[str, Any]:
        """Add ``steps`` and, if asked for, ``history`` to a state dict."""
        check_type(include_history, "include_history", bool, "True or False")
        state["steps"] = self._history.steps
        if include_history:
            state["history"] = self._history._state()
        return state

    @staticmethod
    def _load_history(state: Mapping[str, Any]) -> ScaleHistory:
        """Return the history a state dict holds, or an empty one that counts on from its steps."""
        name = "state_dict['steps']"
        steps = check_scalar(state["steps"], name, int, min_val=0, max_val=_MAX_STEPS)
        if "history" in state:
            return ScaleHistory._from_state(state["history"], steps)
        return ScaleHistory(first_step=steps)


class StaticLossScaler(_Scaler):
    """A loss scale that never changes; :meth:`update` still says to skip an overflowed step.

    Parameters
    ----------
    scale : float
        The scale, a finite number > 0, rounded to float32.

    Raises
    ------
    TypeError, ValueError
        If ``scale`` is not a real number, or not > 0 within float32's range.

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
        """Record one step; return ``not found_inf`` (see :meth:`DynamicLossScaler.update`)."""
        return not self._record(found_inf)

    def state_dict(self, include_history: bool = False) -> dict[str, Any]:
        """Return ``type``, ``scale``, ``steps`` and, if asked for, ``history`` (plain values)."""
        state = {"type": "StaticLossScaler", "scale": self._scale}
        return self._with_history(state, include_history)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict`.

        Raises
        ------
        ValueError
            If it is not such a state (another scaler's, a key missing or unknown, an invalid
            value); nothing changes then.
        """
        _check_keys(state_dict, "StaticLossScaler", {"type", "scale", "steps"}, {"history"})
        try:
            scale = _scale_value("state_dict['scale']", state_dict["scale"])
            history = self._load_history(state_dict)
        except TypeError as exc:  # a value of the wrong type: one more flaw of the state
            raise ValueError(f"malformed state_dict: {exc}") from exc
        self._scale, self._history = scale, history

    def __repr__(self) -> str:
        return f"StaticLossScaler(scale={self._scale!r}, steps={self._history.steps})"


class DynamicLossScaler(_Scaler):
    """A dynamic loss scale with ``torch.amp.GradScaler``'s trajectory, and a floor.

    :meth:`update` once per step: ``growth_interval`` clean steps multiply the scale by
    ``growth_factor``, an inf/NaN step by ``backoff_factor`` (each restarts the count), in float64
    rounded once to float32, as GradScaler's CPU kernel; growth past float32 keeps the scale.
    Unlike GradScaler's, the scale stops at ``min_scale``: :attr:`overflows_at_floor` counts the
    steps skipped there (a long run: the loss or the forward pass itself is inf or NaN, or gradients
    that overflow at the floor's scale, which only a lower ``min_scale`` lets the scale fix).

    Parameters
    ----------
    init_scale : float, optional
        Starting scale, rounded to float32.
    growth_factor, backoff_factor : float, optional
        Factors > 1 and in (0, 1).
    growth_interval : int, optional
        Consecutive clean steps before growing, 1 to ``2**31 - 1``.
    min_scale : float, optional
        The floor, > 0, rounded up to float32 (``2**-149``: GradScaler's path, never 0).
    max_scale : float, optional
        A cap GradScaler does not have, rounded down to float32; ``None``: no cap.

    Raises
    ------
    TypeError, ValueError
        If an argument is not a finite number of its kind in range, ``[min_scale, max_scale]``
        holds no float32 value, or ``init_scale`` lies outside it.

    Examples
    --------
    >>> s = DynamicLossScaler(init_scale=4.0)  # 4, 2, 1, then twice at the floor of 1
    >>> [s.update(True) for _ in range(4)], s.scale, s.overflows_at_floor
    ([False, False, False, False], 1.0, 2)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        min_scale: float = 1.0,
        max_scale: float | None = None,
    ) -> None:
        settings = self._settings(
            growth_factor, backoff_factor, growth_interval, min_scale, max_scale
        )
        scale = _scale_value("init_scale", init_scale)
        high = math.inf if max_scale is None else float(max_scale)
        if not float(min_scale) <= float(init_scale) <= high:  # as given, not as rounded
            raise ValueError(
                f"init_scale={init_scale!r} lies outside [min_scale, max_scale] = "
                f"[{min_scale!r}, {max_scale!r}]; the scale starts within its bounds"
            )
        scale = min(max(scale, settings[3]), settings[4] or FLOAT32_MAX)
        self._set(settings, scale, 0, 0, ScaleHistory())

    @staticmethod
    def _settings(growth: Any, backoff: Any, interval: Any, low: Any, high: Any) -> tuple:
        """Check the settings (``__init__``'s arguments after ``init_scale``) and round them."""
        positive: dict[str, Any] = {"min_val": 0, "include_boundaries": "neither"}
        growth = check_scalar(growth, "growth_factor", min_val=1, include_boundaries="neither")
        backoff = check_scalar(backoff, "backoff_factor", max_val=1, **positive)
        interval = check_scalar(interval, "growth_interval", int, min_val=1, max_val=_INT32_MAX)
        in_float32 = {"min_val": 0, "max_val": FLOAT32_MAX, "include_boundaries": "right"}
        low_32 = _f32(check_scalar(low, "min_scale", **in_float32), 1)  # rounded up
        high_32 = check_scalar(high, "max_scale", allow_none=True, **positive)
        if high_32 is not None:
            high_32 = _f32(high_32, -1)  # rounded down
            if not low_32 <= high_32:  # a max_scale below the smallest float32 gives 0
                raise ValueError(
                    f"no float32 value lies in [min_scale, max_scale] = [{low!r}, {high!r}]; "
                    "the scale is held in float32"
                )
        return growth, backoff, interval, low_32, high_32

    def _set(
        self, settings: tuple, scale: float, tracker: int, at_floor: int, history: ScaleHistory
    ) -> None:
        """Set every field at once, so that a refused state changes nothing."""
        self._growth_factor, self._backoff_factor, self._growth_interval = settings[:3]
        self._min_scale, self._max_scale = settings[3:]
        self._scale, self._growth_tracker, self._overflows_at_floor = scale, tracker, at_floor
        self._history = history

    # The settings and the state, read-only: a state dict changes them, checked, all at once.
    growth_factor = property(lambda s: s._growth_factor, doc="Factor after enough clean steps.")
    backoff_factor = property(lambda s: s._backoff_factor, doc="Factor on an inf/NaN step.")
    growth_interval = property(lambda s: s._growth_interval, doc="Clean steps before growing.")
    min_scale = property(lambda s: s._min_scale, doc="The floor (float32, rounded up).")
    max_scale = property(lambda s: s._max_scale, doc="The cap (float32, rounded down) or None.")
    growth_tracker = property(lambda s: s._growth_tracker, doc="Clean steps since the last change.")
    overflows_at_floor = property(
        lambda s: s._overflows_at_floor, doc="Consecutive overflowing steps at the floor."
    )

    def update(self, found_inf: Any) -> bool:
        """Record one step and move the scale; say whether to take the optimizer step.

        Parameters
        ----------
        found_inf : bool
            Whether the scaled gradients held inf or NaN: anything ``bool()`` turns into one
            answer (a NumPy bool, a count, a one-element array or tensor).

        Returns
        -------
        bool
            ``True`` to take the optimizer step (``not found_inf``).

        Raises
        ------
        TypeError
            If ``found_inf`` is None, a string, a container or several elements (not recorded).
        """
        scale = self._scale
        if self._record(found_inf):
            if scale == self._min_scale:
                self._overflows_at_floor += 1
            self._scale = max(_f32(scale * self._backoff_factor), self._min_scale)
            self._growth_tracker = 0
            return False
        self._overflows_at_floor = 0
        self._growth_tracker += 1
        if self._growth_tracker == self._growth_interval:
            new = min(_f32(scale * self._growth_factor), self._max_scale or math.inf)
            self._scale = new if math.isfinite(new) else scale
            self._growth_tracker = 0
        return True

    def state_dict(self, include_history: bool = False) -> dict[str, Any]:
        """Return everything needed to resume this scaler bit for bit.

        Parameters
        ----------
        include_history : bool, optional
            Also store the history as plain lists. Without it a resumed scaler counts steps on,
            but its history starts empty at the step it resumed from (``first_step``).

        Returns
        -------
        dict
            Plain values: the state, the settings, ``steps`` and, if asked for, ``history``.
        """
        state = {
            "type": "DynamicLossScaler",
            "scale": self._scale,
            "growth_tracker": self._growth_tracker,
            "overflows_at_floor": self._overflows_at_floor,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "min_scale": self._min_scale,
            "max_scale": self._max_scale,
        }
        return self._with_history(state, include_history)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore a :meth:`state_dict`, settings included (``min_scale`` None: ``2**-149``).

        Raises
        ------
        ValueError
            If it is not such a state (another scaler's, a key missing or unknown, a value the
            constructor refuses, the scale or ``growth_tracker`` out of bounds, overflows
            counted above the floor); nothing changes then.
        """
        s = state_dict
        keys = {"type", "scale", "growth_tracker", "growth_factor", "backoff_factor", "steps"}
        keys |= {"growth_interval", "min_scale", "max_scale"}
        _check_keys(s, "DynamicLossScaler", keys, {"history", "overflows_at_floor"})
        try:
            low = 2.0**-149 if s["min_scale"] is None else s["min_scale"]
            settings = self._settings(
                s["growth_factor"], s["backoff_factor"], s["growth_interval"], low, s["max_scale"]
            )
            scale = _scale_value("state_dict['scale']", s["scale"])
            if not settings[3] <= scale <= (settings[4] or FLOAT32_MAX):
                raise ValueError(
                    f"state_dict['scale']={scale!r} lies outside [min_scale, max_scale] = "
                    f"[{settings[3]}, {settings[4]}]"
                )
            name, bounds = "state_dict['growth_tracker']", {"include_boundaries": "left"}
            tracker = check_scalar(
                s["growth_tracker"], name, int, min_val=0, max_val=settings[2], **bounds
            )
            name = "state_dict['overflows_at_floor']"
            at_floor = check_scalar(s.get("overflows_at_floor", 0), name, int, min_val=0)
            if at_floor and (scale != settings[3] or tracker):
                raise ValueError(
                    f"{name}={at_floor} but scale={scale!r}, growth_tracker={tracker}: overflows "
                    "are counted only at the floor, and an overflow restarts growth_tracker"
                )
            history = self._load_history(s)
        except TypeError as exc:  # a value of the wrong type: one more flaw of the state
            raise ValueError(f"malformed state_dict: {exc}") from exc
        self._set(settings, scale, tracker, at_floor, history)

    def __repr__(self) -> str:
        return (
            f"DynamicLossScaler(scale={self._scale!r}, clean steps {self._growth_tracker}"
            f"/{self._growth_interval}, growth_factor={self._growth_factor!r}, "
            f"backoff_factor={self._backoff_factor!r}, min_scale={self._min_scale!r}, "
            f"max_scale={self._max_scale!r}, overflows_at_floor={self._overflows_at_floor}, "
            f"steps={self._history.steps})"
        )
