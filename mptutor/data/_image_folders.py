"""Image folders: check a ``<class>/<image>`` folder, and split one into train and test."""

from __future__ import annotations

import numbers
import os
import random
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mptutor.atomic import atomic_dirs
from mptutor._checks import check_scalar, check_type
from mptutor.data._store import (
    ENV_VAR,
    DatasetFolders,
    StrPath,
    building,
    check_path,
    check_seed,
    finished_split,
    write_marker,
)

#: File extensions counted as images (case-insensitive): those ``ImageFolderDataset`` loads.
IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png")

#: A split: ``{class: (train_files, test_files)}``.
Plan = dict[str, tuple[list[str], list[str]]]


def _is_image(path: Path) -> bool:
    hidden = path.name.startswith(".")  # e.g. macOS "._name.jpg" resource forks
    return not hidden and path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()


def _images(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if _is_image(p))


def _class_images(path: StrPath) -> dict[str, list[str]]:
    """Check a folder of class sub-folders and list the image files of each class."""
    path = Path(check_path(path, "path"))
    if not path.exists():
        raise FileNotFoundError(
            f"image folder {path} does not exist. Check the path; for the datasets of "
            f"mptutor.data, run the function that builds it again (it re-creates missing "
            f"folders), or set {ENV_VAR} to where the data lives."
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"{path} is a file, not an image folder: expected a folder with one sub-folder of "
            "images per class. Point at the folder, or delete the file and run again."
        )
    classes = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise ValueError(
            f"image folder {path} has no class sub-folders: expected <class>/<image> files "
            f"({', '.join(IMAGE_EXTENSIONS)}). If it was left half-built, delete {path} and "
            "run again."
        )
    files = {name: _images(path / name) for name in classes}
    empty = [name for name, names in files.items() if not names]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise ValueError(
            f"image folder {path} has {len(empty)} class folder(s) with no images ({shown}); "
            f"images are files ending in {', '.join(IMAGE_EXTENSIONS)}. If the folder was left "
            f"half-built, delete {path} and run again; otherwise remove the empty folders."
        )
    return files


def check_image_folder(path: StrPath) -> dict[str, int]:
    """Check that a folder holds images in class sub-folders, and count them.

    Parameters
    ----------
    path : path-like
        A folder laid out as ``<class>/<image>``, as ``ImageFolderDataset`` reads it.

    Returns
    -------
    dict of str to int
        Number of images per class, classes in sorted order (the label order).

    Raises
    ------
    TypeError
        If ``path`` is not a path.
    FileNotFoundError
        If the folder does not exist.
    NotADirectoryError
        If the path is a file.
    ValueError
        If the folder has no class sub-folders, or a class sub-folder has no images. Hidden
        files and folders (``.name``) and files other than ``.jpg``, ``.jpeg`` and ``.png`` are
        ignored.
    """
    return {name: len(names) for name, names in _class_images(path).items()}


def check_test_per_class(test_per_class: Any) -> int | float:
    """Return a test size per class as an ``int`` (images, >= 1) or a ``float`` in (0, 1)."""
    if isinstance(test_per_class, numbers.Integral) and not isinstance(test_per_class, bool):
        return check_scalar(test_per_class, "test_per_class (images per class)", int, min_val=1)
    return check_scalar(
        test_per_class,
        "test_per_class (a fraction of each class, or an int of images per class)",
        float,
        min_val=0,
        max_val=1,
        include_boundaries="neither",
    )


def check_exclude(exclude: Any) -> list[str]:
    """Check the classes to leave out: a list of names, not one name (its letters)."""
    if isinstance(exclude, (str, bytes)) or not isinstance(exclude, Iterable):
        raise TypeError(f"exclude must be a list of class names, e.g. ['cat'], got {exclude!r}")
    names = list(exclude)
    for name in names:
        check_type(name, "exclude's entries", str, "class names (str)")
    return names


