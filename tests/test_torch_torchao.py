"""mpt.import_torchao: torchao's parts imported, its import-time log lines not shown."""

import logging
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchao")


def test_import_prints_nothing_and_gives_the_parts(tmp_path):
    # torchao's sources compiled afresh (an empty bytecode cache), as where pip installed with
    # --no-compile: its invalid escape sequences warn then, and fail under -W error
    code = (
        "import sys\n"
        "from mptutor import torch as mpt\n"
        f"sys.pycache_prefix = {str(tmp_path)!r}\n"
        "sys.dont_write_bytecode = True\n"
        "ao = mpt.import_torchao()\n"
        "mx = ao.prototype.mx_formats\n"
        "print(ao.__name__, ao.float8.__name__, mx.__name__, ao.optim.__name__)\n"
        "print('torchao.quantization.quant_api' in sys.modules)\n"
    )
    errors = ["-W", "error::SyntaxWarning", "-W", "error::DeprecationWarning"]
    done = subprocess.run([sys.executable, *errors, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "torchao",
        "torchao.float8",
        "torchao.prototype.mx_formats",
        "torchao.optim",
        "True",
    ]
    assert done.stderr == ""


def test_the_quieted_loggers_get_their_levels_back():
    from mptutor import torch as mpt

    logging.getLogger("torchao").setLevel(logging.INFO)
    try:
        mpt.import_torchao()
        assert logging.getLogger("torchao").level == logging.INFO
        assert logging.getLogger("torch.utils._pytree").level == logging.NOTSET
    finally:
        logging.getLogger("torchao").setLevel(logging.NOTSET)
