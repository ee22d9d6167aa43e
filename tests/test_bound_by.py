"""What bounds the steady state (``inference.bound_by``) against the findings beside it, and one cost priced
once when gpu_idle and jitter see the same host pauses; synthetic loops shaped like the H200 captures
(a PyTorch training step that never synchronises, a request loop whose garbage collector pauses the host)."""

from __future__ import annotations

import pandas as pd
import pytest

from profiler.capture.analyze import _bound_by, analyze
from profiler.capture.trace import Trace
from tests.capture_builders import T, api, capture_or_skip, kernels, ranges
from tests.conftest import SAMPLE_TRACES


@pytest.fixture(scope="module")
def sample_analysis():
    """The analysis JSON of a sample capture by file name, each analysed once."""
    from profiler.capture.analyze import analyze_path

    done: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in done:
            done[name] = analyze_path(capture_or_skip(SAMPLE_TRACES / name)).to_json()
        return done[name]
    return get


def _loop(n: int = 40, busy_us: int = 120, period_us: int = 200, wait: str = ""):
    """Steps of ``period_us`` on thread 5, each launching one kernel that keeps the GPU busy ``busy_us``
    (GPU idle in between: 80 us gaps). With ``wait`` the host blocks until the kernel ends, then runs its own
    code: in cudaStreamSynchronize ('sync') or in a synchronous copy of the result ('copy', PyTorch's
    ``.cpu()``); 'staging' adds a 60 us pageable copy call while the GPU idles before the launch; without,
    the host never waits on the GPU. 'poll' waits by calling cudaEventQuery every 2 us until the kernel ends
    (a spin loop); 'poll_slow' calls it every 40 us, running its own code between; 'poll_sleep' every 150 us,
    asleep in between (time.sleep: clock_nanosleep)."""
    nv, krows, arows, orows = [], [], [], []
    for i in range(n):
        t = i * period_us * T
        nv.append(("step", t, t + period_us * T, 5))
        krows.append((t + 10 * T, t + (10 + busy_us) * T, 5, t + 2 * T, i + 1))
        arows.append(("cudaLaunchKernel", t + 2 * T, t + 4 * T, 5, "launch"))
        if wait == "sync":
            arows.append(("cudaStreamSynchronize", t + 5 * T, t + (11 + busy_us) * T, 5, "sync"))
        elif wait == "copy":
            arows.append(("cudaMemcpy", t + 5 * T, t + (12 + busy_us) * T, 5, "memcpy"))
        elif wait == "staging" and i:
            arows.append(("cudaMemcpy", t - 70 * T, t - 10 * T, 5, "memcpy"))
        elif wait.startswith("poll"):  # 'poll' spins every 2 us, 'poll_slow' polls every 40, 'poll_sleep' 150
            every = {"poll": 2, "poll_slow": 40}.get(wait, 150)
            arows += [("cudaEventQuery_v3020", t + u * T, t + (u + 1) * T, 5, "other")
                      for u in range(5, 11 + busy_us, every)]
            if wait == "poll_sleep":  # asleep 140 of the 149 us between two polls
                orows += [("clock_nanosleep", t + (u + 3) * T, t + (u + 143) * T, 5)
                          for u in range(5, 11 + busy_us - every, every)]
    osrt = pd.DataFrame([{"name": n, "start_ns": a, "end_ns": b, "global_tid": g, "pid": 1, "tid": g}
                         for n, a, b, g in orows]) if orows else None
    return Trace(kernels=kernels(*krows), nvtx=ranges(*nv), api=api(*arows), osrt=osrt)


def test_a_loop_that_never_waits_on_its_gpu_is_bound_by_its_host():
    """The H200 training step: GPU busy 61% of the steady state, the host never synchronising (1.3 ms of host
    per 0.8 ms of GPU), read 'bound by compute' beside a HIGH gpu_idle finding. Busy over half the time,
    the GPU still waits on the host (40% idle) and the host never on the GPU: the host bounds it."""
    data = analyze(_loop()).to_json()
    assert data["phases"]["steady"]["gpu_busy_fraction"] == pytest.approx(0.6, abs=0.01)
    assert data["inference"]["bound_by"] == "host"
    [idle] = [f for f in data["findings"] if f["rule"] == "gpu_idle"]
    assert idle["severity"] == "high" and idle["evidence"]["idle_fraction"] == pytest.approx(0.4, abs=0.01)


