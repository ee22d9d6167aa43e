"""The analysis report's generation section, contexts-and-threads section and throughput table, built as
data from real captures: the numbers are the analysis JSON's, counted again by SQL over the exports where
they are counts; captures without a generation or several contexts and threads show no such section."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.report.analysis import build_analysis_page
from profiler.report.common import cell, kv
from profiler.fmt import fmt_num, fmt_pct
from tests.capture_builders import capture_or_skip, result_of, sql_rows
from tests.conftest import SHARED
from tests.report_examples import analysis_example

REAL = SHARED / "fixtures" / "nsys-real"
MAMBA = REAL / "mamba_generate_cudagraph_a5000_r1.sqlite"
REALCUGAN = REAL / "realcugan_trt_2threads_2080ti.sqlite"
ONE_CONTEXT = SHARED / "fixtures" / "nsys-tensorrt" / "multistream_calculation-bound.sqlite"


def _page(path: Path) -> tuple[dict, dict]:
    data = result_of(capture_or_skip(path)).to_json()
    return data, build_analysis_page(data)


def _section(page: dict, sid: str) -> dict | None:
    return next((s for s in page["sections"] if s["id"] == sid), None)


def _kv(sec: dict) -> dict[str, str]:
    return dict(row for b in sec["blocks"] if b["type"] == "kv" for row in b["rows"])


def _tables(sec: dict) -> list[dict]:
    return [b for b in sec["blocks"] if b["type"] == "table"]


def _texts(table_block: dict) -> list[list[str]]:
    return [[c["text"] for c in row] for row in table_block["rows"]]


def _expected_kv(pairs: list[tuple[str, object]]) -> dict[str, str]:
    return dict(kv(pairs)["rows"])


def test_mamba_generation_section_shows_the_json_numbers():
    data, page = _page(MAMBA)
    gen = data["generation"]
    sec = _section(page, "generation")
    assert sec is not None
    replays = sql_rows(MAMBA, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE")[0][0]
    assert gen["decode_steps"] == replays  # one graph replay per generated token
    assert _kv(sec) == _expected_kv([
        ("requests", gen["requests"]), ("prefill median ms", gen["prefill_ms"]["median"]),
        ("decode steps", replays), ("ms per token median", gen["ms_per_token"]["median"]),
        ("ms per token p99", gen["ms_per_token"]["p99"]), ("tokens per s", gen["tokens_per_s"])])
    stats, requests = _tables(sec)
    assert _texts(stats)[1] == ["time per token (step to step)", fmt_num(gen["ms_per_token"]["median"]),
                                fmt_num(gen["ms_per_token"]["p99"]), fmt_num(gen["ms_per_token"]["max"])]
    assert [r[3] for r in _texts(requests)] == [fmt_num(r["decode_steps"]) for r in gen["per_request"]]
    assert sum(r["decode_steps"] for r in gen["per_request"]) == replays
    drift = gen["drift"]
    text = next(b["text"] for b in sec["blocks"] if b["type"] == "note" and "Step time" in b["text"])
    assert f"from step {drift['start_step']} of {replays}" in text
    assert f"({drift['baseline_ms']:.4g} -> {drift['peak_ms']:.4g} ms" in text
    # one context, one launching thread: no contexts section; the decode steps are the inference, so a
    # throughput table counts them (those launched once the GPU decodes, the steady ones)
    assert _section(page, "contexts") is None
    assert data["inference"]["series"] == "generation:decode step"
    assert any(b.get("text") == "Throughput" for b in _section(page, "inference")["blocks"])
    assert data["inference"]["throughput"]["inferences"] == data["inference"]["steady_count"]


def test_realcugan_contexts_threads_and_throughput_show_the_json_numbers():
    data, page = _page(REALCUGAN)
    conc, tp = data["concurrency"], data["inference"]["throughput"]
    assert _section(page, "generation") is None
    sec = _section(page, "contexts")
    assert sec is not None
    contexts, threads = _tables(sec)
    sql_contexts = sql_rows(REALCUGAN, "SELECT deviceId, contextId, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                                   "GROUP BY deviceId, contextId ORDER BY contextId")
    assert len(sql_contexts) == 2
    # the steady state's kernels per context: the capture's, less those of the setup (never more)
    assert [(int(r[0]), int(r[3].replace(",", ""))) for r in _texts(contexts)] == \
        [(c["device"], c["kernels"]) for c in conc["contexts"]]
    assert all(c["kernels"] <= n for c, (_, _, n) in zip(conc["contexts"], sql_contexts))
    assert [r[6] for r in _texts(contexts)] == [fmt_num(c["busy_ms"]) for c in conc["contexts"]]
    assert _texts(threads) == [[str(t["tid"]), fmt_num(t["kernels"]), fmt_num(t["inferences"]),
                                fmt_num(t["gpu_busy_ms"]), fmt_num(t["lock_wait_ms"]),
                                fmt_pct(t["lock_wait_share"] * 100), fmt_num(t["lock_waits"])]
                               for t in conc["threads"]]
    assert _kv(sec) == _expected_kv([("GPU 0 kernel overlap between contexts ms", conc["context_overlap_ms"]["0"]),
                                     ("threads waiting on locks at once ms", conc["lock_wait_overlap_ms"]),
                                     ("threads' GPU work overlapping ms", conc["thread_gpu_overlap_ms"])])
    # throughput: overall, then each thread and each stream, in the Inference section
    inf = _section(page, "inference")
    i = next(k for k, b in enumerate(inf["blocks"]) if b.get("text") == "Throughput")
    got = _texts(inf["blocks"][i + 1])
    want = [["all", "", fmt_num(tp["inferences"]), fmt_num(tp["per_s"])]]
    want += [["thread", str(r["tid"]), fmt_num(r["count"]), fmt_num(r["per_s"])] for r in tp["per_thread"]]
    want += [["stream", f"GPU {r['device']} stream {r['stream']}", fmt_num(r["count"]), fmt_num(r["per_s"])]
             for r in tp["per_stream"]]
    assert got == [[cell(c)["text"] for c in row] for row in want]
    enqueues = sql_rows(REALCUGAN, "SELECT COUNT(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
                               "WHERE COALESCE(e.text, s.value) LIKE '%ExecutionContext::enqueue%'")[0][0]
    assert enqueues == data["inference"]["count"]  # every enqueue range is an inference
    assert tp["inferences"] == sum(r["count"] for r in tp["per_thread"]) <= enqueues


def test_captures_without_them_have_no_such_section():
    page = build_analysis_page(analysis_example())
    assert _section(page, "generation") is None and _section(page, "contexts") is None
    data, page = _page(ONE_CONTEXT)
    assert "generation" not in data or data["generation"] is None
    assert _section(page, "generation") is None and _section(page, "contexts") is None


@pytest.mark.parametrize("doc", [{"generation": {"requests": 1}}, {"concurrency": {"contexts": [{}, {}]}},
                                 {"inference": {"throughput": {"per_s": 3.0}}}])
def test_partial_documents_render(doc):
    page = build_analysis_page(doc)
    assert page["sections"]
