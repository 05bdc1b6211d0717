"""Tests of mptutor.scaling that need only NumPy: properties, bounds, history, state dicts and
bad arguments. The comparisons with the frameworks' own scalers are in test_scaling_vs_*.py.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from array import array
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import scaling
from mptutor.scaling import FLOAT32_MAX, DynamicLossScaler, ScaleHistory, StaticLossScaler

# --- properties of DynamicLossScaler ----------------------------------------------------------

positive = st.floats(2.0**-149, FLOAT32_MAX)
dynamic_args = st.fixed_dictionaries(
    {
        "init_scale": positive,
        "growth_factor": st.floats(1.0, 1e6, exclude_min=True),
        "backoff_factor": st.floats(0.0, 1.0, exclude_min=True, exclude_max=True),
        "growth_interval": st.integers(1, 4),
        # the default floor, the smallest float32 > 0 (no floor), or any: init_scale above it
        "min_scale": st.one_of(st.just(1.0), st.just(2.0**-149), positive),
    }
).map(lambda a: a | {"min_scale": min(a["min_scale"], a["init_scale"])})


@given(args=dynamic_args, seq=st.lists(st.booleans(), max_size=60))
def test_scale_is_always_a_finite_positive_float32_and_update_says_not_found(args, seq):
    scaler = DynamicLossScaler(**args)
    for found in seq:
        assert scaler.update(found) is (not found)
        assert 0 < scaler.min_scale <= scaler.scale <= FLOAT32_MAX
        assert float(np.float32(scaler.scale)) == scaler.scale
        assert 0 <= scaler.growth_tracker < scaler.growth_interval
    assert scaler.history.steps == len(seq)


@given(
    args=dynamic_args,
    bounds=st.tuples(positive, positive).map(sorted),
    seq=st.lists(st.booleans(), max_size=60),
)
def test_scale_stays_within_min_and_max(args, bounds, seq):
    low, high = bounds
    args = dict(args)
    del args["min_scale"]
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
    assert DynamicLossScaler(init_scale=0.1, min_scale=0.01, max_scale=0.1).scale <= 0.1
    assert DynamicLossScaler(init_scale=1000.1).scale == float(np.float32(1000.1))


def test_backoff_never_reaches_zero():
    tiny = 2.0**-149  # the smallest float32 > 0: the lowest floor there is
    s = DynamicLossScaler(init_scale=2.0**-148, backoff_factor=0.25, min_scale=tiny)
    s.update(True)
    assert s.scale == tiny  # 2**-150 would round to 0: stops at the floor
    s = DynamicLossScaler(init_scale=2.0**-148, backoff_factor=0.5, min_scale=tiny)
    s.update(True)
    s.update(True)
    assert s.scale == tiny and s.overflows_at_floor == 1


def test_found_inf_accepts_bool_likes():
    s = DynamicLossScaler()
    accepted = [True, np.bool_(True), 1, 2.5, math.nan, np.float32(3), np.array(True)]
    for value in accepted:
        assert s.update(value) is False
    for value in [False, np.bool_(False), 0, 0.0, np.array([0])]:
        assert s.update(value) is True
    assert s.history.steps == len(accepted) + 5


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
        "overflows_at_floor": 0,
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
        (
            lambda d: d | {"backoff_factor": "0.5"},
            "malformed state_dict: backoff_factor must be a real number, got '0.5'",
        ),
        (lambda d: d | {"growth_interval": 0}, "growth_interval"),
        (lambda d: d | {"scale": 4096.0}, r"state_dict\['scale'\].*outside"),
        (lambda d: d | {"scale": math.inf}, r"state_dict\['scale'\]"),
        (lambda d: d | {"growth_tracker": 5}, r"growth_tracker'\] must be in \[0, 5\), got 5"),
        (lambda d: d | {"growth_tracker": -1}, r"growth_tracker'\] must be in \[0, 5\), got -1"),
        (lambda d: d | {"growth_tracker": 1.0}, r"growth_tracker'\] must be an int, got 1.0"),
        (lambda d: d | {"min_scale": 2048.0}, "min_scale"),
        (lambda d: d | {"steps": -1}, r"state_dict\['steps'\] must be in \[0, \d+\], got -1"),
        (lambda d: d | {"steps": 2}, r"history'\] must hold lists of steps - first_step = 2"),
        (lambda d: d | {"history": [1]}, "history"),
        (
            lambda d: d | {"history": d["history"] | {"scales": 64.0}},
            r"history'\] must hold lists",
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

POSITIVE = r"must be in \(0, inf\)"
INTERVAL = r"growth_interval must be in \[1, 2147483647\], got"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"init_scale": 0}, ValueError, f"init_scale {POSITIVE}, got 0"),
        ({"init_scale": -1.0}, ValueError, f"init_scale {POSITIVE}, got -1.0"),
        ({"init_scale": math.inf}, ValueError, "init_scale must be a finite number, got inf"),
        ({"init_scale": math.nan}, ValueError, "init_scale must be a finite number, got nan"),
        ({"init_scale": True}, TypeError, "init_scale must be a real number, got True"),
        ({"init_scale": "65536"}, TypeError, "init_scale must be a real number, got '65536'"),
        ({"init_scale": None}, TypeError, "init_scale must be a real number, got None"),
        ({"init_scale": 1e39}, ValueError, "init_scale=1e.39 overflows float32"),
        ({"init_scale": 1e-50}, ValueError, "init_scale=1e-50 rounds to 0 in float32"),
        ({"growth_factor": 1.0}, ValueError, r"growth_factor must be in \(1, inf\), got 1.0"),
        ({"growth_factor": 0.5}, ValueError, r"growth_factor must be in \(1, inf\), got 0.5"),
        ({"growth_factor": math.inf}, ValueError, "growth_factor must be a finite number"),
        ({"growth_factor": math.nan}, ValueError, "growth_factor must be a finite number"),
        ({"growth_factor": True}, TypeError, "growth_factor must be a real number"),
        ({"backoff_factor": 0.0}, ValueError, r"backoff_factor must be in \(0, 1\), got 0.0"),
        ({"backoff_factor": 1.0}, ValueError, r"backoff_factor must be in \(0, 1\), got 1.0"),
        ({"backoff_factor": -0.5}, ValueError, r"backoff_factor must be in \(0, 1\)"),
        ({"backoff_factor": 2}, ValueError, r"backoff_factor must be in \(0, 1\), got 2"),
        ({"backoff_factor": math.nan}, ValueError, "backoff_factor must be a finite number"),
        ({"backoff_factor": False}, TypeError, "backoff_factor must be a real number"),
        ({"growth_interval": 0}, ValueError, f"{INTERVAL} 0"),
        ({"growth_interval": -3}, ValueError, f"{INTERVAL} -3"),
        ({"growth_interval": 2**31}, ValueError, f"{INTERVAL} 2147483648"),
        ({"growth_interval": 2000.0}, TypeError, "growth_interval must be an int, got 2000.0"),
        ({"growth_interval": True}, TypeError, "growth_interval must be an int, got True"),
        ({"growth_interval": "2000"}, TypeError, "growth_interval must be an int"),
        ({"min_scale": 0.0}, ValueError, r"min_scale must be in \(0, 3.40282e\+38\], got 0.0"),
        ({"min_scale": -1}, ValueError, r"min_scale must be in \(0, 3.40282e\+38\], got -1"),
        ({"min_scale": math.inf}, ValueError, "min_scale must be a finite number"),
        ({"min_scale": math.nan}, ValueError, "min_scale must be a finite number"),
        ({"min_scale": True}, TypeError, "min_scale must be a real number, got True"),
        ({"min_scale": None}, TypeError, "min_scale must be a real number, got None"),
        ({"init_scale": 0.5}, ValueError, r"init_scale=0.5 lies outside .* = \[1.0, None\]"),
        ({"max_scale": 0}, ValueError, f"max_scale {POSITIVE}, got 0"),
        ({"max_scale": math.inf}, ValueError, "max_scale must be a finite number"),
        ({"max_scale": math.nan}, ValueError, "max_scale must be a finite number"),
        ({"max_scale": "big"}, TypeError, "max_scale must be a real number or None"),
        ({"max_scale": 1e-50}, ValueError, r"no float32 value lies in .* = \[1.0, 1e-50\]"),
        ({"min_scale": 1e39}, ValueError, r"min_scale must be in \(0, 3.40282e\+38\], got 1e\+39"),
        (
            {"min_scale": 10.0, "max_scale": 1.0, "init_scale": 5.0},
            ValueError,
            r"no float32 value lies in \[min_scale, max_scale\] = \[10.0, 1.0\]",
        ),
        (
            {"min_scale": 0.1, "max_scale": 0.1, "init_scale": 0.1},
            ValueError,
            r"no float32 value lies in \[min_scale, max_scale\] = \[0.1, 0.1\]",
        ),
        ({"init_scale": 1.0, "min_scale": 2.0}, ValueError, "init_scale=1.0 lies outside"),
        ({"init_scale": 100.0, "max_scale": 10.0}, ValueError, r"100.0 lies .* \[1.0, 10.0\]"),
    ],
)
def test_bad_arguments_raise_errors_naming_them_and_the_accepted_values(kwargs, error, message):
    with pytest.raises(error, match=message):
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
    ("scale", "error", "message"),
    [
        (0, ValueError, r"scale must be in \(0, inf\), got 0"),
        (-2.0, ValueError, r"scale must be in \(0, inf\), got -2.0"),
        (math.inf, ValueError, "scale must be a finite number, got inf"),
        (math.nan, ValueError, "scale must be a finite number, got nan"),
        (True, TypeError, "scale must be a real number, got True"),
        ("128", TypeError, "scale must be a real number, got '128'"),
        (1e39, ValueError, "scale=1e.39 overflows float32"),
        (1e-46, ValueError, "scale=1e-46 rounds to 0 in float32"),
    ],
)
def test_static_scaler_rejects_bad_scales(scale, error, message):
    with pytest.raises(error, match=message):
        StaticLossScaler(scale)


# --- the package stays framework-free ---------------------------------------------------------


def test_scaling_imports_only_the_standard_library_numpy_and_mptutor():
    imported = set()
    for node in ast.walk(ast.parse(Path(scaling.__file__).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert "numpy" in imported
    assert imported - {"numpy", "mptutor"} <= set(sys.stdlib_module_names), imported


# --- the floor: a long run of overflows (issue: training must resume afterwards) -------------


def test_default_floor_is_one_and_a_long_overflow_run_stops_there():
    s = DynamicLossScaler()
    assert s.min_scale == 1.0
    for _ in range(300):  # more than the 16 halvings from 2**16 to 1, and the 149 to 2**-149
        assert s.update(True) is False
    assert s.scale == 1.0
    assert s.overflows_at_floor == 300 - 16  # the first 16 overflows were above the floor
    assert s.update(False) is True  # finite batches are back: the step is taken at once
    assert s.scale == 1.0 and s.overflows_at_floor == 0


def test_overflows_at_floor_counts_consecutive_overflows_at_the_floor_only():
    s = DynamicLossScaler(init_scale=4.0, min_scale=2.0, growth_interval=2)
    assert [s.update(f) for f in (True, True, True)] == [False] * 3
    assert (s.scale, s.overflows_at_floor) == (2.0, 2)  # 4 -> 2 was not at the floor yet
    s.update(False)
    assert s.overflows_at_floor == 0
    s.update(True)
    assert s.overflows_at_floor == 1
    state = s.state_dict()
    assert state["overflows_at_floor"] == 1
    resumed = DynamicLossScaler()
    resumed.load_state_dict(state)
    assert resumed.overflows_at_floor == 1 and resumed.state_dict() == state
    assert "overflows_at_floor=1" in repr(s)


def test_a_state_dict_saved_before_the_floor_existed_still_loads():
    # No floor then: min_scale None and no overflows_at_floor. The old scaler stopped at the
    # smallest float32 > 0, which is what min_scale=2**-149 does now.
    old = {
        "type": "DynamicLossScaler",
        "scale": 2.0**-20,
        "growth_tracker": 3,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
        "min_scale": None,
        "max_scale": None,
        "steps": 40,
    }
    s = DynamicLossScaler()
    s.load_state_dict(old)
    assert (s.scale, s.min_scale, s.growth_tracker, s.overflows_at_floor) == (
        2.0**-20,
        2.0**-149,
        3,
        0,
    )
    assert s.history.steps == 40


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d | {"overflows_at_floor": -1}, r"overflows_at_floor'\] must be in \[0, inf\]"),
        (lambda d: d | {"overflows_at_floor": 1.0}, r"overflows_at_floor'\] must be an int"),
        (lambda d: d | {"overflows_at_floor": 2}, "overflows_at_floor.*only at the floor"),
    ],
)
def test_load_state_dict_checks_overflows_at_floor(change, message):
    s = DynamicLossScaler(init_scale=8.0)
    before = s.state_dict()
    with pytest.raises(ValueError, match=message):
        s.load_state_dict(change(_good_state()))
    assert s.state_dict() == before


# --- bad input to the rest of the public API ----------------------------------------------------


@pytest.mark.parametrize("cls", [DynamicLossScaler, StaticLossScaler])
@pytest.mark.parametrize("bad", ["yes", None, 1])
def test_state_dict_include_history_must_be_a_bool(cls, bad):
    with pytest.raises(TypeError, match="include_history must be True or False"):
        cls(2.0).state_dict(include_history=bad)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"first_step": -1}, ValueError, r"first_step must be in \[0, 4611686018427387904\]"),
        ({"first_step": 1.5}, TypeError, "first_step must be an int, got 1.5"),
        ({"first_step": 2**70}, ValueError, "first_step must be in"),
        ({"scales": array("f", [1.0])}, TypeError, "unexpected keyword argument 'scales'"),
    ],
)
def test_scale_history_refuses_bad_fields(kwargs, error, message):
    with pytest.raises(error, match=message):
        ScaleHistory(**kwargs)


@pytest.mark.parametrize(
    ("scale", "skipped", "error", "message"),
    [
        (math.nan, False, ValueError, "scale must be a finite number"),
        (-1.0, False, ValueError, r"scale must be in \(0, inf\)"),
        ("x", False, TypeError, "scale must be a real number"),
        (1e39, False, ValueError, "overflows float32"),
        (1.0, "no", TypeError, "skipped must be True or False, got 'no'"),
        (1.0, None, TypeError, "skipped must be True or False"),
    ],
)
def test_scale_history_append_refuses_bad_values_and_records_nothing(
    scale, skipped, error, message
):
    history = ScaleHistory()
    with pytest.raises(error, match=message):
        history.append(scale, skipped)
    assert history.steps == 0 and len(history.skipped) == 0
    history.append(np.float32(2.0), np.bool_(True))
    assert history.skipped_steps().tolist() == [0]


def test_a_huge_step_count_or_integer_scale_is_refused_clearly():
    s = DynamicLossScaler()
    with pytest.raises(
        ValueError, match=r"state_dict\['steps'\] must be in \[0, 4611686018427387904\]"
    ):
        s.load_state_dict(s.state_dict() | {"steps": 2**70})
    with pytest.raises(ValueError, match=r"init_scale must be a finite number, got 10+\.\.\.$"):
        DynamicLossScaler(init_scale=10**400)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        StaticLossScaler(10**400)
