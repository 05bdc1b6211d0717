import json
import stat
import sys
from importlib.util import find_spec

import pytest

from mptutor import hardware
from mptutor.hardware import GpuInfo


def test_report_describes_this_machine():
    rep = hardware.report(refresh=True)
    assert rep.python.startswith(f"{sys.version_info.major}.{sys.version_info.minor}")
    assert rep.cpu and rep.cpu_count >= 1
    assert set(rep.cpu_features) >= {"avx512_bf16", "amx_bf16"}
    assert rep.packages["numpy"]
    for name in ("torch", "tensorflow", "mxnet"):  # versions of what is installed, else None
        assert bool(rep.packages[name]) == (find_spec(name) is not None)
    text = repr(rep)
    assert "CPU:" in text and "Device used:" in text
    assert rep.summary().startswith(("CPU:", "GPU:"))
    json.dumps(rep.as_dict())  # plain data, ready for a provenance record


@pytest.mark.parametrize(
    ("cc", "arch", "tc", "bf16", "fp8"),
    [
        ((6, 1), "pre-Volta", False, False, False),
        ((7, 0), "Volta", True, False, False),
        ((7, 5), "Turing", True, False, False),
        ((8, 0), "Ampere", True, True, False),
        ((8, 6), "Ampere", True, True, False),
        ((8, 9), "Ada Lovelace", True, True, True),
        ((9, 0), "Hopper", True, True, True),
        ((10, 0), "Blackwell", True, True, True),
    ],
)
def test_gpu_capabilities_follow_compute_capability(cc, arch, tc, bf16, fp8):
    gpu = GpuInfo(0, "test GPU", cc, 16.0)
    assert (gpu.architecture, gpu.tensor_cores, gpu.bf16, gpu.fp8) == (arch, tc, bf16, fp8)


def test_summary_and_device_with_a_gpu(monkeypatch):
    rep = hardware.HardwareReport(
        "3.11.7", "Linux x86_64", "cpu", 2, {}, [GpuInfo(0, "NVIDIA H100", (9, 0), 79.6)]
    )
    monkeypatch.delenv("MPTUTOR_DEVICE", raising=False)
    assert rep.device == "cuda"
    assert rep.summary() == "GPU: NVIDIA H100 (Hopper, sm_90)"
    assert "Tensor Cores: yes" in repr(rep) and "FP8: yes" in repr(rep)
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert rep.device == "cpu"
    assert "MPTUTOR_DEVICE=cpu" in repr(rep)


def test_pick_follows_the_device(monkeypatch):
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert hardware.pick(cpu=32, gpu=256) == 32
    monkeypatch.delenv("MPTUTOR_DEVICE")
    expected = 256 if hardware.gpus() else 32
    assert hardware.pick(cpu=32, gpu=256) == expected


