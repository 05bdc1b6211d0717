"""The Makefile finds a Python 3.11 for the MXNet environment, or runs without the Gluon track.

`make -n` prints what `make run` and `make test-unit` would do on a machine whose ``python3``
is 3.12, with fake interpreters on an otherwise empty PATH (no pyenv), so nothing is built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")


def _fake_python(folder: Path, name: str, version_ok: bool) -> Path:
    """An interpreter that answers the Makefile's two questions: is it 3.11, where is it."""
    path = folder / name
    path.write_text(
        "#!/bin/sh\n"
        'case "$2" in\n'
        f"  *version_info*) exit {0 if version_ok else 1} ;;\n"
        '  *executable*) echo "$0" ;;\n'
        "esac\n"
    )
    path.chmod(0o755)
    return path


def _make_n(bin_dir: Path, tmp_path: Path, target: str) -> str:
    # Both environments point into tmp_path, so what make prints does not depend on whether this
    # checkout has made its own .venv or .venv-mxnet.
    env = {"HOME": str(tmp_path), "PATH": str(bin_dir)}
    args = [MAKE, "-n", "-C", str(ROOT), target, "PYTHON=python3.12"]
    args += [f"MAIN_VENV={tmp_path / 'no-main-env'}", f"MXNET_VENV={tmp_path / 'no-mxnet-env'}"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def test_a_python311_on_the_path_is_used_when_python3_is_newer(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_python(bin_dir, "python3.12", version_ok=False)
    found = _fake_python(bin_dir, "python3.11", version_ok=True)
    out = _make_n(bin_dir, tmp_path, "run")
    assert f"py='{found}'" in out  # the MXNet environment is made with it
    assert "--append --budgets notebooks/budgets.json notebooks/gluon/01-" in out


def test_without_python311_run_says_why_the_gluon_track_did_not_run(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_python(bin_dir, "python3.12", version_ok=False)
    out = _make_n(bin_dir, tmp_path, "run")
    main = sorted(str(p.relative_to(ROOT)) for d in ("pytorch", "keras")
                  for p in (ROOT / "notebooks" / d).glob("*.ipynb"))
    assert all(nb in out for nb in main)  # the other tracks run
    assert "make run: notebooks/gluon did not run: no Python 3.11 found" in out
    assert "MXNET_PYTHON=/path/to/python3.11" in out
    assert f"-m venv {tmp_path / 'no-mxnet-env'}" not in out  # no MXNet environment is attempted
    assert f"python3.12 -m venv {tmp_path / 'no-main-env'}" in out  # the main one is made
    # under `make test` the missing environment is an error, with the same reason
    out = _make_n(bin_dir, tmp_path, "test-unit")
    assert "py='';" in out and 'test -n "$py" || { echo "error: no Python 3.11 found' in out


def test_a_named_mxnet_python_wins(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_python(bin_dir, "python3.12", version_ok=False)
    _fake_python(bin_dir, "python3.11", version_ok=True)
    env = {"HOME": str(tmp_path), "PATH": str(bin_dir)}
    args = [
        MAKE,
        "-n",
        "-C",
        str(ROOT),
        "run",
        "PYTHON=python3.12",
        "MXNET_PYTHON=/opt/py/bin/python",
    ]
    args += [f"MXNET_VENV={tmp_path / 'no-mxnet-env'}"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False).stdout
    assert "py='/opt/py/bin/python'" in out
    assert os.fspath(bin_dir / "python3.11") not in out


@pytest.mark.parametrize("target", ["run", "test", "notebooks"])
def test_every_notebook_runs_once_in_its_environment(tmp_path, target):
    # the lanes of `make run` and `make test` name each PyTorch and Keras notebook once, in a
    # command of the main environment, and each Gluon notebook once, in the MXNet environment's
    # (`make notebooks` names the two tracks' folders); gluon/02 runs on every core
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_python(bin_dir, "python3.12", version_ok=False)
    _fake_python(bin_dir, "python3.11", version_ok=True)
    out = _make_n(bin_dir, tmp_path, target)
    main_py, mxnet_py = tmp_path / "no-main-env/bin/python", tmp_path / "no-mxnet-env/bin/python"
    runs = [line for line in out.replace("\\\n", " ").splitlines() if "notebooks/" in line]
    named = []
    for line in runs:
        for command in line.split(";"):
            if "-m pytest" not in command and "-m mptutor.notebooks" not in command:
                continue  # an echo, a message
            for word in command.split():
                if word.startswith("notebooks/") and word.endswith((".ipynb", "pytorch", "keras",
                                                                   "gluon")):
                    named.append((word, str(main_py) in command, str(mxnet_py) in command,
                                  "MKL_NUM_THREADS=1" in command))
    tracks = {d: sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks" / d).glob("*.ipynb"))
              for d in ("pytorch", "keras", "gluon")}

    def expand(word):
        return tracks.get(word.removeprefix("notebooks/"), [word])

    main = sorted(nb for word, in_main, _, _ in named if in_main for nb in expand(word))
    gluon = sorted(nb for word, _, in_mxnet, _ in named if in_mxnet for nb in expand(word))
    assert main == sorted(tracks["pytorch"] + tracks["keras"])
    assert gluon == tracks["gluon"]
    assert len(named) == sum(1 for _, in_main, in_mxnet, _ in named if in_main != in_mxnet)
    gluon02 = [one_thread for word, _, _, one_thread in named
               if word.startswith("notebooks/gluon/02-")]
    assert gluon02 in ([], [False])  # alone on every core where it is named on its own


@pytest.mark.parametrize("command", ["test", "run"])
def test_each_lane_waits_only_for_its_own_environment(tmp_path, command):
    # the MXNet environment is made in a third of the main one's time: its lane starts on it
    # alone, and only the part of it that runs main-environment notebooks waits for both
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    main_stamp, mxnet_stamp = tmp_path / "m/.installed", tmp_path / "x/.installed"
    args = [MAKE, "-p", "-n", "-C", str(ROOT), f"MAIN_VENV={main_stamp.parent}",
            f"MXNET_VENV={mxnet_stamp.parent}", "MXNET_PYTHON=/opt/py/bin/python3.11",
            f"{command}-lanes"]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=False).stdout
    prerequisites = {}
    for line in out.splitlines():
        name, colon, rest = line.partition(":")
        if colon and name.startswith(f"{command}-lane") and not rest.startswith("="):
            prerequisites[name] = rest.split()
    gluon_lane = "test-lane-mxnet" if command == "test" else "run-lane-gluon"
    assert prerequisites[f"{command}-lanes"] == [f"{command}-lane-main",
                                                 f"{command}-lane-after-gluon"]
    assert prerequisites[f"{command}-lane-main"] == [str(main_stamp)]
    assert prerequisites[gluon_lane] == [str(mxnet_stamp)]
    assert sorted(prerequisites[f"{command}-lane-after-gluon"]) == sorted(
        [gluon_lane, str(main_stamp)])
