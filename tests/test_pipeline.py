"""profiler.pipeline: the measure task and Sweep.merge, one parallel sweep run in this process (onnxruntime on
the CPU), and where the outcomes of a task go."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from profiler.store import Store  # noqa: E402
from profiler.sweep import Sweep, SweepConfig, VariantOutcome  # noqa: E402
from tests.onnx_models import FAST_SWEEP as FAST, conv_model  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRTPROF_CACHE_DIR", str(tmp_path / "cache"))


def _config(tmp_path) -> SweepConfig:
    return SweepConfig(model=conv_model(tmp_path / "conv.onnx"), precisions=["fp32", "fp16"], streams=[1, 2],
                       backend="onnxruntime", layers=False, cache_dir=str(tmp_path / "cache"), **FAST)


def test_merge_stores_a_variant_unless_the_task_that_measured_it_did(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 's.db'}")
    run_id = store.create_run(kind="sweep", source="m.onnx")
    sweep = Sweep(_config(tmp_path), store=store, run_id=run_id)
    samples = [{"idx": i, "latency_ms": 1.0 + i} for i in range(3)]
    sweep.merge(VariantOutcome({"key": "a", "status": "ok", "precision": "fp32"}, samples=samples))
    sweep.merge(VariantOutcome({"key": "b", "status": "ok", "precision": "fp16"}, samples=samples[:2], stored=True))
    assert [v["key"] for v in sweep.variants] == ["a", "b"]
    assert sweep.samples_ms == {"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0]}
    stored = store.run_dict(run_id, with_samples=True)["variants"]
    assert [(v["key"], len(v["samples"])) for v in stored] == [("a", 3)]  # b: its task stored it
    store.close()


def test_measure_leaves_the_accuracy_checks_to_merge(tmp_path):
    """Sweep.measure returns the variant's checks and keeps none: merging adds them once."""
    sweep = Sweep(_config(tmp_path))
    prep = sweep.prepare(create_run=False)
    fp16 = next(p for p in prep.plan if p.spec.key == "fp16-wsdefault-s1")
    done = sweep.measure(fp16, prep, sweep.reference_outputs(prep))
    assert done.record["status"] == "ok" and len(done.samples) == done.record["count"]
    assert done.accuracy_checks and {c.variant for c in done.accuracy_checks} == {"fp16-wsdefault-s1"}
    assert sweep.accuracy_checks == []
    sweep.merge(done)
    assert sweep.accuracy_checks == done.accuracy_checks


def test_a_parallel_sweep_in_this_process_matches_the_serial_sweep(tmp_path):
    """run_parallel with the inline runner: the measure task in this process, each outcome stored by the task
    and merged; the same variants, accuracy and stored rows as Sweep.run."""
    from profiler.distributed.sweep import run_parallel
    from profiler.pipeline.runners import InlineRunner

    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store.open(url)
    serial = Sweep(_config(tmp_path), store=store).run()
    parallel = run_parallel(Sweep(_config(tmp_path), store=store), InlineRunner(), store_url=url)
    assert [v["key"] for v in parallel["variants"]] == [v["key"] for v in serial["variants"]]
    assert [v["status"] for v in parallel["variants"]] == ["ok"] * 4
    for s, p in zip(serial["variants"], parallel["variants"]):
        assert p["device"]["pid"] and p["count"] == s["count"]
        for out, m in s["accuracy"].items():  # the same inputs through the same model: the same numbers
            assert p["accuracy"][out]["rel_l2"] == pytest.approx(m["rel_l2"], rel=1e-9, abs=1e-12)
    assert [f["rule"] for f in parallel["findings"] if f["rule"].startswith("precision")] == \
        [f["rule"] for f in serial["findings"] if f["rule"].startswith("precision")]
    rows = store.run_dict(parallel["run"]["id"], with_samples=True)["variants"]
    assert sorted((v["key"], len(v["samples"])) for v in rows) == sorted((v["key"], v["count"])
                                                                         for v in parallel["variants"])
    store.close()
