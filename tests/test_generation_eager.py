"""Decode steps as the inference, eager decode (NVTX step ranges, a repeated kernel group) and GPU clocks:
the project's H200 captures generate_eager (ranges ``prefill``/``decode_step``), generate_eager_bare (the same
program without ranges), classify_eager (its healthy twin: a repeated forward, no generation) and
generate_eager_metrics (one request, nsys --gpu-metrics-devices=all at 200 Hz), and the two mamba-2.8b graph
captures; every number checked against SQL over the same export. Synthetic GPU_METRICS tables for the clock
verdicts."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from profiler.capture import clocks
from profiler.capture import generation as G
from profiler.capture.analyze import analyze_path
from tests.capture_builders import capture_or_skip
from tests.conftest import SAMPLE_TRACES, SHARED

REAL = SHARED / "fixtures" / "nsys-real"
_DONE: dict[Path, object] = {}


def _result(path: Path):
    """``analyze_path`` with the default options (the steady state judged), once per capture."""
    if path not in _DONE:
        _DONE[path] = analyze_path(path, cache=False)
    return _DONE[path]


def _sql(path: Path, q: str, args: tuple = ()) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q, args).fetchall()
    finally:
        con.close()


RANGES = ("SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
          "WHERE coalesce(n.text, s.value) = ? ORDER BY n.start")
STEP_SPANS = ("SELECT r.start, MIN(k.start), MAX(k.end), SUM(k.end - k.start), COUNT(*) FROM (" + RANGES + ") r "
              "JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.start BETWEEN r.start AND r.end "
              "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = rt.correlationId GROUP BY r.start ORDER BY r.start")


WORK_SPANS = STEP_SPANS.replace("JOIN CUPTI_ACTIVITY_KIND_KERNEL k", "JOIN (SELECT start, end, correlationId FROM "
                                "CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end, correlationId FROM "
                                "CUPTI_ACTIVITY_KIND_MEMCPY) k")


def _steps(path: Path, work: bool = False) -> np.ndarray:
    """Per decode_step range (SQL): range start, its kernels' (``work``: and copies') first start, last end,
    busy sum, count."""
    return np.array(_sql(path, WORK_SPANS if work else STEP_SPANS, ("decode_step",)), dtype=np.int64)


def _by_request(x: np.ndarray, n: int, per: int) -> list[np.ndarray]:
    return [x[i * per:(i + 1) * per] for i in range(n)]


# ---- eager decode with NVTX ranges ----

def test_generate_eager_ranges_are_the_steps():
    path = capture_or_skip(SAMPLE_TRACES / "generate_eager.sqlite")
    man = json.loads(path.with_suffix(".json").read_text())
    data = _result(path).to_json()
    gen, inf = data["generation"], data["inference"]
    st = _steps(path)
    n, per = man["requests"], man["decode_steps_per_request"]
    assert len(st) == n * per == 192 and (st[:, 4] == 32).all()  # 32 kernels a token
    assert gen["steps_from"] == "NVTX range decode_step"
    assert gen["requests"] == n and [r["decode_steps"] for r in gen["per_request"]] == [per] * n
    w = gen.get("warmup_requests", 0)
    steady = _by_request(st, n, per)[w:]  # a warm-up request's tokens are not what a token costs
    periods = np.concatenate([np.diff(r[:, 1]) for r in steady]) / 1e6
    assert gen["ms_per_token"]["median"] == pytest.approx(float(np.median(periods)), rel=1e-6)
    work = _by_request(_steps(path, work=True), n, per)[w:]  # a step ends with its token's read-back
    decode_s = sum(int(r[-1, 2] - k[0, 1]) for r, k in zip(work, steady)) / 1e9
    assert gen["tokens_per_s"] == pytest.approx(len(steady) * per / decode_s, rel=1e-9)
    assert gen["tokens_per_s"] == pytest.approx(1e3 / gen["ms_per_token"]["mean"], rel=0.1)  # one story
    # the prefill: the kernels its range launched (and the last step's token read-back before it)
    pre = _sql(path, "SELECT r.start, SUM(k.end - k.start) FROM (" + RANGES + ") r JOIN CUPTI_ACTIVITY_KIND_RUNTIME rt "
                     "ON rt.start BETWEEN r.start AND r.end JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                     "ON k.correlationId = rt.correlationId GROUP BY r.start ORDER BY r.start", ("prefill",))
    for r, (_, busy) in zip(gen["per_request"], pre):
        assert r["prefill_ms"] == pytest.approx(busy / 1e6, rel=0.03)
    # the first request is warm-up: cuDNN builds an attention plan for each new sequence length
    wall = (np.array(_sql(path, RANGES, ("decode_step",)))[:, 1] - st[:, 0]) / 1e6
    first, rest = np.median(wall[:per]), np.median(wall[per:])
    assert first > 30 * rest
    assert gen["warmup_requests"] == 1 and [r["warmup"] for r in gen["per_request"]] == [True, False, False]
    # the unit: the decode steps, the first request's as warm-up, statistics over the other two
    assert inf["series"] == "decode_step" and inf["count"] == 192 and inf["warmup_count"] == per
    assert inf["host_ms"]["median"] == pytest.approx(float(np.median(wall[per:])), rel=1e-6)
    work = _steps(path, work=True)  # each step's kernels and its token's read-back copy
    assert inf["gpu_ms"]["median"] == pytest.approx(float(np.median(work[per:, 3])) / 1e6, rel=1e-6)
    assert "decode step" in inf["chosen"]
    assert data["phases"]["prefill"]["requests"] == n
    rules = {f.rule: f for f in _result(path).findings}
    assert "jitter" not in rules and "decode_drift" not in rules  # steady decode steps, prefills apart
    [lo] = [f for f in _result(path).findings if f.rule == "launch_overhead" and f.range == "decode_step"]
    assert lo.severity == "high"  # 32 eager launches a token: a CUDA graph


# ---- eager decode without ranges: a repeated kernel group ----

def test_generate_eager_bare_from_the_kernel_group():
    path = capture_or_skip(SAMPLE_TRACES / "generate_eager_bare.sqlite")
    ranged = capture_or_skip(SAMPLE_TRACES / "generate_eager.sqlite")
    man = json.loads(path.with_suffix(".json").read_text())
    n, per = man["requests"], man["decode_steps_per_request"]
    data = _result(path).to_json()
    gen, inf = data["generation"], data["inference"]
    kernels = int(_steps(ranged)[0, 4])  # the same program's decode_step range launches this many
    assert gen["steps_from"] == f"a repeated group of {kernels} kernels"
    assert gen["requests"] == n and gen["decode_steps"] == n * per
    # a step starts with the one-token embedding (its only index_elementwise kernel); the warm-up's 4 first
    emb = np.array(_sql(path, "SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = "
                              "k.shortName WHERE s.value = 'index_elementwise_kernel' ORDER BY k.start"))[:, 0]
    assert len(emb) == 4 + n * per
    starts = _by_request(emb[4:], n, per)
    assert [r["warmup"] for r in gen["per_request"]] == [True, False, False]
    periods = np.concatenate([np.diff(r) for r in starts[1:]]) / 1e6  # the warm-up request left out
    assert gen["ms_per_token"]["median"] == pytest.approx(float(np.median(periods)), rel=1e-6)
    # the unit: one range per step but each request's first (launched while the prefill still ran)
    assert inf["series"] == "generation:decode step" and inf["count"] == n * per - n
    assert data["phases"]["prefill"]["steps_inside"] == n
    assert inf["warmup_count"] == per - 1
    rules = {f.rule: f for f in _result(path).findings}
    assert "jitter" not in rules and "decode_drift" not in rules
    [lo] = [f for f in _result(path).findings if f.rule == "launch_overhead" and f.range == inf["series"]]
    assert lo.severity == "high"  # 32 eager launches a token: a CUDA graph


def test_a_repeated_forward_is_no_generation():
    path = capture_or_skip(SAMPLE_TRACES / "classify_eager.sqlite")
    man = json.loads(path.with_suffix(".json").read_text())
    # the same kernel sequence each iteration, as in the decode loop ...
    per = _sql(path, "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = "
                     "k.shortName WHERE s.value = 'vectorized_gather_kernel'")
    assert per[0][1] == man["iterations"]
    # ... but no prefill before it: no generation, and the unit stays the capture's window
    data = _result(path).to_json()
    assert data["generation"] is None and data["inference"]["source"] == "window"


@pytest.mark.parametrize("name", ["no_nvtx.sqlite", "numbered_eager.sqlite", "launch_bound.sqlite",
                                  "pipeline.sqlite", "sleeps.sqlite"])
def test_repeated_loops_are_no_eager_generation(name):
    path = capture_or_skip(SAMPLE_TRACES / name)
    assert _result(path).to_json()["generation"] is None


# ---- the graph captures: decode steps are the unit, the prefill its own phase ----

def _mamba_queued(path: Path) -> int:
    """Replays launched before their request's first replay ran on the GPU (SQL: graph trace and runtime)."""
    g = np.array(_sql(path, "SELECT g.start, rt.start FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE g JOIN "
                            "CUPTI_ACTIVITY_KIND_RUNTIME rt ON rt.correlationId = g.correlationId ORDER BY g.start"))
    cut = [0] + [i + 1 for i in np.flatnonzero(g[1:, 0] - g[:-1, 0] > 500e6)] + [len(g)]
    return sum(int((g[a:b, 1] < g[a, 0]).sum()) for a, b in zip(cut[:-1], cut[1:]))


