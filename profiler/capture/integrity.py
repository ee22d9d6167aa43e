"""Capture integrity: whether an export holds everything nsys traced, checked before anything is judged.

Two sources of evidence:

- what nsys says about its own collection (``DIAGNOSTIC_EVENT``, read by the loader into
  ``trace.meta['diagnostics']``): events it dropped or lost, "Not all ... events might have been collected",
  errors while it processed the events, and its per-process counts ("Number of CUPTI events produced",
  "Number of CUDA events collected", "Number of NVTX events collected", ...);
- the capture against itself: launch calls without the activity record they must have produced, the
  inference's instances running on after the last CUDA call of the capture (or before its first), OS
  runtime calls that stop while CUDA calls go on, nsys's counts against the rows the export holds.

nsys prints warnings routinely on healthy captures ("Installed CUDA driver version ... is not supported",
"No CUDA events collected" for a child process that does no CUDA work, "Unable to collect CPU kernel IP
samples", 2 "incomplete CUPTI events dropped" at the end of a session); only evidence that data is missing
is a problem. Every number the checks compare with is a field of :class:`IntegrityThresholds`, reported
beside the problems (``integrity.thresholds``), each calibrated on the healthy captures the tests hold.

``check(...)`` gives the ``integrity`` object of the analysis JSON::

    {"complete": bool, "problems": [{kind, what, evidence, lost}], "trusted": [part, ...],
     "untrusted": [part, ...], "thresholds": {...}}

``lost`` names the data a problem takes away (``gpu``: activity records; ``api``: CUDA API calls; ``nvtx``;
``osrt``); ``trusted`` and ``untrusted`` are the parts of the analysis (:data:`PARTS`) that still hold and
that do not.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import numpy as np

from profiler.capture.blockwise import sorted_distinct
from profiler.capture.keys import blocks

PARTS = {
    "host_range_timing": "host time of the NVTX ranges (host time per inference)",
    "gpu_busy_time": "GPU busy time, idle gaps and the GPU's share of the steady state",
    "gpu_time_per_inference": "GPU time, GPU latency and layer times per inference",
    "cuda_calls_per_inference": "launches, CUDA calls and synchronisation per inference",
    "osrt_stalls": "OS runtime calls (host stalls)",
    "range_counts": "how many instances each NVTX range has (nsys drops whole events: those it kept are right)",
}
"""The parts of an analysis a problem can take away, id -> what the part is."""

UNTRUSTED_BY_LOSS = {
    "gpu": ("gpu_busy_time", "gpu_time_per_inference", "cuda_calls_per_inference"),
    "api": ("gpu_time_per_inference", "cuda_calls_per_inference"),
    "nvtx": ("range_counts",),
    "osrt": ("osrt_stalls",),
}
"""What lost data takes away: activity records carry the GPU's time and the launches per inference; API calls
tie GPU work to the ranges that launched it; lost NVTX events leave the ranges kept whole but fewer."""

RULES_BY_LOSS = {
    "gpu": ("gpu_idle", "launch_overhead", "transfer_bound", "fp32_math", "time_slicing", "serialised_threads",
            "decode_drift", "stream_race", "repeated_setup", "host_sleeps"),
    "api": ("launch_overhead", "sync_api", "stream_race", "repeated_setup", "jitter"),
    "nvtx": (),
    "osrt": ("host_sleeps", "serialised_threads", "jitter"),
}
"""Capture rules that need the data a problem lost: they do not run on such a capture (the ranges nsys kept are
whole, so the rules over them still hold). jitter measures the ranges' host time, which holds, but names the
outliers' cause from the CUDA and OS runtime calls inside them: without those it would blame host code."""

LOSS_ORDER = ("gpu", "api", "nvtx", "osrt")
"""The order problems are told in: by the most important data they take away."""
SPAWN_CALLS = ("waitpid", "wait4", "waitid", "wait", "posix_spawn", "posix_spawnp", "fork", "vfork", "execve",
               "execv", "execvp", "execl", "execlp", "system", "popen")
"""OS runtime calls by which a traced process starts another process (or waits for one it started)."""
STREAM_CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture")
STREAM_CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture")
DIAGNOSTICS_MAX_ROWS = 10_000
"""DIAGNOSTIC_EVENT rows read (a healthy capture has a few dozen; one per process and message)."""


