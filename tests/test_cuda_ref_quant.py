"""The reference executor's Q/DQ build-time plan and its memory accounting, without PyTorch.

What a QuantizeLinear/DequantizeLinear node becomes (integer type and range, per-tensor or per-axis and
along which axis) and what is refused, and the device-memory columns computed from given allocator
numbers. The kernels themselves are checked against onnx's reference in test_cuda_ref_qdq.py (PyTorch)."""

from __future__ import annotations

import pytest

from profiler.backends.base import BuildError
from profiler.backends.cuda_ref.memory import AllocatorStats, context_cost, memory_columns, pass_memory
from profiler.backends.cuda_ref.quant import check_scale, qdq_plan

F32, U8, I8, I16, I32, F16, E4M3, I4 = 1, 2, 3, 5, 6, 10, 17, 22


def _q(opset=13, attrs=None, x=(1, 8, 4, 4), x_type=F32, scale=(), zp=(), zp_type=I8):
    return qdq_plan("QuantizeLinear", "q", opset, attrs or {}, x, x_type, scale, zp, zp_type)


def _dq(opset=13, attrs=None, x=(1, 8, 4, 4), x_type=I8, scale=(), zp=(), zp_type=I8):
    return qdq_plan("DequantizeLinear", "dq", opset, attrs or {}, x, x_type, scale, zp, zp_type)


def test_per_tensor_int8_with_zero_point():
    p = _q()
    assert (p.int_type, p.qmin, p.qmax, p.axis, p.has_zero_point) == ("int8", -128, 127, None, True)
    assert p.broadcast_shape() == ()


def test_without_zero_point_quantizes_to_uint8_or_output_dtype():
    p = _q(zp=None, zp_type=None)
    assert (p.int_type, p.qmin, p.qmax, p.has_zero_point) == ("uint8", 0, 255, False)
    assert _q(opset=21, attrs={"output_dtype": I8}, zp=None, zp_type=None).int_type == "int8"


def test_per_axis_scale_and_axis_normalisation():
    p = _q(scale=(8,), zp=(8,))
    assert p.axis == 1 and p.channels == 8 and p.broadcast_shape() == (1, 8, 1, 1)
    p = _dq(attrs={"axis": -1}, x=(3, 5), scale=(5,), zp=(5,))
    assert p.axis == 1 and p.broadcast_shape() == (1, 5)
    p = _dq(attrs={"axis": 0}, x=(16, 3, 3, 3), scale=(16,), zp=(16,))
    assert p.axis == 0 and p.broadcast_shape() == (16, 1, 1, 1)
    # a one-element 1-D scale is per-tensor, at any axis
    assert _q(attrs={"axis": 3}, scale=(1,), zp=(1,)).axis is None


def test_dequantize_reads_int32_biases_and_uint8():
    assert _dq(x=(64,), x_type=I32, scale=(), zp=None, zp_type=None).int_type == "int32"
    assert _dq(x_type=U8, zp_type=U8).qmax == 255


@pytest.mark.parametrize("kwargs,match", [
    ({"attrs": {"block_size": 32}, "scale": (8, 4, 4, 4), "zp": None, "zp_type": None}, "block quantization"),
    ({"scale": (2, 8), "zp": None, "zp_type": None}, r"scale of shape \[2, 8\]"),
    ({"zp_type": E4M3}, "float8e4m3fn"),
    ({"zp_type": I4}, "int4"),
    ({"opset": 10, "scale": (8,), "zp": (8,)}, "per-axis needs opset 13"),
    ({"opset": 21, "attrs": {"output_dtype": U8}}, "disagrees with the zero point"),
    ({"opset": 23, "attrs": {"precision": F16}}, "explicit precision"),
    ({"scale": (8,), "zp": (4,)}, "zero point's shape"),
    ({"attrs": {"axis": 4}, "scale": (8,), "zp": (8,)}, "axis 4 is out of range"),
    ({"attrs": {"axis": 2}, "scale": (8,), "zp": (8,)}, "the scale has 8 values but the input has 4"),
    ({"x_type": I32}, "quantizing a int32 input"),
])
def test_what_quantize_refuses_says_why(kwargs, match):
    with pytest.raises(BuildError, match=match) as exc:
        _q(**kwargs)
    assert "'q'" in str(exc.value) and "QuantizeLinear" in str(exc.value)


