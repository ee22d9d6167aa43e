"""The inference part of the capture-analysis report: the unit, its layers, phases and streams.

Input: the ``trtprof analyze --json`` dict (``inference``, ``layers``, ``layer_total``, ``phases``,
``streams``, ``gpu_concurrency``, ``copy_compute_overlap``, ``inference.throughput``). Absent keys (an older JSON) add nothing.
"""

from __future__ import annotations

from profiler.documents import AnalysisDocument
from profiler.report.common import Section, card, cell, kv, note, stat, table
from profiler.report.concurrency import throughput_blocks
from profiler.fmt import fmt_pct

SOURCES = {"tensorrt": "TensorRT's ExecutionContext enqueue/execute ranges",
           "nvtx": "the outermost repeated NVTX range", "window": "the whole capture (no repeated NVTX range)"}
BOUND = {"host": "the host", "compute": "compute",
         "HtoD": "host-to-device copies", "DtoH": "device-to-host copies",
         "DtoD": "device-to-device copies", "other_copy": "other copies"}
MAX_LAYERS = 60


def inference_cards(doc: AnalysisDocument) -> list[dict]:
    """The inference's cards: GPU and host time per inference, what bounds it, time to first inference."""
    inf = doc.get("inference")
    if not isinstance(inf, dict):
        return []
    gpu = inf.get("gpu_ms") or {}
    if inf.get("source") == "window":  # no inference identified: the capture's work as one window
        cards = [card("GPU busy ms", stat(gpu, "median"), sub="whole capture: no inference identified"),
                 card("host ms", stat(inf.get("host_ms"), "median"), sub="whole capture")]
    else:
        cards = [card("inference GPU ms", stat(gpu, "median"), sub=f"median of {inf.get('steady_count')} "
                                                                    f"steady of {inf.get('count')}"),
                 card("host ms", stat(inf.get("host_ms"), "median"), sub="median enqueue time")]
    if inf.get("bound_by"):
        why = ": the GPU waits on the host longer than the host on the GPU" if inf["bound_by"] == "host" else ""
        what = BOUND.get(inf["bound_by"], f"{inf['bound_by']} copies")
        cards.append(card("bound by", what, sub="steady state" + why))
    ph = doc.get("phases") or {}
    if ph.get("time_to_first_inference_ms") is not None:
        cards.append(card("time to first inference ms", ph["time_to_first_inference_ms"]))
    return cards


def inference_section(doc: AnalysisDocument) -> Section | None:
    """The 'Inference' section (unit, layers, phases, streams); None for a document without an inference."""
    inf = doc.get("inference")
    if not isinstance(inf, dict):
        return None
    if inf.get("source") == "window":
        about = (f"No inference identified ({inf.get('why') or 'no repeated NVTX range'}): the capture's GPU work "
                 "as one window. GPU time is the busy union of that work, on the GPU timeline.")
    else:
        what = SOURCES.get(inf.get("source"), "?")
        if inf.get("graph_replays"):
            what = ("a CUDA graph replay of TensorRT's enqueue (one per cudaGraphLaunch call; TensorRT's NVTX ranges "
                    "exist only while the graph was captured)")
        if inf.get("inside"):
            what = f"an iteration of a loop inside the range {inf['inside']}"
        if str(inf.get("series") or "").startswith("(frame"):
            what = "a frame: one repetition of the stage ranges that repeat as a whole"
        others = inf.get("other_loops") or []
        about = (f"One inference is {what}: {inf.get('series')}. Statistics over "
                 "the steady-state instances; GPU time is the busy union of the work each launched, on the GPU "
                 "timeline." + (f" Other loops in the capture: {', '.join(others)} (--unit NAME takes one)."
                                if others else "")
                 + (f" Why this unit: {inf['chosen']}." if inf.get("chosen") else ""))
        if inf.get("alternates_with"):
            about += (f" Taking turns with it: {', '.join(inf['alternates_with'])}, a loop of its own (its copies "
                      "are its work, not counted as the inference's; --unit NAME judges it).")
    sec = Section("inference", "Inference", about)
    rows = [[name, stat(inf.get(key), "median"), stat(inf.get(key), "p99"), stat(inf.get(key), "max")]
            for name, key in (("GPU time", "gpu_ms"), ("GPU latency (first start to last end)", "gpu_latency_ms"),
                              ("queueing delay (launch call to GPU start)", "queue_ms"),
                              ("host enqueue time", "host_ms"))]
    head = "whole capture (one window)" if inf.get("source") == "window" else "per inference"
    sec.add(table([head, "median ms", "p99 ms", "max ms"], rows, numeric=[False, True, True, True]))
    out = inf.get("copies_outside_per_inference") or {}
    if out.get("ms"):
        sec.add(note(f"Plus {out['ms']:.4g} ms of copies per inference ({out['count']:.3g} copies) that the "
                     "application issues outside the inference: they are not in its GPU time above."))
    sec.add(*throughput_blocks(inf), *_layers(doc), *_phases(doc.get("phases") or {}), *_streams(doc))
    return sec