@dataclass(frozen=True)
class IntegrityThresholds:
    """Every number the integrity checks compare with (calibrated on the healthy captures the tests hold)."""

    cuda_collected_min_share: float = 0.2
    """nsys lost CUDA events when a process's "Number of CUDA events collected" is below this share of its "Number
    of CUPTI events produced". Healthy captures collect 28-100% (43 produced, 12 collected on a 2-kernel program;
    70 and 37; 105,471 and 70,925 on a CUDA-graph LLM run: CUPTI counts records nsys does not keep as events);
    the broken capture this catches collected 909 of 34,429 (2.6%)."""
    cuda_lost_min_events: int = 1_000
    """... and only when at least this many produced events are not collected (a tiny program's counts differ
    by tens)."""
    dropped_min_events: int = 100
    """Events nsys says it dropped ("Number of incomplete CUPTI events dropped: N") count as lost from this
    many (2 at the end of a healthy session whose last GPU work had not finished) ..."""
    dropped_min_share: float = 0.01
    """... and this share of the CUPTI events the process produced."""
    export_min_share: float = 0.9
    """The export lacks events when it holds fewer rows of a kind (CUDA API calls and GPU activity, NVTX, OS
    runtime) for a process than this share of what nsys says it collected for it. Healthy exports lack at most
    5 rows of a kind (15 of 17 NVTX events on a short capture: nsys counts a few events, like NVTX domain
    creations, that are not rows) or hold up to 0.6% more ..."""
    export_min_missing_events: int = 100
    """... and at least this many rows fewer."""
    unmatched_min_launches: int = 10
    """Kernel launch calls without an activity record count as lost from this many (outside CUDA stream
    capture, whose launches make no kernel; beyond the process's activity rows that lack their call) ..."""
    unmatched_min_share: float = 0.02
    """... and this share of the process's launch calls (at most 6 of 2,023, 0.3%, on the healthy captures once
    stream capture is left out)."""
    unit_min_uncovered: int = 3
    """The inference's instances after the capture's last CUDA call (or before its first), while the others
    make CUDA calls, mean the CUDA trace stopped (or started) early from this many instances ..."""
    unit_min_uncovered_share: float = 0.05
    """... and this share of the instances."""
    osrt_min_gap_ms: float = 100.0
    """OS runtime calls that end this long before the last CUDA call ..."""
    osrt_min_gap_share: float = 0.1
    """... and this share of the span of the CUDA calls mean the OS runtime trace stopped early (a live process
    keeps calling the C library while it calls CUDA; on every healthy capture the OS runtime calls outlast the
    CUDA calls)."""


DEFAULT_THRESHOLDS = IntegrityThresholds()


@dataclass
class Problem:
    """One piece of evidence that the capture lacks data."""

    kind: str
    what: str
    evidence: dict[str, Any]
    lost: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.what, "evidence": self.evidence, "lost": list(self.lost)}


@dataclass
class Integrity:
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    thresholds: IntegrityThresholds = DEFAULT_THRESHOLDS

    @property
    def complete(self) -> bool:
        return not self.problems

    @property
    def lost(self) -> set[str]:
        return {x for p in self.problems for x in p.lost}

    def skipped_rules(self) -> list[str]:
        """The capture rules that need lost data, in a fixed order."""
        return sorted({r for x in self.lost for r in RULES_BY_LOSS.get(x, ())})

    def to_json(self) -> dict[str, Any]:
        untrusted = {part for x in self.lost for part in UNTRUSTED_BY_LOSS.get(x, ())}
        return {"complete": self.complete, "problems": [p.to_json() for p in self.problems],
                "trusted": [p for p in PARTS if p not in untrusted], "untrusted": [p for p in PARTS if p in untrusted],
                "rules_not_run": self.skipped_rules(), "notes": self.notes, "parts": dict(PARTS),
                "thresholds": asdict(self.thresholds)}


# ----------------------------------------------------------------------------- reading DIAGNOSTIC_EVENT

_SEVERITIES = {0: "Unknown", 1: "Info", 2: "Warning", 3: "Error", 4: "Verbose"}
_SOURCES = {0: "Unknown source", 1: "Injection", 2: "Daemon", 3: "Analysis"}


