"""DynamicLossScaler against MXNet's contrib.amp LossScaler, driven for real with finite, inf or
NaN gradients: MXNet's scale is ours one step late, capped at 2**24 (docs/loss-scaling-notes.md).
"""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():  # mxnet 1.9 touches deprecated NumPy aliases on import
    warnings.simplefilter("ignore", DeprecationWarning)
    mxnet = pytest.importorskip(
        "mxnet", reason="MXNet is not installed (it has its own environment)"
    )
    from mxnet.contrib.amp import loss_scaler

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from scaling_steps import GRADIENT, run_ours, sequences  # noqa: E402

from mptutor.scaling import DynamicLossScaler  # noqa: E402


@given(growth_steps=st.sampled_from([1, 2, 3]), seq=sequences)
def test_mxnet_loss_scaler_is_ours_one_step_late(growth_steps, seq):
    # MXNet stores the new scale as _next_loss_scale and uses it from the iteration after
    # the next: its scale at step k is ours at step k - 1 (with max_scale=2**24, its cap).
    param = mxnet.gluon.Parameter("w", shape=(1,))
    param.initialize()
    theirs = loss_scaler.LossScaler()
    theirs._scale_seq_len = growth_steps
    used, skipped = [], []
    for kind in seq:
        used.append(theirs.loss_scale)  # what amp.scale_loss multiplies the loss by
        param.grad()[:] = GRADIENT[kind]
        skipped.append(theirs.has_overflow([param]))
    ours = DynamicLossScaler(  # MXNet has no floor: ours gets the lowest there is
        2.0**16, growth_interval=growth_steps, min_scale=2.0**-149, max_scale=2.0**24
    )
    ours_used, ours_skipped, _ = run_ours(ours, seq)
    assert skipped == ours_skipped
    assert used == ([2.0**16] + ours_used)[: len(seq)]
