"""DynamicLossScaler against Keras 3's LossScaleOptimizer, driven for real with finite, inf or
NaN gradients: identical where their semantics coincide, and the documented differences at the
ends of float32 (docs/loss-scaling-notes.md).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
keras = pytest.importorskip("keras", reason="Keras is not installed")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from scaling_steps import CLEAN, GRADIENT, INF, run_ours, sequences  # noqa: E402

from mptutor.scaling import DynamicLossScaler  # noqa: E402


def run_keras(initial_scale: float, growth_steps: int, seq: list[str]):
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


@given(
    init=st.sampled_from([2.0**15, 2.0**16, 3.0, 1e30]),
    growth_steps=st.sampled_from([1, 2, 3]),
    seq=sequences,
)
def test_matches_keras_loss_scale_optimizer(init, growth_steps, seq):
    # Where Keras's semantics coincide (factors 2 and 0.5, scale within float32) the
    # trajectories are identical, including the count that triggers growth.
    *expected, _ = run_keras(init, growth_steps, seq)
    ours = DynamicLossScaler(  # Keras has no floor: ours gets the lowest there is
        init, 2.0, 0.5, growth_interval=growth_steps, min_scale=2.0**-149
    )
    assert run_ours(ours, seq) == tuple(expected)


def test_keras_defaults_differ_from_grad_scaler():
    # Keras starts at 2**15, where mptutor.tensorflow's LossScaledStep starts its scaler;
    # DynamicLossScaler's default is GradScaler's 2**16. Both grow after 2000 clean steps.
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    assert opt.initial_scale == 2.0**15 != DynamicLossScaler().scale == 2.0**16
    assert opt.dynamic_growth_steps == 2000 == DynamicLossScaler().growth_interval


def test_keras_grows_to_inf_and_stays_there():
    # Keras doubles 2**127 to inf; then every gradient is inf, every step skipped, and
    # halving inf leaves inf. GradScaler and DynamicLossScaler keep 2**127.
    seq = [CLEAN] * 4 + [INF, CLEAN]
    used, skipped, after, _ = run_keras(2.0**126, 1, seq)
    assert after == [2.0**127] + [math.inf] * 5
    assert skipped == [False, False, True, True, True, True]
    ours = run_ours(DynamicLossScaler(2.0**126, growth_interval=1, min_scale=2.0**-149), seq)
    assert ours[2] == [2.0**127] * 4 + [2.0**126, 2.0**127]
    assert ours[1] == [False] * 4 + [True, False]


def test_keras_backs_off_to_zero_and_then_writes_nan():
    # Keras halves down to 0; then the scaled gradient is 0, passes the finite check, and
    # 0 / 0 = NaN is applied to the weights (GradScaler does the same: test_scaling_vs_torch).
    # TensorFlow flushes float32 subnormals to zero, so halving 2**-126 gives 0 at once.
    # DynamicLossScaler goes on into the subnormals (and would stop at 2**-149, never 0).
    seq = [INF] * 8 + [CLEAN]
    used, skipped, after, weight = run_keras(2.0**-120, 1, seq)
    assert after == [2.0 ** (-121 - i) for i in range(6)] + [0.0, 0.0, 0.0]
    assert all(skipped[:8]) and not skipped[8] and math.isnan(weight)
    ours = run_ours(DynamicLossScaler(2.0**-120, growth_interval=1, min_scale=2.0**-149), seq)
    assert ours[2] == [2.0 ** (-121 - i) for i in range(8)] + [2.0**-127]
