"""A small, dependency-free table that prints well in a terminal and in a notebook."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mptutor._checks import check_type

__all__ = ["Table"]


class Table:
    """Rows of named values, shown as aligned text (``repr``) and as HTML in Jupyter.

    Parameters
    ----------
    rows : iterable of mapping
        One mapping per row; the first row's keys (plus any new keys of later rows) name the
        columns, in order.
    float_format : str, optional
        Format spec for floats, e.g. ``".4g"``; whole numbers below 10 million print in full
        (with ``"#"``, the alternate form, as the spec writes them where it needs no exponent:
        ``1.000`` beside ``0.8530`` for ``"#.4g"``, but ``65504``).
    title : str, optional
        A caption printed above the table.

    Raises
    ------
    TypeError, ValueError
        If ``rows`` is not a list of dicts with str keys, ``float_format`` not a float format
        spec, or ``title`` not a str.

    Examples
    --------
    >>> Table([{"a": 1, "b": 0.5}, {"a": 2, "b": 0.25}])
    a  b
    -  ----
    1  0.5
    2  0.25
    """

    def __init__(
        self,
        rows: Iterable[Mapping[str, Any]],
        float_format: str = ".4g",
        title: str | None = None,
    ) -> None:
        if not isinstance(rows, Iterable) or isinstance(rows, (str, bytes, Mapping)):
            raise TypeError(f"rows must be a list of dicts, got {rows!r:.80}")
        self.rows: list[dict[str, Any]] = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping) or not all(isinstance(k, str) for k in row):
                raise TypeError(
                    f"rows[{i}] must be a dict with str keys (the column names), got {row!r:.80}"
                )
            self.rows.append(dict(row))
        check_type(float_format, "float_format", str, "a format spec such as '.4g'")
        try:
            format(1.5, float_format)
        except ValueError:
            raise ValueError(
                f"float_format={float_format!r} is not a format spec for floats (e.g. '.4g')"
            ) from None
        if title is not None:
            check_type(title, "title", str, "a str or None")
        self.float_format = float_format
        self.title = title
        self.columns: list[str] = list(dict.fromkeys(k for row in self.rows for k in row))

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]

    def column(self, name: str) -> list[Any]:
        """Return one column's values in row order, ``None`` where a row lacks it.

        Raises
        ------
        KeyError
            If no row has that column.
        """
        if name not in self.columns:
            raise KeyError(f"no column {name!r}; columns are {self.columns}")
        return [row.get(name) for row in self.rows]

    def to_dicts(self) -> list[dict[str, Any]]:
        """Return the rows as plain dictionaries (copies)."""
        return [dict(r) for r in self.rows]

    def _cell(self, value: Any) -> str:
        """Write one value: floats by ``float_format``, whole ones below 10 million in full."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if _is_float_scalar(value):
            value = float(value)  # a NumPy float16 or float32 scalar as well as a Python float
            text = format(value, self.float_format)
            if value.is_integer() and abs(value) < 1e7 and ("#" not in self.float_format
                                                            or "e" in text.lower()):
                return str(int(value))  # 65504, not 6.55e+04
            return text
        return str(value)

    def _text_rows(self) -> Sequence[list[str]]:
        """Return every row as the text of its cells."""
        return [[self._cell(row.get(c)) for c in self.columns] for row in self.rows]

    def __repr__(self) -> str:
        body = self._text_rows()
        widths = [max([len(c)] + [len(r[i]) for r in body]) for i, c in enumerate(self.columns)]
        lines = []
        if self.title:
            lines.append(self.title)
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(self.columns, widths, strict=True)).rstrip()
        )
        lines.append("  ".join("-" * w for w in widths))
        for r in body:
            lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>"
            for r in self._text_rows()
        )
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _is_float_scalar(value: Any) -> bool:
    """Return whether a value is a Python float or a NumPy floating scalar (no float subclass)."""
    if isinstance(value, float):
        return True
    dtype = getattr(value, "dtype", None)
    return (
        type(value).__module__ == "numpy"
        and getattr(value, "ndim", None) == 0
        and getattr(dtype, "kind", None) == "f"
    )
