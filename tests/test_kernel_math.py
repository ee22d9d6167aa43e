"""Precision and Tensor Cores from kernel names (profiler.kernel_math), tested against every kernel name of
every capture and trtexec export the tests hold, and the fp32_math capture rule."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from profiler.kernel_math import MATRIX_OPS, PRECISIONS, classify, gpu_tensor_cores
from tests.capture_builders import T, capture_or_skip, kernels, ranges
from tests.conftest import SAMPLE_TRACES, SHARED

FIXTURES = SHARED / "fixtures"


def _captures() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.sqlite")) + sorted(SAMPLE_TRACES.glob("*.sqlite"))


def _kernel_times(path: Path) -> dict[str, int]:
    """Kernel name -> total GPU ns, by SQL over the export (the demangled name, as the loader reads it)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name='CUPTI_ACTIVITY_KIND_KERNEL'").fetchone():
            return {}
        return dict(con.execute(
            "SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value").fetchall())
    finally:
        con.close()


def _all_kernel_names() -> set[str]:
    names: set[str] = set()
    for p in _captures():
        names |= set(_kernel_times(p))
    return names


def _all_tactics() -> set[str]:
    out: set[str] = set()
    for p in FIXTURES.rglob("*.json"):
        try:
            doc = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        stack = [doc]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                t = x.get("TacticName")
                if isinstance(t, str) and t:
                    out.add(t)
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
    return out


@pytest.fixture(scope="module")
def names() -> set[str]:
    found = _all_kernel_names() | _all_tactics()
    if len(found) < 100:
        pytest.skip("the shared fixtures are absent")
    return found


def test_every_name_reads_to_a_known_precision_and_op(names):
    for n in names:
        m = classify(n)
        assert m.precision in PRECISIONS + (None,), n
        assert m.op in MATRIX_OPS + ("gemv", "depthwise", "other", None), n
        assert m.tensor_cores in (True, False, None), n


def test_xmma_is_not_a_tensor_core_marker(names):
    """sm50 XMMA kernels (cuBLAS gemv, pooling) in TensorRT's FP16 engines ran on CUDA cores: the old test
    keyed on 'xmma' said Tensor Cores."""
    sm50 = [n for n in names if n.startswith("sm50_xmma_")]
    assert len(sm50) >= 5  # gemvx and pooling kernels of the RealCUGAN engines and the trtexec exports
    assert all(classify(n).tensor_cores is False for n in sm50)
    gemv = [n for n in names if "gemv" in n.lower()]
    assert gemv and all(classify(n).tensor_cores is False and classify(n).op == "gemv" for n in gemv)
    pooling = [n for n in names if "pooling" in n.lower() or "_pool" in n.lower()]
    assert pooling and all(classify(n).tensor_cores is False and classify(n).op == "other" for n in pooling)
    # FFMA and SIMT name the CUDA cores whatever the family
    ffma = [n for n in names if "ffma" in n.lower() or "_simt" in n.lower()]
    assert ffma and all(classify(n).tensor_cores is False for n in ffma)


def test_mma_shapes_and_reduced_precision_xmma_are_tensor_cores(names):
    shaped = [n for n in names if "_tensor16x8x" in n or "_tensor8x8x" in n]
    assert len(shaped) >= 30 and all(classify(n).tensor_cores is True for n in shaped)
    for n in shaped:  # the math type of the XMMA name is the precision
        assert classify(n).precision == ("fp16" if "_f16f16_f16" in n else "tf32" if "tf32" in n else
                                         "int8" if "_i8" in n else classify(n).precision), n


