"""Shared test configuration: Hypothesis profiles, headless matplotlib, required frameworks, the
`gpu` marker policy, a fake CPU for the hardware report (`cpu_flags`).

Hypothesis: the ``ci`` profile is loaded by default. It is derandomized (every run draws the
same examples, so a failure reproduces and a pass means the same everywhere) and keeps no
example database; ``pytest --hypothesis-profile=deep`` draws ten times as many random examples
for a thorough local run. Tests set no ``max_examples`` or ``deadline`` of their own, so the
profile decides.

Frameworks: the tests of a framework skip with the reason when it is not installed (in anyone's
own environment). Under ``make test`` each environment names the frameworks it is meant to hold
in ``MPTUTOR_REQUIRE_FRAMEWORKS`` (e.g. ``torch,tensorflow,keras``); one of those that does not
import is an error before any test runs, never a skip.

Tests marked ``gpu`` need a CUDA GPU. On a machine without one they are skipped with a reason
that ``-ra`` prints; under ``make test-gpu`` (``MPTUTOR_REQUIRE_GPU=1``) a missing GPU is an
error instead, so a GPU runner can never pass by skipping them.
"""

from __future__ import annotations

import importlib
import os
import warnings

import pytest

try:  # only the tests of mptutor.plots need matplotlib, and they skip without it
    import matplotlib
except ImportError:  # pragma: no cover - a minimal environment
    matplotlib = None
else:
    # Headless figures in this process only: an MPLBACKEND variable would also reach the kernels
    # that nbval starts when tests and notebooks run in one pytest session, and change their
    # output.
    matplotlib.use("Agg")

try:
    from hypothesis import settings
except ImportError:  # pragma: no cover - the property tests import it and fail without it
    settings = None
else:
    settings.register_profile(
        "ci", derandomize=True, database=None, max_examples=100, deadline=None
    )
    settings.register_profile("deep", max_examples=1000, deadline=None)
    settings.load_profile("ci")  # `--hypothesis-profile=deep` loads another one after this


@pytest.fixture
def cpu_flags(monkeypatch):
    """Make ``mptutor.hardware.report()`` describe a CPU with exactly the flags given to it."""
    from mptutor import hardware

    def set_flags(*flags: str) -> None:
        features = {flag: flag in flags for flag in hardware._CPU_FLAGS}
        fake = hardware.HardwareReport("3.11", "Linux x86_64", "test CPU", 2, features)
        monkeypatch.setattr(hardware, "_CACHE", {"report": fake})

    return set_flags


def _required_frameworks() -> list[str]:
    raw = os.environ.get("MPTUTOR_REQUIRE_FRAMEWORKS", "")
    return [name.strip() for name in raw.split(",") if name.strip()]


def pytest_configure(config: pytest.Config) -> None:
    missing = []
    for name in _required_frameworks():
        try:
            with warnings.catch_warnings():  # mxnet 1.9 touches deprecated NumPy aliases
                warnings.simplefilter("ignore", DeprecationWarning)
                importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a broken install is as missing as an absent one
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    if missing:
        raise pytest.UsageError(
            "MPTUTOR_REQUIRE_FRAMEWORKS says this environment holds "
            f"{os.environ['MPTUTOR_REQUIRE_FRAMEWORKS']}, but these do not import: "
            + "; ".join(missing)
        )


def _gpu_available() -> bool:
    # The test process asks PyTorch when it can (hardware only asks a framework already imported).
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        return torch.cuda.is_available()
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