def test_dequantize_refusals():
    with pytest.raises(BuildError, match="zero point is uint8 but the input is int8"):
        _dq(zp_type=U8)
    with pytest.raises(BuildError, match="float8e5m2"):
        _dq(x_type=19, zp=None, zp_type=None)
    with pytest.raises(BuildError, match="block quantization"):
        _dq(opset=21, attrs={"block_size": 2}, scale=(1, 4, 4, 4), zp=None, zp_type=None)


def test_a_scale_that_is_not_finite_and_non_zero_is_refused():
    check_scale("QuantizeLinear", "q", [0.02, 1e-30, 3.0e38])  # tiny and huge finite scales are fine
    for bad in (float("inf"), float("nan"), 0.0):
        with pytest.raises(BuildError, match="'mask_q' .*scale is .*not finite and non-zero"):
            check_scale("QuantizeLinear", "mask_q", [0.1, bad])


def test_int16_is_a_quantized_type():
    p = _q(zp_type=I16)
    assert (p.int_type, p.qmin, p.qmax) == ("int16", -32768, 32767)


# -- memory accounting ---------------------------------------------------------------------------------
def test_allocator_stats_from_torch_keys():
    s = AllocatorStats.from_stats({"allocated_bytes.all.current": 10, "reserved_bytes.all.current": 20,
                                   "allocated_bytes.all.peak": 15, "other": 1})
    assert (s.allocated_bytes, s.reserved_bytes, s.peak_allocated_bytes) == (10, 20, 15)
    assert AllocatorStats.from_stats({}) == AllocatorStats(0, 0, 0)


def test_pass_memory_separates_what_the_pass_kept():
    before = AllocatorStats(allocated_bytes=1000, reserved_bytes=4096, peak_allocated_bytes=1000)
    # the pass peaked at 1000 + 700; 100 bytes (a library workspace) stayed allocated after it
    after = AllocatorStats(allocated_bytes=1100, reserved_bytes=8192, peak_allocated_bytes=1700)
    assert pass_memory(before, after) == {"activation_bytes_per_context": 600, "workspace_bytes": 100}
    # nothing kept, nothing above: zeros, never negative
    same = AllocatorStats(1000, 4096, 900)
    assert pass_memory(before, same) == {"activation_bytes_per_context": 0, "workspace_bytes": 0}


def test_context_cost_and_the_columns():
    before = AllocatorStats(5000, 2 << 20, 6000)
    after = AllocatorStats(5600, 6 << 20, 7000)
    cost = context_cost(before, after, io_bytes=450)
    assert cost == {"extra_context_bytes": 4 << 20, "extra_context_allocated_bytes": 600, "workspace_bytes": 150}
    cols = memory_columns(4096, {"activation_bytes_per_context": 600, "workspace_bytes": 100}, before, cost)
    assert cols["workspace_bytes"] == 150  # the real stream's, not the build pass's
    assert cols["weights_bytes"] == 4096 and cols["peak_allocated_bytes"] == 6000
    assert cols["reserved_bytes"] == 2 << 20 and cols["allocated_bytes"] == 5000
    assert cols["extra_context_bytes"] == 4 << 20 and cols["activation_bytes_per_context"] == 600
    assert all(v is not None for v in cols.values())


def test_columns_left_empty_say_why():
    cols = memory_columns(1, None, AllocatorStats(1, 2, 3), None, "one more context could not be made: X")
    assert cols["activation_bytes_per_context"] is None and "probe pass" in cols["activation_bytes_per_context_reason"]
    assert cols["extra_context_bytes"] is None and cols["extra_context_reason"].startswith("one more context")