def read_diagnostics(export: Any) -> list[dict[str, Any]]:
    """nsys's messages about its own collection: ``[{severity, source, pid, text}]`` (severity and source as
    the export's ENUM tables name them), empty when the export has no DIAGNOSTIC_EVENT table."""
    table = "DIAGNOSTIC_EVENT"
    if not export.has(table):
        return []
    cols = set(export.columns(table))
    text = "text" if "text" in cols else ("(SELECT value FROM StringIds WHERE id = textId)" if "textId" in cols
                                          and export.has("StringIds") else None)
    if text is None:
        return []
    sev = _enum(export, "ENUM_DIAGNOSTIC_SEVERITY_LEVEL", _SEVERITIES)
    src = _enum(export, "ENUM_DIAGNOSTIC_SOURCE_TYPE", _SOURCES)
    pick = lambda c: c if c in cols else "NULL"  # noqa: E731
    out = []
    for s, o, gpid, t in export.rows(f"SELECT {pick('severity')}, {pick('source')}, {pick('globalPid')}, {text} "
                                     f"FROM {table} LIMIT {DIAGNOSTICS_MAX_ROWS}"):
        if isinstance(t, bytes):
            t = t.decode("utf-8", "replace")
        out.append({"severity": sev.get(s, str(s)), "source": src.get(o, str(o)),
                    "pid": int((gpid >> 24) & 0xFFFFFF) if isinstance(gpid, int) and gpid >= 0 else None,
                    "text": str(t or "").strip()})
    return out


def _enum(export: Any, table: str, default: dict[int, str]) -> dict[Any, str]:
    if not (export.has(table) and {"id", "label"} <= set(export.columns(table))):
        return dict(default)
    return {i: str(label) for i, label in export.rows(f"SELECT id, label FROM {table}")}


# ----------------------------------------------------------------------------- the check

def check(trace: Any, table: Any = None, unit: Any = None, *, kernels_unrecorded: int = 0,
          thresholds: IntegrityThresholds = DEFAULT_THRESHOLDS) -> Integrity:
    """The integrity of a loaded capture (``table``: its full series table; ``unit``: its inference unit)."""
    meta = getattr(trace, "meta", None) or {}
    diags = [d for d in meta.get("diagnostics") or [] if isinstance(d, dict)]
    out = Integrity(thresholds=thresholds)
    t = thresholds
    counts = nsys_counts(diags)
    rows = export_rows(trace)
    launches = launches_without_records(trace, kernels_unrecorded, t, unit)
    explained = {p.evidence.get("pid") for p in launches}  # their kernels are what the export's count lacks
    found = [*nsys_said(diags, counts, rows, t), *cuda_events_lost(counts, t), *launches,
             *unit_uncovered(table, unit, t), *export_short(counts, rows, t, explained),
             *gpu_process_not_traced(trace, diags, rows), *osrt_stops_early(trace, t)]
    # the loss of GPU data first (it decides the most), then of API calls, NVTX, OS runtime; stable within
    out.problems = sorted(found, key=lambda p: min(LOSS_ORDER.index(x) for x in p.lost) if p.lost else len(LOSS_ORDER))
    out.notes = routine_notes(diags)
    return out


_COUNT = re.compile(r"Number of (?P<what>.+?) events (?P<verb>collected|produced):\s*(?P<n>\d+)")
_KIND_OF = {"CUDA": "cuda", "NVTX": "nvtx", "OS runtime libraries": "osrt", "CUPTI": "cupti"}


def nsys_counts(diags: Iterable[dict[str, Any]]) -> dict[int, dict[str, int]]:
    """Per process, nsys's own event counts: ``{pid: {"cuda": collected, "nvtx": ..., "osrt": ..., "cupti":
    produced}}``."""
    out: dict[int, dict[str, int]] = {}
    for d in diags:
        m = _COUNT.search(d.get("text") or "")
        kind = _KIND_OF.get(m.group("what")) if m else None
        if m and kind and d.get("pid") is not None:
            out.setdefault(int(d["pid"]), {})[kind] = int(m.group("n"))
    return out


