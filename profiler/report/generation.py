"""The generation part of the capture-analysis report: LLM prefill and decode steps.

Input: the ``trtprof analyze --json`` dict's ``generation`` (requests, prefill_ms, decode_steps,
ms_per_token, tokens_per_s, drift, per_request, clocks). A capture without a generation adds nothing.
"""

from __future__ import annotations

from profiler.documents import AnalysisDocument
from profiler.report.common import Section, kv, note, stat, table

MAX_REQUESTS = 40
"""Requests listed in the per-request table (the JSON has them all)."""


def generation_section(doc: AnalysisDocument) -> Section | None:
    """The 'Generation' section: prefill, decode steps, time per token and drift; None without a generation."""
    gen = doc.get("generation")
    if not isinstance(gen, dict):
        return None
    steps = gen.get("steps_from") or "graph replays"
    sec = Section("generation", "Generation (LLM decode)",
                  f"A prefill followed by many repeated decode steps, one per generated token (read from {steps}). "
                  "Time per token is the wall time from one decode step's start to the next one's. The decode "
                  "steps are the inference the other findings judge; each request's prefill is a phase of its own.")
    sec.add(kv(generation_rows(gen)))
    sec.add(*_per_token(gen), *_drift(gen), *_requests(gen))
    clocks = gen.get("clocks") if isinstance(gen.get("clocks"), dict) else {}
    if clocks.get("note"):
        sec.add(note(f"GPU clocks: {clocks['note']}."))
    return sec


def generation_rows(gen: dict) -> list[tuple[str, object]]:
    """The section's headline figures as (label, value) pairs, in the JSON's units."""
    return [("requests", gen.get("requests")),
            ("prefill median ms", stat(gen.get("prefill_ms"), "median")),
            ("decode steps", gen.get("decode_steps")),
            ("ms per token median", stat(gen.get("ms_per_token"), "median")),
            ("ms per token p99", stat(gen.get("ms_per_token"), "p99")),
            ("tokens per s", gen.get("tokens_per_s"))]


def _per_token(gen: dict) -> list[dict]:
    rows = [[what, stat(gen.get(key), "median"), stat(gen.get(key), "p99"), stat(gen.get(key), "max")]
            for what, key in (("prefill", "prefill_ms"), ("time per token (step to step)", "ms_per_token"),
                              ("decode step GPU time", "step_gpu_ms")) if isinstance(gen.get(key), dict)]
    return [table(["", "median ms", "p99 ms", "max ms"], rows, numeric=[False, True, True, True])] if rows else []


def drift_text(gen: dict) -> str:
    """'Step time rises 2.18x (13.4 -> 29.2 ms) from step 308 of 394 ...' or the flat case."""
    d = gen.get("drift") if isinstance(gen.get("drift"), dict) else {}
    if d.get("start_step") is None:
        return "Decode step time stays flat over the capture (no drift)."
    text = (f"Step time rises {d.get('peak_over_baseline', 0):.2f}x ({d.get('baseline_ms', 0):.4g} -> "
            f"{d.get('peak_ms', 0):.4g} ms, rolling median of {d.get('window_steps')} steps) from step "
            f"{d['start_step']} of {gen.get('decode_steps')}")
    if d.get("pattern"):
        text += f": {d['pattern']}"
    if d.get("slow_steps") is not None:
        text += f", {d['slow_steps']} slow steps costing {d.get('excess_ms', 0):.4g} ms"
    if d.get("cause_seen"):
        text += f"; {d['cause_seen']}"
    clocks = gen.get("clocks") if isinstance(gen.get("clocks"), dict) else {}
    if clocks.get("verdict"):
        text += f"; {clocks['verdict']}"
    return text + "."


def _drift(gen: dict) -> list[dict]:
    d = gen.get("drift") if isinstance(gen.get("drift"), dict) else {}
    return [{"type": "heading", "text": "Drift"}, note(drift_text(gen), "medium" if d.get("start_step") is not None
                                                       else "info")]


def _requests(gen: dict) -> list[dict]:
    reqs = [r for r in gen.get("per_request") or [] if isinstance(r, dict)]
    if not reqs:
        return []
    rows = [[i + 1, r.get("prefill_start_ms"), r.get("prefill_ms"), r.get("decode_steps"), r.get("decode_ms"),
             r.get("first_step"), "warm-up" if r.get("warmup") else ""] for i, r in enumerate(reqs)]
    return [{"type": "heading", "text": "Requests"},
            table(["request", "prefill start ms", "prefill ms", "decode steps", "decode ms", "first step", ""], rows,
                  numeric=[True] * 6 + [False], limit=MAX_REQUESTS)]


__all__ = ["drift_text", "generation_rows", "generation_section"]
