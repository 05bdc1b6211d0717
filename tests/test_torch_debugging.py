import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
from torch import nn

from mptutor import torch as mpt
from mptutor.table import Table


def _overflowing(value=1000.0):
    # Linear "1" multiplies inputs of 100 by weights of `value`: 4 x 100 x 1000 overflows FP16
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.fill_(1.0)
        model[0].bias.fill_(0.0)
        model[1].weight.fill_(value)
        model[1].bias.fill_(0.0)
    return model.half()


def _input():
    return torch.full((3, 4), 25.0, dtype=torch.float16)


class Norm(nn.Module):
    """Divides by an RMS whose sqrt has an infinite derivative where the squares underflow."""

    def forward(self, v):
        return v / (torch.sqrt((v * v).mean(-1, keepdim=True)) + 1e-3)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.norm = Norm()

    def forward(self, x):
        return self.norm(self.inner(x))


def _tiny_activations():
    # activations of ~1e-4 whose squares round to zero in FP16: finite forward, inf backward
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Block(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.fill_(1e-3)
        model[0].bias.zero_()
        model[1].inner.weight.copy_(torch.eye(4))
        model[1].inner.bias.zero_()
    return model.half(), torch.full((2, 4), 0.05, dtype=torch.float16)


def _sum_loss(out):
    return out.float().sum()


def _hook_count(model):
    return sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in model.modules()
    )


# --- find_nonfinite ---------------------------------------------------------------------


def test_names_the_layer_that_overflows_in_the_forward_pass():
    record = mpt.find_nonfinite(_overflowing(), _input())
    assert record is not None
    assert (record.module, record.phase, record.dtype) == ("1", "forward", torch.float16)
    assert record.module_type == "Linear"
    assert record.op is None
    assert record.n_inf == 12 and record.n_nan == 0 and record.numel == 12
    assert record.largest_finite == 100.0  # its inputs (4 x 25) are finite, its outputs not
    text = str(record)
    assert "forward" in text and "'1'" in text and "Linear" in text and "65504" in text


def test_the_same_model_in_fp32_is_finite():
    model = _overflowing().float()
    assert mpt.find_nonfinite(model, _input().float()) is None
    assert mpt.find_nonfinite(model, _input().float(), loss_fn=_sum_loss) is None


def test_qualified_names_of_nested_modules():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), _overflowing()))
    with torch.no_grad():
        model[0].weight.copy_(torch.eye(4))
        model[0].bias.zero_()
        model[1][0].weight.copy_(torch.eye(4))
        model[1][0].bias.zero_()
    record = mpt.find_nonfinite(model.half(), _input())
    assert record.module == "1.1.1"


def test_code_between_submodules_is_blamed_on_the_enclosing_module():
    class Exp(nn.Module):
        def __init__(self):
            super().__init__()
            self.before = nn.Linear(4, 4)
            self.after = nn.Linear(4, 4)

        def forward(self, x):
            return self.after(self.before(x).exp())  # exp(25) overflows FP16

    model = Exp()
    with torch.no_grad():
        model.before.weight.copy_(torch.eye(4))
        model.before.bias.zero_()
    record = mpt.find_nonfinite(model.half(), _input())
    assert (record.module, record.module_type, record.phase) == ("", "Exp", "forward")
    assert "'after'" in record.detail
    assert "own forward" in str(record)


def test_an_overflow_in_the_backward_pass_is_found_with_its_operation():
    model, x = _tiny_activations()
    assert mpt.find_nonfinite(model, x) is None  # the forward pass is finite
    record = mpt.find_nonfinite(model, x, loss_fn=_sum_loss)
    assert (record.module, record.module_type, record.phase) == ("1.norm", "Norm", "backward")
    assert record.op == "SqrtBackward0"
    assert record.dtype == torch.float16 and record.n_inf > 0
    assert "backward" in str(record) and "SqrtBackward0" in str(record)
    # in FP32 the squares do not underflow and every gradient is finite
    model32 = model.float()
    assert mpt.find_nonfinite(model32, x.float(), loss_fn=_sum_loss) is None


def test_a_non_finite_loss_is_reported_as_the_loss_function():
    model = _overflowing().float()
    record = mpt.find_nonfinite(model, _input().float(), loss_fn=lambda out: out.sum() * math.inf)
    assert (record.module, record.module_type, record.phase) == ("<loss_fn>", "loss_fn", "forward")
    assert "loss function" in str(record)


def test_gradients_are_found_through_the_loss_function_too():
    model = _overflowing().float()
    record = mpt.find_nonfinite(
        model, _input().float(), loss_fn=lambda out: torch.sqrt(out.sum() * 0.0)
    )
    assert (record.module, record.phase, record.op) == ("<loss_fn>", "backward", "SqrtBackward0")


def test_hooks_are_removed_and_buffers_restored_even_when_the_forward_raises():
    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("broken layer")

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), Broken())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="broken layer"):
        mpt.find_nonfinite(model, torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="broken layer"):
        mpt.find_nonfinite(model, torch.randn(3, 4), loss_fn=_sum_loss)
    assert _hook_count(model) == 0
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


@pytest.mark.parametrize("training", [True, False])
def test_the_model_is_left_unchanged(training):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    model.train(training)
    model(torch.randn(5, 4)).sum().backward()  # existing gradients must survive
    grads = [p.grad.clone() for p in model.parameters()]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(6, 4)
    assert mpt.find_nonfinite(model, x, loss_fn=_sum_loss) is None
    assert _hook_count(model) == 0
    assert model.training is training and all(m.training is training for m in model.modules())
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    for p, g in zip(model.parameters(), grads, strict=True):
        assert torch.equal(p.grad, g)


def test_works_inside_no_grad_and_with_structured_outputs():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = _overflowing(value=1.0)

        def forward(self, x, scale=1.0):
            out = self.body(x)
            return {"a": out * scale, "b": (out, out.sum())}

    model = TwoHeads()
    with torch.no_grad():
        record = mpt.find_nonfinite(model, _input(), loss_fn=lambda out: out["b"][1].float())
    assert record is None
    with torch.no_grad():
        model.body[3].weight.fill_(6e4)  # the last layer now overflows
    assert mpt.find_nonfinite(model, _input()).module == "body.3"


def test_bad_arguments_get_clear_errors():
    model = _overflowing().float()
    x = _input().float()
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mpt.find_nonfinite(lambda t: t, x)
    with pytest.raises(TypeError, match="loss_fn must be a callable"):
        mpt.find_nonfinite(model, x, loss_fn="mse")
    with pytest.raises(TypeError, match="loss_fn must return a tensor"):
        mpt.find_nonfinite(model, x, loss_fn=lambda out: 1.0)
    with pytest.raises(ValueError, match="scalar"):
        mpt.find_nonfinite(model, x, loss_fn=lambda out: out)
    frozen = _overflowing().float().requires_grad_(False)
    with pytest.raises(ValueError, match="requires_grad"):
        mpt.find_nonfinite(frozen, x, loss_fn=_sum_loss)
    bad = x.clone()
    bad[0, 0] = math.nan
    with pytest.raises(ValueError, match="input 0 already holds 0 inf and 1 NaN"):
        mpt.find_nonfinite(model, bad)
    assert _hook_count(model) == 0 and _hook_count(frozen) == 0


@pytest.mark.gpu
def test_find_nonfinite_on_the_gpu():
    model = _overflowing().cuda()
    record = mpt.find_nonfinite(model, _input().cuda())
    assert (record.module, record.phase) == ("1", "forward")
    tiny, x = _tiny_activations()
    record = mpt.find_nonfinite(tiny.cuda(), x.cuda(), loss_fn=_sum_loss)
    assert (record.module, record.phase) == ("1.norm", "backward")


# --- tensor_core_audit -------------------------------------------------------------------


def _odd_model():
    return nn.Sequential(
        nn.Conv2d(3, 30, 3),
        nn.ReLU(),
        nn.Conv2d(30, 32, 3, groups=2),  # 15 channels per group in, 16 out
        nn.Conv2d(32, 32, 3, groups=32),  # depthwise: not a matrix product
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 1000),
        nn.Linear(1000, 10),
    )


def test_audit_names_the_odd_sizes_and_their_padding():
    audit = mpt.tensor_core_audit(_odd_model())
    found = [(r.module, r.setting, r.size, r.pad_to) for r in audit]
    assert found == [
        ("0", "in_channels", 3, 8),
        ("0", "out_channels", 30, 32),
        ("2", "in_channels", 15, 16),
        ("7", "out_features", 10, 16),
    ]
    assert audit[0].layer == "Conv2d" and "not a multiple of 8" in audit[0].reason
    assert "per group" in audit[2].reason
    table = audit.table()
    assert isinstance(table, Table) and len(table) == 4
    assert table.columns == ["module", "layer", "setting", "size", "pad to", "reason"]
    assert "out_features" in repr(audit) and "<table>" in audit._repr_html_()


def test_audit_names_vocabulary_sized_layers():
    model = nn.Sequential(nn.Embedding(30522, 768), nn.Embedding(10, 3), nn.Linear(768, 30522))
    audit = mpt.tensor_core_audit(model)
    assert [(r.module, r.setting, r.pad_to) for r in audit] == [
        ("0", "num_embeddings", 30528),
        ("2", "out_features", 30528),
    ]
    assert all("vocabulary-sized" in r.reason for r in audit)


def test_audit_of_attention_and_recurrent_layers():
    audit = mpt.tensor_core_audit(nn.ModuleList([nn.MultiheadAttention(96, 8), nn.LSTM(20, 64)]))
    assert {(r.module, r.setting, r.size) for r in audit} == {
        ("0", "head_dim", 12),
        ("1", "input_size", 20),
    }


def test_audit_of_a_model_that_fits_is_empty():
    model = nn.Sequential(nn.Conv2d(8, 16, 3), nn.Flatten(), nn.Linear(64, 1024))
    audit = mpt.tensor_core_audit(model)
    assert len(audit) == 0 and "no layer" in repr(audit) and "no layer" in audit._repr_html_()


def test_audit_bad_arguments():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        mpt.tensor_core_audit([nn.Linear(3, 3)])
