"""mpt.import_torchao: torchao's parts imported, its import-time log lines not shown."""

import logging
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchao")


def test_import_prints_nothing_and_gives_the_parts():
    code = (
        "from mptutor import torch as mpt\n"
        "ao = mpt.import_torchao()\n"
        "mx = ao.prototype.mx_formats\n"
        "print(ao.__name__, ao.float8.__name__, mx.__name__, ao.optim.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [
        "torchao",
        "torchao.float8",
        "torchao.prototype.mx_formats",
        "torchao.optim",
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
