import os
import stat

import pytest

from mptutor.atomic import atomic_dir, atomic_dirs, atomic_path, write_text


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


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_atomic_dir_appears_complete_with_normal_permissions(tmp_path):
    target = tmp_path / "sub" / "built"
    with atomic_dir(target) as tmp:
        assert tmp.parent == target.parent and not target.exists()
        (tmp / "a.txt").write_text("done")
    assert (target / "a.txt").read_text() == "done"
    assert _names(target.parent) == ["built"]  # no temporary folder left
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o777 & ~mask


def test_atomic_dir_failure_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="crash"), atomic_dir(tmp_path / "built") as tmp:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("crash")
    assert _names(tmp_path) == []


def test_atomic_dir_refuses_to_replace_a_folder_that_appeared(tmp_path):
    target = tmp_path / "built"
    with pytest.raises(FileExistsError, match="appeared while it was being built"):
        with atomic_dir(target) as tmp:
            (tmp / "new.txt").write_text("new")
            target.mkdir()
            (target / "other.txt").write_text("a concurrent run's")
    assert _names(target) == ["other.txt"] and _names(tmp_path) == ["built"]


def test_atomic_dir_clears_leftovers_of_killed_runs(tmp_path):
    target = tmp_path / "built"
    (tmp_path / ".built.partial-killed").mkdir()
    (tmp_path / ".other.partial-x").mkdir()  # another folder's: kept
    target.mkdir()
    (target / "unfinished.txt").write_text("")
    with atomic_dir(target, clear_leftovers=True) as tmp:
        assert not target.exists()
        (tmp / "a.txt").write_text("")
    assert _names(tmp_path) == [".other.partial-x", "built"] and _names(target) == ["a.txt"]


def test_atomic_dirs_puts_every_folder_in_place_or_none(tmp_path):
    train, test = tmp_path / "a" / "train", tmp_path / "b" / "test"
    with atomic_dirs([train, test]) as (tr, te):
        (tr / "x").write_text("1")
        (te / "y").write_text("2")
    assert _names(train) == ["x"] and _names(test) == ["y"]

    train2, test2 = tmp_path / "a" / "train2", tmp_path / "b" / "test2"
    with pytest.raises(FileExistsError), atomic_dirs([train2, test2]) as (tr, te):
        (tr / "x").write_text("1")
        (test2 / "in-the-way").mkdir(parents=True)  # the second rename fails
    assert not train2.exists()  # the first rename was undone
    assert _names(tmp_path / "a") == ["train"] and _names(test2) == ["in-the-way"]


def test_write_text_refuses_a_folder_and_non_text(tmp_path):
    (tmp_path / "folder").mkdir()
    for target in (tmp_path / "folder", ""):
        with pytest.raises(IsADirectoryError, match="folder"):
            write_text(target, "x")
    for bad in (5, b"x", None):
        with pytest.raises(TypeError, match="text must be a str"):
            write_text(tmp_path / "f.txt", bad)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]  # no temporary left


def test_atomic_dirs_refuses_one_path_and_the_same_path_twice(tmp_path):
    for bad in (str(tmp_path / "abc"), tmp_path / "abc"):
        with pytest.raises(TypeError, match="atomic_dir"):
            with atomic_dirs(bad):
                pass
    with pytest.raises(ValueError, match="twice"):
        with atomic_dirs([tmp_path / "x", tmp_path / "y" / ".." / "x"]):
            pass
    assert list(tmp_path.iterdir()) == []


def test_paths_that_are_not_paths_are_named():
    with pytest.raises(TypeError, match="path must be a path"):
        write_text(None, "x")
    with pytest.raises(TypeError, match="paths' entries"):
        with atomic_dirs([None]):
            pass
