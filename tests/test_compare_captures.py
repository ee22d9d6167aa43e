"""`trtprof compare` of two captures by their inference (profiler.compare.captures): stored analyses or analysis
JSON files (no store needed); the units matched by normalised name or role, judged on time per inference (host
time where one side's GPU time is unmeasured), per-kernel GPU time without a unit, and how many ranges were
compared and not matched said."""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
import sys

import numpy as np
import pytest

from profiler.compare.captures import (compare_captures, load_document, normalised, side_from_document,
                                       side_from_run)
from profiler.errors import InputError
from tests.conftest import SAMPLE_TRACES


def _analyse(name: str, tmp_path) -> str:
    """``trtprof analyze`` of a sample trace to JSON (and into a store at tmp_path/s.db, labelled ``name``)."""
    src = SAMPLE_TRACES / f"{name}.sqlite"
    if not src.exists():
        pytest.skip(f"sample_traces/{name}.sqlite is missing")
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", f"sqlite:///{tmp_path / 's.db'}", "analyze",
                        str(src), "--json", str(out), "--label", name], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(out)


def _median_ns(path, sql: str) -> float:
    return statistics.median(r[0] for r in sqlite3.connect(path).execute(sql))


def test_eager_against_cuda_graph_is_an_improvement_with_the_units_ratio(tmp_path):
    eager, graph = _analyse("trt_eager", tmp_path), _analyse("trt_graph", tmp_path)
    out = compare_captures(side_from_document(load_document(eager), eager), side_from_document(load_document(graph), graph))
    unit = out["captures"]["unit"]
    assert out["verdict"] == "improvement" and unit["matched_by"] == "unit, by role"
    assert (unit["baseline_key"], unit["key"]) == ("TensorRT/ExecutionContext::enqueue",
                                                   "TensorRT/ExecutionContext::enqueueV3")
    # independently, from the exports: eager is bound by its enqueue (host), the graph by its replay on the GPU
    host = _median_ns(SAMPLE_TRACES / "trt_eager.sqlite", "select n.end - n.start from NVTX_EVENTS n left join "
                      "StringIds s on s.id = n.textId where coalesce(n.text, s.value) = 'ExecutionContext::enqueue'")
    replay = _median_ns(SAMPLE_TRACES / "trt_graph.sqlite", "select end - start from CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert unit["median_ratio"] == pytest.approx(replay / host, rel=0.02)
    # the layer ranges exist only in the eager capture: counted, named, and the headline says so
    cap = out["captures"]
    assert cap["ranges_compared"] == 1 and len(cap["unmatched"]["baseline"]) == 6 and not cap["unmatched"]["candidate"]
    assert "1 range series compared; 6 of the baseline's and 0 of the candidate's not matched" in cap["summary"]
    # the stored runs of the same captures compare the same way
    from profiler.compare import compare_runs
    from profiler.store import Store

    stored = compare_runs(Store.open(f"sqlite:///{tmp_path / 's.db'}"), "trt_eager", "trt_graph")
    assert stored["verdict"] == "improvement"
    assert stored["captures"]["unit"]["median_ratio"] == pytest.approx(unit["median_ratio"], rel=0.01)


def test_two_json_files_compare_without_a_store_and_a_capture_against_itself_never_regresses(tmp_path):
    eager, trtexec = _analyse("trt_eager", tmp_path), _analyse("trt_trtexec_graph", tmp_path)
    db = tmp_path / "absent" / "none.db"
    r = subprocess.run([sys.executable, "-m", "profiler", "--db", str(db), "compare", eager, trtexec,
                        "--json", str(tmp_path / "c.json"), "--report", str(tmp_path / "c.html")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not db.exists() and "verdict: improvement" in r.stdout and "cudaGraphLaunch" in r.stdout
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["captures"]["unit"]["key"] == "TensorRT/cudaGraphLaunch"
    same = subprocess.run([sys.executable, "-m", "profiler", "--db", str(db), "compare", eager, eager],
                          capture_output=True, text=True)
    assert same.returncode == 0 and "verdict: regression" not in same.stdout
    assert "smallest detectable change" in same.stdout  # what one capture a side could have seen


def test_a_file_that_is_not_an_analysis_is_one_sentence_exit_3(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"kind": "sweep", "variants": []}))
    with pytest.raises(InputError, match="not the JSON of `trtprof analyze`"):
        load_document(bad)
    r = subprocess.run([sys.executable, "-m", "profiler", "compare", str(bad), str(bad)], capture_output=True,
                       text=True)
    assert r.returncode == 3 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _doc(ranges: dict[str, tuple[list[float], list[float]]], unit: str | None, kernels=()) -> dict:
    """An analysis document: {name: (host wall ms per instance, GPU busy ms per instance)}."""
    return {"capture": {}, "inference": {"series": unit} if unit else None, "top_kernels": list(kernels),
            "ranges": [{"name": n, "domain": "", "count": len(h),
                        "instances": {"wall_ms": h, "gpu_busy_ms": g, "start_ms": list(range(len(h)))}}
                       for n, (h, g) in ranges.items()]}


def test_numbered_ranges_are_one_series_matched_with_the_placeholder_name():
    assert [normalised(n) for n in ("Inference 12", "Run_3", "step[7]", "iter-40", "Forward 0", "Inference #",
                                    "enqueueV3", "fc2")] == \
        ["Inference #", "Run #", "step #", "iter #", "Forward #", "Inference #", "enqueueV3", "fc2"]
    rng = np.random.default_rng(0)
    host = rng.normal(2.0, 0.05, 100)
    # the baseline as an older analysis sees it: 100 one-instance series, an engine enqueue as the unit
    numbered = {f"Inference {i}": ([float(host[i])], [0.5]) for i in range(100)}
    base = _doc({**numbered, "enqueue": ([0.2] * 800, [0.1] * 800)}, "enqueue")
    cand = _doc({"Inference #": ([float(x) * 0.4 for x in host], [0.5] * 100), "enqueue": ([0.2] * 800, [0.1] * 800)},
                "Inference #")
    out = compare_captures(side_from_document(base, "a.json"), side_from_document(cand, "b.json"))
    unit = next(v for v in out["variants"] if v.get("role") == "unit")
    assert unit["key"] == "Inference #" and unit["matched_by"] == "unit, by name" and unit["pooled"]["baseline"] == 100
    assert out["verdict"] == "improvement" and unit["median_ratio"] == pytest.approx(0.4, rel=0.01)
    assert out["captures"]["ranges_compared"] == 2 and out["captures"]["unmatched"] == {"baseline": [], "candidate": []}


def test_an_unmeasured_gpu_side_is_judged_on_host_time_and_says_so():
    rng = np.random.default_rng(2)
    h = list(rng.normal(1.0, 0.02, 200))
    base = _doc({"infer": (h, [3.0] * 200)}, "infer")  # GPU-bound: 3 ms of GPU work per 1 ms host call
    cand = _doc({"infer": ([x * 2.5 for x in h], [0.0] * 200)}, "infer")  # no GPU work recorded at all
    out = compare_captures(side_from_document(base, "a.json"), side_from_document(cand, "b.json"))
    unit = next(v for v in out["variants"] if v.get("role") == "unit")
    assert unit["measure"] == "host" and "candidate's GPU time is unmeasured" in unit["gpu_unmeasured"]
    assert unit["median_ratio"] == pytest.approx(2.5, rel=0.01)  # host against host, not 2.5 ms against 3 ms
    assert out["verdict"] == "regression" and "judged on host time" in out["captures"]["summary"]
    base["integrity"] = {"complete": False, "untrusted": ["GPU busy time"]}  # a capture that lost its kernels
    cand = _doc({"infer": (h, [3.0] * 200)}, "infer")
    out = compare_captures(side_from_document(base, "a.json"), side_from_document(cand, "b.json"))
    assert "integrity check" in out["captures"]["unit"]["gpu_unmeasured"]


def _kernel(name, calls, per_call, spread=0.02):
    return {"name": name, "count": calls, "total_ms": calls * per_call, "median_ms": per_call,
            "min_ms": per_call * (1 - spread), "max_ms": per_call * (1 + spread)}


def test_without_a_unit_per_kernel_gpu_time_decides_and_names_the_largest_changes():
    base = _doc({}, None, [_kernel("gemm", 100, 1.0), _kernel("softmax", 100, 0.2), _kernel("old_only", 10, 0.1)])
    cand = _doc({}, None, [_kernel("gemm", 50, 1.5), _kernel("softmax", 50, 0.201), _kernel("new_only", 10, 0.1)])
    out = compare_captures(side_from_document(base, "a.json"), side_from_document(cand, "b.json"))
    k = out["captures"]["kernels"]
    # per call at the baseline's calls: (100 x 0.5 + 100 x 0.001) / (100 x 1.0 + 100 x 0.2)
    assert k["per_call_change"] == pytest.approx((50 + 0.1) / 120)
    assert k["matched_share"] == pytest.approx(120 / 121)
    assert [r["name"] for r in k["significant"]] == ["gemm"]  # softmax moved 0.5%: inside its own range
    assert out["verdict"] == "regression" and out["latency_regressions"] == ["per-kernel GPU time"]
    assert "gemm x1.500 per call" in out["captures"]["summary"]
    few = compare_captures(side_from_document(_doc({}, None, [_kernel("a", 10, 1.0), _kernel("b", 10, 9.0)]), "a"),
                           side_from_document(_doc({}, None, [_kernel("a", 10, 2.0), _kernel("c", 10, 9.0)]), "b"))
    assert few["verdict"] == "inconclusive"  # the kernels on both sides carry 10% of the baseline's GPU time


def test_the_2gpu_fixtures_compare_by_their_unit_never_no_change_in_n(tmp_path, nsys_fixtures):
    paths = [nsys_fixtures / f"v2026.2.1_nsysai_mfu_2gpu_{w}.sqlite" for w in ("before", "after")]
    if not all(p.exists() for p in paths):
        pytest.skip("the mfu_2gpu fixtures are missing")
    docs = []
    for p in paths:
        out = tmp_path / f"{p.stem}.json"
        r = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(p), "--json", str(out), "--no-store"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        docs.append(load_document(out))
    out = compare_captures(side_from_document(docs[0], "before"), side_from_document(docs[1], "after"))
    cap = out["captures"]
    names = [{(r["domain"] + "/" if r["domain"] else "") + r["name"] for r in d["ranges"]} for d in docs]
    assert cap["decided_by"] == "unit" and out["verdict"] != "regression"
    assert cap["ranges_compared"] == len(names[0] & names[1])
    assert len(cap["unmatched"]["baseline"]) == len(names[0] - names[1])
    assert len(cap["unmatched"]["candidate"]) == len(names[1] - names[0])
    assert "No change in" not in cap["summary"]


def test_stored_runs_without_their_analysis_fall_back_to_tensorrts_inference_range(tmp_path):
    from profiler.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'o.db'}")
    rng = np.random.default_rng(4)
    for label, key, scale in (("v2", "ExecutionContext::enqueueV2", 1.0), ("v3", "ExecutionContext::enqueueV3", 0.3)):
        rid = store.create_run(kind="analyze", source="app.sqlite", label=label)
        store.add_variant(rid, {"key": key, "domain": "TensorRT", "kind": "range"},
                          samples=[{"idx": i, "latency_ms": float(x)} for i, x in enumerate(rng.normal(scale, 0.01, 200))])
        store.finish_run(rid)
    out = compare_captures(side_from_run(store, store.run_dict("v2")), side_from_run(store, store.run_dict("v3")))
    assert out["captures"]["unit"]["matched_by"] == "unit, by role" and out["verdict"] == "improvement"


