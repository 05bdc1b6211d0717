"""`import mptutor` must not import any deep-learning framework (nor matplotlib)."""

import json
import subprocess
import sys

HEAVY = ["torch", "tensorflow", "keras", "mxnet", "jax", "matplotlib"]


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_import_mptutor_imports_no_framework():
    loaded = _modules_after("import mptutor")
    assert "mptutor" in loaded and "mptutor.formats" in loaded
    assert not [m for m in HEAVY if m in loaded]


def test_framework_versions_read_without_importing():
    loaded = _modules_after(
        "from mptutor import hardware\nv = hardware.framework_versions()\n"
        "assert v['numpy'] and v['torch'] and v['tensorflow'] and v['mxnet'], v"
    )
    assert not [m for m in HEAVY if m in loaded]
