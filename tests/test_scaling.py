"""Tests of mptutor.scaling, including differential tests against the frameworks' own scalers.

PyTorch's GradScaler, Keras 3's LossScaleOptimizer and MXNet's contrib.amp LossScaler are each
driven for real with finite, inf or NaN gradients, and their scales compared with
DynamicLossScaler fed the same sequence of overflows.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mptutor import scaling
from mptutor.scaling import FLOAT32_MAX, DynamicLossScaler, ScaleHistory, StaticLossScaler

try:  # the differential tests need PyTorch; the rest of this file runs without it
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

# A step's gradient: finite, inf or NaN. Clean steps are drawn 3 times as often, so that
# the scale also grows.
CLEAN, INF, NAN = "clean", "inf", "nan"
GRADIENT = {CLEAN: 1.0, INF: math.inf, NAN: math.nan}
step_kinds = st.sampled_from([CLEAN, CLEAN, CLEAN, INF, NAN])
sequences = st.lists(step_kinds, max_size=40)

# GradScaler arguments: small growth intervals, non-power-of-two factors, scales near the top
# of float32 (growth there would overflow) and the defaults.
TORCH_ARGS = [
    {"init_scale": 2.0**16, "growth_interval": 1},
    {"init_scale": 2.0**16, "growth_interval": 2},
    {"init_scale": 1000.1, "growth_factor": 1.1, "backoff_factor": 0.7, "growth_interval": 3},
    {"init_scale": 3.0, "growth_factor": 3.0, "backoff_factor": 0.3, "growth_interval": 1},
    {"init_scale": 1e30, "growth_factor": 1.7, "backoff_factor": 0.9, "growth_interval": 2},
    {"init_scale": 2.0**120, "growth_interval": 1},
    {"init_scale": 3e38, "growth_factor": 1.01, "backoff_factor": 0.999, "growth_interval": 1},
    {},
]

FIXED_SEQUENCES = [
    [CLEAN] * 7 + [INF] + [CLEAN] * 5 + [NAN, NAN] + [CLEAN] * 10,
    [INF] * 6 + [CLEAN] * 12,
    [CLEAN, INF] * 8,
    [NAN] + [CLEAN] * 20 + [INF, CLEAN, CLEAN, CLEAN],
]


def run_grad_scaler(
    kwargs: dict, seq: list[str], weights: list[float] | None = None
) -> tuple[list[float], list[bool], list[float]]:
    """Drive torch.amp.GradScaler through real backward passes and optimizer steps.

    Returns the scale used at each step, whether the step was skipped (the parameter, reset
    to 0 before each step, stayed 0), and the scale after each update(). The parameter after
    each step is appended to ``weights`` if given.
    """
    param = torch.nn.Parameter(torch.zeros(()))
    opt = torch.optim.SGD([param], lr=1.0)
    scaler = torch.amp.GradScaler("cpu", **kwargs)
    used, skipped, after = [], [], []
    for kind in seq:
        opt.zero_grad()
        with torch.no_grad():
            param.zero_()
        loss = param * GRADIENT[kind]  # d loss / d param is 1, inf or NaN
        scaled = scaler.scale(loss)
        used.append(scaler.get_scale())
        scaled.backward()
        scaler.step(opt)
        scaler.update()
        skipped.append(param.item() == 0.0)  # SGD with lr=1 moves the parameter by about -1
        after.append(scaler.get_scale())
        if weights is not None:
            weights.append(param.item())
    return used, skipped, after


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


def assert_matches_grad_scaler(kwargs: dict, seq: list[str]) -> None:
    expected = run_grad_scaler(kwargs, seq)
    got = run_ours(DynamicLossScaler(**kwargs), seq)
    assert got[0] == expected[0], "scales used differ"
    assert got[1] == expected[1], "skipped steps differ"
    assert got[2] == expected[2], "scales after update differ"
    assert expected[1] == [kind != CLEAN for kind in seq]  # the driver works as intended


# --- PyTorch GradScaler -----------------------------------------------------------------------


@needs_torch
@settings(max_examples=50, deadline=None)
@given(kwargs=st.sampled_from(TORCH_ARGS), seq=sequences)
def test_matches_grad_scaler_on_random_sequences(kwargs, seq):
    assert_matches_grad_scaler(kwargs, seq)


@needs_torch
@pytest.mark.parametrize("kwargs", TORCH_ARGS)
@pytest.mark.parametrize(
    "seq", FIXED_SEQUENCES, ids=["mixed", "overflows-first", "alternate", "grow-then-overflow"]
)
def test_matches_grad_scaler_on_fixed_sequences(kwargs, seq):
    assert_matches_grad_scaler(kwargs, seq)


@needs_torch
def test_matches_grad_scaler_with_default_growth_interval():
    # 2000 clean steps double 2**16; a NaN after 1000 clean steps restarts the count, so the
    # scale only doubles again 2000 clean steps later.
    seq = [CLEAN] * 2000 + [INF] + [CLEAN] * 1000 + [NAN] + [CLEAN] * 2000
    expected = run_grad_scaler({}, seq)
    got = run_ours(DynamicLossScaler(), seq)
    assert got == expected
    assert expected[2][1999] == 2.0**17 and expected[2][-1] == 2.0**16


@needs_torch
@settings(max_examples=50, deadline=None)
@given(
    scale=st.floats(2.0**-100, 2.0**100, width=32),
    factor=st.floats(1.0, 4.0, exclude_min=True),
    backoff=st.floats(1e-3, 1.0, exclude_max=True),  # keeps the scale well above 0
    kind=st.sampled_from([CLEAN, INF]),
)
def test_one_update_has_grad_scaler_float32_arithmetic(scale, factor, backoff, kind):
    kwargs = dict(init_scale=scale, growth_factor=factor, backoff_factor=backoff, growth_interval=1)
    assert_matches_grad_scaler(kwargs, [kind])


@needs_torch
def test_float32_rounding_of_a_float64_product_not_a_float32_product():
    # GradScaler computes float32 scale * float64 factor in float64 and rounds once to float32.
    # Here that differs from the product of the two float32 values.
    naive = float(np.float32(3.0) * np.float32(1.1))
    _, _, after = run_grad_scaler(
        {"init_scale": 3.0, "growth_factor": 1.1, "growth_interval": 1}, [CLEAN]
    )
    ours = DynamicLossScaler(3.0, growth_factor=1.1, growth_interval=1)
    ours.update(False)
    assert ours.scale == after[0] == float(np.float32(3.0 * 1.1)) == 3.299999952316284
    assert naive != ours.scale
    # The same for a backoff from a scale that is not a power of two.
    _, _, after = run_grad_scaler({"init_scale": 1000.1, "backoff_factor": 0.7}, [INF])
    ours = DynamicLossScaler(1000.1, backoff_factor=0.7)
    ours.update(True)
    assert ours.scale == after[0] != float(np.float32(1000.1) * np.float32(0.7))


@needs_torch
def test_grad_scaler_keeps_its_scale_when_growth_would_overflow_float32():
    seq = [CLEAN] * 4
    used, skipped, after = run_grad_scaler({"init_scale": 2.0**126, "growth_interval": 1}, seq)
    assert after == [2.0**127] * 4 and not any(skipped)
    assert run_ours(DynamicLossScaler(2.0**126, growth_interval=1), seq) == (used, skipped, after)
    top = {"init_scale": FLOAT32_MAX, "growth_factor": 1.5, "growth_interval": 1}
    assert run_grad_scaler(top, [CLEAN])[2] == [FLOAT32_MAX]
    assert run_ours(DynamicLossScaler(**top), [CLEAN])[2] == [FLOAT32_MAX]


@needs_torch
def test_grad_scaler_backs_off_to_zero_and_stays_there_where_ours_stops():
    # The documented difference: GradScaler halves 2**-140 through the subnormals to 0, and 0
    # times the growth factor is 0. At 0 the scaled gradients are 0, pass its finite check
    # (made before unscaling) and are unscaled by 1/0 = inf into NaN, which the optimizer
    # writes into the weights. DynamicLossScaler stops at the smallest float32 > 0 instead.
    seq = [INF] * 12 + [CLEAN] * 3
    weights: list[float] = []
    used, skipped, after = run_grad_scaler(
        {"init_scale": 2.0**-140, "growth_interval": 1}, seq, weights
    )
    assert after[:10] == [2.0 ** (-141 - i) for i in range(9)] + [0.0]
    assert after[9:] == [0.0] * 6 and all(skipped[:12])
    assert all(math.isnan(w) for w in weights[12:])  # the "clean" steps at scale 0
    ours = run_ours(DynamicLossScaler(2.0**-140, growth_interval=1), seq)
    assert ours[2][:9] == after[:9]
    assert ours[2][9:] == [2.0**-149] * 3 + [2.0**-148, 2.0**-147, 2.0**-146]
    assert ours[1] == [True] * 12 + [False] * 3


@needs_torch
def test_grad_scaler_writes_inf_into_weights_once_its_scale_is_below_2_to_minus_128():
    # float32(1 / 2**-130) is inf: a finite scaled gradient passes the check, then unscales
    # to inf, and the step is taken. (DynamicLossScaler leaves unscaling to the caller.)
    weights: list[float] = []
    _, skipped, after = run_grad_scaler({"init_scale": 2.0**-130}, [CLEAN], weights)
    assert skipped == [False] and weights == [-math.inf] and after == [2.0**-130]


@needs_torch
def test_grad_scaler_defaults_and_settings_are_ours():
    ours, theirs = DynamicLossScaler(), torch.amp.GradScaler("cpu")
    assert ours.scale == theirs.get_scale() == 2.0**16
    assert ours.growth_factor == theirs.get_growth_factor() == 2.0
    assert ours.backoff_factor == theirs.get_backoff_factor() == 0.5
    assert ours.growth_interval == theirs.get_growth_interval() == 2000


@needs_torch
def test_state_dict_resumes_like_grad_scaler():
    kwargs = {
        "init_scale": 1000.1,
        "growth_factor": 1.1,
        "backoff_factor": 0.7,
        "growth_interval": 3,
    }
    seq = [CLEAN, CLEAN, INF, CLEAN, CLEAN]
    expected = run_grad_scaler(kwargs, seq + seq)
    first = DynamicLossScaler(**kwargs)
    run_ours(first, seq)
    resumed = DynamicLossScaler()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    second = run_ours(resumed, seq)
    assert second == tuple(part[len(seq) :] for part in expected)
    assert resumed.history.first_step == len(seq) and resumed.history.steps == 2 * len(seq)


# --- Keras 3 LossScaleOptimizer ---------------------------------------------------------------


@pytest.fixture(scope="module")
def keras():
    pytest.importorskip("keras", reason="Keras is not installed")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    return keras


def run_keras(keras, initial_scale: float, growth_steps: int, seq: list[str]):
    """Drive keras.optimizers.LossScaleOptimizer with scaled gradients through apply()."""
    var = keras.Variable(np.zeros(1, np.float32))
    opt = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.SGD(learning_rate=1.0),
        initial_scale=initial_scale,
        dynamic_growth_steps=growth_steps,
    )
    opt.build([var])
    used, skipped, after = [], [], []
    for kind in seq:
        var.assign(np.zeros(1, np.float32))
        scale = float(opt.dynamic_scale.numpy())
        with np.errstate(over="ignore", invalid="ignore"):  # inf * 0 is NaN: intended
            grad = np.float32(GRADIENT[kind]) * np.float32(scale)  # gradient of scaled loss
        opt.apply([np.full(1, grad, np.float32)], [var])
        used.append(scale)
        skipped.append(float(var.numpy()[0]) == 0.0)
        after.append(float(opt.dynamic_scale.numpy()))
    return used, skipped, after, float(var.numpy()[0])


@settings(max_examples=30, deadline=None)
@given(
    init=st.sampled_from([2.0**15, 2.0**16, 3.0, 1e30]),
    growth_steps=st.sampled_from([1, 2, 3]),
    seq=sequences,
)
def test_matches_keras_loss_scale_optimizer(keras, init, growth_steps, seq):
    # Where Keras's semantics coincide (factors 2 and 0.5, scale within float32) the
    # trajectories are identical, including the count that triggers growth.
    *expected, _ = run_keras(keras, init, growth_steps, seq)
    ours = DynamicLossScaler(
        init, growth_factor=2.0, backoff_factor=0.5, growth_interval=growth_steps
    )
    assert run_ours(ours, seq) == tuple(expected)


def test_keras_defaults_differ_from_grad_scaler(keras):
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    assert opt.initial_scale == 2.0**15 != DynamicLossScaler().scale == 2.0**16
    assert opt.dynamic_growth_steps == 2000 == DynamicLossScaler().growth_interval


def test_keras_growth_and_backoff_factors_are_fixed(keras):
    with pytest.raises(ValueError, match="does not support arguments"):
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(), growth_factor=3.0)


def test_keras_grows_to_inf_and_stays_there(keras):
    # Keras doubles 2**127 to inf; then every gradient is inf, every step skipped, and
    # halving inf leaves inf. GradScaler and DynamicLossScaler keep 2**127.
    seq = [CLEAN] * 4 + [INF, CLEAN]
    used, skipped, after, _ = run_keras(keras, 2.0**126, 1, seq)
    assert after == [2.0**127] + [math.inf] * 5
    assert skipped == [False, False, True, True, True, True]
    ours = run_ours(DynamicLossScaler(2.0**126, growth_interval=1), seq)
    assert ours[2] == [2.0**127] * 4 + [2.0**126, 2.0**127]
    assert ours[1] == [False] * 4 + [True, False]


def test_keras_backs_off_to_zero_and_then_writes_nan(keras):
    # Keras halves down to 0; then the scaled gradient is 0, passes the finite check, and
    # 0 / 0 = NaN is applied to the weights (GradScaler does the same, see above).
    # TensorFlow flushes float32 subnormals to zero, so halving 2**-126 gives 0 at once.
    # DynamicLossScaler goes on into the subnormals (and would stop at 2**-149, never 0).
    seq = [INF] * 8 + [CLEAN]
    used, skipped, after, weight = run_keras(keras, 2.0**-120, 1, seq)
    assert after == [2.0 ** (-121 - i) for i in range(6)] + [0.0, 0.0, 0.0]
    assert all(skipped[:8]) and not skipped[8] and math.isnan(weight)
    ours = run_ours(DynamicLossScaler(2.0**-120, growth_interval=1), seq)
    assert ours[2] == [2.0 ** (-121 - i) for i in range(8)] + [2.0**-127]


# --- MXNet contrib.amp LossScaler -------------------------------------------------------------


@pytest.fixture(scope="module")
def mxnet():
    pytest.importorskip("mxnet", reason="MXNet is not installed (it has its own environment)")
    with warnings.catch_warnings():  # mxnet 1.9 touches deprecated NumPy aliases on import
        warnings.simplefilter("ignore", DeprecationWarning)
        import mxnet
        from mxnet.contrib.amp import loss_scaler  # noqa: F401

    return mxnet


def test_mxnet_loss_scaler_defaults(mxnet):
    scaler = mxnet.contrib.amp.loss_scaler.LossScaler()
    assert scaler.loss_scale == 2.0**16
    assert scaler._scale_seq_len == 2000
    assert scaler._max_loss_scale == 2.0**24


@settings(max_examples=30, deadline=None)
@given(growth_steps=st.sampled_from([1, 2, 3]), seq=sequences)
def test_mxnet_loss_scaler_is_ours_one_step_late(mxnet, growth_steps, seq):
    # MXNet stores the new scale as _next_loss_scale and uses it from the iteration after
    # the next: its scale at step k is ours at step k - 1 (with max_scale=2**24, its cap).
    param = mxnet.gluon.Parameter("w", shape=(1,))
    param.initialize()
    theirs = mxnet.contrib.amp.loss_scaler.LossScaler()
    theirs._scale_seq_len = growth_steps
    used, skipped = [], []
    for kind in seq:
        used.append(theirs.loss_scale)  # what amp.scale_loss multiplies the loss by
        param.grad()[:] = GRADIENT[kind]
        skipped.append(theirs.has_overflow([param]))
    ours = DynamicLossScaler(2.0**16, growth_interval=growth_steps, max_scale=2.0**24)
    ours_used, ours_skipped, _ = run_ours(ours, seq)
    assert skipped == ours_skipped
    assert used == ([2.0**16] + ours_used)[: len(seq)]


# --- properties of DynamicLossScaler ----------------------------------------------------------

positive = st.floats(2.0**-149, FLOAT32_MAX)
dynamic_args = st.fixed_dictionaries(
    {
        "init_scale": positive,
        "growth_factor": st.floats(1.0, 1e6, exclude_min=True),
        "backoff_factor": st.floats(0.0, 1.0, exclude_min=True, exclude_max=True),
        "growth_interval": st.integers(1, 4),
    }
)


@settings(max_examples=200, deadline=None)
@given(args=dynamic_args, seq=st.lists(st.booleans(), max_size=60))
def test_scale_is_always_a_finite_positive_float32_and_update_says_not_found(args, seq):
    scaler = DynamicLossScaler(**args)
    for found in seq:
        assert scaler.update(found) is (not found)
        assert 0 < scaler.scale <= FLOAT32_MAX
        assert float(np.float32(scaler.scale)) == scaler.scale
        assert 0 <= scaler.growth_tracker < scaler.growth_interval
    assert scaler.history.steps == len(seq)


@settings(max_examples=200, deadline=None)
@given(
    args=dynamic_args,
    bounds=st.tuples(positive, positive).map(sorted),
    seq=st.lists(st.booleans(), max_size=60),
)
def test_scale_stays_within_min_and_max(args, bounds, seq):
    low, high = bounds
    args = dict(args)
    init = min(max(args.pop("init_scale"), low), high)
    try:
        scaler = DynamicLossScaler(init, min_scale=low, max_scale=high, **args)
    except ValueError as exc:  # only when no float32 lies in [low, high]
        assert "no float32 value lies in [min_scale, max_scale]" in str(exc)
        up = np.float32(low)
        if float(up) < low:  # compared in float64: NumPy 2 would compare float32 with float32
            up = np.nextafter(up, np.float32(np.inf))
        assert float(up) > high
        return
    assert low <= scaler.min_scale <= scaler.max_scale <= high
    for found in seq:
        assert scaler.update(found) is (not found)
        assert low <= scaler.scale <= high


@settings(max_examples=100, deadline=None)
@given(
    args=dynamic_args,
    bounded=st.booleans(),
    prefix=st.lists(st.booleans(), max_size=30),
    rest=st.lists(st.booleans(), max_size=30),
    include_history=st.booleans(),
)
def test_state_dict_round_trip_continues_identically(args, bounded, prefix, rest, include_history):
    if bounded:
        args = args | {
            "min_scale": args["init_scale"] / 8,
            "max_scale": min(args["init_scale"] * 8, FLOAT32_MAX),
        }
    uninterrupted = DynamicLossScaler(**args)
    for found in prefix + rest:
        uninterrupted.update(found)
    first = DynamicLossScaler(**args)
    for found in prefix:
        first.update(found)
    state = json.loads(json.dumps(first.state_dict(include_history=include_history)))
    resumed = DynamicLossScaler(init_scale=7.0, growth_factor=5.0, growth_interval=99)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == first.state_dict()
    for found in rest:
        assert resumed.update(found) is (not found)
    assert resumed.scale == uninterrupted.scale
    assert resumed.growth_tracker == uninterrupted.growth_tracker
    assert resumed.history.steps == uninterrupted.history.steps
    if include_history:
        assert resumed.history == uninterrupted.history
    else:
        assert resumed.history.first_step == len(prefix)
        tail = slice(len(prefix), None)
        assert list(resumed.history.scales) == list(uninterrupted.history.scales)[tail]
        assert list(resumed.history.skipped) == list(uninterrupted.history.skipped)[tail]


# --- behaviour, bounds and history --------------------------------------------------------------


def test_growth_and_backoff_count_clean_steps():
    s = DynamicLossScaler(init_scale=1024, growth_interval=3)
    assert [s.update(f) for f in [False, False, True, False, False, False]] == [
        True,
        True,
        False,
        True,
        True,
        True,
    ]
    assert list(s.history.scales) == [1024, 1024, 1024, 512, 512, 512]
    assert s.scale == 1024 and s.growth_tracker == 0


def test_min_and_max_scale_stop_the_scale_at_the_bounds():
    s = DynamicLossScaler(2.0**16, growth_interval=1, max_scale=1e5, min_scale=2.0**14)
    s.update(False)
    assert s.scale == 1e5  # grows only as far as the bound
    s.update(False)
    assert s.scale == 1e5
    for _ in range(5):
        assert s.update(True) is False
    assert s.scale == 2.0**14  # backs off only as far as the bound


def test_bounds_are_rounded_inwards_to_float32():
    s = DynamicLossScaler(init_scale=0.5, min_scale=0.1, max_scale=0.7)
    # float32(0.1) is just above 0.1 and float32(0.7) just below 0.7: both kept.
    assert s.min_scale == float(np.float32(0.1)) > 0.1
    assert s.max_scale == float(np.float32(0.7)) < 0.7
    low, high = float(np.float32(0.2)) + 1e-12, float(np.float32(0.7)) - 1e-12
    s = DynamicLossScaler(init_scale=0.5, min_scale=low, max_scale=high)
    # Here the nearest float32 would fall outside, so the bounds move inwards by one step.
    assert s.min_scale == float(np.nextafter(np.float32(0.2), np.float32(1))) > low
    assert s.max_scale == float(np.nextafter(np.float32(0.7), np.float32(0))) < high
    assert DynamicLossScaler(1.0, max_scale=1e300).max_scale == FLOAT32_MAX
    assert DynamicLossScaler(1.0, min_scale=1e-60).min_scale == 2.0**-149
    # init_scale rounds to float32 and is kept inside the rounded bounds.
    assert DynamicLossScaler(init_scale=0.1, max_scale=0.1).scale <= 0.1
    assert DynamicLossScaler(init_scale=1000.1).scale == float(np.float32(1000.1))


def test_backoff_never_reaches_zero():
    s = DynamicLossScaler(init_scale=2.0**-148, backoff_factor=0.25)
    s.update(True)
    assert s.scale == 2.0**-148  # 2**-150 would round to 0: kept
    s = DynamicLossScaler(init_scale=2.0**-148, backoff_factor=0.5)
    s.update(True)
    s.update(True)
    assert s.scale == 2.0**-149


@needs_torch
def test_found_inf_accepts_bool_likes():
    s = DynamicLossScaler()
    accepted = [
        True,
        np.bool_(True),
        1,
        2.5,
        math.nan,
        np.float32(3),
        np.array(True),
        torch.tensor(True),
        torch.tensor([1.0]),
    ]
    for value in accepted:
        assert s.update(value) is False
    for value in [False, np.bool_(False), 0, 0.0, np.array([0]), torch.tensor(0.0)]:
        assert s.update(value) is True
    assert s.history.steps == len(accepted) + 6


@pytest.mark.parametrize(
    "bad",
    [
        "yes",
        "",
        b"1",
        None,
        [True],
        (),
        {},
        {True},
        np.array([True, False]),
        *([] if torch is None else [torch.tensor([0.0, 1.0])]),
        object(),
        print,
    ],
    ids=lambda v: type(v).__name__,
)
@pytest.mark.parametrize("cls", [DynamicLossScaler, StaticLossScaler])
def test_found_inf_rejects_non_bool_likes(cls, bad):
    s = cls(1024.0)
    with pytest.raises(TypeError, match="found_inf"):
        s.update(bad)
    assert s.history.steps == 0  # nothing recorded


def test_history_arrays_and_skipped_steps():
    s = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    for found in [False, True, False, False, False]:
        s.update(found)
    steps, scales, skipped = s.history.arrays()
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert scales.tolist() == [8.0, 8.0, 4.0, 4.0, 8.0]
    assert skipped.tolist() == [False, True, False, False, False]
    assert s.history.skipped_steps().tolist() == [1]
    assert len(s.history) == 5 and s.history.steps == 5
    # 5 bytes a step: float32 scales and one byte per skip flag.
    assert s.history.scales.itemsize == 4 and s.history.skipped.itemsize == 1
    empty = ScaleHistory(first_step=7)
    assert empty.steps == 7 and [a.size for a in empty.arrays()] == [0, 0, 0]
    assert repr(s.history) == "ScaleHistory(steps=5, first_step=0, skipped=1)"


def test_history_after_resuming_without_it_counts_from_the_resume_step():
    s = DynamicLossScaler(init_scale=8.0)
    for found in [True, False, True]:
        s.update(found)
    resumed = DynamicLossScaler()
    resumed.load_state_dict(s.state_dict())
    resumed.update(True)
    assert resumed.history.first_step == 3 and resumed.history.steps == 4
    assert resumed.history.skipped_steps().tolist() == [3]
    assert resumed.history.arrays()[0].tolist() == [3]


def test_state_dict_contents():
    s = DynamicLossScaler(init_scale=64.0, growth_interval=5, min_scale=1.0, max_scale=1024.0)
    s.update(False)
    s.update(True)
    s.update(False)
    assert s.state_dict() == {
        "type": "DynamicLossScaler",
        "scale": 32.0,
        "growth_tracker": 1,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 5,
        "min_scale": 1.0,
        "max_scale": 1024.0,
        "steps": 3,
    }
    assert s.state_dict(include_history=True)["history"] == {
        "first_step": 0,
        "scales": [64.0, 64.0, 32.0],
        "skipped": [False, True, False],
    }
    assert "scale=32.0" in repr(s) and "1/5" in repr(s)


def _good_state() -> dict:
    s = DynamicLossScaler(init_scale=64.0, growth_interval=5, min_scale=1.0, max_scale=1024.0)
    s.update(False)
    return s.state_dict(include_history=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: [], "must be a dict"),
        (lambda d: d | {"type": "StaticLossScaler"}, "type='StaticLossScaler'"),
        (lambda d: {k: v for k, v in d.items() if k != "growth_tracker"}, "missing keys.*growth_"),
        (lambda d: d | {"extra": 1}, "unexpected keys.*extra"),
        (lambda d: d | {"growth_factor": 0.5}, "growth_factor"),
        (lambda d: d | {"backoff_factor": "0.5"}, "backoff_factor"),
        (lambda d: d | {"growth_interval": 0}, "growth_interval"),
        (lambda d: d | {"scale": 4096.0}, r"state_dict\['scale'\].*outside"),
        (lambda d: d | {"scale": math.inf}, r"state_dict\['scale'\]"),
        (lambda d: d | {"growth_tracker": 5}, "growth_tracker"),
        (lambda d: d | {"growth_tracker": -1}, "growth_tracker"),
        (lambda d: d | {"growth_tracker": 1.0}, "growth_tracker"),
        (lambda d: d | {"min_scale": 2048.0}, "min_scale"),
        (lambda d: d | {"steps": -1}, "steps"),
        (lambda d: d | {"steps": 2}, "history.*inconsistent"),
        (lambda d: d | {"history": [1]}, "history"),
        (
            lambda d: d | {"history": d["history"] | {"scales": 64.0}},
            r"\['scales'\] must be a list",
        ),
        (lambda d: d | {"history": d["history"] | {"skipped": ["no"]}}, r"skipped'\]\[0\]"),
        (lambda d: d | {"history": d["history"] | {"scales": [0.0]}}, r"scales'\]\[0\]"),
    ],
)
def test_load_state_dict_rejects_malformed_dicts_and_changes_nothing(change, message):
    scaler = DynamicLossScaler(init_scale=3.0)
    scaler.update(True)
    before = scaler.state_dict(include_history=True)
    with pytest.raises(ValueError, match=message):
        scaler.load_state_dict(change(_good_state()))
    assert scaler.state_dict(include_history=True) == before


# --- bad constructor arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"init_scale": 0}, "init_scale must be a finite number > 0"),
        ({"init_scale": -1.0}, "init_scale must be a finite number > 0"),
        ({"init_scale": math.inf}, "init_scale must be a finite number > 0"),
        ({"init_scale": math.nan}, "init_scale must not be NaN"),
        ({"init_scale": True}, "init_scale must be a real number"),
        ({"init_scale": "65536"}, "init_scale must be a real number"),
        ({"init_scale": None}, "init_scale must be a real number"),
        ({"init_scale": 1e39}, "init_scale=1e.39 overflows float32"),
        ({"init_scale": 1e-50}, "init_scale=1e-50 rounds to 0 in float32"),
        ({"growth_factor": 1.0}, "growth_factor must be finite and > 1"),
        ({"growth_factor": 0.5}, "growth_factor must be finite and > 1"),
        ({"growth_factor": math.inf}, "growth_factor must be finite and > 1"),
        ({"growth_factor": math.nan}, "growth_factor must not be NaN"),
        ({"growth_factor": True}, "growth_factor must be a real number"),
        ({"backoff_factor": 0.0}, r"backoff_factor must be in the open interval \(0, 1\)"),
        ({"backoff_factor": 1.0}, r"backoff_factor must be in the open interval \(0, 1\)"),
        ({"backoff_factor": -0.5}, r"backoff_factor must be in the open interval \(0, 1\)"),
        ({"backoff_factor": 2}, r"backoff_factor must be in the open interval \(0, 1\)"),
        ({"backoff_factor": math.nan}, "backoff_factor must not be NaN"),
        ({"backoff_factor": False}, "backoff_factor must be a real number"),
        ({"growth_interval": 0}, r"growth_interval must be an int in \[1, 2147483647\]"),
        ({"growth_interval": -3}, r"growth_interval must be an int in \[1, 2147483647\]"),
        ({"growth_interval": 2**31}, r"growth_interval must be an int in \[1, 2147483647\]"),
        ({"growth_interval": 2000.0}, "growth_interval must be an int"),
        ({"growth_interval": True}, "growth_interval must be an int"),
        ({"growth_interval": "2000"}, "growth_interval must be an int"),
        ({"min_scale": 0.0}, "min_scale must be a finite number > 0 or None"),
        ({"min_scale": -1}, "min_scale must be a finite number > 0 or None"),
        ({"min_scale": math.inf}, "min_scale must be a finite number > 0 or None"),
        ({"min_scale": math.nan}, "min_scale must not be NaN"),
        ({"min_scale": True}, "min_scale must be a real number"),
        ({"max_scale": 0}, "max_scale must be a finite number > 0 or None"),
        ({"max_scale": math.inf}, "max_scale must be a finite number > 0 or None"),
        ({"max_scale": math.nan}, "max_scale must not be NaN"),
        ({"max_scale": "big"}, "max_scale must be a real number"),
        ({"max_scale": 1e-50}, "max_scale=1e-50 is below the smallest float32 > 0"),
        ({"min_scale": 1e39}, "min_scale=1e.39 is above the float32 range"),
        (
            {"min_scale": 10.0, "max_scale": 1.0, "init_scale": 5.0},
            "min_scale=10.0 must not exceed max_scale=1.0",
        ),
        (
            {"min_scale": 0.1, "max_scale": 0.1, "init_scale": 0.1},
            r"no float32 value lies in \[min_scale, max_scale\] = \[0.1, 0.1\]",
        ),
        ({"init_scale": 1.0, "min_scale": 2.0}, "init_scale=1.0 is below min_scale=2.0"),
        ({"init_scale": 100.0, "max_scale": 10.0}, "init_scale=100.0 is above max_scale=10.0"),
    ],
)
def test_bad_arguments_raise_value_errors_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DynamicLossScaler(**kwargs)


def test_numpy_numbers_are_accepted():
    s = DynamicLossScaler(
        np.float32(1024),
        np.float64(2),
        np.float16(0.5),
        np.int64(3),
        min_scale=np.int32(1),
        max_scale=np.float64(2.0**20),
    )
    assert (s.scale, s.growth_interval, s.min_scale) == (1024.0, 3, 1.0)
    assert type(s.growth_interval) is int and type(s.scale) is float


# --- StaticLossScaler -------------------------------------------------------------------------


def test_static_scaler_never_changes_but_still_says_skip():
    s = StaticLossScaler(128)
    results = [s.update(found) for found in [False, True, True, False]]
    assert results == [True, False, False, True]
    assert s.scale == 128.0 and type(s.scale) is float
    assert list(s.history.scales) == [128.0] * 4
    assert s.history.skipped_steps().tolist() == [1, 2]
    assert repr(s) == "StaticLossScaler(scale=128.0, steps=4)"


@needs_torch
def test_static_scaler_skips_the_steps_grad_scaler_skips():
    # Whether a step is skipped depends on its gradients only, not on how the scale moves.
    seq = FIXED_SEQUENCES[0]
    _, torch_skipped, _ = run_grad_scaler({"init_scale": 2.0**10, "growth_interval": 10**6}, seq)
    used, skipped, after = run_ours(StaticLossScaler(2.0**10), seq)
    assert skipped == torch_skipped and set(used) == set(after) == {2.0**10}


def test_static_scaler_rounds_to_float32():
    assert StaticLossScaler(1000.1).scale == float(np.float32(1000.1))


def test_static_state_dict_round_trip():
    s = StaticLossScaler(2.0**12)
    s.update(True)
    s.update(False)
    state = s.state_dict(include_history=True)
    assert state == {
        "type": "StaticLossScaler",
        "scale": 4096.0,
        "steps": 2,
        "history": {"first_step": 0, "scales": [4096.0, 4096.0], "skipped": [True, False]},
    }
    other = StaticLossScaler(1.0)
    other.load_state_dict(json.loads(json.dumps(state)))
    assert other.scale == 4096.0 and other.history == s.history
    lean = StaticLossScaler(1.0)
    lean.load_state_dict(s.state_dict())
    assert lean.history.steps == 2 and len(lean.history) == 0


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (DynamicLossScaler().state_dict(), "type='DynamicLossScaler'"),
        ({"type": "StaticLossScaler", "scale": 0.0, "steps": 0}, r"state_dict\['scale'\]"),
        ({"type": "StaticLossScaler", "scale": 1.0}, "missing keys.*steps"),
        ({"type": "StaticLossScaler", "scale": 1.0, "steps": True}, "steps"),
        ("StaticLossScaler", "must be a dict"),
    ],
)
def test_static_load_state_dict_rejects_malformed_dicts(state, message):
    s = StaticLossScaler(2.0)
    with pytest.raises(ValueError, match=message):
        s.load_state_dict(state)
    assert s.scale == 2.0


@pytest.mark.parametrize(
    ("scale", "message"),
    [
        (0, "scale must be a finite number > 0"),
        (-2.0, "scale must be a finite number > 0"),
        (math.inf, "scale must be a finite number > 0"),
        (math.nan, "scale must not be NaN"),
        (True, "scale must be a real number"),
        ("128", "scale must be a real number"),
        (1e39, "scale=1e.39 overflows float32"),
        (1e-46, "scale=1e-46 rounds to 0 in float32"),
    ],
)
def test_static_scaler_rejects_bad_scales(scale, message):
    with pytest.raises(ValueError, match=message):
        StaticLossScaler(scale)


# --- the module stays framework-free ----------------------------------------------------------


def test_scaling_imports_only_the_standard_library_and_numpy():
    tree = ast.parse(Path(scaling.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert "numpy" in imported
    assert imported - {"numpy"} <= set(sys.stdlib_module_names), imported


def test_importing_scaling_loads_no_framework():
    code = "import json, sys, mptutor.scaling; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    loaded = set(json.loads(out.strip().splitlines()[-1]))
    assert "mptutor.scaling" in loaded
    assert not {"torch", "tensorflow", "keras", "mxnet", "jax"} & loaded