@pytest.mark.parametrize("name, op, precision, tc", [
    # cuDNN/cuBLAS legacy names: the letter before the MMA shape is the math type
    ("ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "conv", "fp32", False),
    ("trt_turing_h1688cudnn_256x64_ldg8_relu_exp_interior_nhwc_linkable_tn_v1", "conv", "fp16", True),
    ("volta_fp32_i8816cudnn_int8_256x64_ldg16_relu_singleBuffer_interior_nt_v1", "conv", "int8", True),
    ("volta_int8x4_icudnn_int8x4_128x32_relu_xregs_small_c32_nn_v1", "conv", "int8", False),  # dp4a
    ("ampere_fp16_s16816gemm_fp16_64x64_ldg8_f2f_stages_64x5_tn", "gemm", "fp16", True),
    ("void sgemm_largek_lds64<(bool)1, (bool)0, (int)5>(float *, const float *)", "gemm", "fp32", False),
    # XMMA: sm target, math type, FFMA
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_"
     "execute_kernel__5x_cublas", "gemm", "fp32", False),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_warpgroupsize1x1x1_g1_"
     "execute_segment_k_off_kernel__5x_cudnn", "conv", "tf32", True),
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", "conv", "fp16", True),
    ("sm70_xmma_gemm_as_conv1x1_f16f16_f16_f16_tn_n_simt_small_batch_bias_relu_exec_conv1x1_kernel_0_kernel_trt",
     "conv", "fp16", False),
    ("sm50_xmma_cublas_gemvx_f16f16_f32_f32_nn_n_int32_unit_n_launch_param64x8x8_strided_unit_stride_execute_"
     "kernel_trt", "gemv", "fp16", False),
    ("sm50_xmma_pooling_fw_4d_FP32FP32NHWC_Average_FastDiv_CAlign4", "other", "fp32", False),
    ("void xmma_trt::implicit_gemm::strided_dgrad_indexed::kernel_helper_stage_0<xmma_trt::Params>(T1)",
     "other", None, False),
    # CUTLASS, nvjet, FlashAttention, Triton, Myelin, PyTorch
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(T1::Params)", "gemm", "tf32", True),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_256x64_32x4_tn_align8>(T1::Params)",
     "gemm", "fp16", True),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)", "gemm", "fp32", False),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN", "gemm", "tf32", True),
    ("nvjet_sm90_hsh_128x16_64x11_4x1_v_bz_splitK_NNT", "gemm", "fp16", True),
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, "
     "cutlass::bfloat16_t>>(Flash_fwd_params)", "attention", "bf16", True),
    ("triton_poi_fused_add_mul_0", "other", None, False),
    ("triton_tem_fused_mm_0", "gemm", None, None),
    ("__myl_AddMulRouMaxMinTra_0xa2e185eeee77c88be9eabf5c34ef6679", None, None, None),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::Half>, "
     "std::array<char *, (unsigned long)3>>(int, T2, T3)", "other", "fp16", False),
    ("void at::native::<unnamed>::conv_depthwise2d_forward_kernel<(int)3, float, int>(...)", "depthwise", "fp32",
     False),
    ("void genericReformat::copyPackedKernel<__half, __half, (bool)1, (bool)1>(unsigned int)", "other", "fp16", False),
    ("_selective_scan_update_kernel", None, None, None),
])
def test_named_families(name, op, precision, tc):
    m = classify(name)
    assert (m.op, m.precision, m.tensor_cores) == (op, precision, tc), m


def test_gpu_tensor_cores_by_compute_capability():
    assert gpu_tensor_cores([{"compute_major": 7, "compute_minor": 5}]) is True
    assert gpu_tensor_cores([{"compute_major": 6, "compute_minor": 1}]) is False
    assert gpu_tensor_cores([{"compute_major": 6}, {"compute_major": 8}]) is None
    assert gpu_tensor_cores([]) is None


# ---- fp32_math ----

FFMA = ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_"
        "execute_kernel__5x_cublas")
HALF = "sm80_xmma_gemm_f16f16_f16f16_f16_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x16_execute_kernel"
ADD = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>>(int, T2, T3)"


def _synthetic(gemm: str, major: int | None):
    """20 inferences of 1 ms each: a 600 us GEMM, a 100 us element-wise kernel, 300 us idle."""
    from profiler.capture.trace import Trace

    ks, rs = [], []
    for i in range(20):
        t0 = 1_000_000 + i * 1000 * T
        rs.append(("infer", t0, t0 + 1000 * T, 1))
        ks.append({"row": (t0 + 10 * T, t0 + 610 * T, 1, t0 + 5 * T), "name": gemm})
        ks.append({"row": (t0 + 620 * T, t0 + 720 * T, 1, t0 + 8 * T), "name": ADD})
    frame = kernels(*[k["row"] for k in ks])
    frame["name"] = frame["short_name"] = [k["name"] for k in ks]
    gpus = [] if major is None else [{"device_id": 0, "name": "GPU", "compute_major": major, "compute_minor": 0}]
    return Trace.from_frames(meta={"gpus": gpus}, kernels=frame, nvtx=ranges(*rs))


def _fp32(trace, **options):
    from profiler.capture.analyze import AnalysisOptions, analyze

    res = analyze(trace, AnalysisOptions(**options))
    return [f for f in res.findings if f.rule == "fp32_math"], res


def test_fp32_gemm_on_a_tensor_core_gpu_is_found_and_priced():
    [f], res = _fp32(_synthetic(FFMA, 8), include_setup=True)
    assert f.evidence["fp32_share"] == pytest.approx(600 / 700)
    assert f.evidence["fp32_kernel_ms"] == pytest.approx(20 * 0.6)
    assert f.evidence["estimated_saving_ms"] == pytest.approx(20 * 0.6 / 2)
    assert f.evidence["kernels"][0]["name"] == FFMA and f.evidence["kernels"][0]["count"] == 20
    assert f.impact["ms_per_instance"] == pytest.approx(0.3)
    assert "torch" in f.recommendation  # no TensorRT ranges: the framework advice


def test_fp32_math_is_silent_without_tensor_cores_or_with_them_in_use():
    assert _fp32(_synthetic(FFMA, 6))[0] == []  # Pascal: FP32 on CUDA cores is all it has
    assert _fp32(_synthetic(FFMA, None))[0] == []  # GPU unknown
    assert _fp32(_synthetic(HALF, 8))[0] == []  # FP16 on Tensor Cores: the healthy twin


