"""The layer table in one grouping equals the per-layer computation it replaced, byte for byte, on every
capture with layer ranges: the TensorRT sample traces, the NVIDIA cookbook TensorRT captures, a real
two-thread TensorRT app's capture (160 layers) and synthetic captures with many layers (ties in kernel time wider than a small sort, a layer missing from
an inference, GPUs without Tensor Cores)."""

from __future__ import annotations

import json

import pytest

from profiler.capture import load_trace
from profiler.capture import series as S
from profiler.capture import unit as U
from profiler.capture.layer_table import layer_table
from tests.capture_builders import capture_or_skip, many_layers
from tests.conftest import SAMPLE_TRACES, SHARED
from tests.layer_table_reference import layer_table_per_layer

COOKBOOK = ("multistream_DtoH-bound", "multistream_HtoD-bound", "multistream_calculation-bound")


def both(trace, gpus=None) -> tuple[str, str]:
    """(new, reference) layer tables of ``trace`` as JSON text, keys in the order they were made."""
    table = S.build_series(trace)
    unit = U.build_unit(table)
    names = S.factor(trace.kernels, "name", small=True) if trace.kernels is not None and len(trace.kernels) else None
    gpus = trace.meta.get("gpus") if gpus is None else gpus
    new, old = layer_table(table, unit, names, gpus), layer_table_per_layer(table, unit, names, gpus)
    return json.dumps(new), json.dumps(old)


@pytest.mark.parametrize("path", [SAMPLE_TRACES / f"{n}.sqlite" for n in ("trt_eager", "trt_graph", "trt_trtexec_graph")]
                         + [SHARED / "fixtures" / "nsys-tensorrt" / f"{n}.sqlite" for n in COOKBOOK]
                         + [SHARED / "fixtures" / "nsys-real" / "realcugan_trt_2threads_2080ti.sqlite"],
                         ids=lambda p: p.stem)
def test_equals_the_per_layer_table_on_real_captures(path):
    new, old = both(load_trace(capture_or_skip(path)))
    assert new == old


def test_real_capture_has_layers_to_compare():
    """The comparison above is not vacuous: the eager TensorRT sample's layers are the NVTX ranges nested in
    its enqueue ranges on the same thread (by SQL over the export), six of them."""
    import sqlite3

    path = capture_or_skip(SAMPLE_TRACES / "trt_eager.sqlite")
    with sqlite3.connect(path) as con:
        names = {r[0] for r in con.execute(
            "WITH r AS (SELECT COALESCE(e.text, s.value) AS name, e.start, e.end, e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON e.textId = s.id WHERE e.eventType = 59) "
            "SELECT DISTINCT c.name FROM r c JOIN r q ON q.name = 'ExecutionContext::enqueue' "
            "AND c.globalTid = q.globalTid AND c.start >= q.start AND c.end <= q.end AND c.name != q.name")}
    layers = {r["name"].split(":", 1)[1] for r in json.loads(both(load_trace(path))[0])["layers"]}
    assert layers == names and len(layers) == 6


@pytest.mark.parametrize("gpus", [None, [{"compute_major": 6}], [{"compute_major": 9}]], ids=["unknown", "pascal", "hopper"])
def test_equals_the_per_layer_table_with_many_layers(gpus):
    trace = many_layers(300)
    new, old = both(trace, gpus)
    assert new == old
    layers = json.loads(new)["layers"]
    assert len(layers) == 300
    by = {r["name"]: r for r in layers}
    # layer 0 ran 20 kernels of 2 us each, once per steady inference: five of them shown, each 2 x 2 us
    wide = by["TensorRT:layer_0 [Conv + Relu]"]["kernels"]
    assert len(wide) == 5 and all(k["count"] == 2 and k["total_ms"] == pytest.approx(0.004) for k in wide)
    assert by["TensorRT:layer_299 [Conv + Relu]"]["count"] == 1  # missing from the last inference
