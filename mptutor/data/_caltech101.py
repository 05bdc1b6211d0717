"""Caltech 101: a checksum-verified download with pooch, atomic extraction, a seeded split."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path, PurePosixPath
from typing import Any

from mptutor._checks import check_type
from mptutor.data._image_folders import build_split, check_image_folder, check_test_per_class
from mptutor.data._store import (
    ENV_VAR,
    DatasetError,
    DatasetFolders,
    StrPath,
    building,
    check_seed,
    complete_split,
    make_root,
    read_marker,
    say,
    write_marker,
)

_CHUNK = 1 << 20


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
    say(f"Extracting {archive} ...", progress)
    with building(dest) as tmp:
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
        write_marker(tmp, {"archive_hash": source.known_hash, "counts": counts})


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
        If ``test_per_class`` is not a usable test size: an int of at least 1 or a float
        strictly between 0 and 1.
    TypeError
        If ``seed`` is not an int, ``progress`` or ``keep_background`` not a bool, ``source``
        not an :class:`ArchiveSource` or ``root`` not a path. Nothing is downloaded then.
    """
    test_per_class = check_test_per_class(test_per_class)
    seed = check_seed(seed)
    check_type(progress, "progress", bool, "True or False")
    check_type(keep_background, "keep_background", bool, "True or False")
    check_type(source, "source", ArchiveSource, "an ArchiveSource (CALTECH101 by default)")
    root_path = make_root(root)
    base = root_path / "caltech101"
    split_name = f"split-seed{seed}-test{test_per_class:g}" + ("" if keep_background else "-nobg")
    split_dir = base / split_name
    done = complete_split(split_dir, archive_hash=source.known_hash)
    if done is not None:
        return done

    extracted = base / "extracted"
    marker = read_marker(extracted)
    if marker is None or marker.get("archive_hash") != source.known_hash:
        archive = _fetch(source, root_path, progress)
        _extract(archive, source, extracted, progress)
    say(f"Splitting Caltech 101 into {split_dir} ...", progress)
    return build_split(
        extracted / source.folder,
        split_dir,
        ("101_ObjectCategories", "101_ObjectCategories_test"),
        test_per_class,
        seed,
        () if keep_background else (CALTECH101_BACKGROUND,),
        {"archive_hash": source.known_hash, "dataset": "caltech101"},
    )