def _analyse_no_store(name: str, tmp_path) -> dict:
    src = SAMPLE_TRACES / f"{name}.sqlite"
    if not src.exists():
        pytest.skip(f"sample_traces/{name}.sqlite is missing")
    out = tmp_path / f"{name}.json"
    r = subprocess.run([sys.executable, "-m", "profiler", "analyze", str(src), "--json", str(out), "--no-store"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return load_document(out)


def _inference_ms(name: str) -> float:
    """The median wall time of the capture's ``Inference N`` ranges, from the export's own tables."""
    return _median_ns(SAMPLE_TRACES / f"{name}.sqlite", "select n.end - n.start from NVTX_EVENTS n left join StringIds "
                      "s on s.id = n.textId where coalesce(n.text, s.value) like 'Inference %'") / 1e6


def test_h200_numbered_captures_eager_graph_and_the_same_command_twice(tmp_path):
    """sample_traces/numbered_*: the loop's `Inference 0..59` ranges, eager, the same command again, and replayed as
    a CUDA graph: the graph is an improvement by the unit's ratio; the second eager run (its host 34% slower) is
    never a regression."""
    eager, again, graph = (_analyse_no_store(n, tmp_path) for n in ("numbered_eager", "numbered_eager_again",
                                                                    "numbered_graph"))
    out = compare_captures(side_from_document(eager, "eager"), side_from_document(graph, "graph"))
    unit = out["captures"]["unit"]
    assert out["verdict"] == "improvement" and unit["key"] == "Inference #"
    # host-bound on both sides (each range ends with a stream sync after its GPU work): the wall times' ratio
    assert unit["median_ratio"] == pytest.approx(_inference_ms("numbered_graph") / _inference_ms("numbered_eager"),
                                                 rel=0.02)
    same = compare_captures(side_from_document(eager, "eager"), side_from_document(again, "again"))
    assert same["captures"]["unit"]["key"] == "Inference #" and same["verdict"] != "regression"
    assert same["captures"]["unit"]["median_ratio"] == pytest.approx(
        _inference_ms("numbered_eager_again") / _inference_ms("numbered_eager"), rel=0.02)
    assert same["captures"]["unit"]["detectable_change"]["rel"] is not None
