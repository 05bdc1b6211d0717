"""Properties of MasterWeightOptimizer with its loss scaler, over random gradient streams.

Hypothesis (the derandomized ``ci`` profile of conftest.py) draws streams of steps: finite
gradients, gradients with an inf, -inf or NaN somewhere, and long runs (over 200 in a row) of
such overflowing steps, as a stretch of bad batches gives. The gradients are written straight
into the FP16 model's ``.grad`` (times the current scale, as a backward pass of the scaled loss
would leave them), so thousands of steps run in seconds. Checked at every step:

- no inf or NaN ever reaches the master weights, the model's weights or the optimizer state;
- a skipped step leaves all of them, and the optimizer's step counters, bit for bit as they were;
- the scale never falls below the scaler's floor, and training resumes after any run;
- a checkpoint taken anywhere resumes bit-exactly.
"""

from __future__ import annotations

import copy
import io
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mptutor import torch as mpt  # noqa: E402
from mptutor.scaling import DynamicLossScaler  # noqa: E402

BAD = [math.inf, -math.inf, math.nan]

clean = st.tuples(st.just("clean"), st.integers(0, 2**16))
bad = st.tuples(st.just("bad"), st.sampled_from(BAD), st.integers(0, 10**6))
run = st.tuples(st.just("run"), st.sampled_from(BAD), st.integers(201, 300))
steps = st.lists(st.one_of(clean, bad), max_size=4)
# one long run in about a third of the streams, between other steps
streams = st.builds(
    lambda head, r, tail: head + ([r[1]] if r[0] == 0 else []) + tail,
    steps,
    st.tuples(st.integers(0, 2), run),
    steps,
)
# for checkpoints: short runs, which can end at the floor too (the floor is 2**12 / 2**k)
short_streams = st.lists(
    st.one_of(clean, bad, st.tuples(st.just("run"), st.sampled_from(BAD), st.integers(2, 16))),
    max_size=8,
)
settings = st.fixed_dictionaries(
    {
        "adam": st.booleans(),
        "clip": st.sampled_from([None, 0.5]),
        "growth_interval": st.integers(1, 5),
        "min_scale": st.sampled_from([1.0, 2.0**-20, 64.0]),
    }
)


def _optimizer(s):
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Linear(4, 3)).half()
    factory = (
        (lambda p: torch.optim.Adam(p, lr=1e-3))
        if s["adam"]
        else (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    )
    scaler = DynamicLossScaler(
        init_scale=2.0**12, growth_interval=s["growth_interval"], min_scale=s["min_scale"]
    )
    return mpt.MasterWeightOptimizer(factory, model, scaler, clip_norm=s["clip"])


_BASE = torch.randn(64, generator=torch.Generator().manual_seed(7)) * 1e-2


def _gradients(opt, kind, value, where=0):
    """Write one step's scaled gradients into the model: finite, or with one bad value."""
    if kind == "clean":
        g = torch.Generator().manual_seed(value)
        grads = [torch.randn(p.shape, generator=g) * 1e-2 for p in opt.model_params]
    else:
        grads = [_BASE[: p.numel()].reshape(p.shape) for p in opt.model_params]
    for p, grad in zip(opt.model_params, grads, strict=True):
        p.grad = (grad * opt.scale).to(p.dtype)
    if kind != "clean":
        target = opt.model_params[where % len(grads)].grad.view(-1)
        target[(where // len(grads)) % target.numel()] = value
    return all(torch.isfinite(p.grad).all() for p in opt.model_params)


def _state(opt):
    """Everything a step may change, copied: weights, masters, optimizer state."""
    return copy.deepcopy(
        {
            "masters": [p.detach().clone() for p in opt.master_params],
            "model": [p.detach().clone() for p in opt.model_params],
            "optimizer": opt.optimizer.state_dict()["state"],
        }
    )


def _assert_same_state(a, b):
    for key in ("masters", "model"):
        for x, y in zip(a[key], b[key], strict=True):
            assert torch.equal(x, y), key
    assert a["optimizer"].keys() == b["optimizer"].keys()
    for index, entry in a["optimizer"].items():
        for name, value in entry.items():
            assert torch.equal(value, b["optimizer"][index][name]), name


def _assert_all_finite(opt):
    tensors = list(opt.master_params) + list(opt.model_params)
    tensors += [
        v for entry in opt.optimizer.state.values() for v in entry.values() if torch.is_tensor(v)
    ]
    assert all(torch.isfinite(t).all() for t in tensors)


def _steps(stream):
    """Expand a stream into single steps: (kind, value, where)."""
    for item in stream:
        if item[0] == "clean":
            yield "clean", item[1], 0
        elif item[0] == "bad":
            yield "bad", item[1], item[2]
        else:
            for i in range(item[2]):
                yield "bad", item[1], i


def _drive(opt, stream):
    for kind, value, where in _steps(stream):
        _gradients(opt, kind, value, where)
        opt.step()


@given(s=settings, stream=streams)
def test_no_inf_or_nan_reaches_the_weights_and_skipped_steps_change_nothing(s, stream):
    opt = _optimizer(s)
    scaler = opt.loss_scaler
    for item in stream:
        before = _state(opt)
        steps = list(_steps([item]))
        taken = []
        for kind, value, where in steps:
            finite = _gradients(opt, kind, value, where)
            took = opt.step()
            assert took == finite  # skipped exactly when the scaled gradients were not finite
            taken.append(took)
            assert scaler.scale >= scaler.min_scale
        _assert_all_finite(opt)
        if not any(taken):  # a skipped step or a whole run of them: nothing moved
            _assert_same_state(before, _state(opt))
        if item[0] == "run" and scaler.scale == scaler.min_scale:
            assert scaler.overflows_at_floor > 0
    # training resumes: within a few clean steps one is taken (the scale comes down to where
    # these gradients fit in FP16, or is there already)
    assert any(_gradients(opt, "clean", k) and opt.step() for k in range(30))
    assert scaler.overflows_at_floor == 0


@given(s=settings, before=short_streams, after=short_streams)
def test_a_checkpoint_resumes_bit_exactly(s, before, after):
    whole = _optimizer(s)
    _drive(whole, before)
    buffer = io.BytesIO()
    torch.save(whole.state_dict(), buffer)
    buffer.seek(0)
    resumed = _optimizer(s | {"growth_interval": 7})  # other settings: the checkpoint wins
    with torch.no_grad():
        for p in resumed.model_params:
            p.add_(1.0)  # other weights too
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    _assert_same_state(_state(whole), _state(resumed))
    assert resumed.loss_scaler.state_dict() == whole.loss_scaler.state_dict()
    _drive(whole, after)
    _drive(resumed, after)
    _assert_same_state(_state(whole), _state(resumed))
    assert resumed.loss_scaler.state_dict() == whole.loss_scaler.state_dict()
