"""torchao, imported without the log lines it prints on a machine that cannot load its kernels."""

from __future__ import annotations

import contextlib
import importlib
import logging
import warnings
from collections.abc import Iterator
from types import ModuleType

# What importing torchao 0.18 logs on a CPU-only machine: torchao itself warns for each CUDA
# extension it cannot load (torchao/__init__.py, "Failed to load ..._C_mxfp8..."), and torch's
# pytree warns that torchao registers Enum subclasses as pytree constants (torch/utils/_pytree.py).
_NOISY_LOGGERS = ("torchao", "torch.utils._pytree")
# torchao 0.18's sources hold docstrings with invalid escape sequences (quant_api.py, "\."):
# Python 3.12 compiles them with a SyntaxWarning (3.11 a DeprecationWarning), shown wherever no
# bytecode was cached, as on an install with pip's --no-compile, and an error under -W error.
_ESCAPE_WARNINGS = ((SyntaxWarning, DeprecationWarning), r"invalid escape sequence")
# The parts the lessons use; each registers its pytree constants when first imported.
_PARTS = ("torchao.float8", "torchao.prototype.mx_formats", "torchao.optim")


@contextlib.contextmanager
def _quiet(names: tuple[str, ...]) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            categories, message = _ESCAPE_WARNINGS
            for category in categories:
                warnings.filterwarnings("ignore", message=message, category=category)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def import_torchao() -> ModuleType:
    """Import torchao and the parts the lessons use, without its import-time log lines.

    Only the two loggers above are quieted (CUDA extensions not loaded on a CPU machine, Enums
    registered as pytree constants), and the compiler's warnings about invalid escape sequences
    in torchao's docstrings (shown where no bytecode is cached) ignored, only while importing.

    Returns
    -------
    types.ModuleType
        The ``torchao`` module, with ``torchao.float8``, ``torchao.prototype.mx_formats`` and
        ``torchao.optim`` imported.

    Raises
    ------
    ImportError
        If torchao is not installed (it is pinned in the project's ``requirements.txt``).
    """
    try:
        with _quiet(_NOISY_LOGGERS):
            torchao = importlib.import_module("torchao")
            for part in _PARTS:
                importlib.import_module(part)
    except ImportError as error:
        raise ImportError(
            "torchao is not installed: pip install torchao (requirements.txt pins the version "
            f"that works with its PyTorch): {error}"
        ) from error
    return torchao
