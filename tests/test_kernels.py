"""mptutor.kernels: the Tensor Core kernel-name classifier, held against real profiler names.

Framework-free: these tests run without PyTorch (or any framework) installed.
"""
# ruff: noqa: E501  (kernel names are quoted whole, as profilers print them)

import subprocess
import sys

import pytest

from mptutor.kernels import is_tensor_core_kernel

TENSOR_CORE = [
    # Volta: the "884" kernels of the GTC 2018 talk
    "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
    "volta_h884gemm_64x64_ldg8_nn",
    "volta_s884cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc2nchw_tn_v1",
    # Turing
    "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn",
    "turing_h1688gemm_256x128_ldg8_tn",
    # Ampere: cuBLAS, TF32, xmma, CUTLASS, cuDNN implicit GEMM
    "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
    "ampere_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn",
    "ampere_tf32_s1688gemm_tf32_128x128_16x3_nt",
    "sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_kernel",
    "cutlass_80_tensorop_s16816gemm_f16_256x128_32x3_nn_align8",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(T1::Params)",
    "sm86_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nchw_tilesize64x32x64",
    "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16",
    # Hopper: xmma sm90, CUTLASS 3 wgmma, cuBLAS nvjet kernels
    "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_cgasize1x2x1_warpgroupsize2x1x1",
    "void cutlass::device_kernel<cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma>",
    "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
    "nvjet_tst_128x128_64x4_1x2_h_bz_coopA_NNT",
    "nvjet_sss_tf32_128x256_TNT",
    "nvjet_qqtst_128x256_128x6_1x2_h_bz_coopA_TNT",
]

NOT_TENSOR_CORE = [
    "volta_sgemm_128x64_nn",
    "turing_sgemm_64x32_sliced1x4_nn",
    "ampere_sgemm_128x64_nn",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_kernel",
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>",
    "void gemmSN_TN_kernel<float, 128, 16, 2, 4, 2, 2, true>",
    "implicit_convolve_sgemm",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<c10::Half>, at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<c10::Half>, at::detail::Array<char*, 2>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4> >",
    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<__half, float, 512, true, 1>(cudnnTensorStruct, __half const*, cudnnTensorStruct, __half*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
    "nvjet_sss_128x64_64x8_2x1_v_bz_TNN",
    "Memcpy HtoD (Pageable -> Device)",
]


@pytest.mark.parametrize("name", TENSOR_CORE)
def test_tensor_core_kernels_are_recognised(name):
    assert is_tensor_core_kernel(name)
    assert is_tensor_core_kernel(name.upper())  # case does not matter


@pytest.mark.parametrize("name", NOT_TENSOR_CORE)
def test_other_kernels_are_not(name):
    assert not is_tensor_core_kernel(name)


def test_a_name_must_be_a_string():
    with pytest.raises(TypeError, match="kernel name"):
        is_tensor_core_kernel(None)


def test_the_module_imports_no_framework():
    code = (
        "import sys\nimport mptutor.kernels\n"
        "heavy = {'torch', 'tensorflow', 'keras', 'mxnet', 'jax'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