def export_rows(trace: Any) -> dict[int, dict[str, int]]:
    """Per process, the rows the export holds of each kind nsys counts (``cuda``: CUDA API calls and GPU
    activity; ``nvtx``; ``osrt``)."""
    out: dict[int, dict[str, int]] = {}
    groups = {"cuda": ("api", "kernels", "memcpy", "memset", "graphs"), "nvtx": ("nvtx",), "osrt": ("osrt",)}
    for kind, frames in groups.items():
        for name in frames:
            df = getattr(trace, name, None)
            if df is None or not len(df) or "pid" not in df.columns:
                continue
            for p, c in _value_counts(df["pid"].to_numpy()).items():
                slot = out.setdefault(p, {})
                slot[kind] = slot.get(kind, 0) + c
    return out


def _value_counts(values: np.ndarray) -> dict[int, int]:
    """How often each value occurs, a block of rows at a time (a constant zero-stride column at once): no
    row-length copy of a large capture's column."""
    if not len(values):
        return {}
    if values.strides == (0,):
        return {int(values[0]): len(values)}
    out: dict[int, int] = {}
    for sl in blocks(len(values)):
        u, n = np.unique(values[sl], return_counts=True)
        for v, c in zip(u.tolist(), n.tolist()):
            out[int(v)] = out.get(int(v), 0) + int(c)
    return out


_CUPTI_MISSING = re.compile(r"CUPTI buffers:\s*(?P<got>\d+) of (?P<of>\d+)\.\s*Some CUPTI events might be missing")
_DROPPED = re.compile(r"Number of incomplete CUPTI events dropped:\s*(\d+)")
_LOSS = re.compile(r"\b(lost|dropped|discarded|overflow(ed)?|overwritten)\b", re.I)
_NOT_ALL = re.compile(r"Not all (?P<what>.+?) events might have been collected")
_NONE_OF = re.compile(r"No (?P<what>.+?) events collected")
_PROCESSING = re.compile(r"error (when|while) processing|unknown driver api function index|exportation error", re.I)


def nsys_said(diags: list[dict[str, Any]], counts: dict[int, dict[str, int]], rows: dict[int, dict[str, int]],
              t: IntegrityThresholds) -> list[Problem]:
    """Problems nsys itself reported: dropped or lost events, events that might not all have been collected
    (where the capture holds some of them), errors while it processed the events."""
    out: list[Problem] = []
    none_of = {(d.get("pid"), m.group("what")) for d in diags if (m := _NONE_OF.search(d.get("text") or ""))}
    errors: list[str] = []
    for d in diags:
        text = d.get("text") or ""
        pid = d.get("pid")
        cupti = _CUPTI_MISSING.search(text)
        if cupti:  # a CUPTI buffer never came back: the session stopped before the process flushed it
            c = counts.get(pid) or {}
            out.append(Problem(
                "nsys_cupti_buffers_missing", f"nsys says some CUPTI events of process {pid} might be missing "
                f"({cupti.group('got')} of {cupti.group('of')} CUPTI buffers came back"
                + (f"; {c['cuda']:,} CUDA events collected of {c['cupti']:,} produced)" if "cuda" in c and "cupti" in c
                   else ")"),
                {"pid": pid, "cupti_buffers": int(cupti.group("got")), "cupti_buffers_expected": int(cupti.group("of")),
                 "cupti_events_produced": c.get("cupti"), "cuda_events_collected": c.get("cuda"), "nsys_said": text},
                ("gpu", "api")))
            continue
        dropped = _DROPPED.search(text)
        if dropped:
            n = int(dropped.group(1))
            produced = (counts.get(pid) or {}).get("cupti", 0)
            if n >= t.dropped_min_events and n >= t.dropped_min_share * max(produced, 1):
                out.append(Problem("nsys_dropped_events", f"nsys dropped {n:,} incomplete CUPTI events of process {pid}"
                                   + (f" (of {produced:,} produced)" if produced else ""),
                                   {"dropped_events": n, "cupti_events_produced": produced or None, "pid": pid,
                                    "nsys_said": text}, ("gpu",)))
            continue
        not_all = _NOT_ALL.search(text)
        if not_all:
            what = not_all.group("what")
            kind = _KIND_OF.get(what)
            if (pid, what) in none_of:
                continue  # said beside "No X events collected": the process made none, nothing is missing
            got = (counts.get(pid) or {}).get(kind or "")
            lost = {"cuda": ("gpu", "api"), "nvtx": ("nvtx",), "osrt": ("osrt",)}.get(kind or "", ("gpu", "api"))
            out.append(Problem("nsys_not_all_collected", f"nsys says not all {what} events of process {pid} might "
                               f"have been collected" + (f" (it collected {got:,})" if got is not None else ""),
                               {"pid": pid, "events": what, "nsys_collected": got, "nsys_said": text}, lost))
            continue
        if _PROCESSING.search(text):
            errors.append(text)
        elif _LOSS.search(text) and d.get("severity") in ("Warning", "Error"):
            out.append(Problem("nsys_lost_events", f"nsys reported lost events: {text[:200]}",
                               {"pid": pid, "nsys_said": text}, ("gpu", "api")))
    if errors:
        out.append(Problem("nsys_processing_errors", f"nsys failed to process some events ({len(errors)} error "
                           f"message{'s' if len(errors) != 1 else ''}: {errors[0][:160]})",
                           {"messages": len(errors), "nsys_said": errors[:5]}, ("gpu", "api")))
    return out


