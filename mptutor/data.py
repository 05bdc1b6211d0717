"""Image-folder datasets for the training notebooks: Caltech 101 and a small digits set.

Both are written as ``<train>/<class>/<image>`` and ``<test>/<class>/<image>`` folders, as
MXNet's ``ImageFolderDataset``, torchvision's ``ImageFolder`` and Keras'
``image_dataset_from_directory`` read them.

Where the files go: ``root`` when given, else ``$MPTUTOR_DATA_DIR``, else ``data/cache/`` of
the project checkout this package runs from, else pooch's per-user cache. Every folder is built
under a temporary name, marked ``mptutor-complete.json`` and renamed into place when complete:
a killed run leaves nothing a later run takes for finished.

Examples
--------
>>> from mptutor import data
>>> folders = data.digits_image_folder()  # doctest: +SKIP
>>> folders.num_classes, folders.num_train, folders.num_test  # doctest: +SKIP
(10, 1438, 359)
>>> caltech = data.caltech101()  # downloads 137 MB once  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from mptutor._checks import check_scalar, check_type

__all__ = ["DatasetError", "caltech101", "check_image_folder", "digits_image_folder"]

StrPath = str | os.PathLike[str]
_ENV_VAR = "MPTUTOR_DATA_DIR"
_MARKER = "mptutor-complete.json"
_IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")  # what ImageFolderDataset loads
_Plan = dict[str, tuple[list[str], list[str]]]  # {class: (train files, test files)}


class DatasetError(RuntimeError):
    """A dataset could not be downloaded, verified or unpacked; the message says what to do."""


@dataclass(frozen=True)
class DatasetFolders:
    """A train folder and a test folder, one sub-folder per class, and their image counts."""

    root: Path
    train: Path
    test: Path
    classes: tuple[str, ...]  # sorted: the label order of ImageFolderDataset
    train_counts: dict[str, int] = field(repr=False)
    test_counts: dict[str, int] = field(repr=False)

    @property
    def num_classes(self) -> int:
        """Return the number of classes."""
        return len(self.classes)

    @property
    def num_train(self) -> int:
        """Return the number of training images."""
        return sum(self.train_counts.values())

    @property
    def num_test(self) -> int:
        """Return the number of test images."""
        return sum(self.test_counts.values())

    def __repr__(self) -> str:
        return (
            f"DatasetFolders({self.num_classes} classes, {self.num_train} train and "
            f"{self.num_test} test images: train={str(self.train)!r}, test={str(self.test)!r})"
        )


# --------------------------------------------------------------------------------------------
# Where datasets live, and folders that are either complete or absent


def _checkout_cache() -> Path | None:
    """Return ``data/cache`` of the project checkout this package runs from, if any."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        return checkout / "data" / "cache"
    return None


