"""What this machine can do for mixed precision: CPU, GPUs, Tensor Cores, BF16/FP8, versions.

Nothing here imports a deep-learning framework: versions come from the package metadata, GPUs
from PyTorch if the caller imported it, else from ``nvidia-smi``. ``MPTUTOR_DEVICE=cpu`` hides
every GPU from the notebooks; it is read in ``_device_override`` and nowhere else.

Examples
--------
>>> from mptutor import hardware
>>> hardware.report()  # doctest: +SKIP
>>> batch = hardware.pick(cpu=32, gpu=256)  # small on a CPU, full size on a GPU
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from importlib.util import find_spec
from typing import Any, TypeVar

from mptutor._checks import check_scalar, check_type

__all__ = ["GpuInfo", "HardwareReport", "report", "gpus", "pick", "cpu_native", "onednn_isa_cap"]

T = TypeVar("T")

#: Import names whose versions the report lists, in this order.
_PACKAGES = ("numpy", "ml_dtypes", "torch", "tensorflow", "keras", "mxnet", "jax")

#: First compute capability of each NVIDIA architecture that has Tensor Cores.
_ARCHITECTURES = (
    ((10, 0), "Blackwell"),
    ((9, 0), "Hopper"),
    ((8, 9), "Ada Lovelace"),
    ((8, 0), "Ampere"),
    ((7, 5), "Turing"),
    ((7, 0), "Volta"),
)

#: First compute capability whose Tensor Cores take each precision (keys of
#: :data:`mptutor.formats.PRECISIONS`): the one place these thresholds are stated.
_TENSOR_CORES_FROM = {"fp16": (7, 0), "tf32": (8, 0), "bf16": (8, 0), "fp8_e4m3": (8, 9)}

#: CPU flags (from /proc/cpuinfo) that speed up low-precision arithmetic on a CPU.
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_int8")

#: oneDNN's instruction-set levels, the bit masks of its ``dnnl_cpu_isa_t`` (each level holds
#: the ones below it): the names ``ONEDNN_MAX_CPU_ISA`` accepts as a cap.
_ONEDNN_LEVELS = {
    "SSE41": 0x1, "AVX": 0x3, "AVX2": 0x7, "AVX2_VNNI": 0xF, "AVX2_VNNI_2": 0x1F,
    "AVX512_CORE": 0x27, "AVX512_CORE_VNNI": 0x67, "AVX512_CORE_BF16": 0xE7,
    "AVX512_CORE_FP16": 0x1EF, "AVX10_1_512": 0x1EF, "AVX512_CORE_AMX": 0xFEF,
    "AVX10_1_512_AMX": 0xFEF, "AVX512_CORE_AMX_FP16": 0x1FEF, "AVX10_1_512_AMX_FP16": 0x1FEF,
}

#: For products in each format, the CPU flags with which oneDNN computes them natively and the
#: oneDNN level each needs.
_NATIVE = {
    "bf16": {"avx512_bf16": "AVX512_CORE_BF16", "amx_bf16": "AVX512_CORE_AMX"},
    "fp16": {"avx512_fp16": "AVX512_CORE_FP16", "amx_fp16": "AVX512_CORE_AMX_FP16"},
}


@dataclass(frozen=True)
class GpuInfo:
    """One GPU and the low-precision arithmetic its Tensor Cores take.

    Attributes
    ----------
    index, name : int, str
        CUDA device index and name, e.g. ``"NVIDIA H100 80GB HBM3"``.
    compute_capability : tuple of int
        ``(major, minor)``.
    memory_gib : float
        Total device memory in GiB.

    Raises
    ------
    TypeError, ValueError
        If ``compute_capability`` is not two whole numbers >= 0.
    """

    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_gib: float

    def __post_init__(self) -> None:
        cc = self.compute_capability
        if not isinstance(cc, (tuple, list)) or len(cc) != 2:
            raise TypeError(f"compute_capability must be (major, minor), e.g. (9, 0), got {cc!r}")
        cc = tuple(check_scalar(v, "compute_capability's parts", int, min_val=0) for v in cc)
        object.__setattr__(self, "compute_capability", cc)

    @property
    def architecture(self) -> str:
        """``"Hopper"``, ``"Ampere"``, ... or ``"pre-Volta"`` for GPUs without Tensor Cores."""
        first = (name for cc, name in _ARCHITECTURES if self.compute_capability >= cc)
        return next(first, "pre-Volta")

    @property
    def tensor_cores(self) -> bool:
        """Whether the GPU has Tensor Cores (Volta, compute capability 7.0, and later)."""
        return self.compute_capability >= _TENSOR_CORES_FROM["fp16"]

    @property
    def tf32(self) -> bool:
        """Whether FP32 matrix products can run as TF32 on Tensor Cores (8.0 and later)."""
        return self.compute_capability >= _TENSOR_CORES_FROM["tf32"]

    @property
    def bf16(self) -> bool:
        """Whether the Tensor Cores take BF16 (Ampere, 8.0, and later)."""
        return self.compute_capability >= _TENSOR_CORES_FROM["bf16"]

    @property
    def fp8(self) -> bool:
        """Whether the Tensor Cores take FP8 (Ada 8.9, Hopper 9.0 and later)."""
        return self.compute_capability >= _TENSOR_CORES_FROM["fp8_e4m3"]


@dataclass
class HardwareReport:
    """What this machine offers; printed as a short block at the top of each notebook.

    Attributes
    ----------
    python, system, cpu : str
        Python version, operating system and machine type, CPU model name.
    cpu_count : int
        Logical CPU cores.
    cpu_features : dict of str to bool
        Whether the CPU has each of ``avx2, avx512f, avx512_bf16, avx512_fp16, amx_bf16,
        amx_fp16, amx_int8`` (all ``False`` where ``/proc/cpuinfo`` cannot be read).
    gpus : list of GpuInfo
        CUDA GPUs found (empty on a CPU-only machine).
    packages : dict of str to str or None
        Versions of the reported packages, ``None`` for those not installed.
    cuda, driver : str or None
        CUDA version of PyTorch's build (if PyTorch was asked), NVIDIA driver (``nvidia-smi``).
    """

    python: str
    system: str
    cpu: str
    cpu_count: int
    cpu_features: dict[str, bool]
    gpus: list[GpuInfo] = field(default_factory=list)
    packages: dict[str, str | None] = field(default_factory=dict)
    cuda: str | None = None
    driver: str | None = None

    @property
    def device(self) -> str:
        """``"cuda"`` with a GPU (unless ``MPTUTOR_DEVICE=cpu`` hides it), else ``"cpu"``."""
        return "cuda" if self.gpus and _device_override() != "cpu" else "cpu"

    def summary(self) -> str:
        """Name the device notebooks use: ``"GPU: <name> (Hopper, sm_90)"`` or ``"CPU: ..."``."""
        if self.device == "cuda":
            g = self.gpus[0]
            major, minor = g.compute_capability
            return f"GPU: {g.name} ({g.architecture}, sm_{major}{minor})"
        return f"CPU: {self.cpu}, {self.cpu_count} cores"

    def as_dict(self) -> dict[str, Any]:
        """Return all fields and ``device`` as plain data (GPUs with capabilities), for JSON."""
        out = asdict(self)
        derived = ("architecture", "tensor_cores", "bf16", "tf32", "fp8")
        out["gpus"] = [dict(asdict(g), **{k: getattr(g, k) for k in derived}) for g in self.gpus]
        out["device"] = self.device
        return out

    def __repr__(self) -> str:
        lines = [
            f"Python {self.python} on {self.system}",
            f"CPU:  {self.cpu} ({self.cpu_count} logical cores)",
        ]
        flags = [k for k, v in self.cpu_features.items() if v]
        if flags:
            lines.append(f"      low-precision CPU instructions: {', '.join(flags)}")
        if not self.gpus:
            lines.append("GPU:  none found; notebooks take their small CPU path")
        yes = {True: "yes", False: "no"}
        for g in self.gpus:
            major, minor = g.compute_capability
            lines.append(
                f"GPU {g.index}: {g.name}, {g.architecture} (compute capability {major}.{minor}),"
                f" {g.memory_gib:.0f} GiB"
            )
            lines.append(
                f"      Tensor Cores: {yes[g.tensor_cores]}, TF32: {yes[g.tf32]}, "
                f"BF16: {yes[g.bf16]}, FP8: {yes[g.fp8]}"
            )
        if self.gpus and self.device == "cpu":
            lines.append("      MPTUTOR_DEVICE=cpu is set: notebooks take their CPU path")
        if self.cuda or self.driver:
            lines.append(f"CUDA: {self.cuda or '?'} (driver {self.driver or '?'})")
        lines.append("Packages: " + ", ".join(f"{k} {v}" for k, v in self.packages.items() if v))
        missing = [k for k, v in self.packages.items() if not v]
        if missing:
            lines.append("Not installed: " + ", ".join(missing))
        lines.append(f"Device used: {self.device}")
        return "\n".join(lines)


def _device_override() -> str | None:
    """``MPTUTOR_DEVICE`` (``"cpu"``, ``"cuda"`` or ``None`` if unset); ValueError otherwise."""
    value = os.environ.get("MPTUTOR_DEVICE", "").strip().lower()
    if not value:
        return None
    if value not in ("cpu", "cuda"):
        raise ValueError(f"MPTUTOR_DEVICE must be 'cpu' or 'cuda' (or unset), not {value!r}")
    return value


def _version(import_name: str) -> str | None:
    """Version of the distribution that provides an import name, without importing it."""
    if find_spec(import_name) is None:
        return None
    for dist in metadata.packages_distributions().get(import_name, []) + [import_name]:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def _cpuinfo(key: str) -> str:
    """Return the first ``/proc/cpuinfo`` value whose line starts with ``key`` ("" if none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith(key):
                    return line.split(":", 1)[1]
    except OSError:
        pass
    return ""


def _gpus_from_torch() -> tuple[list[GpuInfo], str | None] | None:
    """Return the GPUs PyTorch sees and its CUDA version, if the caller imported PyTorch."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "cuda"):
        return None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    return [
        GpuInfo(i, p.name, (p.major, p.minor), p.total_memory / 2**30) for i, p in enumerate(props)
    ], torch.version.cuda


def _nvidia_smi(query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-gpu=<query>``; none where it is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [[part.strip() for part in line.split(",")] for line in out.splitlines() if line.strip()]


def _gpus_from_nvidia_smi() -> list[GpuInfo]:
    """Return the GPUs ``nvidia-smi`` lists."""
    found = []
    for row in _nvidia_smi("index,name,compute_cap,memory.total"):
        try:
            major, minor = (int(p) for p in row[2].split("."))
            found.append(GpuInfo(int(row[0]), row[1], (major, minor), float(row[3]) / 1024))
        except (IndexError, ValueError):
            continue
    return found


def gpus() -> list[GpuInfo]:
    """CUDA GPUs here, a list of GpuInfo (through PyTorch if imported, else ``nvidia-smi``)."""
    from_torch = _gpus_from_torch()
    return from_torch[0] if from_torch is not None else _gpus_from_nvidia_smi()


def pick(cpu: T, gpu: T, on: Any = None) -> T:
    """Choose a size by hardware: full size on a GPU, small on a CPU, same code path.

    Parameters
    ----------
    cpu, gpu : object
        Values for the CPU path (a CPU-only machine, or ``MPTUTOR_DEVICE=cpu``) and the GPU path.
    on : object, optional
        The device a framework computes on (a ``torch.device``, a TensorFlow device string such
        as ``"/GPU:0"``, an MXNet context): ``gpu`` if it is a GPU. Without it: if this machine
        has a CUDA GPU.

    Returns
    -------
    object

    Raises
    ------
    TypeError
        If ``on`` is not a device, a device string or ``None``.
    """
    if on is None:
        if _device_override() == "cpu":
            return cpu
        found = _CACHE["report"].gpus if "report" in _CACHE else gpus()
        return gpu if found else cpu
    kind = getattr(on, "device_type", None) or getattr(on, "type", None) or on  # MXNet, torch
    if not isinstance(kind, str):
        raise TypeError(
            "on must be a torch.device, a TensorFlow device string or an MXNet context, "
            f"not {type(on).__name__}"
        )
    return gpu if re.search(r"gpu|cuda", kind, re.IGNORECASE) else cpu


_CACHE: dict[str, HardwareReport] = {}


def report(refresh: bool = False) -> HardwareReport:
    """Describe this machine: CPU, GPUs and their capabilities, package versions.

    Parameters
    ----------
    refresh : bool, optional
        Probe again instead of returning the report made earlier in this process.

    Raises
    ------
    TypeError
        If ``refresh`` is not a bool.
    """
    check_type(refresh, "refresh", bool, "True or False")
    if "report" in _CACHE and not refresh:
        return _CACHE["report"]
    from_torch = _gpus_from_torch()
    gpu_list, cuda = from_torch if from_torch is not None else (_gpus_from_nvidia_smi(), None)
    driver_rows = _nvidia_smi("driver_version") if gpu_list else []
    flags = set(_cpuinfo("flags").split())
    result = HardwareReport(
        python=platform.python_version(),
        system=f"{platform.system()} {platform.machine()}",
        cpu=" ".join(_cpuinfo("model name").split()) or platform.processor() or "unknown CPU",
        cpu_count=os.cpu_count() or 1,
        cpu_features={flag: flag in flags for flag in _CPU_FLAGS},
        gpus=gpu_list,
        packages={name: _version(name) for name in _PACKAGES},
        cuda=cuda if gpu_list else None,
        driver=driver_rows[0][0] if driver_rows else None,
    )
    _CACHE["report"] = result
    return result


def onednn_isa_cap() -> str:
    """Return the instruction-set cap set for oneDNN in this process, ``"ALL"`` when none is.

    oneDNN reads ``ONEDNN_MAX_CPU_ISA`` (MXNet 1.9.1's only ``DNNL_MAX_CPU_ISA``); a cap such as
    ``AVX2`` makes a newer CPU compute as an AVX2-only one would. Upper case.
    """
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "ALL"
    return cap.upper()  # as oneDNN reads it: " AVX2" names no level, so caps nothing


def cpu_native(fmt: str) -> tuple[str, ...]:
    """Name the CPU instructions with which oneDNN computes products in ``fmt`` natively here.

    An instruction counts where the CPU has it (``report().cpu_features``) and the cap of
    :func:`onednn_isa_cap` allows it (``ALL``, ``DEFAULT`` or a newer name: no cap). Empty where
    products in ``fmt`` are emulated (in FP32 or generic code), a few to a hundred times slower
    than FP32 products. With ``avx512_fp16`` alone, oneDNN's FP16 matrix-product kernel still
    converts to FP32 inside (measured at about FP32's rate on a Xeon).

    Parameters
    ----------
    fmt : {"bf16", "fp16"}
        ``bf16``: AVX512-BF16 or AMX-BF16; ``fp16``: AVX512-FP16 or AMX-FP16. (PyTorch's CPU FP8
        ``_scaled_mm`` depends on the AMX flags and ``torch.backends.mkldnn``, not on the cap.)

    Returns
    -------
    tuple of str
        The flags, in the order above, e.g. ``("avx512_bf16",)``.

    Raises
    ------
    ValueError
        If ``fmt`` is not one of the two.
    """
    if not isinstance(fmt, str) or fmt not in _NATIVE:
        raise ValueError(f"fmt must be one of {', '.join(_NATIVE)}, got {fmt!r}")
    features = report().cpu_features
    cap = _ONEDNN_LEVELS.get(onednn_isa_cap())  # None: ALL, DEFAULT or a newer name, no cap
    found = []
    for flag, level in _NATIVE[fmt].items():
        need = _ONEDNN_LEVELS[level]
        if features.get(flag) and (cap is None or cap & need == need):
            found.append(flag)
    return tuple(found)
