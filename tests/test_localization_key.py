"""A variant's ``localization`` was written ``localisation`` (and its verification's ``localized``,
``localised``) before trtprof settled on one spelling. New documents write the -ize keys; summary.json files
and stored runs written before keep theirs, and still render, resume and compare."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from profiler.compare.runs import compare_runs
from profiler.documents import current_variant
from profiler.report.sweep import build_sweep_page
from profiler.store import Store
from profiler.store.rows import sweep_rows
from profiler.sweep import stored_variant_record

LOCALIZATION = {
    "curve": [{"index": 0, "node": "a", "op": "Mul", "rel_l2": 1e-4}, {"index": 1, "node": "square", "op": "Mul",
                                                                       "rel_l2": None}],
    "first_jumps": [{"node": "square", "op": "Mul", "rel_l2": None, "input_rel_l2": 1e-4, "amplification": None,
                     "variant_node": "square"}],
    "conclusion": "keeping square in FP32 removes 100% of the fp16 error",
    "verification": {"kept_fp32": ["square"],
                     "conclusion": {"error_removed": 1.0, "latency_change": 0.1, "localized": True, "text": "t"},
                     "variants": {"fp16+kept": {"latency_ms": 0.9, "accuracy": {"y": {"rel_l2": 2e-4}}}}}}


def _variant(latency_ms: float, *, old: bool) -> dict:
    loc = copy.deepcopy(LOCALIZATION)
    if old:
        c = loc["verification"]["conclusion"]
        c["localised"] = c.pop("localized")
    return {"key": "fp16-wsdefault-s1", "precision": "fp16", "workspace_bytes": None, "streams": 1,
            "cuda_graph": False, "backend": "onnxruntime", "status": "ok", "error": None,
            "latency_ms": {"median": latency_ms, "count": 50}, "throughput_qps": 1000 / latency_ms,
            "accuracy": {"y": {"rel_l2": 3e-4, "inf_count": 207, "nan_count": 0, "passed": False}},
            ("localisation" if old else "localization"): loc}


def _summary(*, old: bool) -> dict:
    return {"kind": "sweep", "run": {"kind": "sweep"}, "findings": [], "variants": [_variant(0.8, old=old)]}


def _section(page: dict) -> dict:
    return next(s for s in page["sections"] if s["id"] == "localization")


def test_current_variant_renames_only_the_old_keys():
    new = _variant(0.8, old=False)
    assert current_variant(new) is new  # a current record is passed through untouched
    old = _variant(0.8, old=True)
    up = current_variant(old)
    assert "localisation" not in up and up["localization"]["verification"]["conclusion"]["localized"] is True
    assert up == new and list(up) == list(new)  # same keys, in the same place
    assert "localisation" in old  # the caller's record is left alone
    both = {**new, "localisation": {"stale": True}}
    assert current_variant(both)["localization"] == new["localization"]


def test_an_old_summary_renders_its_localization(tmp_path):
    from click.testing import CliRunner

    from profiler.cli import cli

    assert _section(build_sweep_page(_summary(old=True))) == _section(build_sweep_page(_summary(old=False)))
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(_summary(old=True)))
    out = tmp_path / "old.html"
    result = CliRunner().invoke(cli, ["report", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "Where precision is lost" in html and "keeping square in FP32" in html


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_run_stored_with_the_old_key_reads_back_reports_and_compares(db_url):
    store = Store.open(db_url)
    runs = []
    for label, latency_ms in (("base", 0.8), ("cand", 0.8)):
        rid = store.create_run(kind="sweep", source="m.onnx", label=label, backend="onnxruntime")
        rec = _variant(latency_ms, old=True)
        samples = [{"idx": i, "latency_ms": float(x)}
                   for i, x in enumerate(np.random.default_rng(len(runs)).normal(latency_ms, 0.01, 50))]
        store.add_rows(rid, sweep_rows(rec, samples, None))
        store.finish_run(rid, status="ok", summary={"kind": "sweep", "run": {"kind": "sweep", "id": rid},
                                                    "variants": [rec], "findings": []})
        runs.append(rid)
    # --resume reads stored variants back in summary.json's form: the current key only
    [row] = store.run_dict(runs[0])["variants"]
    assert "localisation" in (row.get("metrics") or {})  # what the old run stored
    rec = stored_variant_record(row)
    assert "localisation" not in rec and rec["localization"]["verification"]["conclusion"]["localized"] is True
    # the stored run's report shows the localization
    sec = _section(build_sweep_page(store.report_data(runs[0])))
    assert any(b.get("type") == "heading" and b.get("text") == "fp16-wsdefault-s1" for b in sec["blocks"])
    # and two such runs compare
    result = compare_runs(store, "base", "cand")
    assert [v["key"] for v in result["variants"]] == ["fp16-wsdefault-s1"]
    assert result["verdict"] in ("no_change", "inconclusive")