def _data_dir(root: StrPath | None = None) -> Path:
    """Return ``root``, else ``$MPTUTOR_DATA_DIR``, else the checkout's cache, else pooch's."""
    if root is not None:
        return Path(check_type(root, "root", (str, os.PathLike), "a path")).expanduser()
    env = os.environ.get(_ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    checkout = _checkout_cache()
    if checkout is not None:
        return checkout
    import pooch

    return Path(pooch.os_cache("mptutor"))


def _make_root(root: StrPath | None) -> Path:
    """Create the data folder, or say how to choose a writable one."""
    path = _data_dir(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(
            f"cannot create the data folder {path}: {exc}. Pass root=... or set {_ENV_VAR} to a "
            "writable folder with room for the dataset, then run again."
        ) from exc
    return path


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """Read the marker of a complete folder; ``None`` when the folder is missing or incomplete."""
    try:
        info = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _write_marker(folder: Path, info: Mapping[str, Any]) -> None:
    """Write the marker that declares ``folder`` complete: the last file written into it."""
    text = json.dumps(dict(info), indent=1, sort_keys=True)
    (folder / _MARKER).write_text(text + "\n", encoding="utf-8")


def _complete_split(folder: Path, **expected: Any) -> DatasetFolders | None:
    """Return the finished split in ``folder`` if its marker holds ``expected``, else ``None``."""
    info = _read_marker(folder)
    if info is None or any(info.get(key) != value for key, value in expected.items()):
        return None
    try:
        train, test = folder / info["train"], folder / info["test"]
        train_counts = {str(k): int(v) for k, v in info["train_counts"].items()}
        test_counts = {str(k): int(v) for k, v in info["test_counts"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (train.is_dir() and test.is_dir()):
        return None
    classes = tuple(sorted(train_counts))
    return DatasetFolders(folder, train, test, classes, train_counts, test_counts)


@contextlib.contextmanager
def _building(dest: Path) -> Iterator[Path]:
    """Yield an empty folder next to an unfinished ``dest``, renamed to it if the block succeeds."""
    # What is at dest and killed runs' temporary folders are removed first; if a concurrent
    # run finishes dest first, its copy is kept and this one discarded.
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in [*dest.parent.glob(f".{dest.name}.partial-*"), dest]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
        else:
            stale.unlink(missing_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # the usual permissions, not a temporary folder's 0o700
        yield tmp
        try:
            os.rename(tmp, dest)
        except OSError:
            if _read_marker(dest) is None:  # not a finished copy from a concurrent run
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _say(message: str, progress: bool) -> None:
    """Print a status line on stderr when ``progress`` is on."""
    if progress:
        print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Image folders and their seeded split


def _class_images(path: StrPath) -> dict[str, list[str]]:
    """Check a folder of class sub-folders and list the image files of each class."""
    path = Path(check_type(path, "path", (str, os.PathLike), "a path (str or pathlib.Path)"))
    if not path.exists():
        raise FileNotFoundError(
            f"image folder {path} does not exist. Check the path; for the datasets of "
            f"mptutor.data, run the function that builds it again (it re-creates missing "
            f"folders), or set {_ENV_VAR} to where the data lives."
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
            f"({', '.join(_IMAGE_EXTENSIONS)}). If it was left half-built, delete {path} and "
            "run again."
        )
    files = {
        name: sorted(
            p.name
            for p in (path / name).iterdir()
            if not p.name.startswith(".")  # e.g. macOS "._name.jpg" resource forks
            and p.suffix.lower() in _IMAGE_EXTENSIONS
            and p.is_file()
        )
        for name in classes
    }
    empty = [name for name, names in files.items() if not names]
    if empty:
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise ValueError(
            f"image folder {path} has {len(empty)} class folder(s) with no images ({shown}); "
            f"images are files ending in {', '.join(_IMAGE_EXTENSIONS)}. If the folder was left "
            f"half-built, delete {path} and run again; otherwise remove the empty folders."
        )
    return files


def check_image_folder(path: StrPath) -> dict[str, int]:
    """Count the images (``.jpg``, ``.jpeg``, ``.png``, not hidden) of a folder's class sub-folders.

    Parameters
    ----------
    path : path-like
        A folder laid out as ``<class>/<image>``.

    Returns
    -------
    dict of str to int
        Number of images per class, classes in sorted order (the label order).

    Raises
    ------
    TypeError, FileNotFoundError, NotADirectoryError
        If ``path`` is not a path, does not exist, or is a file.
    ValueError
        If the folder has no class sub-folders, or a class sub-folder has no images.
    """
    return {name: len(names) for name, names in _class_images(path).items()}


def _check_test_per_class(test_per_class: Any) -> int | float:
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


def _plan_split(files: Mapping[str, list[str]], test_per_class: int | float, seed: int) -> _Plan:
    """Choose the test files of every class from a generator seeded with ``"<seed>/<class>"``."""
    plan: _Plan = {}
    for name in sorted(files):
        names = sorted(files[name])
        k = test_per_class
        if isinstance(test_per_class, float):
            k = min(max(1, round(len(names) * test_per_class)), len(names) - 1)
        if len(names) < 2 or k >= len(names):
            raise ValueError(
                f"class {name!r} has {len(names)} image(s): too few to put {k} in the test "
                "folder and keep at least one for training. Use a smaller test_per_class."
            )
        chosen = set(random.Random(f"{seed}/{name}").sample(names, int(k)))
        plan[name] = ([n for n in names if n not in chosen], [n for n in names if n in chosen])
    return plan


def _split_info(plan: _Plan, train: str, test: str) -> dict[str, Any]:
    """Return the marker entries of a split: its folders' names and image counts."""
    return {
        "train": train,
        "test": test,
        "train_counts": {name: len(tr) for name, (tr, _) in plan.items()},
        "test_counts": {name: len(te) for name, (_, te) in plan.items()},
    }


# --------------------------------------------------------------------------------------------
# Caltech 101


class _Archive(NamedTuple):
    """Where the Caltech 101 zip comes from, its checksum, and the image tarball inside it."""

    url: str
    known_hash: str
    fname: str = "caltech-101.zip"
    member: str = "caltech-101/101_ObjectCategories.tar.gz"
    folder: str = "101_ObjectCategories"
    page: str = "https://data.caltech.edu/records/mzrjq-6wc02"


# The official archive is CaltechDATA record mzrjq-6wc02 (doi:10.22002/D1.20086), 137 MB; its
# SHA-256 is the one TensorFlow Datasets lists (tensorflow_datasets/datasets/caltech101/
# checksums.tsv); torchvision lists its MD5, 3138e1922a9193bfa496528edbbc45d0.
_CALTECH101 = _Archive(
    url="https://data.caltech.edu/records/mzrjq-6wc02/files/caltech-101.zip?download=1",
    known_hash="sha256:331234750fc7f77520e50d9565e8b6907b03565e30320da1401130db08c61f91",
)


def _fetch(source: _Archive, root: Path, progress: bool) -> Path:
    """Download ``source`` into ``root`` with pooch, or reuse a copy that passes its checksum."""
    import pooch
    import requests

    by_hand = (
        f"download {source.fname} (137 MB) by hand from {source.page} and save it as "
        f"{root / source.fname} (it is checked against its SHA-256 before use)"
    )
    try:
        return Path(
            pooch.retrieve(
                source.url,
                known_hash=source.known_hash,
                fname=source.fname,
                path=root,
                progressbar=progress,
            )
        )
    except requests.exceptions.RequestException as exc:
        response = getattr(exc, "response", None)
        if response is not None:  # pooch leaves an error response (and its socket) open
            response.close()
        raise DatasetError(
            f"could not download {source.url}: {exc}. Check the network connection and run "
            f"again, or {by_hand}. Set {_ENV_VAR} to keep the data in another folder."
        ) from exc
    except ValueError as exc:
        if "does not match the known hash" not in str(exc):
            raise
        raise DatasetError(
            f"the download of {source.fname} from {source.url} failed its checksum check "
            f"(pooch: {exc}) The bad download was deleted (pooch keeps a file only when its "
            f"checksum matches), so no later run can use it. Run again to retry. If it fails "
            f"again, the file on the server has changed: {by_hand}, or report it."
        ) from exc


def _extract(archive: Path, source: _Archive, dest: Path, progress: bool) -> None:
    """Unpack the image tarball inside the zip ``archive`` into ``dest``, all or nothing."""
    import gzip
    import tarfile
    import zipfile
    import zlib

    damaged = (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error)
    again = "It was deleted: run again to download it afresh."
    _say(f"Extracting {archive} ...", progress)
    with _building(dest) as tmp:
        try:
            with zipfile.ZipFile(archive) as zf:
                if source.member not in zf.namelist():
                    archive.unlink()
                    raise DatasetError(
                        f"{archive} does not contain {source.member}, so it is not the expected "
                        f"archive (it holds {', '.join(zf.namelist()[:5]) or 'nothing'}). {again}"
                    )
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                with zf.open(source.member) as member:
                    with tarfile.open(fileobj=member, mode="r|gz") as tar:  # streamed
                        tar.extractall(tmp, **safe)  # type: ignore[arg-type]
        except damaged as exc:
            archive.unlink(missing_ok=True)
            raise DatasetError(
                f"the archive {archive} is damaged or incomplete and could not be extracted "
                f"({type(exc).__name__}: {exc}). {again} Nothing was extracted."
            ) from exc
        except OSError as exc:
            raise DatasetError(
                f"could not extract {archive} into {dest.parent}: {exc}. Nothing was kept. Free "
                f"disk space (about 300 MB are needed) or set {_ENV_VAR} to a folder with room, "
                "then run again."
            ) from exc
        if not (tmp / source.folder).is_dir():
            archive.unlink(missing_ok=True)
            raise DatasetError(
                f"the tarball {source.member} inside {archive} has no {source.folder}/ folder, so "
                f"it is not the expected archive. {again}"
            )
        counts = check_image_folder(tmp / source.folder)
        _write_marker(tmp, {"archive_hash": source.known_hash, "counts": counts})


def caltech101(
    root: StrPath | None = None,
    test_per_class: int | float = 10,
    seed: int = 0,
    progress: bool = True,
) -> DatasetFolders:
    """Download Caltech 101 and split it into train and test image folders.

    The first call downloads ``caltech-101.zip`` (137 MB) with pooch, checks its SHA-256,
    extracts about 9,100 JPEG files in 102 class folders (``BACKGROUND_Google`` kept, as the
    MXNet Gluon tutorials keep it) and splits every class. Later calls return the folders at
    once; another ``seed`` or ``test_per_class`` only redoes the split (hard links).

    Parameters
    ----------
    root : path-like, optional
        Data folder (default: see the module): ``root/caltech-101.zip``, ``root/caltech101``.
    test_per_class : int or float, default 10
        Test images per class (the smallest have 31), or a fraction of each class.
    seed : int, default 0
        Seed of the split, the same on every machine.
    progress : bool, default True
        Show a download progress bar and status lines on stderr.

    Returns
    -------
    DatasetFolders
        ``train`` (``.../101_ObjectCategories``) and ``test``
        (``.../101_ObjectCategories_test``), the folder names of the MXNet Gluon tutorials.

    Raises
    ------
    DatasetError
        If the download fails or does not match its checksum, or the archive cannot be
        extracted (then deleted, for the next run); the message says what to do.
    TypeError, ValueError
        For a bad argument (``test_per_class`` an int of at least 1 or a float in (0, 1)), before
        any download.
    """
    test_per_class = _check_test_per_class(test_per_class)
    seed = check_scalar(seed, "seed", int)
    check_type(progress, "progress", bool, "True or False")
    source = _CALTECH101
    root_path = _make_root(root)
    base = root_path / "caltech101"
    split_dir = base / f"split-seed{seed}-test{test_per_class:g}"
    done = _complete_split(split_dir, archive_hash=source.known_hash)
    if done is not None:
        return done
    extracted = base / "extracted"
    if (_read_marker(extracted) or {}).get("archive_hash") != source.known_hash:
        _extract(_fetch(source, root_path, progress), source, extracted, progress)
    _say(f"Splitting Caltech 101 into {split_dir} ...", progress)
    images = extracted / source.folder
    plan = _plan_split(_class_images(images), test_per_class, seed)
    names = ("101_ObjectCategories", "101_ObjectCategories_test")
    with _building(split_dir) as tmp:
        for name, (train_files, test_files) in plan.items():
            for folder, files in zip(names, (train_files, test_files), strict=True):
                (tmp / folder / name).mkdir(parents=True)
                for file in files:
                    try:  # a hard link takes no extra disk space
                        os.link(images / name / file, tmp / folder / name / file)
                    except OSError:
                        shutil.copy2(images / name / file, tmp / folder / name / file)
        info = {"archive_hash": source.known_hash, "dataset": "caltech101", "seed": seed}
        _write_marker(tmp, {**info, "test_per_class": test_per_class, **_split_info(plan, *names)})
    return _complete_split(split_dir)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# scikit-learn's digits


def digits_image_folder(
    root: StrPath | None = None,
    size: int = 32,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> DatasetFolders:
    """Write scikit-learn's digits as RGB PNG files in train and test image folders.

    The 1,797 8x8 grey images of :func:`sklearn.datasets.load_digits` (no download), scaled to
    0..255, enlarged to ``size`` x ``size`` (bilinear), as ``train/<digit>/<index>.png`` and
    ``test/...``; the same arguments give the same bytes; a complete folder is reused.

    Parameters
    ----------
    root : path-like, optional
        Data folder (default: see the module), for ``digits-<size>px-seed<seed>-test<...>``.
    size : int, default 32
        Edge length of the images in pixels (at least 8).
    seed : int, default 0
        Seed of the per-class split.
    test_fraction : float, default 0.2
        Fraction of each class put in the test folder (rounded per class).

    Returns
    -------
    DatasetFolders
        Ten classes, ``"0"`` to ``"9"``.

    Raises
    ------
    TypeError, ValueError
        If ``size`` or ``seed`` is not an int, ``size`` below 8, ``test_fraction`` not a number
        in (0, 1), or ``root`` not a path.
    """
    size = check_scalar(size, "size (the image edge in pixels)", int, min_val=8)
    seed = check_scalar(seed, "seed", int)
    test_fraction = check_scalar(
        test_fraction,
        "test_fraction (the test share of each class)",
        float,
        min_val=0,
        max_val=1,
        include_boundaries="neither",
    )
    dest = _make_root(root) / f"digits-{size}px-seed{seed}-test{test_fraction:g}"
    done = _complete_split(dest)
    if done is not None:
        return done

    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.rint(np.asarray(digits.images, dtype=np.float64) * (255.0 / 16.0))
    pixels = np.clip(pixels, 0, 255).astype(np.uint8)
    labels = np.asarray(digits.target)
    files = {
        str(label): [f"{i:04d}.png" for i in np.flatnonzero(labels == label)]
        for label in np.unique(labels)
    }
    plan = _plan_split(files, test_fraction, seed)
    with _building(dest) as tmp:
        for name, (train_files, test_files) in plan.items():
            for split, names in (("train", train_files), ("test", test_files)):
                folder = tmp / split / name
                folder.mkdir(parents=True)
                for file in names:
                    grey = pixels[int(file[:4])]
                    rgb = Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2))
                    rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
                    rgb.save(folder / file, format="PNG")
        info = {"dataset": "sklearn-digits", "size": size, "seed": seed}
        info |= {"test_fraction": test_fraction, **_split_info(plan, "train", "test")}
        _write_marker(tmp, info)
    return _complete_split(dest)  # type: ignore[return-value]