def cuda_events_lost(counts: dict[int, dict[str, int]], t: IntegrityThresholds) -> list[Problem]:
    """CUPTI produced many more events than nsys collected as CUDA events (a driver nsys cannot read)."""
    out = []
    for pid, c in sorted(counts.items()):
        produced, collected = c.get("cupti"), c.get("cuda")
        if not produced or collected is None:
            continue
        if collected < t.cuda_collected_min_share * produced and produced - collected >= t.cuda_lost_min_events:
            out.append(Problem(
                "cuda_events_lost", f"nsys collected {collected:,} CUDA events of the {produced:,} CUPTI produced for "
                f"process {pid} ({(produced - collected) / produced:.0%} not collected)",
                {"pid": pid, "cupti_events_produced": produced, "cuda_events_collected": collected,
                 "collected_share": collected / produced}, ("gpu", "api")))
    return out


def export_short(counts: dict[int, dict[str, int]], rows: dict[int, dict[str, int]],
                 t: IntegrityThresholds, kernels_missing: set[Any] = frozenset()) -> list[Problem]:
    """The export holds fewer events of a process than nsys says it collected (a truncated or partial export,
    or a process whose events were never written). ``kernels_missing``: processes whose launch calls lack their
    kernels, so the CUDA rows missing are those kernels, not API calls."""
    words = {"cuda": "CUDA API calls and GPU activity records", "nvtx": "NVTX events", "osrt": "OS runtime calls"}
    lost = {"cuda": ("gpu", "api"), "nvtx": ("nvtx",), "osrt": ("osrt",)}
    out = []
    for pid, c in sorted(counts.items()):
        for kind in ("cuda", "nvtx", "osrt"):
            said, held = c.get(kind), (rows.get(pid) or {}).get(kind, 0)
            if not said or held >= t.export_min_share * said or said - held < t.export_min_missing_events:
                continue
            what = (f"the export holds {held:,} {words[kind]} of process {pid}, nsys says it collected {said:,} "
                    f"({(said - held) / said:.0%} missing)")
            out.append(Problem("process_events_missing" if held == 0 else "export_missing_events", what,
                               {"pid": pid, "kind": kind, "nsys_collected": said, "export_rows": held,
                                "missing": said - held},
                               ("gpu",) if kind == "cuda" and pid in kernels_missing else lost[kind]))
    return out


