"""mptutor.fp8.DelayedScaling held against Transformer Engine's delayed-scaling rule.

The rule is re-expressed below in NumPy float32 from Transformer Engine's kernel
``transformer_engine/common/recipe/delayed_scaling.cu`` (``amax_and_scale_update``): the amax
history is a column of ``history_len`` float32 slots whose slot 0 holds this step's amax; the
update takes the largest slot (``fmaxf``, which passes over NaN) or slot 0 (``most_recent``),
rolls the column (slot 0 moves to the end, the others one up, slot 0 is cleared), and sets
``scale = (fp8_max * 2**-margin) / amax`` in float32 when that amax is finite and positive,
else keeps the scale; an infinite quotient becomes the largest float32. The first scale is 1.

Bit for bit (``float32(DelayedScaling.scale)`` against that float32 scale, step after step):
every sequence of float32 amaxes from 1e-30 to 1e30, both algorithms, both FP8 formats, margins
0 to 16, windows of 1 to 8, and amaxes so small that the scale passes float32's largest.

Where they differ, by design (measured in the tests below):

1. An amax of 0, NaN or inf never enters mptutor's window. Transformer Engine writes it into a
   slot: it pushes out an older amax, and an inf holds the scale where it was (``isfinite``
   fails) for ``history_len`` steps. Measured on amaxes that double each step (margin 1,
   window 4) with one inf among them: under Transformer Engine the stale scale saturates the
   three steps after it (errors of 50%, 75% and 87.5% of the amax); mptutor's scale follows
   the finite amaxes (error at most 3.6% of the amax at every step, E4M3's half step).
2. A margin above 127 is refused; Transformer Engine computes ``448 * 2**-margin`` in float32,
   which is 0 from a margin of about 160 on: every scale is then 0.
3. mptutor keeps its scale at or above float32's smallest normal (2**-126); Transformer Engine
   lets ``scaled_max / amax`` go subnormal or to 0 (only with a margin and a huge amax).
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import formats, fp8

FP8_MAX = {"fp8_e4m3": np.float32(448), "fp8_e5m2": np.float32(57344)}


class TransformerEngineDelayedScaling:
    """Transformer Engine's ``amax_and_scale_update`` for one tensor, in NumPy float32."""

    def __init__(self, fmt, history_len, algo="max", margin=0):
        self.history = np.zeros(history_len, np.float32)  # slot 0: this step's amax
        self.scale = np.float32(1.0)
        self.algo = algo
        self.scaled_max = np.float32(FP8_MAX[fmt] * np.float32(2.0) ** np.float32(-margin))

    def update(self, amax):
        self.history[0] = np.float32(amax)  # the forward pass records the step's amax
        last = self.history[0]
        largest = np.float32(0.0)
        for value in self.history:  # fmaxf: a NaN operand is passed over
            largest = value if math.isnan(largest) or value > largest else largest
        chosen = last if self.algo == "most_recent" else largest
        self.history = np.concatenate([[np.float32(0.0)], self.history[2:], [last]]).astype(
            np.float32
        ) if len(self.history) > 1 else np.zeros(1, np.float32)  # fmt: skip
        if math.isfinite(chosen) and chosen > 0:
            with np.errstate(over="ignore", under="ignore"):
                scale = np.float32(self.scaled_max / np.float32(chosen))
        else:
            scale = self.scale
        self.scale = np.finfo(np.float32).max if np.isinf(scale) else scale
        return self.scale


_LOW, _HIGH = float(np.float32(1e-30)), float(np.float32(1e30))
amaxes = st.floats(_LOW, _HIGH, allow_nan=False, allow_infinity=False, width=32)


@given(
    fmt=st.sampled_from(sorted(FP8_MAX)),
    algo=st.sampled_from(["max", "most_recent"]),
    history_len=st.integers(1, 8),
    margin=st.integers(0, 16),
    steps=st.lists(amaxes, min_size=1, max_size=20),
)
def test_scales_are_bit_identical_for_positive_finite_amaxes(fmt, algo, history_len, margin, steps):
    ours = fp8.DelayedScaling(fmt, history_len=history_len, algo=algo, margin=margin)
    theirs = TransformerEngineDelayedScaling(fmt, history_len, algo, margin)
    for amax in steps:
        assert np.float32(ours.update(amax)) == theirs.update(amax), (amax, ours)


