"""MasterWeightOptimizer against torch.amp.GradScaler, in the scenarios of PyTorch's own
grad-scaling tests (test_grad_scaling_* in PyTorch's test suite, test/test_cuda.py and
test/test_torch.py), re-expressed for an FP16 model with FP32 master weights.

The reference is the master-weight loop written out with ``torch.amp.GradScaler("cpu")``
deciding the scale: backward on ``scaler.scale(loss)``, copy the FP16 gradients to the FP32
masters, ``scaler.unscale_`` / ``scaler.step`` on an optimizer over the masters,
``scaler.update()``, copy the masters back. ``MasterWeightOptimizer`` with a
``DynamicLossScaler`` of the same settings must give the same scales, skip the same steps and
leave bit-identical master weights, model weights and optimizer state. The scales here stay far
above the scaler's floor, where its trajectory is GradScaler's.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from mptutor import torch as mpt  # noqa: E402
from mptutor.scaling import DynamicLossScaler  # noqa: E402

SKIP_ITER = 2  # the iteration whose gradients get an inf, as in PyTorch's tests


class GradScalerLoop:
    """The master-weight loop with torch.amp.GradScaler deciding the scale (the reference)."""

    def __init__(self, factory, model, clip_norm=None, scaler=None, **scaler_args):
        self.model = model
        self.model_params, self.master_params = mpt.prep_param_lists(model)
        self.optimizer = factory(self.master_params)
        self.scaler = scaler or torch.amp.GradScaler("cpu", **scaler_args)
        self.clip_norm = clip_norm
        self.unscaled = False

    @property
    def scale(self):
        return self.scaler.get_scale()

    def scale_loss(self, loss):
        return self.scaler.scale(loss.float())

    def backward(self, loss):
        self.scale_loss(loss).backward()

    def unscale(self):
        mpt.model_grads_to_master_grads(self.model_params, self.master_params)
        self.scaler.unscale_(self.optimizer)
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.master_params, self.clip_norm, foreach=True)
        self.unscaled = True

    def step(self, update=True):
        if not self.unscaled:
            self.unscale()
        self.unscaled = False
        found = self.scaler._found_inf_per_device(self.optimizer)
        took = not any(v.item() for v in found.values())
        self.scaler.step(self.optimizer)
        if update:
            self.scaler.update()
        mpt.master_params_to_model_params(self.model_params, self.master_params)
        for p in self.model_params:
            p.grad = None
        return took


def _model(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.Linear(8, 4)
    )
    return model.half()


def _data(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(6, 8, generator=g).half(), torch.randint(0, 4, (6,), generator=g))
        for _ in range(n)
    ]


def _loss(output, target):
    return torch.nn.functional.cross_entropy(output.float(), target)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _adam(params):
    return torch.optim.Adam(params, lr=1e-2)


def _pair(factory=_sgd, clip_norm=None, make=_model, **scaler_args):
    """The same model twice: the reference loop and MasterWeightOptimizer."""
    reference = GradScalerLoop(factory, make(), clip_norm=clip_norm, **scaler_args)
    ours = mpt.MasterWeightOptimizer(
        factory, make(), DynamicLossScaler(**scaler_args), clip_norm=clip_norm
    )
    return reference, ours


def _assert_same(reference, ours):
    for a, b in zip(reference.master_params, ours.master_params, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(reference.model_params, ours.model_params, strict=True):
        assert torch.equal(a, b)
    theirs, mine = reference.optimizer.state_dict(), ours.optimizer.state_dict()
    assert theirs["param_groups"] == mine["param_groups"]
    assert theirs["state"].keys() == mine["state"].keys()
    for key, state in theirs["state"].items():
        for name, value in state.items():
            assert torch.equal(value, mine["state"][key][name]), name


def _poison(loop, iteration):
    if iteration == SKIP_ITER:
        loop.model_params[2].grad.fill_(float("inf"))  # the second Linear's weight


def _run(reference, ours, body, n=4):
    """Run one scenario's loop body on both, compare after each iteration; return the steps."""
    taken = []
    for i, (x, y) in enumerate(_data(n)):
        taken.append((body(reference, i, x, y), body(ours, i, x, y)))
        assert ours.scale == reference.scale
        _assert_same(reference, ours)
    return taken


SKIPPED_AT_2 = [(True, True), (True, True), (False, False), (True, True)]


def test_unscale_with_mixed_dtypes():
    # test_grad_scaling_unscale: gradients of several dtypes unscaled together, and an inf or
    # NaN in any of them found. Here an FP16, a BF16 and an FP32 layer share one model.
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.a = torch.nn.Linear(8, 8).half()
            self.b = torch.nn.Linear(8, 8).bfloat16()
            self.c = torch.nn.Linear(8, 4)

        def forward(self, x):
            return self.c(self.b(self.a(x).bfloat16()).float())

    reference, ours = _pair(make=Mixed, init_scale=2.0**10, growth_interval=2)
    assert {p.dtype for p in ours.model_params} == {torch.float16, torch.bfloat16, torch.float32}
    nan_in = {1: 0, 3: 2, 4: 4}  # iteration: parameter (FP16, BF16, FP32 weight in turn)

    def body(loop, i, x, y):
        loop.backward(_loss(loop.model(x), y))
        if i in nan_in:
            loop.model_params[nan_in[i]].grad.view(-1)[0] = float("nan")
        return loop.step()

    taken = _run(reference, ours, body, n=6)
    assert taken == [(t, t) for t in [True, False, True, False, False, True]]


