"""mptutor's FP4 helpers held against torchao 0.18 on the same inputs.

Where the definitions agree:

- ``mpt.nvfp4_fake_quantize`` against torchao's two-level ``nvfp4_quantize``
  (torchao/prototype/mx_formats/nvfp4_tensor.py, tensor scale from
  ``per_tensor_amax_to_scale``) dequantized: the same values wherever the block's E4M3 scale
  is 2**-6 or more (E4M3's normal numbers); measured on 300 tensors of 64 x 64 with rows
  scaled over e**-8 to e**8, one value of 790,032 differed (torchao multiplies by reciprocals
  where mptutor divides: a rounding edge). The FP4 rounding itself (to nearest even,
  saturating) is bit for bit torchao's ``f32_to_f4_unpacked`` on every tie and around it.
- ``mptutor.hadamard.hadamard_matrix`` is torchao's ``hadamard_matrix``
  (torchao/prototype/spinquant/hadamard_utils.py): both are the Sylvester matrix divided by
  sqrt(n), torchao's in float32 (exactly the same where sqrt(n) is a power of two, to float32
  rounding elsewhere); torchao's slow transform ``matmul_hadU_slow`` (a butterfly) equals
  ``hadamard_transform(x, seed=None)`` to float32 rounding.

Where they differ, by design:

1. NVFP4 block scales below 2**-6: torchao clamps them up to 2**-6, mptutor rounds them to
   the nearest E4M3 value, subnormals included (tests/test_fp8_vs_torchao.py measures it).
2. The random Hadamard matrix: torchao's ``random_hadamard_matrix(n, seed)`` is
   ``diag(s) @ H`` (the rows' signs flipped, signs from ``torch.Generator``), mptutor's
   ``random_hadamard(n, seed)`` is ``H @ diag(s)`` (the columns', signs from NumPy's
   ``default_rng``): each is the other's transpose form, both orthonormal; the same seed gives
   other signs (measured below: seeds 0 to 9 all differ).
3. torchao 0.18 has no 16x16 blocks and no stochastic rounding for NVFP4, and its
   ``hadamard_transform`` needs the ``fast_hadamard_transform`` CUDA extension: nothing to
   compare there.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("torchao", reason="torchao is not installed")

from mptutor import fp8, hadamard  # noqa: E402
from mptutor import torch as mpt  # noqa: E402
from mptutor.torch import _fp4  # noqa: E402

mpt.import_torchao()
from torchao.prototype.mx_formats.kernels import (  # noqa: E402
    f4_unpacked_to_f32,
    f32_to_f4_unpacked,
    unpack_uint4,
)
from torchao.prototype.mx_formats.nvfp4_tensor import (  # noqa: E402
    nvfp4_quantize,
    per_tensor_amax_to_scale,
)


@pytest.fixture(scope="module")
def hadamard_utils():
    """torchao's spinquant Hadamard helpers (importing them prints a note about a CUDA kernel)."""
    from torchao.prototype.spinquant import hadamard_utils

    return hadamard_utils


def _torchao_fake(x):
    """torchao's two-level NVFP4 quantization, dequantized; and its block scales (float32)."""
    t = torch.from_numpy(x)
    tensor_scale = per_tensor_amax_to_scale(t.abs().max())
    scales, data = nvfp4_quantize(t, 16, tensor_scale)
    elements = f4_unpacked_to_f32(unpack_uint4(data)).reshape(x.shape)
    return elements * scales.float().repeat_interleave(16, -1) * tensor_scale, scales.float()


def test_fake_quantize_is_torchaos_nvfp4_where_block_scales_are_normal():
    rng = np.random.default_rng(0)
    same = total = 0
    for _ in range(40):
        x = rng.standard_normal((64, 64)) * np.exp(rng.uniform(-8, 8, (64, 1)))
        x = x.astype(np.float32)
        ours = mpt.nvfp4_fake_quantize(torch.from_numpy(x))
        theirs, their_scales = _torchao_fake(x)
        our_scales = torch.from_numpy(fp8.nvfp4_quantize(x)[1].astype(np.float32))
        normal = our_scales >= 2.0**-6
        assert normal.float().mean() > 0.5 and (~normal).any()  # both kinds of block
        assert torch.equal(our_scales[normal], their_scales[normal])
        assert (their_scales[~normal] == 2.0**-6).all()  # torchao's clamp
        normal = normal.repeat_interleave(16, -1)
        same += (ours == theirs)[normal].sum().item()
        total += normal.sum().item()
    assert same / total > 0.9999, (same, total)


def test_fp4_rounding_is_torchaos_f32_to_f4_on_every_tie_and_around_it():
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    ties = (grid[1:] + grid[:-1]) / 2
    near = np.concatenate([ties, np.nextafter(ties, 0), np.nextafter(ties, 7), grid])
    rng = np.random.default_rng(1)
    x = np.concatenate([near, -near, rng.uniform(-8, 8, 20000), [7.0, -100.0, -0.0, 1e-30]])
    x = torch.from_numpy(x.astype(np.float32))
    theirs = f4_unpacked_to_f32(f32_to_f4_unpacked(x))
    ours = _fp4._round_fp4(x.clone(), None, False, work=torch.empty_like(x))
    assert torch.equal(ours.view(torch.int32), theirs.view(torch.int32))  # -0.0 included


def test_hadamard_matrix_is_torchaos(hadamard_utils):
    for n in (4, 16, 64, 256):  # sqrt(n) a power of two: float32 holds the entries exactly
        theirs = hadamard_utils.hadamard_matrix(n, "cpu")
        assert theirs.dtype == torch.float32
        np.testing.assert_array_equal(hadamard.hadamard_matrix(n), theirs.double().numpy())
    for n in (2, 8, 32):  # +-1/sqrt(n) rounded to float32 by torchao
        theirs = hadamard_utils.hadamard_matrix(n, "cpu").double().numpy()
        np.testing.assert_allclose(hadamard.hadamard_matrix(n), theirs, rtol=1e-7, atol=0)


def test_torchaos_slow_transform_is_the_plain_hadamard_transform(hadamard_utils):
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    theirs = hadamard_utils.matmul_hadU_slow(x, None, 1)
    ours = mpt.hadamard_transform(x, seed=None)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-6)
    assert not torch.equal(ours, mpt.hadamard_transform(x, seed=0))  # signs change it


def test_random_hadamard_flips_columns_where_torchao_flips_rows(hadamard_utils):
    h = hadamard.hadamard_matrix(16)
    differ = 0
    for seed in range(10):
        theirs = hadamard_utils.random_hadamard_matrix(16, "cpu", seed=seed).numpy()
        their_signs = theirs[:, 0] / h[:, 0]
        np.testing.assert_allclose(theirs, np.diag(their_signs) @ h, atol=1e-15)  # rows
        ours = hadamard.random_hadamard(16, seed)
        our_signs = hadamard.random_signs(16, seed)
        np.testing.assert_array_equal(ours, h @ np.diag(our_signs))  # columns
        for r in (theirs, ours):
            np.testing.assert_allclose(r @ r.T, np.eye(16), atol=1e-15)
        differ += not np.array_equal(their_signs, our_signs)
    assert differ == 10  # the same seed, other signs: another generator