def test_an_amax_too_small_for_a_float32_scale_gives_the_largest_float32_in_both():
    ours = fp8.DelayedScaling("fp8_e4m3", history_len=2)
    theirs = TransformerEngineDelayedScaling("fp8_e4m3", 2)
    for amax in (1e-40, 1e-44, 1.0):
        assert np.float32(ours.update(amax)) == theirs.update(amax)
    alone = TransformerEngineDelayedScaling("fp8_e4m3", 1)
    assert (
        alone.update(1e-40)
        == np.finfo(np.float32).max
        == fp8.DelayedScaling("fp8_e4m3", history_len=1).update(1e-40)
    )


def _error_of_each_step(scales, steps, fmt="fp8_e4m3"):
    """Largest quantization error of a tensor of each step's amax, over that amax."""
    errors = []
    for scale, amax in zip(scales, steps, strict=True):
        x = np.linspace(-amax, amax, 65)
        back = fp8.dequantize(fp8.quantize(x, fmt, scale), scale).astype(np.float64)
        errors.append(np.abs(back - x).max() / amax)
    return np.array(errors)


def test_an_infinite_amax_freezes_transformer_engines_scale_and_not_mptutors():
    steps = [2.0**k for k in range(8)]  # amaxes that double each step: a margin of 1 fits them
    amaxes = steps[:3] + [math.inf] + steps[3:]
    ours = fp8.DelayedScaling("fp8_e4m3", history_len=4, margin=1)
    theirs = TransformerEngineDelayedScaling("fp8_e4m3", 4, margin=1)
    our_scales, their_scales = [ours.scale], [theirs.scale]  # the scale each step uses
    for amax in amaxes:
        our_scales.append(ours.update(amax))
        their_scales.append(theirs.update(amax))
    finite = [i for i, a in enumerate(amaxes) if math.isfinite(a)]
    used_ours = [our_scales[i] for i in finite]  # a step quantizes with the scale before it
    used_theirs = [their_scales[i] for i in finite]
    tensors = [amaxes[i] for i in finite]
    ours_error = _error_of_each_step(used_ours, tensors)
    theirs_error = _error_of_each_step(used_theirs, tensors)
    # the first step uses scale 1 in both; after the inf, Transformer Engine's scale is stale
    assert their_scales[4:8] == [their_scales[3]] * 4  # frozen while the inf is in the window
    assert ours_error.max() < 0.037 and theirs_error.max() == 0.875
    assert (ours_error[1:] <= theirs_error[1:] + 1e-12).all()


def test_zero_and_nan_amaxes_take_a_slot_in_transformer_engine_only():
    ours = fp8.DelayedScaling("fp8_e4m3", history_len=2)
    theirs = TransformerEngineDelayedScaling("fp8_e4m3", 2)
    for amax in (4.0, 0.0, 1.0):  # TE's window is now [0, 1]; mptutor's [4, 1]
        ours.update(amax)
        theirs.update(amax)
    assert theirs.scale == np.float32(448.0) and ours.scale == 112.0
    assert ours.history.tolist() == [4.0, 1.0]
    ours_nan = fp8.DelayedScaling("fp8_e4m3", history_len=2)
    theirs_nan = TransformerEngineDelayedScaling("fp8_e4m3", 2)
    for amax in (4.0, math.nan, 1.0):
        ours_nan.update(amax)
        theirs_nan.update(amax)
    assert theirs_nan.scale == np.float32(448.0) and ours_nan.scale == 112.0


def test_a_margin_transformer_engine_turns_into_a_zero_scale_is_refused():
    theirs = TransformerEngineDelayedScaling("fp8_e4m3", 4, margin=200)
    assert theirs.update(1.0) == 0.0  # 448 * 2**-200 is 0 in float32
    with pytest.raises(ValueError, match=r"margin must be in \[0, 127\]"):
        fp8.DelayedScaling("fp8_e4m3", margin=200)


def test_mptutors_scale_stays_a_normal_float32_where_transformer_engines_goes_subnormal():
    ours = fp8.DelayedScaling("fp8_e4m3", margin=127)
    theirs = TransformerEngineDelayedScaling("fp8_e4m3", 1024, margin=127)
    assert theirs.update(1e30) < np.finfo(np.float32).tiny  # subnormal
    assert ours.update(1e30) == formats.get("fp32").smallest_normal