def test_the_same_busy_share_with_the_host_waiting_on_each_step_is_compute_bound():
    """The same 60% busy loop, but the host blocks in a sync for each kernel (62% of the steady state) and
    runs its own code after: the GPU waits on the host less than the host waits on it."""
    data = analyze(_loop(wait="sync")).to_json()
    assert data["phases"]["steady"]["gpu_busy_fraction"] == pytest.approx(0.6, abs=0.01)
    assert sum(s["total_ms"] for s in data["sync_summary"]) / data["phases"]["steady"]["duration_ms"] \
        == pytest.approx(0.62, abs=0.02)
    assert data["inference"]["bound_by"] == "compute"


def test_a_synchronous_copy_of_the_result_is_the_host_waiting_on_the_gpu():
    """The varbatch sample ends each request with ``.cpu()``: the copy call blocks until the model's kernels
    finish, with no sync call anywhere. The host waits in it 60% of the steady state: compute-bound. A
    pageable copy's staging while the GPU idles is the host's own work: it stays host-bound."""
    from profiler.capture.waits import host_waits_on_gpu_ms

    res = analyze(_loop(wait="copy"))
    data = res.to_json()
    assert data["sync_summary"] == [] and data["inference"]["bound_by"] == "compute"
    ph, duration_ms = res.context.phases, data["phases"]["steady"]["duration_ms"]
    waits_ms = host_waits_on_gpu_ms(res.context.table, res.context.devices, ph.steady_start_ns, ph.steady_end_ns)
    assert waits_ms / duration_ms == pytest.approx(0.6, abs=0.01)  # the call's time while the kernel runs
    staged = analyze(_loop(wait="staging"))
    assert staged.to_json()["inference"]["bound_by"] == "host"
    ph = staged.context.phases
    assert host_waits_on_gpu_ms(staged.context.table, staged.context.devices, ph.steady_start_ns,
                                ph.steady_end_ns) == pytest.approx(0.0)


def test_a_host_that_polls_until_the_gpu_is_done_waits_on_it():
    """The H200 capture polled.sqlite (a 1.6 ms model per step, then ``while not event.query(): pass``) read
    'bound by the host' where the same loop with cudaStreamSynchronize read 'bound by compute': its 300
    thousand one-microsecond poll calls were not seen as waiting. A run of polls back to back is one wait,
    from the first call's start to the last one's end: the same 60% of the steady state as a blocking sync.
    Polls far apart, with the host's own work between them, are no wait."""
    from profiler.capture.waits import host_waits_on_gpu_ms, polled_waits

    res = analyze(_loop(wait="poll"))
    data, table = res.to_json(), res.context.table
    assert data["sync_summary"] == [] and data["inference"]["bound_by"] == "compute"
    start, end = polled_waits(table.api, table.api_sorted)
    assert len(start) == len(data["ranges"][0]["instances"]["start_ms"]) > 30  # one wait per step
    assert ((end - start) == 125 * T).all()  # from 5 us to 130 us after the step's start: 63 polls
    ph, duration_ms = res.context.phases, data["phases"]["steady"]["duration_ms"]
    waits_ms = host_waits_on_gpu_ms(table, res.context.devices, ph.steady_start_ns, ph.steady_end_ns)
    assert waits_ms / duration_ms == pytest.approx(0.6, abs=0.01)  # the part of it while the kernel runs
    slow = analyze(_loop(wait="poll_slow"))  # 39 us of its own work between polls: working, not waiting
    assert polled_waits(slow.context.table.api, slow.context.table.api_sorted, slow.context.table.osrt)[0].size == 0
    assert slow.to_json()["inference"]["bound_by"] == "host"


def test_a_completion_thread_waiting_for_results_does_not_make_the_launching_thread_wait():
    """The 60% busy loop whose launching thread never waits, beside a second thread that blocks in
    cudaStreamSynchronize (or polls) for each result, and launches a small kernel after it: the launching
    thread still bounds it. The same waits on
    the launching thread are the compute-bound case."""
    for wait in ("sync", "poll"):
        trace = _loop(wait=wait)
        calls = trace.api
        side = calls["name"] != "cudaLaunchKernel"
        calls.loc[side, "global_tid"] = calls.loc[side, "tid"] = 6
        assert analyze(trace).to_json()["inference"]["bound_by"] == "host", wait
        # the completion thread also launches a 2 us post-processing kernel per result: still not the feeder
        post = [(i * 200 * T + 135 * T, i * 200 * T + 137 * T, 6, i * 200 * T + 132 * T, 900 + i) for i in range(40)]
        trace.kernels = pd.concat([trace.kernels, kernels(*post)], ignore_index=True)
        trace.api = pd.concat([trace.api, api(*[("cudaLaunchKernel", r[3], r[3] + 2 * T, 6, "launch") for r in post])],
                              ignore_index=True)
        assert analyze(trace).to_json()["inference"]["bound_by"] == "host", wait
        assert analyze(_loop(wait=wait)).to_json()["inference"]["bound_by"] == "compute", wait


