import pytest

from mptutor.table import Table


def test_text_and_html():
    t = Table(
        [{"name": "fp16", "max": 65504.0, "ok": True}, {"name": "bf16", "extra": 1}],
        title="formats",
    )
    assert t.columns == ["name", "max", "ok", "extra"]
    lines = repr(t).splitlines()
    assert lines[0] == "formats"
    assert lines[1].split() == ["name", "max", "ok", "extra"]
    assert lines[3].split() == ["fp16", "65504", "yes"]
    assert lines[4].split() == ["bf16", "1"]
    html = t._repr_html_()
    assert "<caption>formats</caption>" in html and "<td>fp16</td>" in html
    assert t.column("extra") == [None, 1]
    assert len(t) == 2 and t[0]["name"] == "fp16"


def test_unknown_column():
    with pytest.raises(KeyError, match="columns are"):
        Table([{"a": 1}]).column("b")


def test_html_is_escaped():
    assert "&lt;b&gt;" in Table([{"x": "<b>"}])._repr_html_()


def test_float_formatting():
    lines = repr(Table([{"v": 3.4028234663852886e38}, {"v": 2.0**-24}, {"v": 1e7}])).splitlines()
    assert [line.strip() for line in lines[2:]] == ["3.403e+38", "5.96e-08", "1e+07"]


def test_numpy_float_scalars_take_the_float_format_like_python_floats():
    np = pytest.importorskip("numpy")
    rows = [{"v": np.float32(0.026515126)}, {"v": np.float16(2.0)}, {"v": np.float64(1 / 3)},
            {"v": np.array([0.5], np.float32)}, {"v": np.int32(7)}]
    cells = [line.strip() for line in repr(Table(rows, float_format=".3f")).splitlines()[2:]]
    # a 1-element array is not a scalar: printed as NumPy prints it; integers stay integers
    assert cells == ["0.027", "2", "0.333", "[0.5]", "7"]


@pytest.mark.parametrize("rows", [None, 5, [1, 2], ["ab"], [{1: 2}], "abc"])
def test_rows_must_be_mappings_with_string_keys(rows):
    with pytest.raises(TypeError, match="rows"):
        Table(rows)


def test_bad_float_format_and_title_are_refused_at_once():
    with pytest.raises(ValueError, match="float_format"):
        Table([{"a": 1.5}], float_format="q")
    with pytest.raises(TypeError, match="float_format"):
        Table([{"a": 1.5}], float_format=3)
    with pytest.raises(TypeError, match="title"):
        Table([{"a": 1}], title=5)


def test_the_alternate_form_keeps_the_zeros_of_whole_numbers_without_an_exponent():
    rows = [{"x": 1.0}, {"x": 0.853}, {"x": 65504.0}, {"x": 2.0**30}]
    assert [r.split()[0] for r in repr(Table(rows, float_format="#.4g")).splitlines()[2:]] == [
        "1.000", "0.8530", "65504", "1.074e+09"]
    assert [r.split()[0] for r in repr(Table(rows, float_format=".4g")).splitlines()[2:]] == [
        "1", "0.853", "65504", "1.074e+09"]
