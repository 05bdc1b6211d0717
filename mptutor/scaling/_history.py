"""The record of a scaler's steps: the scale used at each and whether it was skipped."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mptutor._checks import check_scalar
from mptutor.scaling._float32 import scale_value

#: Step counts stay within int64, in which :meth:`ScaleHistory.arrays` numbers them.
_MAX = 2**62


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

    def __post_init__(self) -> None:
        for name, code in (("scales", "f"), ("skipped", "B")):
            value = getattr(self, name)
            if not (isinstance(value, array) and value.typecode == code):
                raise TypeError(
                    f"{name} must be an array.array with typecode {code!r}, got {value!r:.80}"
                )
        if len(self.scales) != len(self.skipped):
            raise ValueError(
                f"scales and skipped must have one entry per step, got {len(self.scales)} and "
                f"{len(self.skipped)}"
            )
        self.first_step = check_scalar(self.first_step, "first_step", int, min_val=0, max_val=_MAX)

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
            The scale used in the step, a finite number > 0 (stored in float32).
        skipped : bool
            Whether the optimizer step was skipped.

        Raises
        ------
        TypeError, ValueError
            If ``scale`` is not a float32 scale or ``skipped`` not a bool; nothing is recorded.
        """
        scale = scale_value("scale", scale)
        if not isinstance(skipped, (bool, np.bool_)):
            raise TypeError(f"skipped must be True or False, got {skipped!r:.80}")
        self._add(scale, bool(skipped))

    def _add(self, scale: float, skipped: bool) -> None:
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
        name = "state_dict['history']['first_step']"
        first = check_scalar(state["first_step"], name, int, min_val=0, max_val=steps)
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
            scale = scale_value(f"state_dict['history']['scales'][{i}]", scale)
            history._add(scale, bool(skip))
        return history
