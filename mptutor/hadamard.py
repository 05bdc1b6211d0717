"""The (random) Hadamard transform on blocks of values, framework-free (NumPy).

NVFP4 recipes apply it to both inputs of the weight-gradient product, in blocks of 16 along its
reduction axis: an outlier is spread over its block before quantization, and ``R`` being
orthonormal, it cancels: ``(A @ R.T) @ (B @ R.T).T = A @ B.T``.

>>> h = hadamard_matrix(4) * 2  # entries +-1/2 before the factor 2
>>> h.astype(int).tolist()
[[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mptutor._checks import _short, check_scalar

__all__ = ["hadamard_matrix", "random_hadamard", "random_signs", "hadamard_transform"]

_MAX_N = 2**14  # the largest matrix built: 16384 x 16384 float64 is 2 GiB


def _power_of_two(n: Any, name: str) -> int:
    """Return ``n`` checked: an int power of two from 1 to 2**14."""
    n = check_scalar(n, name, int, min_val=1, max_val=_MAX_N)
    if n & (n - 1):
        raise ValueError(f"{name} must be a power of two (1, 2, 4, 8, 16, ...), got {n}")
    return n


def _seed(seed: Any) -> int | None:
    """Return ``seed`` checked: None or an int >= 0."""
    return check_scalar(seed, "seed", int, min_val=0, allow_none=True)


def _check(shape: tuple[int, ...], seed: Any, block: Any, inverse: Any, name: str) -> tuple:
    """Check :func:`hadamard_transform`'s options and input shape; return seed and block."""
    block = _power_of_two(block, "block")
    seed = _seed(seed)
    if not isinstance(inverse, (bool, np.bool_)):
        raise TypeError(f"inverse must be True or False, got {_short(inverse)}")
    if len(shape) == 0 or shape[-1] % block:
        raise ValueError(
            f"the last axis of {name} (shape {shape}) must be a multiple of block={block}"
        )
    return seed, block


def hadamard_matrix(n: int = 16) -> np.ndarray:
    """Return the n x n Sylvester Hadamard matrix over ``sqrt(n)`` (float64): ``H @ H = I``.

    ``H_1 = [1]``, ``H_2n = [[H_n, H_n], [H_n, -H_n]]``.

    Parameters
    ----------
    n : int, optional
        Size, a power of two from 1 to ``2**14``.

    Raises
    ------
    TypeError, ValueError
        If ``n`` is not an int power of two in that range.
    """
    n = _power_of_two(n, "n")
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def random_signs(n: int = 16, seed: int | None = 0) -> np.ndarray:
    """Return ``n`` random signs (+1.0 or -1.0, float64), the same on every machine for a seed.

    Parameters
    ----------
    n : int, optional
        How many, at least 1.
    seed : int or None, optional
        An int >= 0, or None (all +1).
    """
    n = check_scalar(n, "n", int, min_val=1, max_val=_MAX_N)
    seed = _seed(seed)
    if seed is None:
        return np.ones(n)
    return np.random.default_rng(seed).integers(0, 2, n) * 2.0 - 1.0


def random_hadamard(n: int = 16, seed: int | None = 0) -> np.ndarray:
    """Return ``H @ diag(s)`` (``s`` :func:`random_signs`), float64: still ``R.T @ R = I``.

    Parameters
    ----------
    n : int, optional
        Size, a power of two from 1 to ``2**14``.
    seed : int or None, optional
        Seed of the signs (an int >= 0); None gives :func:`hadamard_matrix` itself.
    """
    n = _power_of_two(n, "n")
    return hadamard_matrix(n) * random_signs(n, seed)


def hadamard_transform(
    x: Any, seed: int | None = 0, block: int = 16, inverse: bool = False
) -> np.ndarray:
    """Apply :func:`random_hadamard` to every block of ``block`` values along the last axis.

    Each block, a column vector ``v``, becomes ``R @ v`` (``R.T @ v`` with ``inverse=True``):
    ``hadamard_transform(a) @ hadamard_transform(b).T`` is ``a @ b.T`` up to rounding.

    Parameters
    ----------
    x : array_like
        Real values; the last axis a multiple of ``block``.
    seed : int or None, optional
        Seed of the signs (the same for every block); None for the plain Hadamard matrix.
    block : int, optional
        Block size, a power of two (16 in the NVFP4 recipes).
    inverse : bool, optional
        Apply the inverse (the transpose) instead.

    Returns
    -------
    numpy.ndarray
        The shape of ``x``; float64 for float64 or integer input, else float32 (rounded once).

    Raises
    ------
    TypeError, ValueError
        For a non-real ``x``, a bad ``seed`` or ``block``, or a last axis that is not a
        multiple of ``block``; nothing is computed then.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"x must hold real numbers, got dtype {arr.dtype}")
    seed, block = _check(arr.shape, seed, block, inverse, "x")
    r = random_hadamard(block, seed)
    matrix = r if inverse else r.T  # rows as vectors: v @ R.T is (R @ v).T
    blocks = arr.astype(np.float64).reshape(*arr.shape[:-1], arr.shape[-1] // block, block)
    out = (blocks @ matrix).reshape(arr.shape)
    return out if arr.dtype == np.float64 or arr.dtype.kind in "iu" else out.astype(np.float32)
