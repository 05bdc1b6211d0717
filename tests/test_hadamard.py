"""mptutor.hadamard: the Sylvester matrix, its random-sign version, the blockwise transform."""

import numpy as np
import pytest

from mptutor import hadamard


@pytest.mark.parametrize("n", [1, 2, 4, 16, 64])
def test_hadamard_matrix_is_sylvesters_and_orthonormal(n):
    h = hadamard.hadamard_matrix(n)
    assert h.shape == (n, n) and h.dtype == np.float64
    assert np.array_equal(np.abs(h), np.full((n, n), 1 / np.sqrt(n)))  # entries +-1/sqrt(n)
    np.testing.assert_allclose(h @ h.T, np.eye(n), atol=1e-15)
    np.testing.assert_array_equal(h, h.T)
    if n > 1:  # the recursion H_2n = [[H_n, H_n], [H_n, -H_n]] (normalised)
        half = hadamard.hadamard_matrix(n // 2) / np.sqrt(2)
        np.testing.assert_allclose(h, np.block([[half, half], [half, -half]]), atol=1e-15)


def test_hadamard_matrix_of_4_written_out():
    expected = [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    np.testing.assert_array_equal(hadamard.hadamard_matrix(4) * 2, expected)


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_random_hadamard_is_h_times_seeded_signs_and_orthonormal(seed):
    r = hadamard.random_hadamard(16, seed)
    signs = hadamard.random_signs(16, seed)
    assert set(signs.tolist()) == {-1.0, 1.0}
    np.testing.assert_array_equal(r, hadamard.hadamard_matrix(16) @ np.diag(signs))
    np.testing.assert_allclose(r @ r.T, np.eye(16), atol=1e-15)
    np.testing.assert_allclose(r.T @ r, np.eye(16), atol=1e-15)
    np.testing.assert_array_equal(r, hadamard.random_hadamard(16, seed))  # reproducible
    assert not np.array_equal(r, hadamard.hadamard_matrix(16))  # signs flipped somewhere


def test_random_signs_differ_between_seeds_and_none_gives_the_plain_matrix():
    assert not np.array_equal(hadamard.random_signs(16, 0), hadamard.random_signs(16, 1))
    np.testing.assert_array_equal(hadamard.random_signs(16, None), np.ones(16))
    np.testing.assert_array_equal(hadamard.random_hadamard(16, None), hadamard.hadamard_matrix(16))


def test_transform_is_r_times_each_block_and_the_inverse_undoes_it():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 48))
    y = hadamard.hadamard_transform(x, seed=7)
    r = hadamard.random_hadamard(16, 7)
    for k in range(3):  # each block of 16, as a column vector v, becomes R v
        block = x[..., 16 * k : 16 * (k + 1)]
        np.testing.assert_allclose(y[..., 16 * k : 16 * (k + 1)], block @ r.T, atol=1e-14)
    np.testing.assert_allclose(hadamard.hadamard_transform(y, seed=7, inverse=True), x, atol=1e-14)
    np.testing.assert_allclose(hadamard.hadamard_transform(
        hadamard.hadamard_transform(x, 7, inverse=True), 7), x, atol=1e-14)  # fmt: skip
    # the norm of each block is kept (orthonormal)
    np.testing.assert_allclose(
        np.linalg.norm(y.reshape(3, 5, 3, 16), axis=-1),
        np.linalg.norm(x.reshape(3, 5, 3, 16), axis=-1),
        rtol=1e-14,
    )


def test_transform_cancels_in_a_product_along_the_transformed_axis():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 64)), rng.standard_normal((9, 64))
    ha, hb = hadamard.hadamard_transform(a, seed=3), hadamard.hadamard_transform(b, seed=3)
    np.testing.assert_allclose(ha @ hb.T, a @ b.T, atol=1e-13)
    assert np.abs(ha - a).max() > 0.1  # the operands themselves did change
    # with different signs on the two operands it does not cancel
    other = hadamard.hadamard_transform(b, seed=4)
    assert np.abs(ha @ other.T - a @ b.T).max() > 0.1


def test_transform_spreads_an_outlier_over_its_block():
    x = np.zeros((1, 16))
    x[0, 3] = 8.0
    y = hadamard.hadamard_transform(x, seed=0)
    np.testing.assert_array_equal(np.abs(y), np.full((1, 16), 2.0))  # 8 / sqrt(16) everywhere


def test_transform_dtypes():
    x32 = np.ones((2, 16), dtype=np.float32)
    assert hadamard.hadamard_transform(x32).dtype == np.float32
    assert hadamard.hadamard_transform(x32.astype(np.float64)).dtype == np.float64
    assert hadamard.hadamard_transform(np.ones((2, 16), dtype=int)).dtype == np.float64
    assert hadamard.hadamard_transform(np.ones(8), block=8).shape == (8,)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: hadamard.hadamard_matrix(12), ValueError, "power of two"),
        (lambda: hadamard.hadamard_matrix(0), ValueError, "n must be in"),
        (lambda: hadamard.hadamard_matrix(16.0), TypeError, "n must be an int"),
        (lambda: hadamard.random_hadamard(16, seed=-1), ValueError, "seed must be in"),
        (lambda: hadamard.random_hadamard(16, seed=1.5), TypeError, "seed must be an int"),
        (lambda: hadamard.hadamard_transform(np.ones((2, 24))), ValueError, "multiple of block"),
        (lambda: hadamard.hadamard_transform(np.float32(1)), ValueError, "multiple of block"),
        (lambda: hadamard.hadamard_transform(np.ones(16), block=6), ValueError, "power of two"),
        (lambda: hadamard.hadamard_transform(np.ones(16), inverse=1), TypeError, "inverse"),
        (lambda: hadamard.hadamard_transform(np.array(["a"] * 16)), TypeError, "real numbers"),
    ],
)
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()