def test_a_host_that_sleeps_between_its_polls_waits_on_the_gpu():
    """The H200 capture pollsleep.sqlite (time.sleep(0.0001) between polls: 2411 clock_nanosleep calls of
    154 us, polls 115 us to 1 ms apart) read 'bound by the host' like the spinning one did. Time asleep between
    two polls is waiting: a loop with 140 of every 149 us between its polls in clock_nanosleep waits from its
    first poll to its last, where the same polls with the host's own code between them do not."""
    from profiler.capture.waits import polled_waits

    res = analyze(_loop(busy_us=400, period_us=600, wait="poll_sleep"))
    table = res.context.table
    start, end = polled_waits(table.api, table.api_sorted, table.osrt)
    assert len(start) > 30 and ((end - start) == 301 * T).all()  # polls at 5, 155 and 305 us: to 306 us
    assert res.to_json()["inference"]["bound_by"] == "compute"
    assert polled_waits(table.api, table.api_sorted)[0].size == 0  # the same polls, the sleeps not seen


def test_a_poll_run_ends_at_another_call_of_its_thread_and_not_at_another_threads():
    """Polls of thread 5 with a launch of its own between the second and third, and thread 6 polling at the
    same time: thread 5 waits twice (its third poll and the one 142 us later are each a run of one: no wait),
    thread 6 once."""
    from profiler.capture.series import build_series
    from profiler.capture.waits import polled_waits

    rows = [("cudaStreamQuery", u * T, (u + 1) * T, 5, "other") for u in (0, 2)]
    rows += [("cudaLaunchKernel", 4 * T, 6 * T, 5, "launch"), ("cudaStreamQuery", 7 * T, 8 * T, 5, "other")]
    rows += [("cudaStreamQuery", u * T, (u + 1) * T, 5, "other") for u in (150, 152, 154)]
    rows += [("cuStreamQuery", u * T, (u + 1) * T, 6, "other") for u in (1, 3, 5, 7)]
    rows += [("cudaStreamQuery", 300 * T, 301 * T, 5, "other")]  # 145 us after the last: a run of one
    table = build_series(Trace(api=api(*rows), nvtx=ranges(("step", 0, 400 * T, 5))))
    start, end = polled_waits(table.api, table.api_sorted)
    assert sorted(zip(start.tolist(), end.tolist())) == [(0, 3 * T), (T, 8 * T), (150 * T, 155 * T)]


def _steady(busy: float, by_kind: dict[str, float] | None = None, duration_ms: float = 100.0) -> dict:
    return {"gpu_busy_fraction": busy, "duration_ms": duration_ms,
            "gpu_ms_by_kind": by_kind or {"compute": busy * duration_ms, "HtoD": 0.0}}


@pytest.mark.parametrize("busy,sync_ms,bound", [
    (0.99, 0.0, "compute"),   # saturated (trtexec): its top kind, whatever the host does
    (0.92, 0.0, "compute"),   # idle under a tenth: saturated still
    (0.85, 0.0, "host"),      # idle 15% and the host never waits: host
    (0.85, 20.0, "compute"),  # idle 15%, the host blocked 20%: the GPU
    (0.70, 29.0, "host"),     # idle 30% against 29% blocked
    (0.70, 31.0, "compute"),
    (0.40, 90.0, "host"),     # busy under half: host, however long the host blocks
])
def test_bound_by_weighs_the_gpus_wait_against_the_hosts(busy, sync_ms, bound):
    assert _bound_by(_steady(busy), sync_ms) == bound


