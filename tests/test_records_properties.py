"""Properties of the measurement records: what benchmarks/records.save_result writes,
mptutor.bench reads (find_records, provenance, label); what it refuses, it never writes; a
record file the readers could not read is refused by name, never half-read."""

import functools
import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mptutor import bench, hardware

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import records  # noqa: E402

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.text("abcXYZ019-_", min_size=1, max_size=12)
devices = st.sampled_from(["cpu", "cuda", "cuda:0", "cuda:7"])


@functools.cache
def _report():
    """This machine's hardware report, taken once (it takes a fraction of a second)."""
    return hardware.report()


class _Hardware:
    """Stands in for mptutor.hardware in records.py: the same report, not re-measured."""

    @staticmethod
    def report():
        return _report()


@functools.cache
def _environment(gpu_before=None):
    """The variables, package versions and GPU state records.environment gives, taken once."""
    return _real_environment(gpu_before)


_real_environment = records.environment


def _save(name, data, folder, **options):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(records, "hardware", _Hardware)
        mp.setattr(records, "environment", _environment)
        return records.save_result(name, data, folder, commit_id="abc", **options)


@given(
    name=names,
    data=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    device=st.none() | devices,
    smoke=st.none() | st.booleans(),
)
def test_every_record_save_result_writes_is_read_back(name, data, device, smoke):
    if device is not None:
        data = data | {"device": device}
    if smoke is not None:
        data = data | {"smoke": smoke}
    with tempfile.TemporaryDirectory() as folder:
        path = _save(name, data, folder)
        found = bench.find_records(results_dir=folder, include_smoke=True)
        assert [p for p, _ in found] == [path]
        record = found[0][1]
        assert record["name"] == name
        label, row = bench.label(record), bench.provenance(path, record)
        assert label.startswith("RECORDED ") and row["record"] == path.name
        wanted = bench._device_type(device or record["hardware"].get("device") or "cpu")
        assert bench.find_records(device=wanted, results_dir=folder, include_smoke=True)


@given(
    name=st.one_of(st.integers(), st.none(), st.just(""), st.just("../x"), st.just("a b")),
)
def test_a_refused_name_writes_nothing(name):
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises((TypeError, ValueError), match="name must"):
            _save(name, {}, folder)
        assert list(Path(folder).iterdir()) == []


@given(data=json_scalars | st.lists(json_scalars, max_size=3))
def test_data_that_is_not_a_dict_is_refused_and_writes_nothing(data):
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises(TypeError, match="data must be a dict"):
            _save("x", data, folder)
        assert list(Path(folder).iterdir()) == []


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"data": {"device": "gpu"}}, ValueError, r"data\['device'\] must be 'cpu', 'cuda'"),
        ({"data": {"x": object()}}, TypeError, "not JSON serializable"),
        ({"command": 3}, TypeError, "command must be a str or None"),
        ({"out_dir": 3}, TypeError, "out_dir must be a folder"),
    ],
)
def test_a_record_the_readers_would_refuse_is_not_written(tmp_path, options, error, message):
    arguments = {"name": "x", "data": {}, "out_dir": tmp_path} | options
    with pytest.raises(error, match=message):
        _save(arguments.pop("name"), arguments.pop("data"), arguments.pop("out_dir"), **arguments)
    assert list(tmp_path.iterdir()) == []


def test_the_issues_cases():
    with tempfile.TemporaryDirectory() as folder:
        for data in (None, [1, 2], "text"):
            with pytest.raises(TypeError, match="data must be a dict"):
                _save("x", data, folder)
        with pytest.raises(TypeError, match="name must be a file stem"):
            _save(5, {}, folder)
        assert bench.find_records(results_dir=folder) == []  # the folder is not blocked


_GOOD = {
    "name": "gemm_sweep-cuda-H100",
    "date": "2026-01-31T12:00:00+0000",
    "command": "python benchmarks/x.py --out DIR",
    "git_commit": "0123456789abcdef",
    "hardware": {
        "gpus": [{"name": "H100", "architecture": "Hopper", "compute_capability": [9, 0]}],
        "device": "cuda",
        "packages": {"torch": "2.11"},
    },
    "data": {"device": "cuda:0", "torch": "2.11"},
}
_PLACES = [
    ("name",), ("date",), ("command",), ("git_commit",), ("hardware",), ("data",),
    ("hardware", "gpus"), ("hardware", "device"), ("hardware", "packages"), ("hardware", "cpu"),
    ("data", "device"), ("data", "smoke"), ("data", "torch"),
    ("hardware", "gpus", 0), ("hardware", "gpus", 0, "compute_capability"),
    ("hardware", "gpus", 0, "name"),
]  # fmt: skip


@given(place=st.sampled_from(_PLACES), value=json_values)
def test_a_record_file_is_either_refused_by_name_or_read_whole(place, value):
    record = json.loads(json.dumps(_GOOD))
    target = record
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.json"
        path.write_text(json.dumps(record))
        try:
            found = bench.find_records(results_dir=folder, include_smoke=True)
        except ValueError as refused:
            assert str(path) in str(refused)
            return
        for p, rec in found:
            assert bench.label(rec).startswith("RECORDED")
            assert bench.provenance(p, rec)["record"] == "r.json"
