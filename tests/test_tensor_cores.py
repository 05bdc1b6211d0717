"""The Tensor Core profiler of mptutor.torch: kernels of real products, judged by their names.

The name classifier itself is framework-free and tested in ``test_kernels.py``.
"""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

from mptutor import torch as mpt
from mptutor import torch_perf as tp
from mptutor.torch._tensor_cores import _kernels
from mptutor.torch_perf import _gemm


def test_profiling_needs_a_gpu_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the gpu test below covers the profiler path")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        mpt.tensor_core_kernels(lambda: None)


def test_profiling_warns_of_nothing(monkeypatch):
    # PyTorch 2.11 and later warn once per process on the first profile with acc_events=False;
    # under the tests' warnings-as-errors that warning was an error. Profiled here on the CPU
    # (the CUDA activity swapped for the CPU one), as in a fresh process.
    import types

    from torch import profiler

    monkeypatch.setattr(profiler.profiler, "_WARNINGS_SHOWN", set(), raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    cpu_only = types.SimpleNamespace(CUDA=profiler.ProfilerActivity.CPU)
    monkeypatch.setattr(profiler, "ProfilerActivity", cpu_only)
    a = torch.randn(8, 8)
    assert mpt.tensor_core_kernels(lambda: a @ a) == []  # CPU events are not CUDA kernels


def test_events_are_summed_per_kernel_and_judged_by_name():
    import types

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(name, us, device=cuda):
        return types.SimpleNamespace(name=name, device_time_total=us, device_type=device)

    events = [
        event("ampere_sgemm_128x64_nn", 5),
        event("volta_h884gemm_64x64_ldg8_nn", 7),
        event("volta_h884gemm_64x64_ldg8_nn", 5),
        event("Memcpy HtoD (Pageable -> Device)", 100),
        event("aten::mm", 50, cpu),
    ]
    assert _kernels(events) == [
        ("volta_h884gemm_64x64_ldg8_nn", 2, 12.0, True),
        ("ampere_sgemm_128x64_nn", 1, 5.0, False),
    ]
    assert _kernels(events)[0].cuda_time_us == 12.0 and _kernels(events)[1].tensor_core is False


def test_profiling_checks_its_warmup():
    with pytest.raises(ValueError, match="warmup"):
        mpt.tensor_core_kernels(lambda: None, warmup=-1)


@pytest.mark.gpu
def test_fp16_matmul_runs_on_tensor_cores_and_strict_fp32_does_not():
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    a16, b16 = a.half(), b.half()
    half = mpt.tensor_core_kernels(lambda: a16 @ b16)
    assert all(k.calls >= 1 for k in half)
    assert any(k.tensor_core for k in half), [k.name for k in half]
    with tp.tf32(False):  # the fp32_precision settings: no deprecation warning, nothing mixed
        strict = mpt.tensor_core_kernels(lambda: a @ b)
    assert strict and not any(k.tensor_core for k in strict), [k.name for k in strict]


@pytest.mark.gpu
def test_tf32_setting_decides_whether_fp32_products_use_tensor_cores():
    major, _ = torch.cuda.get_device_capability()
    if major < 8:
        pytest.skip("TF32 needs compute capability 8.0")
    a = torch.randn(2048, 2048, device="cuda")
    b = torch.randn(2048, 2048, device="cuda")
    with tp.tf32(True):
        tf32 = mpt.tensor_core_kernels(lambda: a @ b)
    with tp.tf32(False):
        strict = mpt.tensor_core_kernels(lambda: a @ b)
    assert any(k.tensor_core for k in tf32), [k.name for k in tf32]
    assert not any(k.tensor_core for k in strict), [k.name for k in strict]


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16", "fp8-e4m3"])
def test_products_of_the_gemm_sweep_run_on_tensor_cores(precision):
    reason = _gemm._why_not(precision, "cuda", (1024, 1024, 1024))
    if reason is not None:
        pytest.skip(reason)
    product = _gemm._make_product(precision, 1024, 1024, 1024, "cuda")
    kernels = mpt.tensor_core_kernels(product)
    assert any(k.tensor_core for k in kernels), [k.name for k in kernels]
