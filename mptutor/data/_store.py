"""Where datasets are kept, and how a folder is built so that only a complete one is reused.

Every folder is built with :func:`mptutor.atomic.atomic_dir` and gets a marker file,
``mptutor-complete.json``, written last inside it. A folder is reused only when its marker is
there and describes it; anything else is a leftover of an interrupted run, removed and built
again.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mptutor.atomic import atomic_dir
from mptutor._checks import check_scalar, check_type

StrPath = str | os.PathLike[str]

#: Environment variable that overrides the default data folder.
ENV_VAR = "MPTUTOR_DATA_DIR"

#: Name of the marker file written last into every folder this package builds.
MARKER = "mptutor-complete.json"

_MARKER_FORMAT = 1


class DatasetError(RuntimeError):
    """A dataset could not be downloaded, verified or unpacked; the message says what to do."""


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


def _checkout_cache() -> Path | None:
    """``data/cache`` of the project checkout this package runs from, if it runs from one."""
    checkout = Path(__file__).resolve().parents[2]
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

    Raises
    ------
    TypeError
        If ``root`` is not a path.
    """
    if root is not None:
        return Path(check_path(root, "root")).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    checkout = _checkout_cache()
    if checkout is not None:
        return checkout
    import pooch

    return Path(pooch.os_cache("mptutor"))


def check_path(value: Any, name: str) -> StrPath:
    """Check that ``value`` is a path (a str or an ``os.PathLike``)."""
    return check_type(value, name, (str, os.PathLike), "a path (str or pathlib.Path)")


def check_seed(seed: Any) -> int:
    """Check a seed: an int (a NumPy int too), not a bool."""
    return check_scalar(seed, "seed", int)


def make_root(root: StrPath | None) -> Path:
    """Create the data folder (see :func:`data_dir`), or say how to choose a writable one."""
    path = data_dir(root)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(
            f"cannot create the data folder {path}: {exc}. Pass root=... or set {ENV_VAR} to a "
            "writable folder with room for the dataset, then run again."
        ) from exc
    return path


def read_marker(folder: Path) -> dict[str, Any] | None:
    """Read the marker of a complete folder; ``None`` when the folder is missing or incomplete."""
    try:
        info = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("format") != _MARKER_FORMAT:
        return None
    return info


def write_marker(folder: Path, info: Mapping[str, Any]) -> None:
    """Write the marker that declares ``folder`` complete; the last file written into it."""
    text = json.dumps({"format": _MARKER_FORMAT, **info}, indent=1, sort_keys=True)
    (folder / MARKER).write_text(text + "\n", encoding="utf-8")


def folders_from_marker(folder: Path, info: Mapping[str, Any]) -> DatasetFolders | None:
    """Return the split that a marker describes, or ``None`` if the marker or folders are off."""
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


def complete_split(folder: Path, **expected: Any) -> DatasetFolders | None:
    """Return the finished split in ``folder`` if its marker holds ``expected``, else ``None``."""
    info = read_marker(folder)
    if info is None or any(info.get(key) != value for key, value in expected.items()):
        return None
    return folders_from_marker(folder, info)


def finished_split(folder: Path) -> DatasetFolders:
    """Return the split just built in ``folder``."""
    folders = complete_split(folder)
    if folders is None:  # pragma: no cover - only if the folder vanished right after the rename
        raise DatasetError(f"{folder} disappeared while it was being built; run again")
    return folders


@contextmanager
def building(dest: Path) -> Iterator[Path]:
    """Build ``dest`` atomically in a temporary folder, after clearing leftovers of killed runs.

    Call it only when ``dest`` holds no finished folder: whatever is there is removed. If a
    concurrent run finishes ``dest`` first, its copy is kept and this one discarded.
    """
    try:
        with atomic_dir(dest, clear_leftovers=True) as tmp:
            yield tmp
    except FileExistsError:
        if read_marker(dest) is None:  # not a finished copy from a concurrent run
            raise


def say(message: str, progress: bool) -> None:
    """Print a status line on stderr when ``progress`` is on."""
    if progress:
        print(message, file=sys.stderr, flush=True)
