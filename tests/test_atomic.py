import os
import stat

import pytest

from mptutor._atomic import atomic_path, write_text


def test_write_text_creates_folders_and_normal_permissions(tmp_path):
    target = tmp_path / "a" / "b.txt"
    write_text(target, "hello")
    assert target.read_text() == "hello"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    assert [p.name for p in target.parent.iterdir()] == ["b.txt"]


def test_failure_keeps_the_old_file_and_leaves_nothing(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="crash"), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("crash")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_write_text_refuses_a_folder_and_non_text(tmp_path):
    (tmp_path / "folder").mkdir()
    for target in (tmp_path / "folder", ""):
        with pytest.raises(IsADirectoryError, match="folder"):
            write_text(target, "x")
    for bad in (5, b"x", None):
        with pytest.raises(TypeError, match="text must be a str"):
            write_text(tmp_path / "f.txt", bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # no temporary left