def test_a_busy_copy_bound_steady_state_keeps_its_direction():
    by_kind = {"compute": 10.0, "HtoD": 60.0, "DtoH": 25.0}
    assert _bound_by(_steady(0.95, by_kind), 0.0) == "HtoD"
    assert _bound_by(_steady(0.80, by_kind), 50.0) == "HtoD"
    assert _bound_by(_steady(0.80, by_kind), 0.0) == "host"
    assert _bound_by(_steady(0.80, {"compute": 0.0}), 0.0) is None  # no GPU work: no verdict


def test_terminal_and_report_say_what_host_bound_means():
    from profiler.cli.analyze import inference_lines
    from profiler.documents import AnalysisDocument
    from profiler.report.inference import inference_cards

    data = analyze(_loop()).to_json()
    [line] = [x for x in inference_lines(data) if x.startswith("inference:")]
    assert line.endswith("steady state bound by the host (the GPU waits on it longer than it waits on the GPU)")
    [card] = [c for c in inference_cards(AnalysisDocument(data)) if c["label"] == "bound by"]
    assert card["value"] == "the host" and card["sub"] == ("steady state: the GPU waits on the host longer than the "
                                                           "host on the GPU")


def _gc_loop(n: int = 60, every: int = 10, pause_us: int = 20_000):
    """Requests of 100 us on thread 5 (a 40 us kernel each, then a sync), every ``every``-th one stretched by
    a ``pause_us`` host pause (the garbage collector) before its launch: the GPU idles through each pause."""
    nv, krows, arows = [], [], []
    t = 0
    for i in range(n):
        pause = pause_us * T if i % every == every - 1 else 0
        launch = t + 10 * T + pause
        nv.append(("request", t, launch + 90 * T, 5))
        krows.append((launch + 5 * T, launch + 45 * T, 5, launch, i + 1))
        arows.append(("cudaLaunchKernel", launch, launch + 3 * T, 5, "launch"))
        arows.append(("cudaStreamSynchronize", launch + 4 * T, launch + 46 * T, 5, "sync"))
        t = launch + 100 * T
    return Trace(kernels=kernels(*krows), nvtx=ranges(*nv), api=api(*arows))


def test_gc_pauses_are_priced_once_by_jitter_not_again_by_gpu_idle():
    """The H200 gc capture priced its garbage-collection pauses twice: jitter 98.9% and gpu_idle 91% of the
    steady state. The pauses' idle time is inside the outlier instances: jitter keeps it, gpu_idle keeps
    only the idle time beyond it and names jitter; its evidence still says how idle the GPU was."""
    res = analyze(_gc_loop())
    [jit] = [f for f in res.findings if f.rule == "jitter"]
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]
    steady_ms = jit.impact["steady_ms"]
    assert jit.impact["ms_total"] == pytest.approx(6 * 20.0, rel=0.01)  # six pauses of 20 ms
    assert jit.severity == "high"
    assert idle.evidence["idle_ms"] > 6 * 20.0  # measured: the pauses and the gaps between requests
    shared = idle.impact["shared_ms"]
    assert shared == pytest.approx(6 * 20.0, rel=0.01)
    assert idle.impact["shared_with"] == "jitter [request]"
    assert idle.impact["ms_total"] == pytest.approx(idle.evidence["idle_ms"] - shared)
    assert idle.impact["share"] >= 0.01 and "included_in" not in idle.impact  # 60 us gaps of its own
    assert jit.impact["share"] + idle.impact["share"] <= 1.0
    assert idle.impact["share"] == pytest.approx(idle.impact["ms_total"] / steady_ms)
    assert idle.evidence["impact"] == idle.impact


def test_idle_outside_the_outliers_stays_gpu_idles_cost():
    """Without pauses the same loop idles its GPU between requests: no jitter, gpu_idle keeps all of it."""
    res = analyze(_gc_loop(pause_us=0))
    assert not [f for f in res.findings if f.rule == "jitter"]
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]  # 60 us gaps after each 40 us kernel
    assert "included_in" not in idle.impact and "shared_ms" not in idle.impact
    assert idle.impact["ms_total"] == pytest.approx(idle.evidence["idle_ms"])


