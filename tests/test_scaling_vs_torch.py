"""DynamicLossScaler against torch.amp.GradScaler, driven for real with finite, inf or NaN
gradients: the same scales, bit for bit, and the same skipped steps, as long as GradScaler's
scale stays at or above our floor (docs/loss-scaling-notes.md). GradScaler has no floor; the
comparisons of whole trajectories give ours the lowest floor there is, ``TINY``.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from scaling_steps import (  # noqa: E402
    CLEAN,
    FIXED_SEQUENCES,
    GRADIENT,
    INF,
    NAN,
    run_ours,
    sequences,
)

from mptutor.scaling import FLOAT32_MAX, DynamicLossScaler, StaticLossScaler  # noqa: E402

#: The smallest float32 > 0: as a floor it lets the scale go wherever GradScaler's goes but 0.
TINY = 2.0**-149

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


def assert_matches_grad_scaler(kwargs: dict, seq: list[str]) -> None:
    expected = run_grad_scaler(kwargs, seq)
    got = run_ours(DynamicLossScaler(**kwargs, min_scale=TINY), seq)
    assert got[0] == expected[0], "scales used differ"
    assert got[1] == expected[1], "skipped steps differ"
    assert got[2] == expected[2], "scales after update differ"
    assert expected[1] == [kind != CLEAN for kind in seq]  # the driver works as intended
    # With the default floor of 1: the same trajectory until GradScaler's scale drops below 1;
    # from there ours stays at 1 until it grows again. The same steps are skipped throughout.
    if kwargs.get("init_scale", 2.0**16) >= 1:
        floored = run_ours(DynamicLossScaler(**kwargs), seq)
        below = next((i for i, s in enumerate(expected[2]) if s < 1), len(seq))
        assert floored[2][:below] == expected[2][:below]
        assert floored[1] == expected[1]
        assert all(s >= 1 for s in floored[2])


@given(kwargs=st.sampled_from(TORCH_ARGS), seq=sequences)
def test_matches_grad_scaler_on_random_sequences(kwargs, seq):
    assert_matches_grad_scaler(kwargs, seq)


@pytest.mark.parametrize("kwargs", TORCH_ARGS)
@pytest.mark.parametrize(
    "seq", FIXED_SEQUENCES, ids=["mixed", "overflows-first", "alternate", "grow-then-overflow"]
)
def test_matches_grad_scaler_on_fixed_sequences(kwargs, seq):
    assert_matches_grad_scaler(kwargs, seq)


def test_matches_grad_scaler_with_default_growth_interval():
    # 2000 clean steps double 2**16; a NaN after 1000 clean steps restarts the count, so the
    # scale only doubles again 2000 clean steps later.
    seq = [CLEAN] * 2000 + [INF] + [CLEAN] * 1000 + [NAN] + [CLEAN] * 2000
    expected = run_grad_scaler({}, seq)
    got = run_ours(DynamicLossScaler(), seq)
    assert got == expected
    assert expected[2][1999] == 2.0**17 and expected[2][-1] == 2.0**16


@given(
    scale=st.floats(2.0**-100, 2.0**100, width=32),
    factor=st.floats(1.0, 4.0, exclude_min=True),
    backoff=st.floats(1e-3, 1.0, exclude_max=True),  # keeps the scale well above 0
    kind=st.sampled_from([CLEAN, INF]),
)
def test_one_update_has_grad_scaler_float32_arithmetic(scale, factor, backoff, kind):
    kwargs = dict(init_scale=scale, growth_factor=factor, backoff_factor=backoff, growth_interval=1)
    assert_matches_grad_scaler(kwargs, [kind])


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


def test_grad_scaler_keeps_its_scale_when_growth_would_overflow_float32():
    seq = [CLEAN] * 4
    used, skipped, after = run_grad_scaler({"init_scale": 2.0**126, "growth_interval": 1}, seq)
    assert after == [2.0**127] * 4 and not any(skipped)
    assert run_ours(DynamicLossScaler(2.0**126, growth_interval=1), seq) == (used, skipped, after)
    top = {"init_scale": FLOAT32_MAX, "growth_factor": 1.5, "growth_interval": 1}
    assert run_grad_scaler(top, [CLEAN])[2] == [FLOAT32_MAX]
    assert run_ours(DynamicLossScaler(**top), [CLEAN])[2] == [FLOAT32_MAX]


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
    ours = run_ours(DynamicLossScaler(2.0**-140, growth_interval=1, min_scale=TINY), seq)
    assert ours[2][:9] == after[:9]
    assert ours[2][9:] == [2.0**-149] * 3 + [2.0**-148, 2.0**-147, 2.0**-146]
    assert ours[1] == [True] * 12 + [False] * 3


def test_after_a_long_overflow_run_grad_scaler_is_at_zero_for_good_and_ours_resumes():
    # 200 NaN batches in a row with the defaults, then finite ones. GradScaler halves 2**16
    # down to exactly 0 and stays there, and its later "clean" steps write NaN into the
    # weights. DynamicLossScaler stops at its floor of 1 and takes the finite steps.
    seq = [NAN] * 200 + [CLEAN] * 3
    weights: list[float] = []
    used, skipped, after = run_grad_scaler({}, seq, weights)
    assert after[:16] == [2.0 ** (15 - i) for i in range(16)]  # the same halvings as ours
    assert after[199:] == [0.0] * 4 and all(skipped[:200])
    assert all(math.isnan(w) for w in weights[200:])
    ours = DynamicLossScaler()
    o_used, o_skipped, o_after = run_ours(ours, seq)
    assert o_after[:16] == after[:16] and o_after[16:] == [1.0] * (len(seq) - 16)
    assert o_skipped == [True] * 200 + [False] * 3
    assert ours.overflows_at_floor == 0 and o_used[200] == 1.0  # reset by the clean steps
    stuck = DynamicLossScaler()
    run_ours(stuck, seq[:200])
    assert stuck.overflows_at_floor == 200 - 16  # the NaN batches that came at the floor


def test_grad_scaler_writes_inf_into_weights_once_its_scale_is_below_2_to_minus_128():
    # float32(1 / 2**-130) is inf: a finite scaled gradient passes the check, then unscales
    # to inf, and the step is taken. (DynamicLossScaler leaves unscaling to the caller.)
    weights: list[float] = []
    _, skipped, after = run_grad_scaler({"init_scale": 2.0**-130}, [CLEAN], weights)
    assert skipped == [False] and weights == [-math.inf] and after == [2.0**-130]


def test_grad_scaler_defaults_and_settings_are_ours():
    ours, theirs = DynamicLossScaler(), torch.amp.GradScaler("cpu")
    assert ours.scale == theirs.get_scale() == 2.0**16
    assert ours.growth_factor == theirs.get_growth_factor() == 2.0
    assert ours.backoff_factor == theirs.get_backoff_factor() == 0.5
    assert ours.growth_interval == theirs.get_growth_interval() == 2000


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


def test_static_scaler_skips_the_steps_grad_scaler_skips():
    # Whether a step is skipped depends on its gradients only, not on how the scale moves.
    seq = FIXED_SEQUENCES[0]
    _, torch_skipped, _ = run_grad_scaler({"init_scale": 2.0**10, "growth_interval": 10**6}, seq)
    used, skipped, after = run_ours(StaticLossScaler(2.0**10), seq)
    assert skipped == torch_skipped and set(used) == set(after) == {2.0**10}


def test_found_inf_accepts_torch_tensors():
    s = DynamicLossScaler()
    for value in [torch.tensor(True), torch.tensor([1.0]), torch.tensor(math.nan)]:
        assert s.update(value) is False
    assert s.update(torch.tensor(0.0)) is True
    assert s.history.steps == 4


@pytest.mark.parametrize("cls", [DynamicLossScaler, StaticLossScaler])
def test_found_inf_rejects_a_tensor_of_several_elements(cls):
    s = cls(1024.0)
    with pytest.raises(TypeError, match="found_inf"):
        s.update(torch.tensor([0.0, 1.0]))
    assert s.history.steps == 0
