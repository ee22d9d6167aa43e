"""The measurement harness: trtexec's warm-up / iterations / duration rules, statistics, throughput, NVTX."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from profiler import stats
from profiler.backends.base import ExecutionContext, QueryTiming
from profiler.harness import HarnessConfig, run_queries, summarize_timings, throughput_qps, timings_to_samples
from profiler.nvtx import Ranges, iteration_range_name, variant_range_name

MS = 1_000_000


class FakeClock:
    """A monotonic nanosecond clock that only moves when a fake query says so."""

    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


class FakeClockContext(ExecutionContext):
    """Test double: each query takes the next compute time (ms) of ``durations_ms`` on a fake clock."""

    def __init__(self, clock: FakeClock, durations_ms, h2d_ms=None, d2h_ms=None, enqueue_frac=0.1):
        self.clock = clock
        self.durations_ms = list(durations_ms)
        self.h2d_ms, self.d2h_ms, self.enqueue_frac = h2d_ms, d2h_ms, enqueue_frac
        self.calls = 0

    def set_inputs(self, feeds):
        pass

    def outputs(self):
        return {}

    def query(self) -> QueryTiming:
        compute = self.durations_ms[self.calls % len(self.durations_ms)]
        self.calls += 1
        start = self.clock.now_ns
        total = compute + (self.h2d_ms or 0) + (self.d2h_ms or 0)
        self.clock.now_ns += int(round(total * MS))
        return QueryTiming(start, self.clock.now_ns, compute * self.enqueue_frac, compute, self.h2d_ms,
                           self.d2h_ms)


def test_warmup_drops_queries_started_inside_it_and_duration_bounds_the_run():
    clock = FakeClock()
    ctx = FakeClockContext(clock, [10.0])
    m = run_queries([ctx], HarnessConfig(iterations=5, duration_s=0.1, warmup_ms=200), clock=clock)
    # 10 ms queries: starts at 0, 10, ..., 190 ms fall inside the 200 ms warm-up
    assert m.warmup_dropped == 20
    assert min(t.start_ns for t in m.timings) == 200 * MS
    # the duration (100 ms from 200 ms) outlasts 5 iterations: queries end at 210 ... 300 ms
    assert len(m.timings) == 10
    assert max(t.end_ns for t in m.timings) == 300 * MS
    assert ctx.calls == 30


def test_iterations_minimum_wins_over_a_short_duration():
    clock = FakeClock()
    ctx = FakeClockContext(clock, [10.0])
    m = run_queries([ctx], HarnessConfig(iterations=50, duration_s=0.1, warmup_ms=0), clock=clock)
    assert m.warmup_dropped == 0
    assert len(m.timings) == 50


def test_no_warmup_and_no_duration_runs_exactly_the_iterations():
    clock = FakeClock()
    ctx = FakeClockContext(clock, [1.0, 2.0, 3.0])
    m = run_queries([ctx], HarnessConfig(iterations=7, duration_s=0, warmup_ms=0), clock=clock)
    assert [t.compute_ms for t in m.timings] == [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0]


def test_statistics_are_trtexecs_over_the_kept_samples():
    rng = np.random.default_rng(3)
    durations = list(np.round(rng.lognormal(0.0, 0.3, size=101), 4))
    clock = FakeClock()
    ctx = FakeClockContext(clock, durations, h2d_ms=0.25, d2h_ms=0.125)
    m = run_queries([ctx], HarnessConfig(iterations=101, duration_s=0, warmup_ms=0), clock=clock)
    summary = m.summary()
    latencies = [d + 0.375 for d in durations]
    expect = stats.summarize(latencies)
    for k in ("min", "mean", "median", "p90", "p95", "p99", "max", "cov_pct"):
        assert summary["latency_ms"][k] == pytest.approx(expect[k], rel=1e-6), k
    # trtexec's p90 index on 101 sorted samples: 101 - 1 - int(0.1 * 101) = 90
    assert summary["latency_ms"]["p90"] == pytest.approx(sorted(latencies)[90], rel=1e-6)
    assert summary["h2d_ms"]["median"] == pytest.approx(0.25)
    assert summary["d2h_ms"]["median"] == pytest.approx(0.125)
    assert summary["compute_ms"]["median"] == pytest.approx(float(np.median(np.float32(durations))), rel=1e-6)
    # the stored per-iteration samples reproduce the statistics
    samples = m.samples()
    assert len(samples) == 101
    again = stats.summarize([s["latency_ms"] for s in samples])
    assert again == summary["latency_ms"]
    assert samples[0]["start_ms"] == 0.0
    assert samples[1]["start_ms"] == pytest.approx(latencies[0], abs=1e-6)


def test_cpu_style_timings_have_no_transfer_summaries():
    clock = FakeClock()
    m = run_queries([FakeClockContext(clock, [2.0])], HarnessConfig(3, 0, 0), clock=clock)
    s = m.summary()
    assert s["h2d_ms"] is None and s["d2h_ms"] is None
    assert s["latency_ms"]["median"] == 2.0


def test_throughput_is_queries_over_first_start_to_last_end():
    ts = [QueryTiming(0, 10 * MS, 0.1, 10.0), QueryTiming(5 * MS, 15 * MS, 0.1, 10.0, stream=1),
          QueryTiming(12 * MS, 20 * MS, 0.1, 8.0)]
    # 3 queries in 20 ms, not 3 / (sum of latencies 28 ms)
    assert throughput_qps(ts) == pytest.approx(150.0)
    assert summarize_timings(ts)["span_ms"] == 20.0
    assert np.isnan(throughput_qps([]))


class SleepingContext(ExecutionContext):
    """Test double: a query sleeps (releasing the GIL, like a real backend computing) for ``ms``."""

    def __init__(self, ms: float, fail_at: int | None = None):
        self.ms, self.fail_at, self.calls = ms, fail_at, 0
        self.threads: set[int] = set()

    def set_inputs(self, feeds):
        pass

    def outputs(self):
        return {}

    def query(self) -> QueryTiming:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.fail_at is not None and self.calls == self.fail_at:
            raise RuntimeError("device lost")
        t0 = time.perf_counter_ns()
        time.sleep(self.ms / 1000)
        t1 = time.perf_counter_ns()
        return QueryTiming(t0, t1, 0.01, (t1 - t0) / 1e6)


def test_multistream_runs_one_thread_per_context_and_merges_by_start():
    ctxs = [SleepingContext(1.0), SleepingContext(1.0), SleepingContext(1.0)]
    m = run_queries(ctxs, HarnessConfig(iterations=8, duration_s=0.02, warmup_ms=5))
    assert m.streams == 3
    assert all(n >= 8 for n in m.per_stream_count)
    assert sum(m.per_stream_count) == len(m.timings)
    assert {t.stream for t in m.timings} == {0, 1, 2}
    assert len({next(iter(c.threads)) for c in ctxs}) == 3
    starts = [t.start_ns for t in m.timings]
    assert starts == sorted(starts)
    first, last = min(starts), max(t.end_ns for t in m.timings)
    assert m.summary()["throughput_qps"] == pytest.approx(len(m.timings) / ((last - first) / 1e9))
    assert [s["stream"] for s in m.samples()] == [t.stream for t in m.timings]


def test_a_failing_stream_stops_the_others_and_raises():
    ctxs = [SleepingContext(0.5), SleepingContext(0.5, fail_at=3)]
    with pytest.raises(RuntimeError, match="device lost"):
        run_queries(ctxs, HarnessConfig(iterations=10_000, duration_s=60, warmup_ms=0))
    assert ctxs[0].calls < 10_000


def test_keyboard_interrupt_propagates_from_a_single_stream():
    class InterruptingContext(SleepingContext):
        def query(self):
            if self.calls == 4:
                raise KeyboardInterrupt
            return super().query()

    with pytest.raises(KeyboardInterrupt):
        run_queries([InterruptingContext(0.1)], HarnessConfig(100, 0, 0))


def test_config_validation():
    with pytest.raises(ValueError):
        HarnessConfig(iterations=0)
    with pytest.raises(ValueError):
        HarnessConfig(duration_s=-1)
    with pytest.raises(ValueError):
        run_queries([], HarnessConfig())


class RecordingNvtxDomain:
    """Test double for an nvtx Domain: records pushes and pops."""

    def __init__(self):
        self.events: list[tuple[str, str | None]] = []

    def get_event_attributes(self, message=None, color=None):
        return message

    def push_range(self, attrs):
        self.events.append(("push", attrs))

    def pop_range(self):
        self.events.append(("pop", None))


def test_nvtx_ranges_wrap_every_kept_iteration_with_the_variant_key():
    nv = Ranges("trtprof")
    nv._domain, nv.enabled = RecordingNvtxDomain(), True
    clock = FakeClock()
    m = run_queries([FakeClockContext(clock, [1.0])], HarnessConfig(4, 0, 2.5), key="fp16-ws1G-s2",
                    clock=clock, nv=nv)
    with nv.range(variant_range_name("fp16-ws1G-s2")):
        pass
    pushes = [a for e, a in nv._domain.events if e == "push"]
    # the warm-up queries in one range of their own, outside any iteration range
    assert pushes == ["sweep/fp16-ws1G-s2/warmup"] + ["fp16-ws1G-s2/iter"] * len(m.timings) + ["sweep/fp16-ws1G-s2"]
    assert [e for e, _ in nv._domain.events[:2]] == ["push", "pop"] and len(m.timings) == 4
    assert sum(e == "pop" for e, _ in nv._domain.events) == len(pushes)
    assert m.warmup_dropped == 3
    assert iteration_range_name("int8-ws64M-s1-graph") == "int8-ws64M-s1-graph/iter"


def test_streams_on_threads_leave_their_warm_up_unranged():
    """On each stream's thread a warm-up range would be a repeated top-level range (one per thread), which
    ``trtprof analyze`` took for the inference on a two-stream sweep capture (H200): only the timed queries
    are ranged there."""
    nv = Ranges("trtprof")
    nv._domain, nv.enabled = RecordingNvtxDomain(), True
    clock = FakeClock()
    m = run_queries([FakeClockContext(clock, [1.0]), FakeClockContext(clock, [1.0])], HarnessConfig(3, 0, 2.5),
                    key="fp32-s2", clock=clock, nv=nv)
    pushes = [a for e, a in nv._domain.events if e == "push"]
    assert m.warmup_dropped >= 1 and set(pushes) == {"fp32-s2/iter"} and len(pushes) == len(m.timings) >= 6


def test_nvtx_is_disabled_without_a_tool_attached():
    nv = Ranges("trtprof")
    # no profiler injects itself into pytest, so the nvtx package (if installed) hands out a dummy domain
    assert nv.enabled is False
    push, pop = nv.pusher("x/iter")
    assert push() is None and pop() is None
    with nv.range("sweep/x"):
        pass


def test_samples_of_no_timings_is_empty():
    assert timings_to_samples([]) == []