def test_sample_captures_between_half_and_saturated_busy(sample_analysis):
    """Sample captures busy 69% to 87% of the steady state: graph_node launches 100 kernels per iteration
    and never synchronises (0.139 ms of host per 0.099 ms of GPU): its host bounds it; sync_heavy blocks in
    syncs 66% of its steady state while the GPU works, varbatch in copies 70%: their compute does."""
    node, heavy = sample_analysis("graph_node.sqlite"), sample_analysis("sync_heavy.sqlite")
    assert 0.6 < node["phases"]["steady"]["gpu_busy_fraction"] < 0.75 and node["inference"]["bound_by"] == "host"
    assert 0.6 < heavy["phases"]["steady"]["gpu_busy_fraction"] < 0.75 and heavy["inference"]["bound_by"] == "compute"
    # varbatch idles its GPU 13% between requests and spends under 1% in sync calls: each request's .cpu()
    # waits in its copy call
    var = sample_analysis("varbatch.sqlite")
    steady_ms = var["phases"]["steady"]["duration_ms"]
    assert 0.85 < var["phases"]["steady"]["gpu_busy_fraction"] < 0.9
    assert sum(s["total_ms"] for s in var["sync_summary"]) < 0.01 * steady_ms
    assert var["inference"]["bound_by"] == "compute"


def test_host_stall_sample_prices_its_stalls_once(sample_analysis):
    """host_stall sleeps 5 ms in every tenth query: jitter (its outliers) and gpu_idle (its gaps) saw the
    same 52 ms, 27% and 28% of the steady state; jitter keeps them, gpu_idle the 1% beyond."""
    data = sample_analysis("host_stall.sqlite")
    [jit] = [f for f in data["findings"] if f["rule"] == "jitter"]
    [idle] = [f for f in data["findings"] if f["rule"] == "gpu_idle"]
    assert jit["severity"] == "high" and jit["impact"]["share"] == pytest.approx(0.269, abs=0.005)
    assert idle["impact"]["shared_with"] == "jitter [host_stall.query]"
    assert idle["impact"]["shared_ms"] + idle["impact"]["ms_total"] == pytest.approx(idle["evidence"]["idle_ms"])
    assert idle["impact"]["shared_ms"] <= jit["impact"]["ms_total"]
    assert idle["severity"] == "low" and idle["evidence"]["idle_fraction"] == pytest.approx(0.28, abs=0.005)


def test_idle_that_is_all_in_the_outliers_is_the_same_time_as_jitter():
    """Pauses of 200 ms (the gc capture's 0.3 to 0.7 s): the idle time left beyond them is under 1% of the
    steady state, so the gpu_idle finding is that time seen again: low, 'the same time as' jitter."""
    from profiler.report.verdict import impact

    res = analyze(_gc_loop(pause_us=200_000))
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]
    assert idle.impact["share"] < 0.01 and idle.severity == "low"
    assert idle.impact["included_in"] == idle.impact["shared_with"] == "jitter [request]"
    assert impact(idle.to_dict())["text"].endswith("the same time as jitter [request]")
    part = analyze(_gc_loop())  # 20 ms pauses leave 3% of gaps of its own: no 'same time' said of them
    [idle] = [f for f in part.findings if f.rule == "gpu_idle"]
    assert "same time" not in impact(idle.to_dict())["text"]


def test_gpu_idle_gives_jitter_no_more_than_jitter_prices():
    """Jitter prices less than its outliers' excess where the work explains it or the GPU was backlogged:
    gpu_idle then keeps the idle time jitter does not price."""
    from profiler.rules.impact import _idle_in_outliers

    res = analyze(_gc_loop())
    [jit] = [f for f in res.findings if f.rule == "jitter"]
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]
    idle_ms = idle.evidence["idle_ms"]
    for key in ("shared_ms", "shared_with", "included_in"):  # as priced before the shared time is taken out
        idle.impact.pop(key, None)
    idle.impact.update(ms_total=idle_ms, share=idle_ms / idle.impact["steady_ms"])
    jit.impact["ms_total"] = 30.0  # a quarter of its outliers' 120 ms
    _idle_in_outliers(res.context, [jit, idle], idle.impact["steady_ms"])
    assert idle.impact["shared_ms"] == pytest.approx(30.0)
    assert idle.impact["ms_total"] == pytest.approx(idle_ms - 30.0)


def test_and_list_joins_names_as_a_sentence_does():
    from profiler.rules.impact import and_list

    assert [and_list(["a"]), and_list(["a", "b"]), and_list(["a", "b", "c"])] == ["a", "a and b", "a, b and c"]


