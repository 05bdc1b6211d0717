"""Shared test configuration: headless matplotlib and the `gpu` marker policy.

Tests marked ``gpu`` need a CUDA GPU. On a machine without one they are skipped with a reason
that ``-ra`` prints; under ``make test-gpu`` (``MPTUTOR_REQUIRE_GPU=1``) a missing GPU is an
error instead, so a GPU runner can never pass by skipping them.
"""

from __future__ import annotations

import os

import matplotlib
import pytest

# Headless figures in this process only: an MPLBACKEND variable would also reach the kernels
# that nbval starts when tests and notebooks run in one pytest session, and change their output.
matplotlib.use("Agg")


def _gpu_available() -> bool:
    from mptutor import hardware

    return bool(hardware.gpus())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or _gpu_available():
        return
    if os.environ.get("MPTUTOR_REQUIRE_GPU") == "1":
        raise pytest.UsageError(
            f"{len(gpu_items)} tests marked `gpu` were selected with MPTUTOR_REQUIRE_GPU=1, "
            "but no CUDA GPU is visible (checked through PyTorch, then nvidia-smi)"
        )
    skip = pytest.mark.skip(reason="needs a CUDA GPU; runs under `make test-gpu` on a GPU host")
    for item in gpu_items:
        item.add_marker(skip)
