"""A loss scale that never changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mptutor.scaling._float32 import scale_value
from mptutor.scaling._history import ScaleHistory
from mptutor.scaling._protocol import ScalerBase, check_keys, malformed_state


class StaticLossScaler(ScalerBase):
    """A loss scale that never changes, with the same interface as :class:`DynamicLossScaler`.

    A step whose gradients overflowed must still be skipped: :meth:`update` says so, and the
    history records it, but the scale stays.

    Parameters
    ----------
    scale : float
        The scale, a finite number > 0, rounded to float32.

    Raises
    ------
    TypeError
        If ``scale`` is not a real number (``True`` is refused too).
    ValueError
        If ``scale`` is not finite and > 0, or is outside the float32 range.

    Examples
    --------
    >>> s = StaticLossScaler(128)
    >>> s.update(True), s.update(False), s.scale
    (False, True, 128.0)
    """

    def __init__(self, scale: float) -> None:
        self._scale = scale_value("scale", scale)
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
        check_keys(state_dict, type(self).__name__, {"type", "scale", "steps"}, {"history"})
        with malformed_state():
            scale = scale_value("state_dict['scale']", state_dict["scale"])
            history = self._load_history(state_dict)
        self._scale, self._history = scale, history

    def __repr__(self) -> str:
        return f"StaticLossScaler(scale={self._scale!r}, steps={self._history.steps})"
