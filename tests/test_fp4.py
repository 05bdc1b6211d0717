"""mptutor.fp8.nvfp4_quantize: 16x16 blocks and stochastic rounding of the FP4 elements."""

import ml_dtypes
import numpy as np
import pytest

from mptutor import fp8

if not hasattr(ml_dtypes, "float4_e2m1fn"):  # the MXNet environment's ml_dtypes 0.4
    pytest.skip("NVFP4 needs ml_dtypes >= 0.5 (FP4 E2M1)", allow_module_level=True)

FP4 = np.dtype(ml_dtypes.float4_e2m1fn)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])  # the non-negative FP4 values


def _wide(seed, shape=(64, 96), low=-12, high=12):
    """Normal values, each 16x16 tile scaled by its own power of two."""
    rng = np.random.default_rng(seed)
    tiles = np.exp2(rng.integers(low, high, (*shape[:-2], shape[-2] // 16, shape[-1] // 16)))
    scale = np.kron(tiles, np.ones((16, 16)))
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _bits(a):
    return np.asarray(a).view(np.uint8)


def test_default_is_the_1x16_recipe_whatever_way_it_is_asked_for():
    x = _wide(0)
    default = fp8.nvfp4_quantize(x)
    for spelled in ((1, 16), [1, 16], (np.int64(1), 16)):
        e, s, t = fp8.nvfp4_quantize(x, spelled, "nearest", seed=3)  # a seed changes nothing
        assert np.array_equal(_bits(e), _bits(default[0])) and t == default[2]
        assert np.array_equal(_bits(s), _bits(default[1]))


def test_1x16_written_out_block_by_block():
    x = _wide(1, (16, 64))
    e, s, t = fp8.nvfp4_quantize(x)
    assert t == np.float32(np.float64(np.abs(x).max()) / (6 * 448))
    for i in range(16):
        for j in range(4):
            block = x[i, 16 * j : 16 * (j + 1)]
            scale = (np.abs(block).max() / np.float32(6) / t).astype(E4M3)
            assert _bits(s[i, j]) == _bits(scale)
            decode = np.float32(scale) * t
            expected = (block / decode).astype(FP4)
            assert np.array_equal(_bits(e[i, 16 * j : 16 * (j + 1)]), _bits(expected))


def test_2d_blocks_take_one_scale_from_each_16x16_blocks_amax():
    x = _wide(2, (2, 32, 48))
    e, s, t = fp8.nvfp4_quantize(x, (16, 16))
    assert (e.dtype, s.dtype, e.shape, s.shape) == (FP4, E4M3, x.shape, (2, 2, 3))
    assert t == np.float32(np.float64(np.abs(x).max()) / (6 * 448))
    for b in range(2):
        for i in range(2):
            for j in range(3):
                tile = x[b, 16 * i : 16 * (i + 1), 16 * j : 16 * (j + 1)]
                scale = (np.abs(tile).max() / np.float32(6) / t).astype(E4M3)
                assert _bits(s[b, i, j]) == _bits(scale)
                expected = (tile / (np.float32(scale) * t)).astype(FP4)
                got = e[b, 16 * i : 16 * (i + 1), 16 * j : 16 * (j + 1)]
                assert np.array_equal(_bits(got), _bits(expected))
    back = fp8.nvfp4_dequantize(e, s, t, (16, 16))
    tile_amax = np.kron(np.abs(x).reshape(2, 2, 16, 3, 16).max(axis=(2, 4)), np.ones((16, 16)))
    assert (np.abs(back - x) <= tile_amax / 6 * 1.07).all()  # one FP4 step of the top binade


def test_2d_blocks_equal_1x16_blocks_where_every_row_of_a_tile_has_the_tiles_amax():
    rng = np.random.default_rng(3)
    constant = np.kron(rng.standard_normal((4, 3)), np.ones((16, 16))).astype(np.float32)
    shared = _wide(4, (64, 48))  # each row of each tile gets the tile's amax somewhere
    tiles = shared.reshape(4, 16, 3, 16)
    amax = np.abs(tiles).max(axis=(1, 3), keepdims=True)
    columns = rng.integers(0, 16, (4, 16, 3))
    for i in range(4):
        for r in range(16):
            for j in range(3):
                tiles[i, r, j, columns[i, r, j]] = amax[i, 0, j, 0]
    for x in (constant, shared):
        e1, s1, t1 = fp8.nvfp4_quantize(x, (1, 16))
        e2, s2, t2 = fp8.nvfp4_quantize(x, (16, 16))
        assert t1 == t2
        np.testing.assert_array_equal(_bits(e1), _bits(e2))
        np.testing.assert_array_equal(_bits(s1), _bits(np.repeat(s2, 16, axis=0)))
    # and they differ on a tensor whose rows do not share their tile's amax
    x = _wide(5, (64, 48))
    assert not np.array_equal(
        _bits(fp8.nvfp4_quantize(x)[0]), _bits(fp8.nvfp4_quantize(x, (16, 16))[0])
    )


def test_2d_blocks_of_the_transpose_are_the_transpose_of_the_blocks():
    w = _wide(6, (48, 80))
    e, s, t = fp8.nvfp4_quantize(w, (16, 16))
    et, st, tt = fp8.nvfp4_quantize(w.T, (16, 16))
    assert t == tt
    np.testing.assert_array_equal(_bits(e).T, _bits(et))
    np.testing.assert_array_equal(_bits(s).T, _bits(st))
    np.testing.assert_array_equal(
        fp8.nvfp4_dequantize(e, s, t, (16, 16)).T, fp8.nvfp4_dequantize(et, st, tt, (16, 16))
    )
    # 1x16 blocks along the rows of w and of w.T quantize w in two different ways
    rows = fp8.nvfp4_dequantize(*fp8.nvfp4_quantize(w))
    columns = fp8.nvfp4_dequantize(*fp8.nvfp4_quantize(w.T)).T
    assert (rows != columns).mean() > 0.1


def test_2d_blocks_with_nan_inf_zero_and_tiny_tiles():
    x = _wide(7, (32, 32))
    x[0, 0] = np.nan
    x[16, 31] = np.inf
    x[:16, 16:] = 0
    x[16:, :16] *= np.float32(1e-12)  # its block scale rounds to 0: flushed
    e, s, t = fp8.nvfp4_quantize(x, (16, 16))
    scales = s.astype(np.float32)
    assert np.isnan(scales[0, 0]) and np.isnan(scales[1, 1])
    assert scales[0, 1] == 0 and scales[1, 0] == 0
    back = fp8.nvfp4_dequantize(e, s, t, (16, 16))
    assert np.isnan(back[:16, :16]).all() and np.isnan(back[16:, 16:]).all()
    assert not back[:16, 16:].any() and not back[16:, :16].any()


def _fp4_neighbours(v):
    """The FP4 values just below and above |v| (v within 6), with v's sign."""
    size = np.abs(v)
    hi = GRID[np.searchsorted(GRID, size, side="left")]
    lo = GRID[np.searchsorted(GRID, size, side="right") - 1]
    return np.copysign(lo, v), np.copysign(hi, v)


def test_stochastic_rounding_is_unbiased_and_picks_only_the_two_neighbours():
    rng = np.random.default_rng(8)
    # one block: the amax 6 * 448 * t fixes block scale 448, so the elements are x / (448 t)
    values = np.concatenate([[6.0], rng.uniform(-6, 6, 15)]).astype(np.float32)
    values[1:4] = [0.25, -1.75, 5.0]  # ties of round to nearest
    x = np.tile(values, (1, 1))
    draws = 4000
    elements, scales = [], []
    for seed in range(draws):
        e, s, t = fp8.nvfp4_quantize(x, rounding="stochastic", seed=seed)
        elements.append(e.astype(np.float64)[0])
        scales.append(s.astype(np.float32))
    elements = np.array(elements)
    # the block scale and the tensor scale are those of round to nearest
    e_near, s_near, t_near = fp8.nvfp4_quantize(x)
    assert all(np.array_equal(sc, s_near.astype(np.float32)) for sc in scales) and t == t_near
    target = (x[0] / (s_near.astype(np.float32)[0, 0] * t_near)).astype(np.float64)
    lo, hi = _fp4_neighbours(target)
    assert ((elements == lo) | (elements == hi)).all()
    # unbiased: each element's mean within 5 standard errors of x / scale
    p = np.where(hi != lo, (target - lo) / np.where(hi != lo, hi - lo, 1), 0)
    sigma = np.abs(hi - lo) * np.sqrt(p * (1 - p) / draws)
    assert (np.abs(elements.mean(axis=0) - target) <= 5 * sigma + 1e-12).all()
    # both neighbours drawn where the value lies between them; round to nearest is biased
    between = (hi != lo) & (p > 0.05) & (p < 0.95)
    assert between.sum() >= 10
    assert ((elements[:, between] == lo[between]).any(axis=0)).all()
    assert ((elements[:, between] == hi[between]).any(axis=0)).all()
    bias_nearest = np.abs(e_near.astype(np.float64)[0] - target)[between].mean()
    assert bias_nearest > 10 * np.abs(elements.mean(axis=0) - target)[between].mean()


def test_stochastic_rounding_saturates_and_keeps_representable_values():
    x = np.array([[6.0, 3.0, -4.0, 0.5, 0.0, -0.0, 1.5, -6.0] * 2], dtype=np.float32)
    x[0, 8] = 2.0**-30  # far below the smallest FP4 step: 0 or 0.5
    for seed in range(20):
        e, s, t = fp8.nvfp4_quantize(x, rounding="stochastic", seed=seed)
        values = e.astype(np.float32) * s.astype(np.float32)[0, 0] * t
        # FP4 values (after the scale) come back as they are, -0.0 included
        kept = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15]
        np.testing.assert_array_equal(_bits(e)[0, kept], _bits(fp8.nvfp4_quantize(x)[0])[0, kept])
        assert values[0, 0] == 6 * s.astype(np.float32)[0, 0] * t
    # beyond the largest element it saturates at 6: a block whose wanted scale 13.3 (in
    # E4M3's binade of spacing 1) rounds down to 13, so its amax element is 6 * 13.3 / 13
    y = np.ones((1, 32), dtype=np.float32)
    y[0, 0] = 1000.0  # the tensor's amax: block 0 gets the scale 448
    t = np.float32(1000 / 2688)
    y[0, 16] = np.float32(13.3 * 6) * t
    for seed in range(20):
        e, s, t = fp8.nvfp4_quantize(y, rounding="stochastic", seed=seed)
        assert s.astype(np.float32)[0, 1] == 13
        assert y[0, 16] / (np.float32(13) * t) > 6.1
        assert e.astype(np.float32)[0, 16] == 6.0


def test_stochastic_rounding_is_reproducible_from_a_seed_or_a_generator():
    x = _wide(9, (32, 64))
    a = fp8.nvfp4_quantize(x, (16, 16), "stochastic", seed=5)[0]
    b = fp8.nvfp4_quantize(x, (16, 16), "stochastic", seed=5)[0]
    c = fp8.nvfp4_quantize(x, (16, 16), "stochastic", seed=6)[0]
    d = fp8.nvfp4_quantize(x, (16, 16), "stochastic", seed=np.random.default_rng(5))[0]
    assert np.array_equal(_bits(a), _bits(b)) and np.array_equal(_bits(a), _bits(d))
    assert not np.array_equal(_bits(a), _bits(c))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"block_shape": (2, 16)}, ValueError, r"block_shape must be \(1, 16\) or \(16, 16\)"),
        ({"block_shape": 16}, ValueError, "block_shape must be"),
        ({"block_shape": (True, 16)}, ValueError, "block_shape must be"),
        ({"block_shape": (1.0, 16)}, ValueError, "block_shape must be"),
        ({"rounding": "up"}, ValueError, "rounding must be one of nearest, stochastic"),
        ({"rounding": None}, ValueError, "rounding must be one of"),
        ({"seed": -1}, ValueError, "seed must be in"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"rounding": "stochastic", "seed": "a"}, TypeError, "seed must be an int"),
    ],
)
def test_bad_options_are_refused_before_any_work(kwargs, error, message):
    with pytest.raises(error, match=message):
        fp8.nvfp4_quantize(np.ones((16, 16)), **kwargs)


def test_2d_blocks_need_two_axes_that_are_multiples_of_16():
    with pytest.raises(ValueError, match="last two axes of x"):
        fp8.nvfp4_quantize(np.ones((8, 16)), (16, 16))
    with pytest.raises(ValueError, match="last two axes of x"):
        fp8.nvfp4_quantize(np.ones(256), (16, 16))
    e, s, t = fp8.nvfp4_quantize(np.ones((16, 32)), (16, 16))
    with pytest.raises(ValueError, match=r"block_scales must have shape \(1, 2\)"):
        fp8.nvfp4_dequantize(e, np.ones((1, 3)), t, (16, 16))
    with pytest.raises(ValueError, match="block_shape must be"):
        fp8.nvfp4_dequantize(e, s, t, (16, 1))