def launches_without_records(trace: Any, kernels_unrecorded: int, t: IntegrityThresholds,
                             unit: Any = None) -> list[Problem]:
    """Kernel launch calls whose kernel is not in the export, per process (launches inside CUDA stream
    capture make no kernel and are left out; a process's activity rows that lack their call are subtracted),
    with how many of the inference's instances (``unit``) made such calls."""
    if kernels_unrecorded:
        return [Problem("kernels_not_recorded", f"the export has {kernels_unrecorded:,} kernel launch calls but no "
                        "kernel record", {"launch_calls": kernels_unrecorded, "kernel_records": 0}, ("gpu",))]
    api = getattr(trace, "api", None)
    if api is None or not len(api) or "category" not in api.columns:
        return []
    launch = _is_launch(api["category"])
    if not launch.any():
        return []
    gtid = np.asarray(api["global_tid"].to_numpy(), dtype=np.int64)
    start = np.asarray(api["start_ns"].to_numpy(), dtype=np.int64)
    launch &= ~_in_stream_capture(api, gtid, start)
    linked, unlinked = _activity_links(trace)
    keys = _key(gtid[launch], start[launch])
    found = _member(keys, linked)
    pid = api["pid"].to_numpy()[launch]
    out = []
    for p in np.unique(pid).tolist():
        mine = pid == p
        n = int(mine.sum())
        missing_rows = ~found & mine
        unmatched = int(missing_rows.sum()) - unlinked.get(p, 0)
        if unmatched < t.unmatched_min_launches or unmatched < t.unmatched_min_share * n:
            continue
        when = start[launch][missing_rows]
        t0 = _capture_start(trace)
        span = _span_ms(trace)
        out.append(Problem(
            "launches_without_records",
            f"{unmatched:,} of {n:,} kernel launch calls of process {p} have no kernel record "
            f"(calls from {(when.min() - t0) / 1e6:.1f} to {(when.max() - t0) / 1e6:.1f} ms"
            + (f" of a {span:.1f} ms capture)" if span else ")"),
            {"pid": int(p), "launch_calls": n, "without_record": unmatched,
             "first_ms": (int(when.min()) - t0) / 1e6, "last_ms": (int(when.max()) - t0) / 1e6,
             "threads": _by_thread(gtid[launch][missing_rows]), **_instances_hit(unit, when)}, ("gpu",)))
    return out


def _instances_hit(unit: Any, when_ns: np.ndarray) -> dict[str, Any]:
    """How many of the inference's instances hold a launch call (at ``when_ns``) whose kernel is missing."""
    if unit is None or getattr(unit, "series_id", None) is None or not unit.count:
        return {}
    lo = np.asarray(unit.start_ns, dtype=np.int64)
    hi = lo + np.asarray(unit.host_ns, dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    i = np.searchsorted(lo, when_ns, side="right") - 1  # the last instance starting at or before each call
    inside = i >= 0
    inside[inside] = when_ns[inside] <= hi[i[inside]]
    hit = np.unique(i[inside])
    return {"series": unit.label, "instances": int(unit.count), "instances_with_missing_kernels": int(len(hit))}


def _is_launch(category: Any) -> np.ndarray:
    """Kernel launch calls, compared on the categorical's codes (no row-length array of strings)."""
    if hasattr(category, "cat"):
        cats = list(category.cat.categories)
        codes = category.cat.codes.to_numpy()
        return codes == cats.index("launch") if "launch" in cats else np.zeros(len(codes), dtype=bool)
    return np.asarray(category.to_numpy() == "launch", dtype=bool)


def _key(gtid: np.ndarray, start: np.ndarray) -> np.ndarray:
    """One int64 per (thread, call start): a launch call and the activity it made share it."""
    return start.astype(np.int64) ^ (gtid.astype(np.int64) * np.int64(0x9E3779B1))


def _activity_links(trace: Any) -> tuple[np.ndarray, dict[int, int]]:
    """The keys of the calls that made activity rows, and per process how many rows lack their call."""
    keys, unlinked = [], {}
    for name in ("kernels", "memcpy", "memset", "graphs"):
        df = getattr(trace, name, None)
        if df is None or not len(df) or "api_start_ns" not in df.columns:
            continue
        s = np.asarray(df["api_start_ns"].to_numpy(), dtype=np.int64)
        g = np.asarray(df["api_tid"].to_numpy(), dtype=np.int64)
        ok = s != -1
        keys.append(_key(g[ok], s[ok]))
        if name == "kernels" and (~ok).any():
            for p, c in _value_counts(df["pid"].to_numpy()[~ok]).items():
                unlinked[p] = unlinked.get(p, 0) + c
    return (sorted_distinct(np.concatenate(keys)) if keys else np.empty(0, np.int64)), unlinked


def _member(values: np.ndarray, distinct: np.ndarray) -> np.ndarray:
    """``np.isin(values, distinct)`` for a sorted ``distinct`` (:func:`~profiler.capture.blockwise.sorted_distinct`): one binary search per
    value instead of numpy's hashing of both arrays."""
    if not len(distinct):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(distinct, values), len(distinct) - 1)
    return distinct[at] == values


