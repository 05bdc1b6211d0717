"""`import mptutor` must not import any deep-learning framework (nor matplotlib)."""

import json
import subprocess
import sys
from importlib.util import find_spec

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
    installed = [name for name in ("torch", "tensorflow", "mxnet") if find_spec(name)]
    loaded = _modules_after(
        "from mptutor import hardware\nv = hardware.framework_versions()\n"
        f"assert v['numpy'] and all(v[name] for name in {installed!r}), v"
    )
    assert not [m for m in HEAVY if m in loaded]
