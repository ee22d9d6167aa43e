#!/usr/bin/env python3
"""Where does ``trtprof analyze`` hold its memory? Each stage's own peak RSS, on one export.

Runs the analysis of ``CAPTURE`` (no cache, no store) in this process with the loader's table reads and
the analysis stages wrapped. Before a stage the kernel's peak-RSS mark is reset (``/proc/self/clear_refs``,
Linux), so each row's peak is that stage's own; "held after" is what stays resident when it returns.
Prints one table, in call order:

    python3 benchmarks/stage_memory.py CAPTURE.sqlite
    python3 benchmarks/stage_memory.py CAPTURE.sqlite --json stages.json

A stage nested in another (the series table's parts inside ``build_series``) resets the mark too, so
the enclosing stage's peak is then the highest of what followed the nested one.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STAGES = {  # module -> functions or Class.method names, wrapped in place
    "profiler.capture.loader": ["_Loader.read_api", "_Loader.kernels", "_Loader.memcpy", "_Loader.memset",
                                "_Loader.graphs", "_Loader.nvtx", "_Loader.osrt", "_Loader.api_frame"],
    "profiler.capture.series": ["build_activity", "build_host_calls", "sort_by_thread", "mark_top_level",
                                "activity_metrics", "host_metrics", "build_series", "SeriesTable.subset"],
    "profiler.capture.unit": ["build_unit"],
    "profiler.capture.phases": ["split", "phases_json"],
    "profiler.capture.layer_table": ["layer_table"],
    "profiler.capture.summary": ["series_summary", "attributed_activity", "device_gaps"],
    "profiler.rules": ["run_rules"],
    "profiler.capture.streams": ["streams_json"],
    "profiler.capture.analyze": ["top_kernels", "_gap_histograms", "sync_summary", "analyze"],
}


def _status_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS", "VmHWM")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


class Recorder:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self.depth = 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def stage(*args: Any, **kwargs: Any) -> Any:
            before, _ = _status_mb()
            _reset_peak()
            row = {"stage": "  " * self.depth + name, "start_s": time.perf_counter() - self.t0, "rss_before_mb": before}
            self.rows.append(row)
            self.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= 1
                row["held_after_mb"], row["peak_mb"] = _status_mb()
                row["seconds"] = time.perf_counter() - self.t0 - row["start_s"]
        return stage


def install(rec: Recorder) -> None:
    for module_name, names in STAGES.items():
        module = importlib.import_module(module_name)
        for name in names:
            owner, attr = (getattr(module, name.split(".")[0]), name.split(".")[1]) if "." in name else (module, name)
            wrapped = rec.wrap(name, getattr(owner, attr))
            setattr(owner, attr, wrapped)
            for other in ("profiler.capture.series", "profiler.capture.analyze"):  # names imported by value
                target = sys.modules.get(other)
                if target is not None and "." not in name and getattr(target, name, None) is not None \
                        and target is not module:
                    setattr(target, name, wrapped)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    os.environ["TRTPROF_TRACE_CACHE"] = "0"
    from profiler.capture.heap import bound_heap

    bound_heap()  # as the analyze command does
    rec = Recorder()
    install(rec)
    from profiler.capture.analyze import analyze_path

    base, _ = _status_mb()

    analyze_path(args.capture, cache=False)
    print(f"{'stage':34s} {'start s':>8s} {'s':>7s} {'RSS before':>11s} {'own peak':>9s} {'held after':>11s}  (MB)")
    for r in rec.rows:
        print(f"{r['stage']:34s} {r['start_s']:8.2f} {r['seconds']:7.2f} {r['rss_before_mb']:11.0f} "
              f"{r['peak_mb']:9.0f} {r['held_after_mb']:11.0f}")
    top = max(rec.rows, key=lambda r: r["peak_mb"])
    print(f"interpreter and libraries before the analysis: {base:.0f} MB; highest stage: {top['stage'].strip()} "
          f"at {top['peak_mb']:.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps({"base_mb": base, "stages": rec.rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