def _sql_fp32_share(path: Path) -> tuple[float, float]:
    times = _kernel_times(path)
    total = sum(times.values())
    fp32 = sum(ns for n, ns in times.items() if classify(n).fp32_on_cuda_cores)
    return fp32 / 1e6, total / 1e6


def test_fp32_sample_capture_on_the_h200(tmp_path):
    """pipeline.sqlite: torch FP32 matmuls with TF32 off (workloads.py) on an H200: every kernel is an
    sm80 XMMA FFMA GEMM."""
    from tests.capture_builders import result_of

    path = capture_or_skip(SAMPLE_TRACES / "pipeline.sqlite")
    fp32_ms, total_ms = _sql_fp32_share(path)
    [f] = [f for f in result_of(path).findings if f.rule == "fp32_math"]
    assert f.evidence["fp32_kernel_ms"] == pytest.approx(fp32_ms, rel=1e-9)
    assert f.evidence["kernel_ms"] == pytest.approx(total_ms, rel=1e-9)
    assert f.evidence["gpus"][0]["compute_capability"] == "9.0"


HEALTHY_OR_NO_TENSOR_CORES = [
    "nsys-real/realcugan_trt_2threads_2080ti.sqlite",  # FP16 engines on Turing
    "nsys-real/mamba_generate_cudagraph_a5000_r1.sqlite", "nsys-real/mamba_generate_cudagraph_a5000_r2.sqlite",
    "nsys-tensorrt/multistream_calculation-bound.sqlite",  # FP32 on a GTX 1070: no Tensor Cores to use
    "nsys/v2025.1.1_nvfuser_h200_nvtx13513.sqlite", "nsys/v2026.2.1_nsysai_mfu_2gpu_after.sqlite",
]
HEALTHY_SAMPLES = ["trt_eager.sqlite", "trt_graph.sqlite", "trt_trtexec_graph.sqlite", "graph.sqlite",
                   "launch_bound.sqlite", "transfer_bound.sqlite", "harness_cls.sqlite"]


@pytest.mark.parametrize("rel", HEALTHY_OR_NO_TENSOR_CORES + [f"sample:{s}" for s in HEALTHY_SAMPLES])
def test_fp32_math_stays_silent_on_healthy_captures(rel):
    from tests.capture_builders import result_of

    path = capture_or_skip(SAMPLE_TRACES / rel[7:] if rel.startswith("sample:") else FIXTURES / rel)
    fp32_ms, total_ms = _sql_fp32_share(path)
    has_tc = gpu_tensor_cores(result_of(path).capture.get("gpus"))
    assert has_tc is False or fp32_ms < 0.25 * total_ms  # what SQL says: nothing to find
    assert [f for f in result_of(path).findings if f.rule == "fp32_math"] == []


def test_layer_table_reads_kernels_by_the_same_table():
    """The RealCUGAN engines' layers (TensorRT's per-layer ranges): every listed kernel's Tensor-Core label is
    the table's, the sm50 gemv and pooling kernels included."""
    from tests.capture_builders import result_of

    data = result_of(capture_or_skip(FIXTURES / "nsys-real" / "realcugan_trt_2threads_2080ti.sqlite")).to_json()
    listed = [k for r in data["layers"] for k in r["kernels"]]
    assert listed and all(k["tensor_cores"] is classify(k["name"]).tensor_cores for k in listed)


def test_fp32_and_fp16_convolution_captures():
    """The project's H200 captures of one convolution stack in FP32 (TF32 off) and in FP16 channels-last."""
    from tests.capture_builders import result_of

    fp32 = capture_or_skip(SAMPLE_TRACES / "fp32_conv.sqlite")
    fp32_ms, total_ms = _sql_fp32_share(fp32)
    [f] = [f for f in result_of(fp32).findings if f.rule == "fp32_math"]
    # every kernel starts in the judged period (setup included): the rule's sums are SQL's
    assert f.evidence["fp32_kernel_ms"] == pytest.approx(fp32_ms, rel=1e-9)
    assert f.evidence["kernel_ms"] == pytest.approx(total_ms, rel=1e-9)
    assert f.evidence["fp32_share"] >= 0.5
    assert f.impact["ms_total"] == pytest.approx(fp32_ms / 2, rel=1e-9)  # the 2x floor
    assert f.impact["share"] == pytest.approx(fp32_ms / 2 / f.impact["steady_ms"], rel=1e-9)
    fp16 = capture_or_skip(SAMPLE_TRACES / "fp16_conv.sqlite")
    fp16_ms, _ = _sql_fp32_share(fp16)
    assert fp16_ms == 0.0 and [f for f in result_of(fp16).findings if f.rule == "fp32_math"] == []
    tc = {n: ns for n, ns in _kernel_times(fp16).items() if classify(n).tensor_cores is True}
    assert tc  # the FP16 build's convolutions run on Tensor Cores
