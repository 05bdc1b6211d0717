"""What a loss scaler provides: the :class:`LossScaler` protocol and the scalers' shared part."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from mptutor._checks import check_scalar, check_type
from mptutor.scaling._history import _MAX, ScaleHistory


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


def check_keys(state: Any, kind: str, required: set[str], optional: set[str]) -> None:
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


@contextmanager
def malformed_state() -> Iterator[None]:
    """Report a value of the wrong type in a state dict as a ``ValueError``, like any other flaw.

    A constructor refuses an argument of the wrong type with a ``TypeError``; a state dict is
    one value, malformed whatever is wrong in it.
    """
    try:
        yield
    except TypeError as exc:
        raise ValueError(f"malformed state_dict: {exc}") from exc


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


class ScalerBase:
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
        self._history._add(self._scale, found)
        return found

    def _history_state(self, state: dict[str, Any], include_history: bool) -> dict[str, Any]:
        check_type(include_history, "include_history", bool, "True or False")
        state["steps"] = self._history.steps
        if include_history:
            state["history"] = self._history._state()
        return state

    @staticmethod
    def _load_history(state: Mapping[str, Any]) -> ScaleHistory:
        steps = check_scalar(state["steps"], "state_dict['steps']", int, min_val=0, max_val=_MAX)
        if "history" in state:
            return ScaleHistory._from_state(state["history"], steps)
        return ScaleHistory(first_step=steps)
