"""Steps to feed a loss scaler, shared by the scaling tests: clean, inf or NaN gradients."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from mptutor.scaling import DynamicLossScaler, StaticLossScaler

# A step's gradient: finite, inf or NaN. Clean steps are drawn 3 times as often, so that
# the scale also grows.
CLEAN, INF, NAN = "clean", "inf", "nan"
GRADIENT = {CLEAN: 1.0, INF: math.inf, NAN: math.nan}
step_kinds = st.sampled_from([CLEAN, CLEAN, CLEAN, INF, NAN])
sequences = st.lists(step_kinds, max_size=40)

FIXED_SEQUENCES = [
    [CLEAN] * 7 + [INF] + [CLEAN] * 5 + [NAN, NAN] + [CLEAN] * 10,
    [INF] * 6 + [CLEAN] * 12,
    [CLEAN, INF] * 8,
    [NAN] + [CLEAN] * 20 + [INF, CLEAN, CLEAN, CLEAN],
]


def run_ours(scaler: DynamicLossScaler | StaticLossScaler, seq: list[str]):
    """Feed a sequence to one of our scalers; return the same three lists as run_grad_scaler."""
    used, skipped, after = [], [], []
    for kind in seq:
        used.append(scaler.scale)
        skipped.append(not scaler.update(kind != CLEAN))
        after.append(scaler.scale)
    assert list(scaler.history.scales) == used
    assert [bool(s) for s in scaler.history.skipped] == skipped
    return used, skipped, after