def test_clipping_after_unscaling():
    # test_grad_scaling_clipping_separate_unscale: unscale, clip the true gradients, step.
    # MasterWeightOptimizer(clip_norm=...) clips the unscaled FP32 gradients.
    reference, ours = _pair(clip_norm=0.2, init_scale=2.0**8, growth_interval=1)

    def body(loop, i, x, y):
        loop.backward(_loss(loop.model(x), y))
        _poison(loop, i)
        return loop.step()

    assert _run(reference, ours, body) == SKIPPED_AT_2


def test_gradient_accumulation():
    # test_grad_scaling_accumulation: two backward passes of loss / 2, then one step.
    reference, ours = _pair(_adam, init_scale=2.0**8, growth_interval=1)

    def body(loop, i, x, y):
        loop.backward(_loss(loop.model(x), y) / 2)
        return loop.step() if i % 2 == 1 else None

    taken = _run(reference, ours, body)
    assert taken == [(None, None), (True, True), (None, None), (True, True)]


def test_gradient_penalty():
    # test_grad_scaling_penalty: the gradient norm is part of the loss. The gradients of the
    # scaled loss are unscaled by hand (times 1 / scale) before the penalty is computed.
    reference, ours = _pair(init_scale=2.0**8, growth_interval=1)

    def body(loop, i, x, y):
        loss = _loss(loop.model(x), y)
        params = list(loop.model.parameters())
        grads = torch.autograd.grad(loop.scale_loss(loss), params, create_graph=True)
        inv_scale = 1.0 / loop.scale
        norm = torch.sqrt(sum((g.float() * inv_scale).pow(2).sum() for g in grads))
        loop.backward(loss + norm)
        _poison(loop, i)
        return loop.step()

    assert _run(reference, ours, body) == SKIPPED_AT_2


def test_several_losses():
    # The two losses of test_grad_scaling_multiple, each scaled and back-propagated into the
    # same gradients (the graph retained for the second).
    reference, ours = _pair(_adam, init_scale=2.0**8, growth_interval=1)

    def body(loop, i, x, y):
        out = loop.model(x)
        loop.scale_loss(_loss(0.3 * out, y)).backward(retain_graph=True)
        loop.scale_loss(_loss(0.6 * out, y)).backward()
        _poison(loop, i)
        return loop.step()

    assert _run(reference, ours, body) == SKIPPED_AT_2


def test_several_optimizers_share_one_scaler():
    # test_grad_scaling_multiple: two models, two optimizers, two losses that both reach both
    # models, one scaler updated once per iteration; an inf in model 1's gradients at
    # SKIP_ITER skips optimizer 1 only. Ours steps the two with step_all.
    settings = {"init_scale": 128.0, "growth_factor": 2.0, "growth_interval": 1}
    scaler = torch.amp.GradScaler("cpu", **settings)
    ref = [GradScalerLoop(_adam, _model(k), scaler=scaler) for k in (0, 1)]
    shared = DynamicLossScaler(**settings)
    ours = [mpt.MasterWeightOptimizer(_adam, _model(k), shared) for k in (0, 1)]
    data = _data(4)

    def losses(pair, x, y):
        out0, out1 = pair[0].model(x), pair[1].model(x)
        return _loss(0.3 * out0 + 0.7 * out1, y), _loss(0.6 * out0 - 0.4 * out1, y)

    for i, (x, y) in enumerate(data):
        for pair in (ref, ours):
            loss0, loss1 = losses(pair, x, y)
            pair[0].scale_loss(loss0).backward(retain_graph=True)
            pair[0].scale_loss(loss1).backward()
            if i == SKIP_ITER:
                pair[1].model_params[2].grad.fill_(float("inf"))
        ref[0].unscale()  # as in PyTorch's test, one optimizer is unscaled separately first
        expected = [ref[0].step(update=False), ref[1].step(update=False)]
        scaler.update()
        assert mpt.MasterWeightOptimizer.step_all(*ours) == expected == [True, i != SKIP_ITER]
        assert shared.scale == scaler.get_scale()
        for a, b in zip(ref, ours, strict=True):
            _assert_same(a, b)
    # grown three times and backed off once, as PyTorch's test asserts
    assert shared.scale == scaler.get_scale() == 128.0 * 2.0**3 * 0.5
    assert shared.history.steps == len(data)  # one update per iteration, not two


def test_state_dict_resumes_where_grad_scaler_goes_on():
    # test_grad_scaling_state_dict: a scaler's state loaded into a new one carries on. Here a
    # whole MasterWeightOptimizer checkpoint taken mid-run, against an uninterrupted reference.
    reference, ours = _pair(_adam, init_scale=2.0**8, growth_interval=1)
    for i, (x, y) in enumerate(_data(6)):
        if i == 3:  # resume from the checkpoint in a new optimizer on a new model
            state = ours.state_dict()
            ours = mpt.MasterWeightOptimizer(_adam, _model(5), DynamicLossScaler())
            ours.load_state_dict(state)
            _assert_same(reference, ours)
        for loop in (reference, ours):
            loop.backward(_loss(loop.model(x), y))
            _poison(loop, i)
        assert reference.step() == ours.step() == (i != SKIP_ITER)
        assert ours.scale == reference.scale
        _assert_same(reference, ours)
    theirs, mine = reference.scaler.state_dict(), ours.loss_scaler.state_dict()
    assert mine["scale"] == theirs["scale"]
    assert mine["growth_tracker"] == theirs["_growth_tracker"]
    for key in ("growth_factor", "backoff_factor", "growth_interval"):
        assert mine[key] == theirs[key]
