"""Write files and folders atomically: a reader sees the old state or the complete new one.

Everything is built under a temporary name next to its target (``.<name>.<random>.partial``
for a file, ``.<name>.partial-<random>`` for a folder) and renamed into place in one step when
complete, so an interrupted run never leaves something that a later run takes for finished.
This module is the one place in the package that writes a file or a folder this way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from mptutor._checks import check_type

__all__ = ["atomic_dir", "atomic_dirs", "atomic_path", "write_text"]

StrPath = str | os.PathLike[str]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: StrPath) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path`` in one step.

    The folder is created if needed. If the block raises, the temporary file is removed and
    ``path`` is left as it was. The new file gets the usual permissions (``0o666`` less the
    umask), not the private ones of a temporary file.

    Parameters
    ----------
    path : path-like
        The file to write.

    Yields
    ------
    pathlib.Path
        Where to write the content.

    Raises
    ------
    IsADirectoryError
        If ``path`` is a folder.
    """
    target = Path(check_type(path, "path", (str, os.PathLike), "a path"))
    if target.is_dir():
        raise IsADirectoryError(f"{target.resolve()} is a folder; give the path of a file")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: StrPath, text: str) -> None:
    """Write text to a file atomically (UTF-8).

    Parameters
    ----------
    path : path-like
        The file to write.
    text : str
        Its new content.

    Raises
    ------
    TypeError
        If ``text`` is not a str.
    IsADirectoryError
        If ``path`` is a folder.
    """
    check_type(text, "text", str, "a str")
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _partials(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.partial-*"))


def _commit(tmps: Sequence[Path], targets: Sequence[Path]) -> None:
    """Rename every temporary folder to its target; on a failure, undo the renames made."""
    done: list[tuple[Path, Path]] = []
    try:
        for tmp, target in zip(tmps, targets, strict=True):
            try:
                os.rename(tmp, target)
            except OSError as exc:
                if target.exists() or target.is_symlink():
                    raise FileExistsError(
                        f"{target} appeared while it was being built; it was left as it is and "
                        "the new copy discarded"
                    ) from exc
                raise
            done.append((tmp, target))
    except BaseException:
        for tmp, target in reversed(done):
            os.rename(target, tmp)
        raise


@contextlib.contextmanager
def atomic_dirs(paths: Sequence[StrPath], *, clear_leftovers: bool = False) -> Iterator[list[Path]]:
    """Yield one empty temporary folder per path; on success all are renamed into place.

    The folders are renamed one after the other at the end of the block; if one rename fails,
    those already made are undone, so either every folder is in place or none is. If the block
    raises, nothing is renamed. The temporary folders are removed whatever happens.

    Parameters
    ----------
    paths : sequence of path-like
        The folders to create. They must not exist when the block ends (an empty folder may,
        on POSIX systems: the rename replaces it). Their parent folders are created.
    clear_leftovers : bool, optional
        First remove what earlier runs, killed before the end, left: their temporary folders
        next to these paths (``.<name>.partial-*``) and whatever stands at the paths themselves
        (which the caller has found unfinished). Only for folders that one run at a time
        builds; the paths are then absent until the new folders are in place.

    Yields
    ------
    list of pathlib.Path
        The temporary folders, in the order of ``paths``; they get the usual permissions
        (``0o777`` less the umask).

    Raises
    ------
    FileExistsError
        If a target exists when the block ends; the new folders are then discarded and the
        existing one is left as it is.
    TypeError, ValueError
        If ``paths`` is one path rather than a list, or names a folder twice.
    """
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError(f"paths must be a list of folders, got one: {paths!r}; use atomic_dir")
    targets = [Path(check_type(p, "paths' entries", (str, os.PathLike), "paths")) for p in paths]
    if len({t.resolve() for t in targets}) < len(targets):
        raise ValueError(f"a folder is given twice in {[str(t) for t in targets]}")
    tmps: list[Path] = []
    try:
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            if clear_leftovers:
                for stale in [*_partials(target), target]:
                    _remove(stale)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
            os.chmod(tmp, 0o777 & ~_umask())
            tmps.append(tmp)
        yield list(tmps)
        _commit(tmps, targets)
    finally:
        for tmp in tmps:
            _remove(tmp)


@contextlib.contextmanager
def atomic_dir(path: StrPath, *, clear_leftovers: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; on success it is renamed to ``path``.

    Parameters
    ----------
    path : path-like
        The folder to create; see :func:`atomic_dirs` for what may be there already.
    clear_leftovers : bool, optional
        First remove what killed earlier runs left at and next to ``path``, see
        :func:`atomic_dirs`.

    Yields
    ------
    pathlib.Path
        The temporary folder to fill.

    Raises
    ------
    FileExistsError
        If ``path`` exists when the block ends.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> root = Path(tempfile.mkdtemp())
    >>> with atomic_dir(root / "built") as tmp:
    ...     _ = (tmp / "a.txt").write_text("complete")
    >>> sorted(p.name for p in root.iterdir()), (root / "built" / "a.txt").read_text()
    (['built'], 'complete')
    """
    with atomic_dirs([path], clear_leftovers=clear_leftovers) as (tmp,):
        yield tmp