def test_idle_in_the_outliers_of_two_jitter_findings_names_both_in_one_phrase():
    """mfu after: the idle time sits in the outliers of two jitter findings; the names read 'X and Y'."""
    from profiler.capture.analyze import analyze_path
    from tests.conftest import NSYS_FIXTURES

    res = analyze_path(capture_or_skip(NSYS_FIXTURES / "v2026.2.1_nsysai_mfu_2gpu_after.sqlite"))
    [idle] = [f for f in res.findings if f.rule == "gpu_idle" and f.impact.get("shared_with")]
    # the FSDP ranges' launch_overhead findings hold the idle time inside them as well: one list, one 'and'
    assert idle.impact["shared_with"].endswith(", jitter [aten::layer_norm] and jitter [aten::linear]")
    assert idle.impact["shared_with"].startswith("launch_overhead [FSDP::pre_forward")
    assert idle.impact["shared_with"].count(" and ") == 1


def test_queue_wait_headline_says_the_shared_idle_time_per_inference_like_the_cost(sample_analysis):
    """queue_wait: gpu_idle costs 2.376 ms per inference beyond the idle time in jitter's outliers (3.9 ms in
    all): the headline gives that time per inference too, not the total beside a per-inference cost."""
    from profiler.fmt import fmt_ms
    from profiler.report.verdict import analysis_verdict

    data = sample_analysis("queue_wait.sqlite")
    [idle] = [f for f in data["findings"] if f["rule"] == "gpu_idle"]
    given = idle["impact"]
    head = analysis_verdict(data)["headline"]
    per = fmt_ms(given["shared_ms"] / given["instances"])
    assert head.endswith(f"{fmt_ms(given['ms_per_instance'])} per inference, {given['share'] * 100:.3g}% of the "
                         f"steady state, not counting {per} per inference of idle time in the outliers of "
                         "jitter [queue_wait.request]")


# -- impacts that add up: one time priced once ------------------------------------------------------------
def _tiny_matmuls(n: int = 50, busy_us: int = 8, period_us: int = 100, sleep: bool = False):
    """No NVTX: ``n`` launches of one ``busy_us`` kernel every ``period_us`` on thread 5 (a Python loop of tiny
    matmuls), the host in its own code between them, or asleep (``sleep``: clock_nanosleep fills each gap)."""
    krows, arows, orows = [], [], []
    for i in range(n):
        t = i * period_us * T
        arows.append(("cudaLaunchKernel", t, t + 5 * T, 5, "launch"))
        krows.append((t + 6 * T, t + (6 + busy_us) * T, 5, t, i + 1))
        if sleep and i + 1 < n:
            orows.append(("clock_nanosleep", t + (8 + busy_us) * T, t + (period_us - 2) * T, 5))
    osrt = pd.DataFrame([{"name": a, "start_ns": s, "end_ns": e, "global_tid": g, "pid": 1, "tid": g}
                         for a, s, e, g in orows]) if orows else None
    return Trace(kernels=kernels(*krows), api=api(*arows), osrt=osrt)


def _unincluded_share(findings) -> float:
    return sum(f.impact["share"] or 0.0 for f in findings
               if not f.impact.get("included_in") and f.severity != "info")


def test_a_launch_bound_window_and_its_idle_gaps_are_priced_once():
    """50 tiny matmuls without NVTX: launch_overhead (the whole capture as one window) and gpu_idle both
    claimed the same time (91% and 92% of the steady state). The gaps are the window's, the host between
    launches is its own code that a CUDA graph removes: gpu_idle names launch_overhead as holding them."""
    res = analyze(_tiny_matmuls())
    [lo] = [f for f in res.findings if f.rule == "launch_overhead"]
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]
    assert lo.range is None and lo.severity == "high"
    gap_ms = 49 * (100 - 8) / 1e3  # 49 gaps of 92 us between the kernels
    assert idle.evidence["idle_ms"] == pytest.approx(gap_ms)
    assert idle.impact["shared_ms"] == pytest.approx(min(gap_ms, lo.impact["ms_total"]))
    assert idle.impact["ms_total"] == pytest.approx(gap_ms - idle.impact["shared_ms"])
    assert idle.impact["included_in"] == idle.impact["shared_with"] == "launch_overhead"
    assert idle.severity == "low" and _unincluded_share(res.findings) <= 1.0


def test_idle_a_graph_would_not_remove_stays_gpu_idles_cost():
    """The same loop asleep between launches (time.sleep): a CUDA graph does not remove the sleep, so the
    idle time is gpu_idle's own even inside the launch-bound window."""
    res = analyze(_tiny_matmuls(sleep=True))
    [idle] = [f for f in res.findings if f.rule == "gpu_idle"]
    assert idle.evidence["host_cause"] == "os_runtime"
    assert "shared_ms" not in idle.impact and idle.impact["ms_total"] == pytest.approx(idle.evidence["idle_ms"])


