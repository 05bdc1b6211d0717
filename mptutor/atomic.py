"""Write files atomically: a reader sees the old file or the complete new one, never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
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
    """
    target = Path(path)
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


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write text to a file atomically (UTF-8).

    Parameters
    ----------
    path : path-like
        The file to write.
    text : str
        Its new content.
    """
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
