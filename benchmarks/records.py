"""Writing measurement records: the benchmarks' shared options, provenance and file names.

Every script in this folder saves what it measured as one JSON file, written atomically into
the folder given with ``--out`` (never into ``data/results/`` by default: records are copied
there and committed once the run is over, with the notebooks re-executed). A record carries
what is needed to trust it later:

- the machine (:func:`mptutor.hardware.report`), the date, the command and the commit (``--commit``
  or ``MPTUTOR_COMMIT``, else ``git rev-parse HEAD`` where the checkout has its ``.git``);
- the environment variables that change the arithmetic or the measurement
  (:data:`ENV_VARIABLES`), the versions of packages the hardware report leaves out
  (torchvision, triton, the CUDA libraries' wheels), and on a GPU the clocks, power limit,
  temperature and throttle reasons that ``nvidia-smi`` reports before and after the run;
- the raw timings.

The notebooks read records through :mod:`mptutor.bench` (``find_records``, ``provenance``,
``label``); :func:`read_record` here is the same reader. The targets live in :mod:`targets`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from mptutor import hardware
from mptutor._atomic import write_text
from mptutor._checks import check_type
from mptutor.bench import _check_record
from mptutor.bench import _read_record as read_record  # noqa: F401 - the notebooks' reader

ROOT = Path(__file__).resolve().parents[1]
#: Where measurement records are committed (the scripts write into ``--out`` only).
RESULTS_DIR = ROOT / "data" / "results"

#: Environment variables that change what a product computes or how it is measured.
ENV_VARIABLES = (
    "NVIDIA_TF32_OVERRIDE",  # forces TF32 off (0) whatever PyTorch asks
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",  # forces TF32 on for cuBLAS
    "CUBLAS_WORKSPACE_CONFIG",  # deterministic cuBLAS; limits its workspaces
    "CUBLASLT_WORKSPACE_SIZE",
    "CUBLAS_EMULATE_SINGLE_PRECISION",  # FP32 emulated with BF16 products on newer GPUs
    "CUDNN_LOGLEVEL_DBG",
    "CUDA_LAUNCH_BLOCKING",  # every kernel launch waits: timings mean something else
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MODULE_LOADING",
    "PYTORCH_CUDA_ALLOC_CONF",  # the allocator, and so peak memory
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "TORCH_CUDNN_V8_API_DISABLED",
    "TORCH_BLAS_PREFER_CUBLASLT",
    "TORCH_BLAS_PREFER_HIPBLASLT",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "ONEDNN_MAX_CPU_ISA",  # caps the CPU instructions oneDNN uses (BF16, AMX)
    "DNNL_MAX_CPU_ISA",
    "ATEN_CPU_CAPABILITY",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_CUDNN_DETERMINISTIC",
    "XLA_FLAGS",
    "KERAS_BACKEND",
    "MPTUTOR_DEVICE",
)
#: Packages whose versions a record adds to those of the hardware report.
EXTRA_PACKAGES = (
    "torchvision",
    "triton",
    "nvidia-cublas",
    "nvidia-cublas-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-cudnn-cu12",
)
_SMI_FIELDS = (
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "power.max_limit",
    "temperature.gpu",
    "pstate",
    "clocks_event_reasons.active",
    "persistence_mode",
    "compute_mode",
)


def add_record_options(parser: argparse.ArgumentParser, smoke_help: str) -> None:
    """Add ``--smoke``, ``--out`` and ``--commit`` to a benchmark script's parser.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The script's parser.
    smoke_help : str
        What ``--smoke`` runs in this script (a tiny size that checks the code path).
    """
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="write a JSON record into DIR (created if needed); nothing is written without it",
    )
    parser.add_argument(
        "--commit",
        default=None,
        help="the commit measured, for the record (default: $MPTUTOR_COMMIT, else git)",
    )


def commit(given: str | None = None) -> str | None:
    """Return the commit to record: ``given``, else ``$MPTUTOR_COMMIT``, else git's HEAD."""
    if given:
        return given
    if os.environ.get("MPTUTOR_COMMIT"):
        return os.environ["MPTUTOR_COMMIT"]
    if not (ROOT / ".git").exists():
        return None  # a copy of the working tree without its history
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def gpu_state() -> list[dict[str, str]] | None:
    """Clocks, power limit, temperature and throttle reasons per GPU, from ``nvidia-smi``.

    Returns
    -------
    list of dict or None
        One dict per GPU (the values as ``nvidia-smi`` prints them, units included), or ``None``
        where ``nvidia-smi`` is missing or does not answer.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    rows = []
    for name in ("index", *_SMI_FIELDS):  # one query per field: a driver may lack some
        try:
            out = subprocess.run(
                [exe, f"--query-gpu={name}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        values = [v.strip() for v in out.stdout.splitlines()] if out.returncode == 0 else []
        for i, value in enumerate(values):
            if i == len(rows):
                rows.append({})
            rows[i][name] = value
    return rows or None


def environment(gpu_before: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """What besides the hardware shapes a measurement: variables, extra packages, GPU state.

    Parameters
    ----------
    gpu_before : list of dict, optional
        :func:`gpu_state` taken before the run.

    Returns
    -------
    dict
        ``variables`` (those of :data:`ENV_VARIABLES` that are set; the others were not),
        ``packages`` (:data:`EXTRA_PACKAGES` that are installed), ``gpu_state_before`` and
        ``gpu_state_after``.
    """
    packages = {}
    for name in EXTRA_PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "variables": {k: os.environ[k] for k in ENV_VARIABLES if k in os.environ},
        "variables_checked": list(ENV_VARIABLES),
        "packages": packages,
        "gpu_state_before": gpu_before,
        "gpu_state_after": gpu_state(),
    }


def this_command() -> str:
    """Return this process's command line, without the machine's folders.

    The script is shown relative to the checkout; so is an absolute path argument inside it
    (``--out=PATH`` too), and one outside it as ``.../`` and its last part (``--out
    /home/me/runs/first`` is recorded as ``--out .../first``): a committed record names the run's
    output folder, not the machine's layout.
    """
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if script is not None and script.is_relative_to(ROOT):
        shown = str(script.relative_to(ROOT))
    else:
        shown = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    return " ".join(["python", shown, *map(_without_folders, sys.argv[1:])])


def _without_folders(argument: str) -> str:
    option, equals, value = argument.partition("=") if argument.startswith("--") else ("", "", "")
    if not equals:
        option, value = "", argument
    if not os.path.isabs(value):
        return argument
    path = Path(os.path.normpath(value))
    if path.is_relative_to(ROOT):
        value = str(path.relative_to(ROOT)) or "."
    else:
        value = f".../{path.name}" if path.name else "..."
    return f"{option}{equals}{value}"


def save_result(
    name: str,
    data: dict[str, Any],
    out_dir: str | os.PathLike[str],
    command: str | None = None,
    commit_id: str | None = None,
    gpu_before: list[dict[str, str]] | None = None,
) -> Path:
    """Write a measurement record as JSON, atomically, with its provenance.

    Parameters
    ----------
    name : str
        File stem, e.g. ``"scaler_overhead-cuda"``; letters, digits, ``-`` and ``_`` only.
    data : dict
        The measurement (raw timings included); must be JSON-serialisable.
    out_dir : path-like
        The folder (created if needed).
    command : str, optional
        The command that produced it (default: this process's command line).
    commit_id : str, optional
        The commit measured (default: :func:`commit`).
    gpu_before : list of dict, optional
        :func:`gpu_state` taken before the run.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    ValueError
        If ``name`` has other characters, or the record would be one that
        :func:`mptutor.bench.find_records` refuses (e.g. ``data["device"]`` neither ``"cpu"``
        nor ``"cuda[:N]"``); nothing is written.
    TypeError
        If ``name`` is not a string, ``data`` not a dict or not JSON-serialisable, ``command``
        or ``commit_id`` neither a string nor ``None``, ``out_dir`` not a path (nothing is
        written).
    """
    check_type(name, "name", str, "a file stem (a str)")
    if not name or not all(c.isascii() and (c.isalnum() or c in "-_") for c in name):
        raise ValueError(f"name must use letters, digits, '-' and '_' only, got {name!r}")
    check_type(data, "data", dict, "a dict (a JSON object) of the measurement")
    check_type(out_dir, "out_dir", (str, os.PathLike), "a folder (str or path)")
    if command is not None:
        check_type(command, "command", str, "a str or None")
    if commit_id is not None:
        check_type(commit_id, "commit_id", str, "a str or None")
    record = {
        "name": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command if command is not None else this_command(),
        "git_commit": commit(commit_id),
        "hardware": hardware.report().as_dict(),
        "environment": environment(gpu_before),
        "data": data,
    }
    text = json.dumps(record, indent=2) + "\n"
    _check_record(json.loads(text), f"record {name!r} (not written)")  # as the reader sees it
    target = Path(out_dir) / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text(target, text)
    return target


def save_record(
    benchmark: str,
    device: Any,
    data: dict[str, Any],
    args: argparse.Namespace,
    suffix: str = "",
    gpu_before: list[dict[str, str]] | None = None,
) -> Path | None:
    """Save a PyTorch benchmark's measurement into ``args.out``, if it was given.

    The record is named ``<benchmark>-<device type>[-<GPU name>][-<suffix>]``, or
    ``<benchmark>-smoke-<device type>[-<suffix>]`` for a smoke run, so that a smoke run never
    passes for a measurement. The data gains ``device``, ``smoke``, the PyTorch and cuDNN
    versions and, on a GPU, the device's name.

    Parameters
    ----------
    benchmark : str
        The benchmark's name, e.g. ``"gemm_sweep"``.
    device : str or torch.device
        The device it measured.
    data : dict
        The measurement, raw timings included.
    args : argparse.Namespace
        The script's options (:func:`add_record_options`): ``smoke``, ``out``, ``commit``.
    suffix : str, optional
        Appended to the name (e.g. the model).
    gpu_before : list of dict, optional
        :func:`gpu_state` taken before the run.

    Returns
    -------
    pathlib.Path or None
        The file written, or ``None`` without ``--out``.
    """
    if args.out is None:
        return None
    import torch

    dev = torch.device(device)
    parts = [benchmark, "smoke", dev.type] if args.smoke else [benchmark, dev.type]
    extra: dict[str, Any] = {
        "device": str(dev),
        "smoke": bool(args.smoke),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
    }
    if dev.type == "cuda":
        extra["gpu"] = torch.cuda.get_device_name(dev)
        if not args.smoke:
            parts.append(extra["gpu"])
    if suffix:
        parts.append(suffix)
    name = "-".join("".join(c if c.isalnum() or c == "_" else "_" for c in part) for part in parts)
    return save_result(
        name, {**extra, **data}, args.out, commit_id=args.commit, gpu_before=gpu_before
    )