def _copy_loops(n: int = 40, alternate: bool = True):
    """Two NVTX loops on thread 5, 'copy.pageable' (16 MiB HtoD + DtoH of 400 us each, pageable) and
    'copy.pinned' (the same pinned, 100 us each), each copy pair around a 30 us kernel; taking turns
    (``alternate``) or the pinned loop after the whole pageable one."""
    mc, krows, nv, arows = [], [], [], []
    order = [(i, kind) for i in range(n) for kind in ("pageable", "pinned")] if alternate else \
        [(i, kind) for kind in ("pageable", "pinned") for i in range(n)]
    t, cid = 0, 1
    for _, kind in order:
        copy_us = 400 if kind == "pageable" else 100
        nv.append((f"copy.{kind}", t, t + (2 * copy_us + 60) * T, 5))
        for j, (d, src, dst) in enumerate((("HtoD", kind, "device"), ("DtoH", "device", kind))):
            s = t + 5 * T + j * (copy_us + 40) * T
            mc.append({"start_ns": s, "end_ns": s + copy_us * T, "api_tid": 5, "api_start_ns": s - 2 * T,
                       "bytes": 1 << 24, "copy_kind": d, "src_kind": src, "dst_kind": dst, "correlation_id": cid,
                       "device_id": 0, "stream_id": 7, "pid": 1})
            arows.append(("cudaMemcpy", s - 2 * T, s + (copy_us + 1) * T, 5, "memcpy"))
            cid += 1
        ks = t + (7 + copy_us) * T
        krows.append((ks, ks + 30 * T, 5, ks - T, cid))
        arows.append(("cudaLaunchKernel", ks - T, ks, 5, "launch"))
        cid += 1
        t += (2 * copy_us + 100) * T
    return Trace(kernels=kernels(*krows), memcpy=pd.DataFrame(mc), nvtx=ranges(*nv), api=api(*arows))


def test_a_loop_taking_turns_with_the_inference_keeps_its_copies():
    """Pageable and pinned copy loops taking turns: the pinned loop's copies are not 'copies outside the
    inference', the transfer cost of the inference (the pageable loop) is its own copies, the pageable copies
    are counted alike by both findings, and the pageable saving says it is inside transfer_bound's time."""
    res = analyze(_copy_loops())
    data = res.to_json()
    inf = data["inference"]
    assert inf["series"] == "copy.pageable" and inf["alternates_with"] == ["copy.pinned"]
    assert inf["copies_outside_per_inference"] is None
    # what each inference copies in and out: its own 16 MiB each way, not the pinned loop's too
    assert inf["io_bytes_per_inference"] == {"HtoD": float(1 << 24), "DtoH": float(1 << 24)}
    tb = {f.range: f for f in res.findings if f.rule == "transfer_bound"}
    assert set(tb) == {"copy.pageable", "copy.pinned"}  # each loop prices its own copies
    assert tb["copy.pageable"].evidence["copy_ms_per_instance"] == pytest.approx(2 * 0.4)
    assert tb["copy.pinned"].evidence["copy_ms_per_instance"] == pytest.approx(2 * 0.1)
    [pg] = [f for f in res.findings if f.rule == "pageable_memcpy"]
    assert pg.evidence["copies"] == tb["copy.pageable"].evidence["pageable_copies"] == 2 * 40
    assert pg.impact["included_in"] == "transfer_bound [copy.pageable]"
    assert pg.severity == "high"  # pinned memory is a remedy of its own: it keeps its severity
    assert _unincluded_share(res.findings) <= 1.0


def test_loops_one_after_the_other_do_not_take_turns():
    data = analyze(_copy_loops(alternate=False)).to_json()
    assert "alternates_with" not in data["inference"]


def test_pageable_vs_pinned_sample_keeps_the_pinned_loops_copies_apart(sample_analysis):
    """The H200 sample alternates a pageable and a pinned copy range 40 times: the pinned copies were
    '0.64 ms of copies per inference outside it'."""
    data = sample_analysis("pageable_vs_pinned.sqlite")
    assert data["inference"]["alternates_with"] == ["copy.pinned"]
    assert data["inference"]["copies_outside_per_inference"] is None
