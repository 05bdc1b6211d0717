"""The command-line options that every benchmark script shares."""

from __future__ import annotations

import argparse

__all__ = ["add_record_options"]


def add_record_options(parser: argparse.ArgumentParser, smoke_help: str) -> None:
    """Add ``--smoke``, ``--save`` and ``--out-dir`` to a benchmark script's parser.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The script's parser.
    smoke_help : str
        What ``--smoke`` runs in this script (a tiny size that checks the code path).
    """
    parser.add_argument("--smoke", action="store_true", help=smoke_help)
    parser.add_argument("--save", action="store_true", help="write a JSON record")
    parser.add_argument(
        "--out-dir",
        default=None,
        help="folder for the record (default data/results; a temp dir for --smoke)",
    )