@pytest.mark.parametrize("run", ["r1", "r2"])
def test_mamba_decode_steps_are_the_inference(run):
    path = capture_or_skip(REAL / f"mamba_generate_cudagraph_a5000_{run}.sqlite")
    res = _result(path)
    data = res.to_json()
    inf = data["inference"]
    queued = _mamba_queued(path)
    assert queued == 22  # the host runs 5-7 replays ahead of the GPU
    assert inf["series"] == "generation:decode step" and inf["count"] == 394 - queued
    assert data["phases"]["prefill"] == pytest.approx({**data["phases"]["prefill"], "requests": 4,
                                                       "steps_inside": queued})
    dur = np.array(_sql(path, "SELECT end - start FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE ORDER BY start"))[:, 0] / 1e6
    assert inf["gpu_ms"]["median"] == pytest.approx(float(np.median(dur)), rel=0.01)
    rules = {f.rule: f for f in res.findings}
    if run == "r2":  # flat decode: the prefills' launch stalls are no jitter of the steps
        assert "jitter" not in rules and "decode_drift" not in rules
    else:
        assert "decode_drift" in rules


# ---- GPU clocks ----

def test_metrics_capture_clock_evidence_by_sql():
    path = capture_or_skip(SAMPLE_TRACES / "generate_eager_metrics.sqlite")
    gen = _result(path).to_json()["generation"]
    st = _steps(path, work=True)
    assert gen["requests"] == 1 and gen["decode_steps"] == len(st) == 64
    d, c = gen["drift"], gen["clocks"]
    assert c["recorded"] is True and d["start_step"] is not None
    w, k = d["window_steps"], d["start_step"]
    clk = np.array(_sql(path, "SELECT g.timestamp, g.value FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS t ON "
                              "t.metricId = g.metricId AND t.typeId = g.typeId WHERE t.metricName LIKE "
                              "'GPC Clock Frequency%' ORDER BY g.timestamp"), dtype=np.float64)

    def median_in(spans):
        m = np.zeros(len(clk), bool)
        for a, b in spans:
            m |= (clk[:, 0] >= a) & (clk[:, 0] <= b)
        return float(np.median(clk[m, 1])) / 1e6, int(m.sum())

    base, nb = median_in([(st[0, 1], st[w - 1, 2])])
    slow, ns = median_in([(a, b) for a, b in st[k:, 1:3]])
    assert c["baseline"]["clock_mhz"] == pytest.approx(base, rel=1e-6) and c["baseline"]["samples"] == nb
    assert c["slow"]["clock_mhz"] == pytest.approx(slow, rel=1e-6) and c["slow"]["samples"] == ns
    # the slow steps run the same GPU work with host gaps between kernels: cuDNN plans, not the clock
    assert d["step_busy_ms_slow"] == pytest.approx(float(np.median(st[k:, 3])) / 1e6)
    assert d["cause"] == "host" and c["verdict"] == "clocks steady (host)"
    loads = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                       "WHERE r.start BETWEEN ? AND ? AND (s.value LIKE 'cuLibraryLoad%' OR s.value LIKE "
                       "'cuModuleLoad%' OR s.value LIKE 'cuKernelSetAttribute%' OR s.value LIKE 'cuFuncSetAttribute%')",
                 (int(_sql(path, RANGES, ("decode_step",))[k][0]), int(st[-1, 2])))[0][0]
    assert d["module_load_calls_after_start"] == loads > 0