@pytest.fixture
def without_torch(monkeypatch):
    """As on a machine without PyTorch: `import torch` fails, find_spec() answers None."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(hardware, "_CACHE", {})  # the report made here is not kept


def test_report_without_torch_or_nvidia_smi_finds_no_gpu(tmp_path, monkeypatch, without_torch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi on this PATH
    rep = hardware.report(refresh=True)
    assert (rep.gpus, rep.driver, rep.cuda, rep.packages["torch"]) == ([], None, None, None)
    assert rep.device == "cpu" and "GPU:  none found" in repr(rep)


def test_report_without_torch_asks_nvidia_smi(tmp_path, monkeypatch, without_torch):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  *driver_version*) echo "580.95.05" ;;\n'
        '  *) echo "0, NVIDIA H100 80GB HBM3, 9.0, 81559" ;;\n'
        "esac\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("MPTUTOR_DEVICE", raising=False)
    result = hardware.report(refresh=True).as_dict()
    assert result["driver"] == "580.95.05"
    (gpu,) = result["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["compute_capability"] == (9, 0)
    assert gpu["architecture"] == "Hopper" and gpu["fp8"] is True
    assert result["device"] == "cuda"


def test_pick_does_not_build_the_report(monkeypatch):
    monkeypatch.delenv("MPTUTOR_DEVICE", raising=False)
    monkeypatch.setattr(hardware, "_CACHE", {})
    monkeypatch.setattr(hardware, "gpus", lambda: [GpuInfo(0, "test GPU", (9, 0), 80.0)])
    assert hardware.pick(cpu=32, gpu=256) == 256
    assert hardware._CACHE == {}  # answered without the CPU, package and driver probes
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert hardware.pick(cpu=32, gpu=256) == 32


@pytest.mark.parametrize("value", ["gpu", "cuda:0", "tpu"])
def test_a_bad_device_override_is_an_error(monkeypatch, value):
    monkeypatch.setenv("MPTUTOR_DEVICE", value)
    with pytest.raises(ValueError, match="MPTUTOR_DEVICE must be 'cpu' or 'cuda'"):
        hardware._device_override()
    with pytest.raises(ValueError, match="MPTUTOR_DEVICE"):
        hardware.pick(cpu=1, gpu=2)


@pytest.mark.gpu
def test_report_finds_the_cuda_gpu():
    import torch

    rep = hardware.report(refresh=True)
    assert rep.gpus and rep.cuda == torch.version.cuda
    gpu = rep.gpus[0]
    assert gpu.compute_capability == torch.cuda.get_device_capability(0)
    assert gpu.memory_gib > 1
    assert rep.driver  # nvidia-smi answers on a GPU host


@pytest.mark.parametrize("bad", [None, 9, "9.0", (9,), (9, 0, 1), ("9", "0"), (9.0, 0), (-1, 0)])
def test_a_compute_capability_is_two_whole_numbers(bad):
    with pytest.raises((TypeError, ValueError), match="compute_capability"):
        GpuInfo(0, "GPU", bad, 80.0)


def test_report_refresh_is_a_bool():
    with pytest.raises(TypeError, match="refresh"):
        hardware.report(refresh="no")


@pytest.mark.parametrize(
    "on, expected",
    [("/CPU:0", 32), ("/GPU:0", 256), ("/device:GPU:1", 256), ("cpu", 32), ("cuda:0", 256)],
)
def test_pick_by_a_framework_device(monkeypatch, on, expected):
    monkeypatch.setenv("MPTUTOR_DEVICE", "cuda")  # the device given decides, not the machine
    assert hardware.pick(cpu=32, gpu=256, on=on) == expected


def test_pick_by_a_torch_device_and_a_bad_one():
    torch = pytest.importorskip("torch")
    assert hardware.pick(cpu=1, gpu=2, on=torch.device("cpu")) == 1
    assert hardware.pick(cpu=1, gpu=2, on=torch.device("cuda", 0)) == 2
    with pytest.raises(TypeError, match="on must be"):
        hardware.pick(cpu=1, gpu=2, on=3)


@pytest.mark.parametrize(
    ("flags", "cap", "bf16", "fp16"),
    [
        (("avx2",), None, (), ()),
        (("avx2", "avx512f", "avx512_bf16"), None, ("avx512_bf16",), ()),
        (("avx2", "avx512f", "avx512_bf16"), "AVX2", (), ()),
        (("avx2", "avx512f", "avx512_bf16"), "avx512_core", (), ()),  # case does not matter
        (("avx2", "avx512f", "avx512_bf16"), "AVX512_CORE_BF16", ("avx512_bf16",), ()),
        # an Intel Xeon with AMX (Sapphire Rapids): everything, unless capped
        (("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8"),
         None, ("avx512_bf16", "amx_bf16"), ("avx512_fp16", "amx_fp16")),
        (("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8"),
         "AVX512_CORE_AMX", ("avx512_bf16", "amx_bf16"), ("avx512_fp16",)),
        (("avx512_bf16", "amx_bf16"), "DEFAULT", ("avx512_bf16", "amx_bf16"), ()),
        (("avx512_bf16",), "SOME_FUTURE_ISA", ("avx512_bf16",), ()),  # unknown: no cap
    ],
)
def test_cpu_native_counts_what_the_cpu_has_and_the_cap_allows(
    monkeypatch, cpu_flags, flags, cap, bf16, fp16
):
    cpu_flags(*flags)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert hardware.cpu_native("bf16") == bf16
    assert hardware.cpu_native("fp16") == fp16


def test_onednn_isa_cap_reads_both_names(monkeypatch, cpu_flags):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert hardware.onednn_isa_cap() == "ALL"
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "avx2")  # MXNet 1.9.1's oneDNN reads only this one
    assert hardware.onednn_isa_cap() == "AVX2"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    assert hardware.onednn_isa_cap() == "AVX512_CORE"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", " avx2")  # oneDNN knows no such level: no cap
    cpu_flags("avx512_bf16")
    assert hardware.cpu_native("bf16") == ("avx512_bf16",)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    cpu_flags("avx512_bf16")
    assert hardware.cpu_native("bf16") == ()


@pytest.mark.parametrize("fmt", ["fp32", "BF16", "fp8", "fp8_e4m3", None, 16])
def test_cpu_native_refuses_other_formats(fmt):
    with pytest.raises(ValueError, match="fmt must be one of bf16, fp16"):
        hardware.cpu_native(fmt)