def _layers(result: dict) -> list[dict]:
    layers = [x for x in result.get("layers") or [] if isinstance(x, dict)]
    total = result.get("layer_total") or {}
    out: list[dict] = [{"type": "heading", "text": "Layers"}]
    if layers:
        rows = []
        for x in layers[:MAX_LAYERS]:
            eng = x.get("engine") or {}
            kern = (x.get("kernels") or [{}])[0].get("name", "")
            rows.append([cell(x["name"]), stat(x.get("gpu_ms"), "median"), stat(x.get("gpu_ms"), "p99"),
                         cell(fmt_pct((x.get("share") or 0) * 100)),
                         cell({True: "yes", False: "no"}.get(x.get("tensor_cores"), "—")),
                         cell(eng.get("precision_in") or "—"), cell(str(kern)[:80] or "—")])
        out.append(table(["layer", "GPU ms median", "GPU ms p99", "share", "Tensor Cores (by kernel name)",
                          "precision (layer info)", "top kernel"], rows,
                         numeric=[False, True, True, True, False, False, False]))
        out.append(note(f"Sum of the layers' mean GPU time {total.get('layers_gpu_ms', 0):.4g} ms against the "
                        f"inference's mean {total.get('inference_gpu_ms', 0):.4g} ms of GPU time per inference "
                        f"(difference {total.get('difference_ms', 0):+.3g} ms)."))
        if total.get("gpu_tensor_cores") is False:
            out.append(note("This GPU has no Tensor Cores (compute capability below 7.0): no layer can use them."))
    elif not total.get("note"):
        out.append(note("No child ranges inside the inference: no layer table."))
    if total.get("note"):
        out.append(note(total["note"], "medium"))
    return out


def _phases(ph: dict) -> list[dict]:
    if not ph.get("setup"):
        return []
    su, sd = ph["setup"], ph["steady"]
    w = su.get("what") or {}
    up = w.get("uploads") or {}
    items = [("setup duration ms", su.get("duration_ms")), ("warm-up inferences", w.get("warmup_inferences")),
             ("module loading ms", w.get("module_loading_ms")), ("context creation ms", w.get("context_creation_ms")),
             ("allocation ms", w.get("allocation_ms")), ("uploads", f"{up.get('count', 0)} ({up.get('bytes', 0) / 2**20:.1f} MiB)"),
             ("GPU work outside inferences ms", w.get("gpu_work_outside_inferences_ms")),
             ("steady state ms", sd.get("duration_ms")),
             ("steady GPU busy" + (" (any GPU)" if sd.get("gpu_busy_fraction_by_device") else ""),
              "unknown" if sd.get("gpu_busy_fraction") is None else fmt_pct(sd["gpu_busy_fraction"] * 100)),
             *[(f"steady GPU {dev} busy", fmt_pct(v * 100))
               for dev, v in (sd.get("gpu_busy_fraction_by_device") or {}).items()],
             ("statistics and findings over", ph.get("included_in_statistics", "steady state"))]
    items += [(f"setup range {k} ms", v) for k, v in (w.get("ranges") or {}).items()]
    td = ph.get("teardown") if isinstance(ph.get("teardown"), dict) else {}
    if td:  # the release calls that end the capture
        items += [("teardown ms", td.get("duration_ms")), ("teardown release calls ms", td.get("release_ms")),
                  ("teardown module unloading ms", td.get("module_unloading_ms")),
                  ("teardown frees ms", td.get("frees_ms")),
                  ("teardown context, stream and graph destruction ms", td.get("context_destruction_ms"))]
    by_kind = sd.get("gpu_ms_by_kind") or {}
    return [{"type": "heading", "text": "Setup, steady state and teardown" if td else "Setup and steady state"},
            kv(items),
            table(["steady-state GPU work", "ms"], [[BOUND.get(k, k), v] for k, v in by_kind.items()],
                  numeric=[False, True])]


def _streams(result: dict) -> list[dict]:
    streams = [s for s in result.get("streams") or [] if isinstance(s, dict) and (s.get("busy_ms") or 0) > 0]
    if not streams:
        return []
    ov = result.get("copy_compute_overlap") or {}
    conc = result.get("gpu_concurrency")
    text = (f"Concurrency {conc:.2f}x: the streams' busy time adds up to {conc:.2f} times the GPU's busy union "
            f"(overlap saved {result.get('overlap_saved_ms') or 0:.3g} ms); copies overlapped compute for "
            f"{ov.get('overlap_ms') or 0:.3g} of {ov.get('copy_ms') or 0:.3g} ms of copy time."
            + (f" Another {result['racing_overlap_ms']:.3g} ms of overlap is streams racing (stream_race): no saving, "
               "and not counted above." if result.get("racing_overlap_ms") else "")) if conc else ""
    return [{"type": "heading", "text": "Streams"},
            table(["device", "stream", "busy ms", "kernels", "graph launches", "copies", "copy ms"],
                  [[s.get("device"), s.get("stream"), s.get("busy_ms"), s.get("kernels"), s.get("graph_launches"),
                    s.get("copies"), s.get("copy_ms")] for s in streams], numeric=[True] * 7, limit=40),
            note(text)] if text else []


__all__ = ["inference_cards", "inference_section"]