def split_counts(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """Images per class of a split: the train counts and the test counts."""
    return (
        {name: len(tr) for name, (tr, _) in plan.items()},
        {name: len(te) for name, (_, te) in plan.items()},
    )


def split_info(names: tuple[str, str], plan: Plan) -> dict[str, Any]:
    """Marker entries of a split: the names of the train and test folders, the counts."""
    train_counts, test_counts = split_counts(plan)
    return {
        "train": names[0],
        "test": names[1],
        "train_counts": train_counts,
        "test_counts": test_counts,
    }


def _num_test(name: str, available: int, test_per_class: int | float) -> int:
    if isinstance(test_per_class, float):
        k = min(max(1, round(available * test_per_class)), available - 1)
    else:
        k = test_per_class
    if available < 2 or k >= available:
        raise ValueError(
            f"class {name!r} has {available} image(s): too few to put {k} in the test folder and "
            "keep at least one for training. Use a smaller test_per_class, or exclude the class."
        )
    return k


def plan_split(files: Mapping[str, list[str]], test_per_class: int | float, seed: int) -> Plan:
    """Choose the test files of every class: ``{class: (train_files, test_files)}``.

    Each class draws from its own generator seeded with ``"<seed>/<class>"``, so a class's split
    depends only on the seed, the class name and its sorted file names.
    """
    plan: Plan = {}
    for name in sorted(files):
        names = sorted(files[name])
        k = _num_test(name, len(names), test_per_class)
        chosen = set(random.Random(f"{seed}/{name}").sample(names, k))
        plan[name] = ([n for n in names if n not in chosen], [n for n in names if n in chosen])
    return plan


def _place(src: Path, dst: Path) -> None:
    """Hard-link ``src`` to ``dst`` (no extra disk space), or copy it where links fail."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _write_split(src: Path, train: Path, test: Path, plan: Plan) -> None:
    for name, (train_files, test_files) in plan.items():
        for folder, names in ((train, train_files), (test, test_files)):
            (folder / name).mkdir(parents=True)
            for file in names:
                _place(src / name / file, folder / name / file)


def _plan_folder(src: Path, test_per_class: int | float, seed: int, exclude: Iterable[str]) -> Plan:
    files = _class_images(src)
    excluded = set(exclude)
    kept = {name: names for name, names in files.items() if name not in excluded}
    if not kept:
        raise ValueError(f"every class of {src} is excluded ({sorted(excluded)}): nothing to split")
    return plan_split(kept, test_per_class, seed)


def split_image_folder(
    src: StrPath,
    train_dir: StrPath,
    test_dir: StrPath,
    test_per_class: int | float = 0.2,
    seed: int = 0,
    *,
    exclude: Iterable[str] = (),
) -> DatasetFolders:
    """Split a folder of class sub-folders into a train folder and a test folder.

    Every class appears in both folders and no image is in both. The split is deterministic:
    the same seed, class names and file names give the same split on every machine. Images are
    hard-linked from ``src`` where the file system allows it (no extra disk space), else copied.

    Parameters
    ----------
    src : path-like
        Folder laid out as ``<class>/<image>``, see :func:`check_image_folder`.
    train_dir, test_dir : path-like
        Folders to create; they must not exist yet.
    test_per_class : int or float, default 0.2
        Test images per class: a number (``10``) or a fraction of each class (``0.2``, rounded,
        at least 1, and at least 1 image is left for training).
    seed : int, default 0
        Seed of the random choice.
    exclude : iterable of str, optional
        Class folders to leave out of both splits.

    Returns
    -------
    DatasetFolders
        The two folders and the image counts.

    Raises
    ------
    FileExistsError
        If ``train_dir`` or ``test_dir`` exists.
    FileNotFoundError, NotADirectoryError, ValueError
        If ``src`` is not a usable image folder (see :func:`check_image_folder`), or a class has
        too few images for the requested test size.
    TypeError
        If a path is not a path, ``test_per_class`` is not a number, ``seed`` not an int, or
        ``exclude`` not a list of class names.
    ValueError
        Also if ``train_dir`` and ``test_dir`` are one folder, or one of them and ``src`` lie
        one inside the other.

    Notes
    -----
    Both folders are built in temporary folders next to them and renamed into place at the
    end (:func:`mptutor.atomic.atomic_dirs`), so a failure leaves neither behind.
    """
    src, train_dir, test_dir = (
        Path(check_path(p, name))
        for p, name in ((src, "src"), (train_dir, "train_dir"), (test_dir, "test_dir"))
    )
    test_per_class = check_test_per_class(test_per_class)
    seed = check_seed(seed)
    exclude = check_exclude(exclude)
    here, train, test = src.resolve(), train_dir.resolve(), test_dir.resolve()
    if train == test:
        raise ValueError(f"train_dir and test_dir are the same folder, {train}")
    for name, target in (("train_dir", train), ("test_dir", test)):
        if target.is_relative_to(here) or here.is_relative_to(target):
            raise ValueError(
                f"{name} {target} and src {here} lie one inside the other; choose a folder "
                "outside src, so that the split does not mix with its source"
            )
    for target in (train_dir, test_dir):
        if target.exists():
            raise FileExistsError(
                f"{target} already exists; delete it or choose another folder for the split"
            )
    plan = _plan_folder(src, test_per_class, seed, exclude)
    with atomic_dirs([train_dir, test_dir]) as (train_tmp, test_tmp):
        _write_split(src, train_tmp, test_tmp, plan)
    train_counts, test_counts = split_counts(plan)
    return DatasetFolders(
        root=Path(os.path.commonpath([train_dir.resolve(), test_dir.resolve()])),
        train=train_dir,
        test=test_dir,
        classes=tuple(plan),
        train_counts=train_counts,
        test_counts=test_counts,
    )


def build_split(
    src: Path,
    dest: Path,
    names: tuple[str, str],
    test_per_class: int | float,
    seed: int,
    exclude: Iterable[str],
    extra: Mapping[str, Any],
) -> DatasetFolders:
    """Split ``src`` into ``dest/<names[0]>`` and ``dest/<names[1]>`` atomically, with a marker."""
    plan = _plan_folder(src, test_per_class, seed, exclude)
    with building(dest) as tmp:
        _write_split(src, tmp / names[0], tmp / names[1], plan)
        info = {**extra, "seed": seed, "test_per_class": test_per_class}
        write_marker(tmp, {**info, **split_info(names, plan)})
    return finished_split(dest)