def _in_stream_capture(api: Any, gtid: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Calls made by a thread between its stream-capture begin and end calls."""
    names = api["name"]
    cats = np.asarray(names.cat.categories, dtype=object) if hasattr(names, "cat") else None
    if cats is None:
        text = names.astype(str).to_numpy()
        begin = np.array([str(x).startswith(STREAM_CAPTURE_BEGIN) for x in text])
        end = np.array([str(x).startswith(STREAM_CAPTURE_END) for x in text])
    else:
        codes = names.cat.codes.to_numpy()
        b = np.array([str(c).startswith(STREAM_CAPTURE_BEGIN) for c in cats], dtype=bool)
        e = np.array([str(c).startswith(STREAM_CAPTURE_END) for c in cats], dtype=bool)
        begin = b[codes] & (codes >= 0) if len(b) else np.zeros(len(codes), bool)
        end = e[codes] & (codes >= 0) if len(e) else np.zeros(len(codes), bool)
    inside = np.zeros(len(start), dtype=bool)
    if not begin.any():
        return inside
    for g in np.unique(gtid[begin]).tolist():
        mine = np.flatnonzero(gtid == g)
        order = mine[np.argsort(start[mine], kind="stable")]
        depth = np.cumsum(begin[order].astype(np.int64) - end[order].astype(np.int64))
        inside[order] = (depth > 0) & ~begin[order]
    return inside


def _by_thread(gtid: np.ndarray, limit: int = 5) -> list[dict[str, int]]:
    tids, n = np.unique(gtid, return_counts=True)
    order = np.argsort(-n, kind="stable")[:limit]
    return [{"tid": int(tids[i]) & 0xFFFFFF, "without_record": int(n[i])} for i in order]


def _capture_start(trace: Any) -> int:
    meta = getattr(trace, "meta", None) or {}
    s = meta.get("capture_start_ns")
    return int(s) if s is not None else 0


def _span_ms(trace: Any) -> float | None:
    meta = getattr(trace, "meta", None) or {}
    s, e = meta.get("capture_start_ns"), meta.get("capture_end_ns")
    return (e - s) / 1e6 if s is not None and e is not None else None


def unit_uncovered(table: Any, unit: Any, t: IntegrityThresholds) -> list[Problem]:
    """The inference's instances after the capture's last CUDA call, or before its first, while its other
    instances make CUDA calls: the CUDA trace ended (or began) while the program went on."""
    if table is None or unit is None or getattr(unit, "series_id", None) is None or not len(table.api):
        return []
    inst = table.instances.iloc[np.asarray(unit.rows)]
    if len(inst) < t.unit_min_uncovered:
        return []
    calls = (inst["api_hi"].to_numpy() - inst["api_lo"].to_numpy()).astype(np.int64)
    first, last = int(table.api.start_ns.min()), int(table.api.end_ns.max())
    starts, ends = inst["start_ns"].to_numpy(), inst["end_ns"].to_numpy()
    after = (starts > last) & (calls == 0)
    before = (ends < first) & (calls == 0)
    out = []
    covered = calls[~(after | before)]
    if not len(covered) or np.median(covered) < 1:
        return []
    need = max(t.unit_min_uncovered, t.unit_min_uncovered_share * len(inst))
    for mask, where, at in ((after, "after", last), (before, "before", first)):
        n = int(mask.sum())
        if n < need:
            continue
        lo = int(starts[mask].min())
        hi = int(ends[mask].max())
        out.append(Problem(
            "cuda_trace_ends_early" if where == "after" else "cuda_trace_starts_late",
            f"{n} of {len(inst)} instances of {unit.label} run {where} the capture's "
            f"{'last' if where == 'after' else 'first'} CUDA call and make none, where the others make "
            f"{float(np.median(covered)):g} each: the CUDA trace {'stopped' if where == 'after' else 'started'} "
            f"while the program went on",
            {"series": unit.label, "instances": int(len(inst)), "instances_without_cuda": n,
             "cuda_calls_per_other_instance": float(np.median(covered)), "cuda_calls_end_ns": last if where == "after"
             else None, "cuda_calls_start_ns": first if where == "before" else None,
             "uncovered_from_ns": lo, "uncovered_to_ns": hi, "uncovered_ms": (hi - lo) / 1e6}, ("gpu", "api")))
    return out


_NO_CUDA = re.compile(r"No CUDA events collected|CUDA profiling might have not been started correctly")


def gpu_process_not_traced(trace: Any, diags: list[dict[str, Any]], rows: dict[int, dict[str, int]]) -> list[Problem]:
    """nsys traced CUDA but the capture holds none, and the traced process started another one: nsys wrapped a
    launcher or client, and the process doing the GPU work was not traced (a child whose environment dropped
    nsys's injection, or a server started elsewhere)."""
    if any((r.get("cuda") or 0) for r in rows.values()):
        return []
    said = sorted({d["pid"] for d in diags if d.get("pid") and _NO_CUDA.search(d.get("text") or "")})
    traced = sorted(p for p, r in rows.items() if r.get("nvtx") or r.get("osrt"))
    if not said or not set(traced) <= set(said):
        return []
    osrt = getattr(trace, "osrt", None)
    if osrt is None or not len(osrt):
        return []
    names = osrt["name"].astype(str)
    spawn = names.str.startswith(SPAWN_CALLS)
    if not spawn.any():
        return []
    calls = sorted(set(names[spawn].tolist()))
    procs = {p["pid"]: p.get("name") for p in (getattr(trace, "meta", None) or {}).get("processes") or []
             if isinstance(p, dict)}
    who = ", ".join(f"{p} ({procs[p]})" if procs.get(p) else str(p) for p in traced)
    return [Problem("gpu_process_not_traced",
                    f"nsys traced CUDA in process {who}, which made no CUDA call and started or waited for another "
                    f"process ({', '.join(calls[:4])}) that nsys did not trace: the GPU work is not in the capture "
                    "(profile the process that does it, or let nsys follow the child)",
                    {"traced_pids": traced, "spawn_calls": calls, "cuda_rows": 0}, ("gpu", "api"))]


def osrt_stops_early(trace: Any, t: IntegrityThresholds) -> list[Problem]:
    """OS runtime calls that end long before the CUDA calls do (a live process keeps calling the C library)."""
    osrt, api = getattr(trace, "osrt", None), getattr(trace, "api", None)
    if osrt is None or api is None or not len(osrt) or not len(api):
        return []
    o_end = int(np.asarray(osrt["end_ns"].to_numpy(), dtype=np.int64).max())
    a_start = np.asarray(api["start_ns"].to_numpy(), dtype=np.int64)
    a_first, a_end = int(a_start.min()), int(a_start.max())
    gap_ms = (a_end - o_end) / 1e6
    if gap_ms < t.osrt_min_gap_ms or gap_ms < t.osrt_min_gap_share * (a_end - a_first) / 1e6:
        return []
    t0 = _capture_start(trace)
    return [Problem("osrt_trace_ends_early", f"the OS runtime calls end at {(o_end - t0) / 1e6:.1f} ms, "
                    f"{gap_ms:.1f} ms before the last CUDA call", {"osrt_end_ms": (o_end - t0) / 1e6,
                                                                  "cuda_calls_end_ms": (a_end - t0) / 1e6,
                                                                  "gap_ms": gap_ms}, ("osrt",))]


_ROUTINE = (
    (re.compile(r"driver version .* is not supported", re.I),
     "nsys did not support the installed CUDA driver (it traced with an older driver's libraries)"),
    (re.compile(r"No CUDA events collected"), "a process nsys traced made no CUDA calls (a launcher or helper process)"),
)


def routine_notes(diags: list[dict[str, Any]]) -> list[str]:
    """nsys warnings that are not evidence of missing data by themselves, said once each."""
    out = []
    for pattern, note in _ROUTINE:
        if any(pattern.search(d.get("text") or "") for d in diags):
            out.append(note)
    return out
