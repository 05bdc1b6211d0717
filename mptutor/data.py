"""Image-folder datasets for the training notebooks: Caltech 101 and a small digits set.

Both datasets are written as two folders of class sub-folders, the layout that
``mxnet.gluon.data.vision.ImageFolderDataset`` (and torchvision's ``ImageFolder``, and Keras'
``image_dataset_from_directory``) read::

    <train>/<class>/<image>     <test>/<class>/<image>

:func:`caltech101`
    The Caltech 101 archive from CaltechDATA, downloaded with :mod:`pooch` (checked against its
    published SHA-256), extracted, and split per class into ``101_ObjectCategories`` (train)
    and ``101_ObjectCategories_test`` (test), the folder names the MXNet Gluon tutorials use.
:func:`digits_image_folder`
    scikit-learn's bundled 8x8 digits (1,797 images, 10 classes, no download) rendered as RGB
    PNG files: a real dataset small enough for CPU runs and CI.

Where the files go: ``root`` when given, else the folder named by the environment variable
``MPTUTOR_DATA_DIR``, else ``data/cache/`` of the project checkout (git-ignored) when this
package runs from one, else pooch's per-user cache folder (``pooch.os_cache("mptutor")``).

Every folder is built in a temporary sibling (``.<name>.partial-*``) and renamed into place
only when complete, with a ``mptutor-complete.json`` marker inside. A failed or interrupted
run therefore leaves nothing that a later run takes for finished: the later run removes the
leftovers and does the work again. Run one preparation of a given folder at a time.

Examples
--------
>>> from mptutor import data
>>> folders = data.digits_image_folder()  # doctest: +SKIP
>>> folders.num_classes, folders.num_train, folders.num_test  # doctest: +SKIP
(10, 1438, 359)
>>> caltech = data.caltech101()  # downloads 137 MB once  # doctest: +SKIP
>>> from mxnet.gluon.data.vision import ImageFolderDataset  # doctest: +SKIP
>>> train = ImageFolderDataset(str(caltech.train))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "ArchiveSource",
    "CALTECH101",
    "CALTECH101_BACKGROUND",
    "DatasetError",
    "DatasetFolders",
    "ENV_VAR",
    "IMAGE_EXTENSIONS",
    "MARKER",
    "caltech101",
    "check_image_folder",
    "data_dir",
    "digits_image_folder",
    "split_image_folder",
]

StrPath = str | os.PathLike[str]

#: Environment variable that overrides the default data folder.
ENV_VAR = "MPTUTOR_DATA_DIR"

#: File extensions counted as images (case-insensitive): those ``ImageFolderDataset`` loads.
IMAGE_EXTENSIONS: tuple[str, ...] = (".jpg", ".jpeg", ".png")

#: Name of the marker file written last into every folder this module builds.
MARKER = "mptutor-complete.json"

_MARKER_FORMAT = 1
_CHUNK = 1 << 20


class DatasetError(RuntimeError):
    """A dataset could not be downloaded, verified or unpacked; the message says what to do."""


@dataclass(frozen=True)
class ArchiveSource:
    """Where a zip archive that wraps an image tarball is downloaded from, and how it is checked.

    Attributes
    ----------
    url : str
        Download address.
    known_hash : str
        Checksum of the whole archive in pooch's ``"<algorithm>:<hex digest>"`` form, e.g.
        ``"sha256:..."`` (``"md5:..."`` is accepted too).
    fname : str
        File name of the archive in the data folder.
    member : str
        Path, inside the zip, of the ``.tar.gz`` that holds the images.
    member_hash : str or None
        Checksum of ``member`` in the same form, checked after it is read from the zip; ``None``
        skips this second check.
    folder : str
        Top-level folder of the tarball, holding one sub-folder per class.
    size : int or None
        Archive size in bytes, only for messages.
    page : str
        Web page to download the archive from by hand.
    """

    url: str
    known_hash: str
    fname: str
    member: str
    member_hash: str | None
    folder: str
    size: int | None = None
    page: str = ""


# The official Caltech 101 archive is CaltechDATA record mzrjq-6wc02 (doi:10.22002/D1.20086);
# the old www.vision.caltech.edu download is gone. It is a zip holding
# caltech-101/101_ObjectCategories.tar.gz (the images), caltech-101/Annotations.tar and
# caltech-101/show_annotation.m.
#
# URL, size and SHA-256 of the zip, and size and SHA-256 of the inner tarball, come from
# TensorFlow Datasets: repository tensorflow/datasets, file
# tensorflow_datasets/datasets/caltech101/checksums.tsv (commit 46e70c83ca97), which lists
#   .../caltech-101.zip?download=1  137414764  331234750fc7...08c61f91  caltech-101.zip
#   (Google Drive copy of 101_ObjectCategories.tar.gz)  131740031  af6ece2f339...6430f9926
# The same archive has MD5 3138e1922a9193bfa496528edbbc45d0 in torchvision
# (pytorch/vision, torchvision/datasets/caltech.py, since pull request #9205), and the inner
# tarball's SHA-256 af6ece2f... also appears in torchvision's prototype Caltech101 dataset.
#: The official Caltech 101 archive (CaltechDATA record mzrjq-6wc02, 137 MB).
CALTECH101 = ArchiveSource(
    url="https://data.caltech.edu/records/mzrjq-6wc02/files/caltech-101.zip?download=1",
    known_hash="sha256:331234750fc7f77520e50d9565e8b6907b03565e30320da1401130db08c61f91",
    fname="caltech-101.zip",
    member="caltech-101/101_ObjectCategories.tar.gz",
    member_hash="sha256:af6ece2f339791ca20f855943d8b55dd60892c0a25105fcd631ee3d6430f9926",
    folder="101_ObjectCategories",
    size=137_414_764,
    page="https://data.caltech.edu/records/mzrjq-6wc02",
)

#: Caltech 101's clutter class: background pictures, not an object category.
CALTECH101_BACKGROUND = "BACKGROUND_Google"


@dataclass(frozen=True)
class DatasetFolders:
    """A dataset as a train folder and a test folder, each with one sub-folder per class.

    Attributes
    ----------
    root : pathlib.Path
        Folder that holds ``train`` and ``test``.
    train : pathlib.Path
        Training images, ``train/<class>/<image>``.
    test : pathlib.Path
        Test images, ``test/<class>/<image>``.
    classes : tuple of str
        Class names in sorted order: the label order of ``ImageFolderDataset``.
    train_counts : dict of str to int
        Number of training images per class.
    test_counts : dict of str to int
        Number of test images per class.
    """

    root: Path
    train: Path
    test: Path
    classes: tuple[str, ...]
    train_counts: dict[str, int] = field(repr=False)
    test_counts: dict[str, int] = field(repr=False)

    @property
    def num_classes(self) -> int:
        """Number of classes.

        Returns
        -------
        int
            ``len(classes)``.
        """
        return len(self.classes)

    @property
    def num_train(self) -> int:
        """Number of training images.

        Returns
        -------
        int
            Sum of ``train_counts``.
        """
        return sum(self.train_counts.values())

    @property
    def num_test(self) -> int:
        """Number of test images.

        Returns
        -------
        int
            Sum of ``test_counts``.
        """
        return sum(self.test_counts.values())

    def __repr__(self) -> str:
        return (
            f"DatasetFolders({self.num_classes} classes, {self.num_train} train and "
            f"{self.num_test} test images: train={str(self.train)!r}, test={str(self.test)!r})"
        )


# ---------------------------------------------------------------------------------------------
# Where the data goes


def _checkout_cache() -> Path | None:
    """``data/cache`` of the project checkout this module runs from, if it runs from one."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        return checkout / "data" / "cache"
    return None


