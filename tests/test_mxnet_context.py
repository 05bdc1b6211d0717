"""mptutor.mxnet's context and types: the package layout, context(), pick, check_dtype, seed."""

from __future__ import annotations

import ast
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "mxnet",
    reason="MXNet is not installed: these tests run in the MXNet environment "
    "(requirements-mxnet.txt, NumPy 1.23)",
)

from mptutor import formats, hardware  # noqa: E402
from mptutor import mxnet as mmx  # noqa: E402
from mptutor.mxnet import _core  # noqa: E402

mx = mmx.mx  # imported through mptutor.mxnet, with MXNet's import-time warnings hidden
CPU = mx.cpu()
PACKAGE = Path(mmx.__file__).parent


def test_import_mptutor_does_not_import_mxnet():
    probe = "import sys, mptutor; print('mxnet' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _imported(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_mxnet_is_imported_in_one_place_and_the_environment_read_in_none():
    for path in PACKAGE.glob("*.py"):
        text = path.read_text()
        assert "os.environ" not in text and "getenv" not in text, path.name
        if path.name != "_core.py":
            assert not _imported(ast.parse(text)) & {"mxnet", "tqdm"}, path.name
            assert "filterwarnings" not in text, path.name


def test_context_is_the_cpu_here(monkeypatch):
    if mx.context.num_gpus() == 0:
        assert mmx.context() == CPU
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert mmx.context() == CPU


def test_context_follows_mptutor_device(monkeypatch):
    monkeypatch.setattr(mmx.mx.context, "num_gpus", lambda: 1)
    monkeypatch.delenv("MPTUTOR_DEVICE", raising=False)
    assert mmx.context() == mx.gpu(0)
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert mmx.context() == CPU
    monkeypatch.setenv("MPTUTOR_DEVICE", "sometimes")
    with pytest.raises(ValueError, match="MPTUTOR_DEVICE must be 'cpu' or 'cuda'"):
        mmx.context()
    monkeypatch.setenv("MPTUTOR_DEVICE", "cuda")  # asking cannot conjure a GPU
    monkeypatch.setattr(mmx.mx.context, "num_gpus", lambda: 0)
    assert mmx.context() == CPU


def test_context_reads_the_override_through_hardware(monkeypatch):
    monkeypatch.setattr(mmx.mx.context, "num_gpus", lambda: 1)
    monkeypatch.setattr(hardware, "_device_override", lambda: "cpu")
    assert mmx.context() == CPU


def test_hardware_pick_by_an_mxnet_context(monkeypatch):
    assert hardware.pick(cpu=1, gpu=2, on=CPU) == 1
    assert hardware.pick(cpu=1, gpu=2, on=mx.gpu(0)) == 2  # a Context, no GPU needed
    monkeypatch.setenv("MPTUTOR_DEVICE", "cpu")
    assert hardware.pick(cpu="small", gpu="full", on=mmx.context()) == "small"
    monkeypatch.delenv("MPTUTOR_DEVICE")
    monkeypatch.setattr(mmx.mx.context, "num_gpus", lambda: 1)
    assert hardware.pick(cpu="small", gpu="full", on=mmx.context()) == "full"


def test_check_dtype():
    assert _core._check_dtype("fp16") == "float16"
    assert _core._check_dtype(np.float32, CPU) == "float32"
    assert _core._check_dtype("BF16", CPU) == "bfloat16"
    assert _core._check_dtype(mx.nd.ones(1, dtype="float16"), mx.gpu(0)) == "float16"
    assert _core._check_dtype("float16", mx.gpu(0)) == "float16"  # a Context, no GPU needed
    with pytest.raises(ValueError, match="'int8' is not supported; use one of float32, float16"):
        _core._check_dtype("int8")
    for bad in (None, 3, object()):
        with pytest.raises(ValueError, match="is not supported"):
            _core._check_dtype(bad)
    with pytest.raises(ValueError, match="no float16 matrix products on a CPU") as info:
        _core._check_dtype("float16", CPU)
    assert "bfloat16" in str(info.value) and "GPU" in str(info.value)
    with pytest.raises(ValueError, match="CPUs only"):
        _core._check_dtype("bfloat16", mx.gpu(0))


def test_check_dtype_speaks_the_formats_vocabulary():
    assert all(formats.dtype_name(name) == name for name in _core._DTYPES)
    for spelling, name in formats.SPELLINGS.items():
        if name in _core._DTYPES:
            assert _core._check_dtype(spelling) == name
            assert _core._check_dtype(spelling.upper()) == name
        else:
            with pytest.raises(ValueError, match="is not supported"):
                _core._check_dtype(spelling)


def test_seed():
    draws = []
    for _ in range(2):
        mmx.seed(3)
        legacy = np.random.rand()  # noqa: NPY002 - the global state DataLoader shuffles with
        draws.append((random.random(), legacy, float(mx.nd.random.uniform().asscalar())))
    assert draws[0] == draws[1]
    with pytest.raises(ValueError, match=r"seed must be in \[0, 4294967295\], got -1"):
        mmx.seed(-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        mmx.seed(1.0)

