"""Atomic file writes, kept importable here for the modules that still import them from here.

They live in :mod:`mptutor._atomic`; import them from there.
"""

from mptutor._atomic import atomic_path as atomic_path
from mptutor._atomic import write_text as write_text
