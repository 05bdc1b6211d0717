"""mptutor.data, offline: a Caltech-101-shaped archive served from 127.0.0.1, and the digits.

The archive is built like the real one (a zip holding caltech-101/101_ObjectCategories.tar.gz,
which holds 101_ObjectCategories/<class>/image_XXXX.jpg) from tiny real JPEG files, and served
by a standard-library HTTP server, so pooch's real download path runs without the internet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import threading
import warnings
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PIL", reason="Pillow is not installed (the `data` extra)")
pytest.importorskip("pooch", reason="pooch is not installed (the `data` extra)")

from PIL import Image  # noqa: E402

from mptutor import data  # noqa: E402

CLASSES = {"BACKGROUND_Google": 7, "Faces_easy": 6, "accordion": 5, "airplanes": 9, "anchor": 4}
MEMBER = data._CALTECH101.member  # caltech-101/101_ObjectCategories.tar.gz


# --------------------------------------------------------------------------------------------
# A small archive in the layout of the real one


def _jpeg(seed: int) -> bytes:
    img = Image.new("RGB", (12, 10), ((seed * 37) % 256, (seed * 91) % 256, (seed * 53) % 256))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def _tar_gz(classes: dict[str, int]) -> tuple[bytes, dict[str, bytes]]:
    """A 101_ObjectCategories.tar.gz and the {'<class>/<file>': bytes} it holds."""
    files: dict[str, bytes] = {}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for c, (name, count) in enumerate(sorted(classes.items())):
            for i in range(1, count + 1):
                blob = _jpeg(100 * c + i)
                files[f"{name}/image_{i:04d}.jpg"] = blob
                info = tarfile.TarInfo(f"101_ObjectCategories/{name}/image_{i:04d}.jpg")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    return out.getvalue(), files


def _zip(inner: bytes, member: str = MEMBER) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(member, inner)
        zf.writestr("caltech-101/Annotations.tar", b"not used")
        zf.writestr("caltech-101/show_annotation.m", b"% not used\n")
    return out.getvalue()


def _sha256(blob: bytes) -> str:
    return "sha256:" + hashlib.sha256(blob).hexdigest()


@dataclasses.dataclass
class Archive:
    zip: bytes
    inner: bytes
    files: dict[str, bytes]


@pytest.fixture(scope="module")
def archive() -> Archive:
    inner, files = _tar_gz(CLASSES)
    return Archive(zip=_zip(inner), inner=inner, files=files)


class Server:
    """Serves in-memory files over HTTP on 127.0.0.1 and counts the GET requests."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.gets: list[str] = []
        self.cut: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server calls
                path = self.path.split("?")[0]
                server.gets.append(path)
                blob = server.files.get(path)
                if blob is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/zip")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                # A path in `server.cut` sends only its first half, then the connection closes.
                self.wfile.write(blob[: len(blob) // 2] if path in server.cut else blob)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def url(self, name: str) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/{name}?download=1"

    def source(self, name: str, blob: bytes, **changes: object) -> None:
        """Serve ``blob`` as ``/name`` and make caltech101 download it as the real archive."""
        self.files[f"/{name}"] = blob
        fields = {"url": self.url(name), "known_hash": _sha256(blob), **changes}
        self.monkeypatch.setattr(data, "_CALTECH101", data._CALTECH101._replace(**fields))


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    srv = Server()
    srv.monkeypatch = monkeypatch
    srv.thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()
    srv.thread.join(timeout=5)


def _good(server: Server, archive: Archive) -> None:
    server.source("caltech-101.zip", archive.zip)


def _tree(folder: Path) -> dict[str, set[str]]:
    return {c.name: {f.name for f in c.iterdir()} for c in sorted(folder.iterdir())}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _leftovers(root: Path) -> list[str]:
    """Everything under root except the cached archive, as relative paths."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# --------------------------------------------------------------------------------------------
# Caltech 101 through pooch


def test_published_source_is_the_caltechdata_archive():
    src = data._CALTECH101
    assert src.url.startswith("https://data.caltech.edu/records/mzrjq-6wc02/files/caltech-101.zip")
    alg, digest = src.known_hash.split(":")
    assert alg == "sha256" and len(digest) == 64 and int(digest, 16) >= 0
    assert (src.fname, src.member, src.folder) == (
        "caltech-101.zip",
        "caltech-101/101_ObjectCategories.tar.gz",
        "101_ObjectCategories",
    )


def test_download_extract_and_split(tmp_path, server, archive):
    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=2, seed=0, progress=False)

    assert server.gets == ["/caltech-101.zip"]
    assert (tmp_path / "caltech-101.zip").read_bytes() == archive.zip
    assert got.train.name == "101_ObjectCategories"
    assert got.test.name == "101_ObjectCategories_test"
    assert got.classes == tuple(sorted(CLASSES))  # BACKGROUND_Google kept by default
    assert got.num_classes == 5
    assert got.test_counts == {name: 2 for name in CLASSES}
    assert got.train_counts == {name: n - 2 for name, n in CLASSES.items()}
    assert got.num_train + got.num_test == sum(CLASSES.values())
    assert data.check_image_folder(got.train) == got.train_counts
    assert data.check_image_folder(got.test) == got.test_counts

    train, test = _tree(got.train), _tree(got.test)
    for name in CLASSES:
        assert train[name] and test[name]  # every class in both
        assert not train[name] & test[name]  # no image in both
        assert len(train[name] | test[name]) == CLASSES[name]
    for folder in (got.train, got.test):  # the files are the archive's, byte for byte
        for image in folder.rglob("*.jpg"):
            assert image.read_bytes() == archive.files[f"{image.parent.name}/{image.name}"]

    # Nothing half-built is left next to the results.
    assert not list(tmp_path.rglob(".*partial*"))
    assert stat.S_IMODE(got.root.stat().st_mode) == 0o777 & ~_umask()  # not mkdtemp's 0o700
    assert (got.root / data._MARKER).is_file()
    assert sorted(p.name for p in (tmp_path / "caltech101").iterdir()) == [
        "extracted",
        "split-seed0-test2",
    ]


def test_split_is_deterministic_and_reused(tmp_path, server, archive):
    _good(server, archive)
    first = data.caltech101(tmp_path / "a", test_per_class=2, seed=0, progress=False)
    again = data.caltech101(tmp_path / "a", test_per_class=2, seed=0, progress=False)
    other = data.caltech101(tmp_path / "b", test_per_class=2, seed=0, progress=False)
    seed1 = data.caltech101(tmp_path / "a", test_per_class=2, seed=1, progress=False)

    assert server.gets == ["/caltech-101.zip"] * 2  # one download per data folder
    assert again == first
    assert _tree(first.test) == _tree(other.test)  # same seed, same split, anywhere
    assert _tree(first.train) == _tree(other.train)
    assert _tree(seed1.test) != _tree(first.test)  # another seed, another split
    assert seed1.test_counts == first.test_counts
    assert seed1.root != first.root and first.train.is_dir()  # both splits kept


def test_split_options(tmp_path, server, archive):
    _good(server, archive)
    frac = data.caltech101(tmp_path, test_per_class=0.25, progress=False)
    assert frac.test_counts == {
        "BACKGROUND_Google": 2,
        "Faces_easy": 2,
        "accordion": 1,
        "airplanes": 2,
        "anchor": 1,
    }
    numpy_count = data.caltech101(tmp_path, test_per_class=np.int64(1), progress=False)
    assert numpy_count.test_counts == {name: 1 for name in CLASSES}
    with pytest.raises(ValueError, match="'anchor' has 4 image"):
        data.caltech101(tmp_path, test_per_class=4, progress=False)
    with pytest.raises(ValueError, match=r"test_per_class \(a fraction.*must be in \(0, 1\)"):
        data.caltech101(tmp_path, test_per_class=1.5, progress=False)
    with pytest.raises(ValueError, match=r"test_per_class \(images per class\) must be in \[1"):
        data.caltech101(tmp_path, test_per_class=0, progress=False)
    with pytest.raises(TypeError, match="test_per_class.*must be a real number, got True"):
        data.caltech101(tmp_path, test_per_class=True, progress=False)
    assert server.gets == ["/caltech-101.zip"]


def test_wrong_checksum_keeps_nothing_then_a_good_run_works(tmp_path, server, archive):
    server.source("caltech-101.zip", archive.zip, known_hash=_sha256(b"something else"))
    with pytest.raises(data.DatasetError, match="failed its checksum check") as info:
        data.caltech101(tmp_path, progress=False)
    assert "Run again" in str(info.value) and "data.caltech.edu/records" in str(info.value)
    assert _leftovers(tmp_path) == []  # pooch deleted the bad download: nothing to trust later

    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert got.num_test == len(CLASSES)


def test_connection_lost_midway_keeps_nothing(tmp_path, server, archive):
    _good(server, archive)
    server.cut.add("/caltech-101.zip")
    with pytest.raises(data.DatasetError, match="could not download") as info:
        data.caltech101(tmp_path, progress=False)
    assert "run again" in str(info.value) and "by hand" in str(info.value)
    assert _leftovers(tmp_path) == []  # the partial download was not kept

    server.cut.clear()
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert got.num_classes == len(CLASSES)


def test_a_damaged_cached_archive_is_downloaded_again(tmp_path, server, archive):
    (tmp_path / "caltech-101.zip").write_bytes(archive.zip[:1000])  # e.g. an interrupted copy
    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert server.gets == ["/caltech-101.zip"]
    assert (tmp_path / "caltech-101.zip").read_bytes() == archive.zip
    assert got.num_classes == len(CLASSES)


def test_truncated_archive_fails_cleanly_then_a_good_run_works(tmp_path, server, archive):
    half = archive.zip[: len(archive.zip) // 2]
    server.source("caltech-101.zip", half)  # its own hash: pooch accepts it
    with pytest.raises(data.DatasetError, match="damaged or incomplete") as info:
        data.caltech101(tmp_path, progress=False)
    message = str(info.value)
    assert str(tmp_path / "caltech-101.zip") in message and "run again" in message
    assert _leftovers(tmp_path) == ["caltech101"]  # no archive, no half-filled folder

    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert got.num_train + got.num_test == sum(CLASSES.values())


def test_extraction_failing_midway_leaves_nothing(tmp_path, server, archive):
    cut = archive.inner[: int(len(archive.inner) * 0.7)]  # the tarball breaks after some files
    server.source("caltech-101.zip", _zip(cut))
    with pytest.raises(data.DatasetError, match="damaged or incomplete"):
        data.caltech101(tmp_path, progress=False)
    assert _leftovers(tmp_path) == ["caltech101"]

    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert got.num_classes == len(CLASSES)


def test_archive_without_the_image_tarball(tmp_path, server, archive):
    server.source("caltech-101.zip", _zip(archive.inner, member="other/name.tar.gz"))
    with pytest.raises(data.DatasetError, match="does not contain caltech-101/101_Object"):
        data.caltech101(tmp_path, progress=False)
    assert _leftovers(tmp_path) == ["caltech101"]


def test_leftovers_of_an_interrupted_run_are_redone(tmp_path, server, archive):
    base = tmp_path / "caltech101"
    stale = base / ".extracted.partial-killed"
    (stale / "101_ObjectCategories" / "accordion").mkdir(parents=True)
    half_done = base / "extracted" / "101_ObjectCategories" / "accordion"  # no marker
    half_done.mkdir(parents=True)
    (half_done / "image_0001.jpg").write_bytes(b"")

    _good(server, archive)
    got = data.caltech101(tmp_path, test_per_class=1, progress=False)
    assert not stale.exists()
    assert server.gets == ["/caltech-101.zip"]  # the half-done folder was not trusted
    assert data.check_image_folder(base / "extracted" / "101_ObjectCategories") == CLASSES
    assert got.num_classes == len(CLASSES)


def test_unreachable_server_says_what_to_do(tmp_path, server):
    server.monkeypatch.setattr(
        data, "_CALTECH101", data._CALTECH101._replace(url=server.url("nothing-here.zip"))
    )
    with pytest.raises(data.DatasetError, match="could not download") as info:
        data.caltech101(tmp_path, progress=False)
    assert "by hand" in str(info.value) and str(tmp_path / "caltech-101.zip") in str(info.value)
    assert _leftovers(tmp_path) == []


def test_data_dir_override_and_progress_output(tmp_path, monkeypatch, capsys, server, archive):
    monkeypatch.setenv(data._ENV_VAR, str(tmp_path / "from-env"))
    assert data._data_dir() == tmp_path / "from-env"
    assert data._data_dir(tmp_path / "explicit") == tmp_path / "explicit"  # root wins
    _good(server, archive)
    got = data.caltech101(test_per_class=1, progress=True)
    assert got.train.is_relative_to(tmp_path / "from-env")
    assert (tmp_path / "from-env" / "caltech-101.zip").is_file()
    err = capsys.readouterr().err
    assert "Extracting" in err and "Splitting" in err and "100%" in err  # tqdm's bar

    monkeypatch.setenv(data._ENV_VAR, "")  # empty means unset
    checkout = Path(data.__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "data").is_dir():
        assert data._data_dir() == checkout / "data" / "cache"  # run from a checkout
    monkeypatch.delenv(data._ENV_VAR)
    monkeypatch.setattr(data, "_checkout_cache", lambda: None)  # as when pip-installed
    import pooch

    assert data._data_dir() == Path(pooch.os_cache("mptutor"))


# --------------------------------------------------------------------------------------------
# Image folders


def test_check_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.check_image_folder(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        data.check_image_folder(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        data.check_image_folder(empty)
    (empty / "cat").mkdir()
    (empty / "cat" / "notes.txt").write_text("not an image")
    (empty / "cat" / "._a.jpg").write_bytes(b"macOS resource fork")
    with pytest.raises(ValueError, match=r"1 class folder\(s\) with no images \(cat\)") as info:
        data.check_image_folder(empty)
    assert "delete" in str(info.value)
    (empty / "cat" / "a.JPG").write_bytes(_jpeg(1))
    (empty / "cat" / "b.png").write_bytes(b"")
    assert data.check_image_folder(empty) == {"cat": 2}


# --------------------------------------------------------------------------------------------
# scikit-learn digits


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.png"))}


@pytest.fixture
def sklearn():
    return pytest.importorskip("sklearn", reason="scikit-learn is not installed (the `data` extra)")


def test_digits_image_folder_is_deterministic(tmp_path, sklearn):
    first = data.digits_image_folder(tmp_path / "a", size=16)
    assert first.classes == tuple(str(d) for d in range(10))
    assert first.num_train + first.num_test == 1797
    assert all(first.test_counts[c] > 0 and first.train_counts[c] > 0 for c in first.classes)
    assert abs(first.num_test - 0.2 * 1797) < 10
    assert data.check_image_folder(first.train) == first.train_counts
    assert (first.train.name, first.test.name) == ("train", "test")

    second = data.digits_image_folder(tmp_path / "b", size=16)
    assert _contents(first.root) == _contents(second.root)  # same files, same bytes
    train_names = set(_contents(first.train))
    assert not train_names & set(_contents(first.test))

    other_seed = data.digits_image_folder(tmp_path / "a", size=16, seed=1)
    assert set(_contents(other_seed.train)) != train_names

    with Image.open(next(first.test.rglob("*.png"))) as img:
        assert (img.format, img.mode, img.size) == ("PNG", "RGB", (16, 16))


def test_digits_image_folder_reuses_and_rebuilds(tmp_path, sklearn):
    first = data.digits_image_folder(tmp_path, size=8)
    marker = first.root / "mptutor-complete.json"
    stamp = marker.stat().st_mtime_ns
    assert data.digits_image_folder(tmp_path, size=8) == first
    assert marker.stat().st_mtime_ns == stamp  # reused, not rewritten
    assert json.loads(marker.read_text())["size"] == 8

    marker.unlink()  # as if the run had been killed before it finished
    rebuilt = data.digits_image_folder(tmp_path, size=8)
    assert rebuilt == first and marker.is_file()
    with pytest.raises(ValueError, match=r"size \(the image edge in pixels\) must be in \[8, inf"):
        data.digits_image_folder(tmp_path, size=4)
    with pytest.raises(TypeError, match="size .* must be an int, got 8.0"):
        data.digits_image_folder(tmp_path, size=8.0)
    with pytest.raises(ValueError, match=r"test_fraction .* must be in \(0, 1\), got 1.0"):
        data.digits_image_folder(tmp_path, test_fraction=1.0)


_MXNET_PROBE = """
import json, sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # mxnet 1.9 uses np.bool on import
from mxnet.gluon.data.vision import ImageFolderDataset
train = ImageFolderDataset(sys.argv[1])
test = ImageFolderDataset(sys.argv[2])
image, label = train[0]
pixels = image.asnumpy()
print(json.dumps({"synsets": train.synsets, "test_synsets": test.synsets, "train": len(train),
                  "test": len(test), "shape": list(pixels.shape), "dtype": str(pixels.dtype),
                  "label": int(label), "max": int(pixels.max())}))
"""


def test_digits_load_in_mxnet_image_folder_dataset(tmp_path):
    with warnings.catch_warnings():  # MXNet 1.9's import-time DeprecationWarnings (np.bool)
        warnings.simplefilter("ignore", DeprecationWarning)
        pytest.importorskip(
            "mxnet",
            reason="MXNet is not installed: this test runs in the MXNet environment "
            "(requirements-mxnet.txt)",
        )
    folders = data.digits_image_folder(tmp_path, size=24)
    out = subprocess.run(
        [sys.executable, "-c", _MXNET_PROBE, str(folders.train), str(folders.test)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["synsets"] == got["test_synsets"] == list(folders.classes)
    assert (got["train"], got["test"]) == (folders.num_train, folders.num_test)
    assert got["shape"] == [24, 24, 3] and got["dtype"] == "uint8"
    assert got["label"] == 0 and got["max"] > 100  # a digit, not a blank image


# --------------------------------------------------------------------------------------------
# bad input: a clear error naming the argument, before anything is written


def test_paths_and_flags_of_the_dataset_functions_are_checked(tmp_path):
    for call in (
        lambda: data._data_dir(5),
        lambda: data.check_image_folder(None),
        lambda: data.digits_image_folder(root=3.5),
    ):
        with pytest.raises(TypeError, match="must be a path"):
            call()
    for kwargs, name in [
        (dict(seed="a"), "seed"),
        (dict(seed=None), "seed"),
    ]:
        with pytest.raises(TypeError, match=name):
            data.digits_image_folder(tmp_path, **kwargs)
    for kwargs, name in [
        (dict(progress="no"), "progress"),
        (dict(seed=None), "seed"),
    ]:
        with pytest.raises(TypeError, match=name):
            data.caltech101(tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []
