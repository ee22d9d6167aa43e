"""Capture integrity: real exports damaged the ways captures break (tail of the kernel table gone, one stream's
kernels gone, nsys's own loss messages, the CUDA trace stopping while the program goes on, an export nsys failed
to write) read INCOMPLETE CAPTURE with the right kind and amount; every healthy capture we have stays complete."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.capture import integrity as I
from profiler.capture import series as S
from profiler.capture import unit as U
from profiler.capture.analyze import AnalysisOptions, analyze_path
from profiler.capture.loader import load_trace
from profiler.errors import InputError
from profiler.report.verdict import analysis_verdict, terminal_lines
from tests.conftest import ROOT, SAMPLE_TRACES, SHARED

FIXTURES = SHARED / "fixtures"
HEALTHY = sorted([*FIXTURES.glob("nsys/*.sqlite"), *FIXTURES.glob("nsys-tensorrt/*.sqlite"),
                  *FIXTURES.glob("nsys-real/*.sqlite"), *SAMPLE_TRACES.glob("*.sqlite"),
                  *SAMPLE_TRACES.glob("*/*.sqlite")])
INCOMPLETE = ("killed", "tiny_buffer", "launcher", "truncated", "mp_fork")  # sample traces made incomplete on purpose
INCOMPLETE += ("generate_eager_metrics",)  # a cudaProfilerStop capture range: nsys says not all events were collected
HEALTHY = [p for p in HEALTHY if p.stem not in INCOMPLETE]
LAUNCH_BOUND = SAMPLE_TRACES / "launch_bound.sqlite"
MULTISTREAM = SAMPLE_TRACES / "multistream.sqlite"
TRT_EAGER = SAMPLE_TRACES / "trt_eager.sqlite"


def _check(path: Path) -> I.Integrity:
    trace = load_trace(path)
    full = S.build_series(trace)
    return I.check(trace, full, U.build_unit(full, None))


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    if not src.is_file():
        pytest.skip(f"{src} not found")
    dst = tmp_path / name
    shutil.copyfile(src, dst)
    return dst


def _sql(path: Path, sql: str, *args):
    con = sqlite3.connect(path)
    try:
        rows = con.execute(sql, args).fetchall()
        con.commit()
        return rows
    finally:
        con.close()


def _analyse(path: Path) -> dict:
    return analyze_path(path, AnalysisOptions(), cache=False).to_json()


def _kinds(doc: dict) -> list[str]:
    return [p["kind"] for p in doc["integrity"]["problems"]]


# ----------------------------------------------------------------------------- healthy captures

@pytest.mark.parametrize("path", HEALTHY, ids=[p.name for p in HEALTHY])
def test_every_healthy_capture_is_complete(path):
    result = _check(path)
    assert result.complete, [p.what for p in result.problems]


@pytest.mark.parametrize("path", [p for p in HEALTHY if "nsys-tensorrt" in str(p)][:1] or [FIXTURES / "absent"],
                         ids=lambda p: p.name)
def test_the_cookbook_warnings_are_notes_not_problems(path):
    """The cookbook capture says 'driver ... not supported' and 'No CUDA events collected' for a child
    process: said as notes, the capture complete, the verdict not INCOMPLETE."""
    if not path.is_file():
        pytest.skip("nsys-tensorrt fixtures absent")
    said = [t for (t,) in _sql(path, "SELECT text FROM DIAGNOSTIC_EVENT")]
    assert any("is not supported" in t for t in said) and any("No CUDA events collected" in t for t in said)
    doc = _analyse(path)
    assert doc["integrity"]["complete"] is True and doc["integrity"]["problems"] == []
    assert len(doc["integrity"]["notes"]) == 2
    assert analysis_verdict(doc)["status"] != "INCOMPLETE CAPTURE"


def test_nsys_counts_are_read_per_process():
    if not TRT_EAGER.is_file():
        pytest.skip("sample trace absent")
    trace = load_trace(TRT_EAGER)
    counts = I.nsys_counts(trace.meta["diagnostics"])
    # nsys's own numbers, read with SQL: the process of the 'Number of CUPTI events produced' row
    [(gpid, text)] = _sql(TRT_EAGER, "SELECT globalPid, text FROM DIAGNOSTIC_EVENT WHERE text LIKE "
                                     "'Number of CUPTI events produced%'")
    pid = (gpid >> 24) & 0xFFFFFF
    assert counts[pid]["cupti"] == int(re.search(r"(\d+)", text).group(1))
    [(nvtx_rows,)] = _sql(TRT_EAGER, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 34)")
    assert abs(I.export_rows(trace)[pid]["nvtx"] - nvtx_rows) == 0


# ----------------------------------------------------------------------------- damage

def test_the_tail_of_the_kernel_table_dropped(tmp_path):
    path = _copy(LAUNCH_BOUND, tmp_path, "tail.sqlite")
    [(n,)] = _sql(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    keep = n // 2
    _sql(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid NOT IN "
               "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT ?)", keep)
    doc = _analyse(path)
    integ = doc["integrity"]
    assert integ["complete"] is False
    assert _kinds(doc)[0] == "launches_without_records"
    lead = integ["problems"][0]["evidence"]
    assert lead["without_record"] == n - keep and lead["launch_calls"] == n  # one kernel per launch call here
    missing = next(p for p in integ["problems"] if p["kind"] == "export_missing_events")["evidence"]
    assert missing["missing"] == n - keep
    assert "gpu_busy_time" in integ["untrusted"] and "host_range_timing" in integ["trusted"]
    assert {"gpu_idle", "launch_overhead", "transfer_bound"} <= set(integ["rules_not_run"])
    assert not [f for f in doc["findings"] if f["rule"] in integ["rules_not_run"]]
    assert doc["phases"]["steady"]["gpu_busy_fraction"] is None
    v = analysis_verdict(doc)
    assert v["status"] == "INCOMPLETE CAPTURE" and f"{n - keep:,} of {n:,} kernel launch calls" in v["headline"]
    host = doc["inference"]["host_ms"]["median"]
    assert any(line.startswith("still holds: host time per inference") and f"{host:.4g}" in line
               for line in v["lines"])
    assert any("not run" in line and "gpu_idle" in line for line in v["lines"])
    assert terminal_lines(v)[0].startswith("INCOMPLETE CAPTURE: ")


def test_the_kernels_of_one_stream_deleted(tmp_path):
    path = _copy(MULTISTREAM, tmp_path, "stream.sqlite")
    per_stream = dict(_sql(path, "SELECT streamId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY streamId"))
    stream = sorted(per_stream)[1]
    _sql(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = ?", stream)
    doc = _analyse(path)
    assert _kinds(doc) == ["launches_without_records"]
    ev = doc["integrity"]["problems"][0]["evidence"]
    assert ev["without_record"] == per_stream[stream] and ev["launch_calls"] == sum(per_stream.values())
    # the inference's instances that launched onto that stream, counted with SQL: ranges of the unit holding a
    # launch call whose kernel ran on it
    unit = doc["inference"]["series"].split(":")[-1]
    kept = _copy(MULTISTREAM, tmp_path, "kept.sqlite")
    [(hit,)] = _sql(kept, "SELECT count(DISTINCT n.start) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                          "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.start >= n.start AND r.start <= n.end "
                          "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
                          "WHERE k.streamId = ? AND (s.value = ? OR n.text = ?)", stream, unit, unit)
    assert ev["series"] == doc["inference"]["series"] and ev["instances_with_missing_kernels"] == hit
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def _diagnostic(path: Path, text: str, severity: int = 2, source: int = 3) -> None:
    [(gpid,)] = _sql(path, "SELECT globalPid FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Number of CUDA events%'")
    _sql(path, "INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
               "VALUES (0, 1, ?, ?, ?, ?)", source, severity, text, gpid)


@pytest.mark.parametrize("text, severity, kind", [
    ("Number of incomplete CUPTI events dropped: 4200. Incomplete events appear when GPU timestamp information "
     "have not been retrieved at the time the profiling session was stopped.", 1, "nsys_dropped_events"),
    ("Error when processing events: Unknown driver API function index: 812", 3, "nsys_processing_errors"),
    ("Not all CUDA events might have been collected.", 2, "nsys_not_all_collected"),
    ("Some CUPTI activity buffers were dropped: 12 buffers lost.", 2, "nsys_lost_events"),
])
def test_what_nsys_says_when_it_loses_events(tmp_path, text, severity, kind):
    path = _copy(TRT_EAGER, tmp_path, "diag.sqlite")
    _diagnostic(path, text, severity)
    doc = _analyse(path)
    assert _kinds(doc) == [kind]
    assert doc["integrity"]["problems"][0]["evidence"]["nsys_said"] in (text, [text])
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def test_cupti_events_produced_but_not_collected(tmp_path):
    """The issue's capture: 'Number of CUPTI events produced: 34429' yet 'Number of CUDA events collected: 909'."""
    path = _copy(TRT_EAGER, tmp_path, "lost.sqlite")
    [(collected_text,)] = _sql(path, "SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Number of CUDA events%'")
    collected = int(re.search(r"(\d+)", collected_text).group(1))
    produced = collected * 20
    _sql(path, "UPDATE DIAGNOSTIC_EVENT SET text = ? WHERE text LIKE 'Number of CUPTI events produced%'",
         f"Number of CUPTI events produced: \t{produced}, CUPTI buffers: 50.")
    doc = _analyse(path)
    assert _kinds(doc) == ["cuda_events_lost"]
    ev = doc["integrity"]["problems"][0]["evidence"]
    assert (ev["cupti_events_produced"], ev["cuda_events_collected"]) == (produced, collected)
    assert f"{collected:,} CUDA events of the {produced:,}" in analysis_verdict(doc)["headline"]


def test_routine_warnings_do_not_count(tmp_path):
    path = _copy(TRT_EAGER, tmp_path, "routine.sqlite")
    _diagnostic(path, "Installed CUDA driver version (13.2) is not supported by this build of Nsight Systems. CUDA "
                      "trace will be collected using libraries for driver version 13.1", 2, 1)
    _sql(path, "INSERT INTO DIAGNOSTIC_EVENT VALUES (0, 1, 3, 2, 'No CUDA events collected. Does the process use "
               "CUDA?', ?)", (1 << 24) | (77 << 24))
    _diagnostic(path, "Number of incomplete CUPTI events dropped: 2. Incomplete events appear when GPU timestamp "
                      "information have not been retrieved at the time the profiling session was stopped.", 1, 1)
    doc = _analyse(path)
    assert doc["integrity"]["complete"] is True, _kinds(doc)
    assert len(doc["integrity"]["notes"]) == 2


def test_the_cuda_trace_stops_while_the_inferences_go_on(tmp_path):
    """API rows ending at 853 ms while the NVTX ranges run to 1019 ms: the inferences after the last CUDA call."""
    path = _copy(LAUNCH_BOUND, tmp_path, "stopped.sqlite")
    ranges = _sql(path, "SELECT n.start, n.end FROM NVTX_EVENTS n WHERE n.eventType = 59 AND n.end IS NOT NULL "
                        "ORDER BY n.start")
    cut = ranges[-30][0] - 1  # the last 30 instances lose their CUDA calls and activity
    for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET"):
        if _sql(path, "SELECT 1 FROM sqlite_master WHERE name = ?", table):
            _sql(path, f"DELETE FROM {table} WHERE start > ?", cut)
    [(last_api,)] = _sql(path, "SELECT max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    after = sum(1 for s, _ in ranges if s > last_api)
    doc = _analyse(path)
    problem = next(p for p in doc["integrity"]["problems"] if p["kind"] == "cuda_trace_ends_early")
    assert problem["evidence"]["instances_without_cuda"] == after >= 30
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def test_an_export_nsys_failed_to_write_is_bad_input(tmp_path):
    path = tmp_path / "failed.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.execute("CREATE TABLE ANALYSIS_FILE (id INTEGER PRIMARY KEY, filename TEXT)")
    con.execute("CREATE TABLE ProcessStreams (globalPid INTEGER, filenameId INTEGER, contentId INTEGER)")
    con.execute("INSERT INTO StringIds VALUES (1, 'x')")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not a usable Nsight Systems export"):
        load_trace(path)
    r = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(path), "--no-store", "--no-cache"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no event table" in r.stderr


def test_fail_on_incomplete_exits_1_and_without_it_0(tmp_path):
    path = _copy(MULTISTREAM, tmp_path, "ci.sqlite")
    _sql(path, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE streamId = "
               "(SELECT max(streamId) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    html = tmp_path / "r.html"
    run = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "profiler", "analyze", str(path), "--no-store", "--no-cache", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    plain = run("--report", str(html))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0].startswith("INCOMPLETE CAPTURE: ")
    assert "INCOMPLETE CAPTURE" in html.read_text()
    gated = run("--fail-on-incomplete")
    assert gated.returncode == 1 and "launches_without_records" in gated.stderr
    healthy = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(MULTISTREAM), "--no-store",
                              "--fail-on-incomplete"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert healthy.returncode == 0, healthy.stderr


# ----------------------------------------------------------------------------- real incomplete H200 captures

def _nsys_count(path: Path, what: str) -> int:
    [(text,)] = _sql(path, "SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE ?", f"Number of {what} events collected%")
    return int(re.search(r"(\d+)", text).group(1))


def test_a_process_killed_before_its_cupti_buffers_flushed():
    """sample_traces/killed.sqlite: SIGKILL in the 151st of 400 inferences (48 kernels each); nsys kept 3 CUDA
    events and said not all CUDA, NVTX and OS runtime events might have been collected."""
    path = SAMPLE_TRACES / "killed.sqlite"
    if not path.is_file():
        pytest.skip("killed.sqlite absent")
    doc = _analyse(path)
    integ = doc["integrity"]
    assert integ["complete"] is False and set(_kinds(doc)) == {"nsys_not_all_collected"}
    said = [p["evidence"] for p in integ["problems"]]
    assert [e["events"] for e in said] == ["CUDA", "NVTX", "OS runtime libraries"]  # the GPU's loss first
    assert said[0]["nsys_collected"] == _nsys_count(path, "CUDA")
    assert said[1]["nsys_collected"] == _nsys_count(path, "NVTX")
    v = analysis_verdict(doc)
    assert v["status"] == "INCOMPLETE CAPTURE" and "not all CUDA events" in v["headline"]
    assert "gpu_busy_time" in integ["untrusted"] and "host_range_timing" in integ["trusted"]


def test_nsys_wrapping_a_launcher_that_starts_the_gpu_process():
    """sample_traces/launcher.sqlite: nsys profiled a client that starts the server in a clean environment;
    the server's GPU work is not in the capture."""
    path = SAMPLE_TRACES / "launcher.sqlite"
    if not path.is_file():
        pytest.skip("launcher.sqlite absent")
    assert not _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE 'CUPTI_ACTIVITY_KIND_%'")
    spawned = {n for (n,) in _sql(path, "SELECT DISTINCT s.value FROM OSRT_API o JOIN StringIds s ON s.id = o.nameId "
                                        "WHERE s.value IN ('waitpid', 'posix_spawn', 'fork', 'vfork', 'execve')")}
    doc = _analyse(path)
    assert _kinds(doc) == ["gpu_process_not_traced"]
    ev = doc["integrity"]["problems"][0]["evidence"]
    assert set(ev["spawn_calls"]) == spawned and ev["cuda_rows"] == 0
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def test_os_runtime_calls_that_stop_while_cuda_calls_go_on(tmp_path):
    path = _copy(LAUNCH_BOUND, tmp_path, "osrt.sqlite")
    [(first_api, last_api)] = _sql(path, "SELECT min(start), max(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    _sql(path, "DELETE FROM OSRT_API WHERE end > ?", first_api)  # the OS runtime trace ends at the first CUDA call
    [(osrt_end,)] = _sql(path, "SELECT max(end) FROM OSRT_API")
    doc = _analyse(path)
    problem = next(p for p in doc["integrity"]["problems"] if p["kind"] == "osrt_trace_ends_early")
    assert problem["evidence"]["gap_ms"] == pytest.approx((last_api - osrt_end) / 1e6)
    assert problem["lost"] == ["osrt"] and "osrt_stalls" in doc["integrity"]["untrusted"]
    assert doc["integrity"]["problems"][-1]["lost"] == ["osrt"]  # told after every loss of GPU or API data


def test_a_capture_cut_by_nsys_duration():
    """sample_traces/truncated.sqlite: nsys --duration stopped the session while the program ran; one CUPTI buffer
    of 50 never came back ('CUPTI buffers: 49 of 50. Some CUPTI events might be missing')."""
    path = SAMPLE_TRACES / "truncated.sqlite"
    if not path.is_file():
        pytest.skip("truncated.sqlite absent")
    doc = _analyse(path)
    kinds = _kinds(doc)
    assert {"nsys_cupti_buffers_missing", "nsys_not_all_collected"} <= set(kinds)
    assert doc["integrity"]["problems"][0]["evidence"]["events"] == "CUDA"  # the GPU's loss is told first
    ev = next(p for p in doc["integrity"]["problems"] if p["kind"] == "nsys_cupti_buffers_missing")["evidence"]
    [(text,)] = _sql(path, "SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Number of CUPTI events produced%'")
    got, of = map(int, re.search(r"CUPTI buffers:\s*(\d+) of (\d+)", text).groups())
    assert (ev["cupti_buffers"], ev["cupti_buffers_expected"]) == (got, of) and got < of
    assert ev["cuda_events_collected"] == _nsys_count(path, "CUDA")
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def test_a_multiprocessing_worker_nsys_does_not_trace():
    """sample_traces/mp_fork.sqlite: the GPU work runs in a forked worker nsys does not follow: no CUDA table."""
    path = SAMPLE_TRACES / "mp_fork.sqlite"
    if not path.is_file():
        pytest.skip("mp_fork.sqlite absent")
    assert not _sql(path, "SELECT name FROM sqlite_master WHERE name LIKE 'CUPTI_ACTIVITY_KIND_%'")
    doc = _analyse(path)
    assert _kinds(doc) == ["gpu_process_not_traced"]
    assert analysis_verdict(doc)["status"] == "INCOMPLETE CAPTURE"


def test_sorted_distinct_and_membership_match_numpy():
    import numpy as np

    from profiler.capture.blockwise import sorted_distinct as _distinct
    from profiler.capture.integrity import _member

    rng = np.random.default_rng(7)
    for n, hi in ((0, 5), (1, 5), (2000, 50), (5000, 2**62)):
        values = rng.integers(-hi, hi, n)
        probe = np.concatenate([rng.integers(-hi, hi, 300), values[:50], [np.iinfo(np.int64).max]])
        d = _distinct(values)
        assert np.array_equal(d, np.unique(values))
        assert np.array_equal(_member(probe, d), np.isin(probe, values))