def _metrics_db(tmp_path: Path, mhz_before: float, mhz_after: float, at_ns: int) -> Path:
    """An export with only nsys's GPU metrics tables: the GPC clock (in Hz, as nsys writes it) and GR Active
    sampled every 1 ms from 0 to 400 ms, ``mhz_before`` until ``at_ns`` and ``mhz_after`` from then on."""
    path = tmp_path / "metrics.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER, sourceId INTEGER, typeName TEXT, "
                "metricId INTEGER, metricName TEXT)")
    con.execute("CREATE TABLE GPU_METRICS (rawTimestamp INTEGER, timestamp INTEGER, typeId INTEGER, "
                "metricId INTEGER, value INTEGER)")
    con.executemany("INSERT INTO TARGET_INFO_GPU_METRICS VALUES (7, 7, '', ?, ?)",
                    [(0, "GPC Clock Frequency [MHz]"), (2, "GR Active [Throughput %]")])
    rows = []
    for t in range(0, 400_000_000, 1_000_000):
        rows.append((t, t, 7, 0, int((mhz_before if t < at_ns else mhz_after) * 1e6)))
        rows.append((t, t, 7, 2, 90))
    con.executemany("INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return path


class _Trace:
    def __init__(self, path: Path):
        self.meta = {"gpu_metrics": True, "source_path": str(path)}


@pytest.mark.parametrize("after, verdict", [(1410.0, "clocks dropped"), (1975.0, "clocks steady (contention)")])
def test_clock_verdict_from_synthetic_metrics(tmp_path, after, verdict):
    # 40 steps of 10 ms from 0 ms; the drift starts at step 20 (200 ms), where the clock changes
    s = np.arange(40, dtype=np.int64) * 10_000_000
    steps = G.Steps(s, s + 9_000_000, 1)
    drift = {"start_step": 20, "window_steps": 16}
    c = clocks.evidence(_Trace(_metrics_db(tmp_path, 1980.0, after, 200_000_000)), steps, [(0, 40, 0, 0)], drift)
    assert c["baseline"]["clock_mhz"] == pytest.approx(1980.0)
    assert c["slow"]["clock_mhz"] == pytest.approx(after)
    assert c["slow"]["gr_active_pct"] == 90.0
    assert c["verdict"] == verdict
    # the baseline window: steps 0-15, 0 to 159 ms: 160 samples; the slow steps' own spans: 20 x 10 samples
    assert c["baseline"]["samples"] == 160 and c["slow"]["samples"] == 200


def test_no_metrics_table_says_how_to_record(tmp_path):
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()
    s = np.arange(20, dtype=np.int64) * 10_000_000
    c = clocks.evidence(_Trace(path), G.Steps(s, s + 1, 1), [(0, 20, 0, 0)], {"start_step": None})
    assert c["recorded"] is True and "no clock samples" in c["note"]
    c = clocks.evidence(type("T", (), {"meta": {"gpu_metrics": False}})(), G.Steps(s, s + 1, 1), [(0, 20, 0, 0)],
                        {"start_step": None})
    assert c["recorded"] is False and "--gpu-metrics-devices=all" in c["note"]


def test_decode_drift_on_the_metrics_capture_blames_the_host():
    # integrity keeps the rules off this capture (nsys: "not all CUDA events might have been collected", as a
    # cudaProfilerStop capture range says); its generation entry, judged by the rule itself:
    from profiler.rules import Thresholds, get_rule
    from profiler.rules.capture.decode_drift import ADVICE, decode_drift

    path = capture_or_skip(SAMPLE_TRACES / "generate_eager_metrics.sqlite")
    data = _result(path).to_json()
    assert "decode_drift" in data["integrity"]["rules_not_run"]
    said = {r[0] for r in _sql(path, "SELECT text FROM DIAGNOSTIC_EVENT")}
    assert "Not all CUDA events might have been collected." in said
    assert {p["evidence"]["nsys_said"] for p in data["integrity"]["problems"]} <= said
    gen = data["generation"]
    [f] = decode_drift(type("Ctx", (), {"generation": gen})(),
                       Thresholds("decode_drift", get_rule("capture", "decode_drift").defaults))
    assert f.recommendation.startswith(ADVICE["host"])
    assert "clocks steady (host)" in f.title and f.evidence["start_step"] == gen["drift"]["start_step"]
