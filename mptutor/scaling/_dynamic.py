"""The dynamic loss scale: GradScaler's state machine, with its float32 arithmetic."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mptutor._checks import check_scalar
from mptutor.scaling._float32 import f32, f32_down, f32_up, scale_value
from mptutor.scaling._history import ScaleHistory
from mptutor.scaling._protocol import ScalerBase, check_keys, malformed_state

#: GradScaler counts clean steps in an int32 tensor.
_INT32_MAX = 2**31 - 1


class DynamicLossScaler(ScalerBase):
    """A dynamic loss scale with ``torch.amp.GradScaler``'s trajectory, and a floor.

    Call :meth:`update` once per step with whether the (scaled) gradients held inf or NaN; it
    returns whether to take the optimizer step. Read :attr:`scale` for the next step's scale.

    The scale never falls below ``min_scale`` (1 by default, as in TensorFlow 1's dynamic loss
    scale and Megatron-LM's scaler). A run of overflowing steps halves the scale down to the
    floor; there every further overflow is still skipped (weights and optimizer state are left
    alone) and the scale stays, so training resumes as soon as finite batches come back.
    :attr:`overflows_at_floor` counts the consecutive overflows at the floor: there the forward
    pass or the loss itself overflows (an inf or NaN loss), which no scale can fix.

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
    min_scale : float, optional
        The floor (default 1.0), any positive finite number: a backoff below it stops at it.
        GradScaler has none; its trajectory is this scaler's as long as its scale stays at or
        above the floor. Rounded up to float32; ``2**-149``, the smallest float32 > 0, gives
        GradScaler's trajectory except that the scale never reaches 0.
    max_scale : float, optional
        A cap GradScaler does not have: growth above it stops at it. Rounded down to float32.
        ``None`` (default): no cap.

    Raises
    ------
    TypeError
        If an argument is not a number of its kind (a real number; an int for
        ``growth_interval``; ``True`` is refused too).
    ValueError
        If an argument is NaN, infinite or out of range, or the arguments disagree:
        ``min_scale > max_scale`` or ``init_scale`` outside ``[min_scale, max_scale]`` (an
        ``init_scale`` below 1 needs a lower ``min_scale``). The message names the argument and
        the values it accepts.

    Notes
    -----
    On a clean step the count of clean steps grows by one; when it reaches
    ``growth_interval`` the scale is multiplied by ``growth_factor`` and the count restarts.
    On an inf/NaN step the scale is multiplied by ``backoff_factor`` and the count restarts.
    Products are computed in float64 and rounded once to float32, as GradScaler's CPU kernel
    does (found by experiment; the CUDA kernel was not checked). Growth that would overflow
    float32 keeps the scale (as GradScaler does); a backoff stops at ``min_scale``, while
    GradScaler's scale goes on down to 0 and stays there.

    Examples
    --------
    >>> s = DynamicLossScaler(init_scale=1000.0, growth_factor=1.1, growth_interval=1)
    >>> s.update(False), s.scale  # float32(1000.0 * 1.1) in float64, then rounded
    (True, 1100.0)
    >>> s.update(True), s.scale
    (False, 550.0)
    >>> s = DynamicLossScaler(init_scale=4.0)
    >>> [s.update(True) for _ in range(4)], s.scale, s.overflows_at_floor
    ([False, False, False, False], 1.0, 2)
    >>> s.update(False), s.overflows_at_floor
    (True, 0)
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
        scale = scale_value("init_scale", init_scale)
        low, high = min_scale, max_scale  # compare the values given, not the rounded ones
        if float(init_scale) < float(low):
            raise ValueError(
                f"init_scale={init_scale!r} is below min_scale={low!r}, the floor of the scale; "
                "pass a smaller min_scale to start lower"
            )
        if high is not None and float(init_scale) > float(high):
            raise ValueError(f"init_scale={init_scale!r} is above max_scale={high!r}")
        self._apply(settings, self._clamp(scale, settings), 0, 0, ScaleHistory())

    @staticmethod
    def _settings(
        growth_factor: Any,
        backoff_factor: Any,
        growth_interval: Any,
        min_scale: Any,
        max_scale: Any,
    ) -> dict[str, Any]:
        """Validate the settings shared by ``__init__`` and ``load_state_dict``."""
        growth = check_scalar(
            growth_factor, "growth_factor", float, min_val=1, include_boundaries="neither"
        )
        backoff = check_scalar(
            backoff_factor,
            "backoff_factor",
            float,
            min_val=0,
            max_val=1,
            include_boundaries="neither",
        )
        interval = check_scalar(growth_interval, "growth_interval", int, min_val=1)
        if interval > _INT32_MAX:
            raise ValueError(
                f"growth_interval={interval} exceeds 2**31 - 1: the count of clean steps is an "
                "int32, as in GradScaler"
            )
        positive = {"min_val": 0, "include_boundaries": "neither"}
        low = f32_up(check_scalar(min_scale, "min_scale", float, **positive))
        high = check_scalar(max_scale, "max_scale", float, allow_none=True, **positive)
        if math.isinf(low):
            raise ValueError(f"min_scale={min_scale!r} is above the float32 range")
        if high is not None:
            high = f32_down(high)
            if high == 0:
                raise ValueError(f"max_scale={max_scale!r} is below the smallest float32 > 0")
        if high is not None and low > high:
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
        scale = max(scale, settings["min_scale"])
        if settings["max_scale"] is not None:
            scale = min(scale, settings["max_scale"])
        return scale

    def _apply(
        self,
        settings: Mapping[str, Any],
        scale: float,
        tracker: int,
        at_floor: int,
        history: ScaleHistory,
    ) -> None:
        self._growth_factor: float = settings["growth_factor"]
        self._backoff_factor: float = settings["backoff_factor"]
        self._growth_interval: int = settings["growth_interval"]
        self._min_scale: float = settings["min_scale"]
        self._max_scale: float | None = settings["max_scale"]
        self._scale = scale
        self._growth_tracker = tracker
        self._overflows_at_floor = at_floor
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
    def min_scale(self) -> float:
        """The floor of the scale (float32, rounded up from the argument)."""
        return self._min_scale

    @property
    def max_scale(self) -> float | None:
        """Upper bound (float32, rounded down from the argument), or ``None``."""
        return self._max_scale

    @property
    def growth_tracker(self) -> int:
        """Clean steps since the scale last changed, like GradScaler's ``_growth_tracker``."""
        return self._growth_tracker

    @property
    def overflows_at_floor(self) -> int:
        """Consecutive overflowing steps taken with the scale at its floor; 0 after a clean one.

        A few mean the floor is too high for this model's gradients. A long run means the loss
        or the forward pass itself is inf or NaN: no scale can fix that, look at the data and
        the activations (:func:`mptutor.torch.find_nonfinite`).
        """
        return self._overflows_at_floor

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
            if scale == self._min_scale:
                self._overflows_at_floor += 1
            self._scale = max(f32(scale * self._backoff_factor), self._min_scale)
            self._growth_tracker = 0
            return False
        self._overflows_at_floor = 0
        clean = self._growth_tracker + 1
        if clean == self._growth_interval:
            new = f32(scale * self._growth_factor)
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
            the last change), ``overflows_at_floor``, ``growth_factor``, ``backoff_factor``,
            ``growth_interval``, ``min_scale``, ``max_scale``, ``steps`` and, if asked for,
            ``history``. All values are plain Python numbers, ``None`` or lists, so the dict
            pickles and JSON-encodes.
        """
        state = {
            "type": type(self).__name__,
            "scale": self._scale,
            "growth_tracker": self._growth_tracker,
            "overflows_at_floor": self._overflows_at_floor,
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
            The saved state. The scaler is changed only if all of it is valid. A state saved
            before the floor existed (``min_scale`` ``None``, no ``overflows_at_floor``) loads
            with ``min_scale=2**-149``, the smallest float32 > 0, where its scale stopped then.

        Raises
        ------
        ValueError
            If it is not a dict, was saved by another kind of scaler, lacks a key or has an
            unknown one, or holds a value the constructor would refuse, a scale outside
            ``[min_scale, max_scale]``, a ``growth_tracker`` outside ``[0, growth_interval)``
            or overflows at the floor while the scale is above it.
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
        check_keys(state_dict, type(self).__name__, required, {"history", "overflows_at_floor"})
        s = state_dict
        with malformed_state():
            settings = self._settings(
                s["growth_factor"],
                s["backoff_factor"],
                s["growth_interval"],
                2.0**-149 if s["min_scale"] is None else s["min_scale"],
                s["max_scale"],
            )
            scale = scale_value("state_dict['scale']", s["scale"])
            if self._clamp(scale, settings) != scale:
                raise ValueError(
                    f"state_dict['scale']={scale!r} lies outside [min_scale, max_scale] = "
                    f"[{settings['min_scale']}, {settings['max_scale']}]"
                )
            tracker = check_scalar(
                s["growth_tracker"],
                "state_dict['growth_tracker']",
                int,
                min_val=0,
                max_val=settings["growth_interval"],
                include_boundaries="left",
            )
            name = "state_dict['overflows_at_floor']"
            at_floor = check_scalar(s.get("overflows_at_floor", 0), name, int, min_val=0)
            if at_floor and (scale != settings["min_scale"] or tracker):
                raise ValueError(
                    f"{name}={at_floor} but scale={scale!r}, growth_tracker={tracker}: "
                    "overflows are counted only at the floor (scale == min_scale, "
                    f"{settings['min_scale']!r}), and an overflow restarts growth_tracker"
                )
            history = self._load_history(s)
        self._apply(settings, scale, tracker, at_floor, history)

    def __repr__(self) -> str:
        return (
            f"DynamicLossScaler(scale={self._scale!r}, clean steps {self._growth_tracker}"
            f"/{self._growth_interval}, growth_factor={self._growth_factor!r}, "
            f"backoff_factor={self._backoff_factor!r}, min_scale={self._min_scale!r}, "
            f"max_scale={self._max_scale!r}, overflows_at_floor={self._overflows_at_floor}, "
            f"steps={self._history.steps})"
        )