def data_dir(root: StrPath | None = None) -> Path:
    """Folder that datasets are downloaded to and built in.

    Parameters
    ----------
    root : path-like, optional
        Use this folder.

    Returns
    -------
    pathlib.Path
        ``root`` if given; else ``$MPTUTOR_DATA_DIR`` if set and not empty; else ``data/cache``
        of the project checkout when this package runs from one; else
        ``pooch.os_cache("mptutor")`` (e.g. ``~/.cache/mptutor`` on Linux). The folder is not
        created here.
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    checkout = _checkout_cache()
    if checkout is not None:
        return checkout
    import pooch

    return Path(pooch.os_cache("mptutor"))


def _make_root(root: StrPath | None) -> Path:
    path = data_dir(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(
            f"cannot create the data folder {path}: {exc}. Pass root=... or set {ENV_VAR} to a "
            "writable folder with room for the dataset, then run again."
        ) from exc
    return path


# ---------------------------------------------------------------------------------------------
# Folders built atomically, with a completion marker


def _read_marker(folder: Path) -> dict[str, Any] | None:
    """Read the marker of a complete folder; None when the folder is missing or incomplete."""
    try:
        info = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("format") != _MARKER_FORMAT:
        return None
    return info


def _write_marker(folder: Path, info: Mapping[str, Any]) -> None:
    text = json.dumps({"format": _MARKER_FORMAT, **info}, indent=1, sort_keys=True)
    (folder / MARKER).write_text(text + "\n", encoding="utf-8")


def _partials(dest: Path) -> list[Path]:
    return sorted(dest.parent.glob(f".{dest.name}.partial-*"))


@contextmanager
def _building(dest: Path) -> Iterator[Path]:
    """Yield an empty temporary sibling of ``dest``; rename it to ``dest`` if the block succeeds.

    Leftovers of earlier interrupted runs (partial siblings, or a ``dest`` without a marker)
    are removed first. The temporary folder is removed whatever happens.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in _partials(dest):
        shutil.rmtree(stale, ignore_errors=True)
    if dest.exists() or dest.is_symlink():
        _remove(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, dest)
        except OSError:
            if _read_marker(dest) is None:  # not a finished copy from a concurrent run
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _folders_from_marker(folder: Path, info: Mapping[str, Any]) -> DatasetFolders | None:
    try:
        train = folder / info["train"]
        test = folder / info["test"]
        train_counts = {str(k): int(v) for k, v in info["train_counts"].items()}
        test_counts = {str(k): int(v) for k, v in info["test_counts"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not (train.is_dir() and test.is_dir()):
        return None
    return DatasetFolders(
        root=folder,
        train=train,
        test=test,
        classes=tuple(sorted(train_counts)),
        train_counts=train_counts,
        test_counts=test_counts,
    )


def _say(message: str, progress: bool) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Image folders: check and split


def _is_image(path: Path) -> bool:
    hidden = path.name.startswith(".")  # e.g. macOS "._name.jpg" resource forks
    return not hidden and path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()


def _images(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if _is_image(p))


def _class_images(path: Path) -> dict[str, list[str]]:
    """Check a folder of class sub-folders and list the image files of each class."""
    path = Path(path)
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
    FileNotFoundError
        If the folder does not exist.
    NotADirectoryError
        If the path is a file.
    ValueError
        If the folder has no class sub-folders, or a class sub-folder has no images. Hidden
        files and folders (``.name``) and files other than ``.jpg``, ``.jpeg`` and ``.png`` are
        ignored.
    """
    return {name: len(names) for name, names in _class_images(Path(path)).items()}


def _validate_test_per_class(test_per_class: int | float) -> None:
    if isinstance(test_per_class, bool) or not isinstance(test_per_class, int | float):
        raise TypeError(
            f"test_per_class must be an int (images per class) or a float in (0, 1) (fraction "
            f"per class), not {test_per_class!r}"
        )
    if isinstance(test_per_class, int) and test_per_class < 1:
        raise ValueError(f"test_per_class={test_per_class}: put at least 1 image per class in test")
    if isinstance(test_per_class, float) and not 0.0 < test_per_class < 1.0:
        raise ValueError(
            f"test_per_class={test_per_class}: a fraction must lie strictly between 0 and 1; "
            "pass an int for a number of images per class"
        )


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


def _plan_split(
    files: Mapping[str, list[str]], test_per_class: int | float, seed: int
) -> dict[str, tuple[list[str], list[str]]]:
    """Choose the test files of every class: ``{class: (train_files, test_files)}``.

    Each class draws from its own generator seeded with ``"<seed>/<class>"``, so a class's split
    depends only on the seed, the class name and its sorted file names.
    """
    plan: dict[str, tuple[list[str], list[str]]] = {}
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


def _write_split(
    src: Path, train: Path, test: Path, plan: Mapping[str, tuple[list[str], list[str]]]
) -> None:
    for name, (train_files, test_files) in plan.items():
        for folder, names in ((train, train_files), (test, test_files)):
            (folder / name).mkdir(parents=True)
            for file in names:
                _place(src / name / file, folder / name / file)


def _select(files: dict[str, list[str]], exclude: Iterable[str], src: Path) -> dict[str, list[str]]:
    excluded = set(exclude)
    kept = {name: names for name, names in files.items() if name not in excluded}
    if not kept:
        raise ValueError(f"every class of {src} is excluded ({sorted(excluded)}): nothing to split")
    return kept


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

    Notes
    -----
    Both folders are built in a temporary folder next to ``train_dir`` and renamed into place
    at the end, so a failure leaves neither behind.
    """
    src, train_dir, test_dir = Path(src), Path(train_dir), Path(test_dir)
    _validate_test_per_class(test_per_class)
    for target in (train_dir, test_dir):
        if target.exists():
            raise FileExistsError(
                f"{target} already exists; delete it or choose another folder for the split"
            )
    plan = _plan_split(_select(_class_images(src), exclude, src), test_per_class, seed)
    train_dir.parent.mkdir(parents=True, exist_ok=True)
    test_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{train_dir.name}.partial-", dir=train_dir.parent))
    try:
        _write_split(src, tmp / "train", tmp / "test", plan)
        os.rename(tmp / "train", train_dir)
        try:
            os.rename(tmp / "test", test_dir)
        except OSError:
            os.rename(train_dir, tmp / "train")
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    common = Path(os.path.commonpath([train_dir.resolve(), test_dir.resolve()]))
    return DatasetFolders(
        root=common,
        train=train_dir,
        test=test_dir,
        classes=tuple(plan),
        train_counts={name: len(tr) for name, (tr, _) in plan.items()},
        test_counts={name: len(te) for name, (_, te) in plan.items()},
    )


def _build_split(
    src: Path,
    dest: Path,
    names: tuple[str, str],
    test_per_class: int | float,
    seed: int,
    exclude: Iterable[str],
    extra: Mapping[str, Any],
) -> DatasetFolders:
    """Split ``src`` into ``dest/<names[0]>`` and ``dest/<names[1]>`` atomically, with a marker."""
    plan = _plan_split(_select(_class_images(src), exclude, src), test_per_class, seed)
    train_counts = {name: len(tr) for name, (tr, _) in plan.items()}
    test_counts = {name: len(te) for name, (_, te) in plan.items()}
    with _building(dest) as tmp:
        _write_split(src, tmp / names[0], tmp / names[1], plan)
        _write_marker(
            tmp,
            {
                **extra,
                "train": names[0],
                "test": names[1],
                "seed": seed,
                "test_per_class": test_per_class,
                "train_counts": train_counts,
                "test_counts": test_counts,
            },
        )
    folders = _folders_from_marker(dest, _read_marker(dest) or {})
    if folders is None:  # pragma: no cover - only if the folder vanished right after the rename
        raise DatasetError(f"{dest} disappeared while it was being built; run again")
    return folders


# ---------------------------------------------------------------------------------------------
# Caltech 101


def _split_hash(known_hash: str) -> tuple[str, str]:
    alg, sep, digest = known_hash.partition(":")
    if not sep:
        alg, digest = "sha256", known_hash
    return alg.lower(), digest.lower()


def _fetch(source: ArchiveSource, root: Path, progress: bool) -> Path:
    """Download ``source`` into ``root`` with pooch (or reuse a copy that passes its checksum)."""
    import pooch
    import requests

    if progress and find_spec("tqdm") is None:
        raise ImportError("progress=True needs tqdm: `pip install tqdm`, or pass progress=False")
    target = root / source.fname
    size = f" ({source.size / 1e6:.0f} MB)" if source.size else ""
    by_hand = (
        f"download {source.fname}{size} by hand from {source.page or source.url} and save it as "
        f"{target} (it is checked against its {_split_hash(source.known_hash)[0].upper()} "
        "before use)"
    )
    try:
        path = pooch.retrieve(
            source.url,
            known_hash=source.known_hash,
            fname=source.fname,
            path=root,
            progressbar=progress,
        )
    except requests.exceptions.RequestException as exc:
        response = getattr(exc, "response", None)
        if response is not None:  # pooch leaves an error response (and its socket) open
            response.close()
        raise DatasetError(
            f"could not download {source.url}: {exc}. Check the network connection and run "
            f"again, or {by_hand}. Set {ENV_VAR} to keep the data in another folder."
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
    return Path(path)


def _copy_hashing(src: Any, dst: Path, alg: str) -> str:
    digest = hashlib.new(alg)
    with open(dst, "wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _extract(archive: Path, source: ArchiveSource, dest: Path, progress: bool) -> None:
    """Unpack the tarball inside the zip ``archive`` into ``dest/<source.folder>``, atomically."""
    import gzip
    import tarfile
    import zipfile
    import zlib

    bad_archive = (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error)
    again = "It was deleted: run again to download it afresh."
    _say(f"Extracting {archive} ...", progress)
    with _building(dest) as tmp:
        inner = tmp / PurePosixPath(source.member).name
        try:
            with zipfile.ZipFile(archive) as zf:
                try:
                    member = zf.open(source.member)
                except KeyError:
                    archive.unlink(missing_ok=True)
                    raise DatasetError(
                        f"{archive} does not contain {source.member}, so it is not the expected "
                        f"archive (it holds {', '.join(zf.namelist()[:5]) or 'nothing'}). {again}"
                    ) from None
                with member:
                    alg, expected = _split_hash(source.member_hash or "sha256:")
                    got = _copy_hashing(member, inner, alg)
            if source.member_hash and got != expected:
                archive.unlink(missing_ok=True)
                raise DatasetError(
                    f"{source.member} inside {archive} has {alg.upper()} {got}, not the "
                    f"published {expected}: the archive is not the expected one. {again}"
                )
            with tarfile.open(inner, "r:*") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(tmp, filter="data")
                else:  # pragma: no cover - Python < 3.10.12 lacks extraction filters
                    for info in tar.getmembers():
                        if info.name.startswith(("/", "..")) or "/../" in f"/{info.name}/":
                            raise tarfile.TarError(f"unsafe path in the tarball: {info.name}")
                    tar.extractall(tmp)
            inner.unlink()
        except bad_archive as exc:
            archive.unlink(missing_ok=True)
            raise DatasetError(
                f"the archive {archive} is damaged or incomplete and could not be extracted "
                f"({type(exc).__name__}: {exc}). {again} Nothing was extracted."
            ) from exc
        except OSError as exc:
            raise DatasetError(
                f"could not extract {archive} into {dest.parent}: {exc}. Nothing was kept. Free "
                f"disk space (about 300 MB are needed) or set {ENV_VAR} to a folder with room, "
                "then run again."
            ) from exc
        images = tmp / source.folder
        if not images.is_dir():
            archive.unlink(missing_ok=True)
            raise DatasetError(
                f"the tarball {source.member} inside {archive} has no {source.folder}/ folder, so "
                f"it is not the expected archive. {again}"
            )
        counts = check_image_folder(images)
        _write_marker(tmp, {"archive_hash": source.known_hash, "counts": counts})


def caltech101(
    root: StrPath | None = None,
    test_per_class: int | float = 10,
    seed: int = 0,
    progress: bool = True,
    *,
    keep_background: bool = True,
    source: ArchiveSource = CALTECH101,
) -> DatasetFolders:
    """Download Caltech 101 and split it into train and test image folders.

    The first call downloads ``caltech-101.zip`` (137 MB) with pooch, checks its SHA-256,
    extracts the images (about 9,100 JPEG files in 102 class folders) and splits every class.
    Later calls return the finished folders at once; a new ``seed`` or ``test_per_class`` only
    redoes the split, which hard-links the extracted files (no extra space where the file
    system allows links).

    Parameters
    ----------
    root : path-like, optional
        Data folder; default :func:`data_dir` (``$MPTUTOR_DATA_DIR``, else the checkout's
        ``data/cache``, else pooch's cache folder). Everything goes under ``root/caltech101``;
        the archive stays at ``root/caltech-101.zip`` (delete it to free 137 MB; it is
        downloaded again only if the extracted images are gone).
    test_per_class : int or float, default 10
        Test images per class: a number, or a fraction of each class. The smallest Caltech 101
        classes have 31 images, so 10 leaves at least 21 per class for training.
    seed : int, default 0
        Seed of the split; the same seed gives the same split on every machine.
    progress : bool, default True
        Show a download progress bar (tqdm, through pooch) and status lines on stderr.
    keep_background : bool, default True
        Keep the ``BACKGROUND_Google`` clutter folder as a 102nd class, as the MXNet Gluon
        tutorials do (they load every folder with ``ImageFolderDataset``). ``False`` leaves it
        out, giving the 101 object categories that most papers report on.
    source : ArchiveSource, default CALTECH101
        Address and checksums of the archive: the official ones by default; give another to
        use a mirror (or, in tests, a local server).

    Returns
    -------
    DatasetFolders
        ``train`` is ``.../101_ObjectCategories`` and ``test`` is
        ``.../101_ObjectCategories_test``, inside ``root/caltech101/split-seed<seed>-test<n>``
        (``-nobg`` appended without the background class).

    Raises
    ------
    DatasetError
        If the download fails, does not match its checksum (the bad file is deleted), or the
        archive cannot be extracted (it is deleted, so the next run downloads it again). The
        message says what to do.
    ValueError, TypeError
        If ``test_per_class`` is not a usable test size.
    """
    _validate_test_per_class(test_per_class)
    root_path = _make_root(root)
    base = root_path / "caltech101"
    split_name = f"split-seed{seed}-test{test_per_class:g}" + ("" if keep_background else "-nobg")
    split_dir = base / split_name
    done = _read_marker(split_dir)
    if done is not None and done.get("archive_hash") == source.known_hash:
        folders = _folders_from_marker(split_dir, done)
        if folders is not None:
            return folders

    extracted = base / "extracted"
    marker = _read_marker(extracted)
    if marker is None or marker.get("archive_hash") != source.known_hash:
        archive = _fetch(source, root_path, progress)
        _extract(archive, source, extracted, progress)
    _say(f"Splitting Caltech 101 into {split_dir} ...", progress)
    return _build_split(
        extracted / source.folder,
        split_dir,
        ("101_ObjectCategories", "101_ObjectCategories_test"),
        test_per_class,
        seed,
        () if keep_background else (CALTECH101_BACKGROUND,),
        {"archive_hash": source.known_hash, "dataset": "caltech101"},
    )


# ---------------------------------------------------------------------------------------------
# scikit-learn digits as PNG files


def digits_image_folder(
    root: StrPath | None = None,
    size: int = 32,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> DatasetFolders:
    """Write scikit-learn's digits as RGB PNG files in train and test image folders.

    The 1,797 8x8 grey images of :func:`sklearn.datasets.load_digits` (shipped with
    scikit-learn, no download) are scaled from 0..16 to 0..255, enlarged to ``size`` x ``size``
    pixels (bilinear) and saved as 3-channel PNG files, ``train/<digit>/<index>.png`` and
    ``test/<digit>/<index>.png`` (``<index>`` is the position in ``load_digits()``, four
    digits). The result is the same files with the same bytes for the same arguments, and is
    reused when already complete.

    Parameters
    ----------
    root : path-like, optional
        Data folder, see :func:`data_dir`. The images go to
        ``root/digits-<size>px-seed<seed>-test<test_fraction>``.
    size : int, default 32
        Edge length of the images in pixels (at least 8).
    seed : int, default 0
        Seed of the per-class train/test split.
    test_fraction : float, default 0.2
        Fraction of each class put in the test folder (rounded per class).

    Returns
    -------
    DatasetFolders
        Ten classes ``"0"`` to ``"9"``, 1,797 images in all.

    Raises
    ------
    ValueError
        If ``size`` is below 8 or ``test_fraction`` is not strictly between 0 and 1.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 8:
        raise ValueError(f"size={size!r}: give the image edge in pixels as an int of at least 8")
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, int | float)
        or not 0.0 < test_fraction < 1.0
    ):
        raise ValueError(
            f"test_fraction={test_fraction!r}: give the test share of each class as a float "
            "strictly between 0 and 1, e.g. 0.2"
        )
    test_fraction = float(test_fraction)
    dest = _make_root(root) / f"digits-{size}px-seed{seed}-test{test_fraction:g}"
    done = _read_marker(dest)
    if done is not None:
        folders = _folders_from_marker(dest, done)
        if folders is not None:
            return folders

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
        _write_marker(
            tmp,
            {
                "dataset": "sklearn-digits",
                "train": "train",
                "test": "test",
                "size": size,
                "seed": seed,
                "test_fraction": test_fraction,
                "train_counts": {name: len(tr) for name, (tr, _) in plan.items()},
                "test_counts": {name: len(te) for name, (_, te) in plan.items()},
            },
        )
    folders = _folders_from_marker(dest, _read_marker(dest) or {})
    if folders is None:  # pragma: no cover - only if the folder vanished right after the rename
        raise DatasetError(f"{dest} disappeared while it was being built; run again")
    return folders
