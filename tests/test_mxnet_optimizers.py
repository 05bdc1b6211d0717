"""mptutor.mxnet's survey of which registered optimizers keep a float32 master of a float16 weight.

The update is elementwise, so it runs on a CPU, with and without ``multi_precision``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip(
    "mxnet",
    reason="MXNet is not installed: these tests run in the MXNet environment "
    "(requirements-mxnet.txt, NumPy 1.23)",
)

from mptutor import mxnet as mmx  # noqa: E402
from mptutor.mxnet._master_weights import _try_multi_precision  # noqa: E402

mx = mmx.mx  # imported through mptutor.mxnet, with MXNet's import-time warnings hidden


def test_try_multi_precision_on_sgd_and_adam():
    sgd = _try_multi_precision("sgd")
    assert sgd.error == "" and sgd.own_code and sgd.master and sgd.master_moved
    # 100 steps of 3e-5 in float32 end near 0.997; the float16 copy is its rounding
    assert sgd.weight_moved and sgd.weight_after == float(np.float16(1 - 100 * 3e-5))
    plain = _try_multi_precision("sgd", multi_precision=False)
    assert not plain.weight_moved and plain.weight_after == 1.0 and plain.master is False
    assert any("multi_precision=True" in w for w in plain.warnings)  # MXNet's own advice
    adam = _try_multi_precision("adam", steps=3)
    assert not adam.own_code and adam.master_moved and not adam.weight_moved
    failing = _try_multi_precision("adagrad", multi_precision=False)
    assert failing.error.startswith("MXNetError: expected float32, got float16")
    assert failing.weight_moved is None and failing.master is None
    with pytest.raises(ValueError, match="unknown optimizer 'sgdd'; registered: adadelta"):
        _try_multi_precision("sgdd")
    with pytest.raises(ValueError, match=r"steps must be in \[1, inf\], got 0"):
        mmx.multi_precision_survey(["sgd"], steps=0)
    with pytest.raises(TypeError, match="steps must be an int"):
        mmx.multi_precision_survey(["sgd"], steps=2.0)
    with pytest.raises(ValueError, match="learning_rate must be in"):
        mmx.multi_precision_survey(["sgd"], learning_rate=0.0)


def test_multi_precision_survey_table():
    table, trials = mmx.multi_precision_survey(["sgd", "adagrad", "lars"], steps=10)
    assert table.column("optimizer") == ["sgd", "adagrad", "lars"]
    assert table.column("code") == ["own", "generic", "own"]
    assert table.column("fp32 master") == ["moved"] * 3
    assert table.column("without multi_precision")[0] == "unchanged"
    assert table.column("without multi_precision")[1].startswith("MXNetError")
    assert [a.optimizer for a, _ in trials] == ["sgd", "adagrad", "lars"]
    assert all(a.multi_precision and not b.multi_precision for a, b in trials)
    full, _ = mmx.multi_precision_survey(steps=1)
    assert full.column("optimizer") == sorted(mx.optimizer.Optimizer.opt_registry)
