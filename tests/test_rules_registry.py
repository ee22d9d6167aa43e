"""The rule registry's contract, checked by running every rule of every scope over real contexts (the
sample captures, the trtexec exports, the sample sweeps' variants) and synthetic ones for the branches
real data lacks: a rule reads only thresholds its defaults declare and every one it declares, one
(scope, id) is one rule, every finding carries its rule's registry id and scope, and ``run_rules``
returns its thresholds instead of writing them into the context."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from profiler import rules as R
from profiler.capture.analyze import AnalysisOptions, analyze_path
from profiler.errors import UsageError
from profiler.findings import Finding
from profiler.layers import frame as lf
from profiler.rules.context import AccuracyCheck, LayerContext, SweepContext
from tests.conftest import SAMPLE_TRACES, TRTEXEC_FIXTURES


class Recording(R.Thresholds):
    """Thresholds that note every name a rule reads."""

    def __init__(self, rule_id: str, values: dict[str, Any], seen: set[str]) -> None:
        super().__init__(rule_id, values)
        self._seen = seen

    def __getitem__(self, name: str) -> Any:
        self._seen.add(name)
        return super().__getitem__(name)


# -- contexts of every scope --------------------------------------------------------------------------
def capture_contexts() -> list:
    paths = sorted(SAMPLE_TRACES.glob("*.sqlite"))
    if not paths:
        pytest.skip(f"no sample captures in {SAMPLE_TRACES}")
    out = []
    for p in paths:
        for setup in (False, True):  # the steady state, and the whole capture (start-up gaps, first copies)
            out.append(analyze_path(p, AnalysisOptions(include_setup=setup)).context)
    # two threads taking turns on a semaphore (OS runtime calls the sample captures do not trace)
    from profiler.capture.analyze import analyze
    from tests.capture_builders import two_threads

    out.append(analyze(two_threads(same_context=True, overlap=False, waits="alternate"),
                       AnalysisOptions(include_setup=True)).context)
    return out


def _timing(key: str, version: str | None, enq: float, comp: float, h2d: float, d2h: float, cov: float,
            ) -> LayerContext:
    summary = {"gpu_compute_ms": {"median": comp, "cov_pct": cov, "count": 100}, "enqueue_ms": {"median": enq},
               "h2d_ms": {"median": h2d}, "d2h_ms": {"median": d2h}}
    return LayerContext(key, lf.empty_frame(), None, summary, {}, version)


def layer_contexts() -> list[LayerContext]:
    from profiler.layers import trtexec as tx

    out = [_timing("enqueue-bound", "10.14", 0.9, 1.0, 0.1, 0.1, 0.5),
           _timing("h2d-bound", "10.14", 0.1, 1.0, 1.5, 0.1, 0.5),
           _timing("unstable", "8.6.1", 0.1, 1.0, 0.1, 0.1, 5.0)]
    if TRTEXEC_FIXTURES.is_dir():
        dirs = sorted({p.parent for p in TRTEXEC_FIXTURES.rglob("*.json")})
        for s in tx.find_export_sets(dirs):
            e = tx.load_export(s)
            for precision in dict.fromkeys((e.precision, "fp16", "int8")):  # the build's, and stricter asks
                out.append(LayerContext(f"{s.prefix}-{precision}", e.layers, precision, e.summary, e.trtexec,
                                        e.tensorrt_version))
    return out


def _variant(key: str, median_ms: float, qps: float, **extra: Any) -> dict[str, Any]:
    precision, ws, streams = key.split("-")[:3]
    lat = {"median": median_ms, "count": 100, "cov_pct": extra.pop("cov_pct", 0.1)}
    return {"key": key, "precision": precision, "workspace_bytes": int(ws[2:-1]) << 20, "streams": int(streams[1:]),
            "cuda_graph": False, "status": "ok", "latency_ms": lat, "compute_ms": lat, "throughput_qps": qps,
            "accuracy": {}, **extra}


def sweep_contexts() -> list[SweepContext]:
    out = []
    for p in sorted(SAMPLE_TRACES.glob("*.summary.json")):
        s = json.loads(p.read_text())
        out.append(SweepContext(s["variants"], s["run"].get("environment") or {}))
    synthetic = [
        _variant("fp32-ws64M-s1", 4.0, 250), _variant("fp32-ws1024M-s1", 3.0, 333),
        _variant("fp32-ws1024M-s2", 5.5, 340), _variant("fp16-ws64M-s1", 2.0, 500, cov_pct=30.0),
        _variant("fp16-ws1024M-s1", 2.02, 495, enqueue_ms={"median": 1.9}, h2d_ms={"median": 2.5}),
        _variant("fp16-ws1024M-s2", 3.0, 900),
        {"key": "int8-ws64M-s1", "precision": "int8", "status": "failed", "error": "build failed"},
    ]
    out.append(SweepContext(synthetic, {"name": "tensorrt", "version": "10.14.1"}))
    out.append(SweepContext([], {}, accuracy_checks()))
    return out


def accuracy_checks() -> list[AccuracyCheck]:
    """An fp16 variant whose timed outputs are 30% off FP32's (rel L2) and one whose own arithmetic is."""
    from profiler.accuracy import compare_batches

    rng = np.random.default_rng(0)
    ref = [{"y": rng.normal(size=(4, 16))} for _ in range(2)]
    off = [{"y": r["y"] + 0.3 * rng.normal(size=(4, 16))} for r in ref]
    return [AccuracyCheck("fp16-ws64M-s1", "fp16", compare_batches(ref, off)),
            AccuracyCheck("fp16-ws1024M-s1", "fp16", compare_batches(ref, off), engine="model_arithmetic")]


CONTEXTS = {"capture": capture_contexts, "layers": layer_contexts, "sweep": sweep_contexts}


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], tuple[set[str], list[Finding]]]:
    """(scope, id) -> (threshold names read, findings) of every rule over every context of its scope."""
    out: dict[tuple[str, str], tuple[set[str], list[Finding]]] = defaultdict(lambda: (set(), []))
    for scope, make in CONTEXTS.items():
        for ctx in make():
            for spec in R.registry(scope):
                seen, found = out[scope, spec.id]
                found.extend(spec.func(ctx, Recording(spec.id, dict(spec.defaults), seen)))
    return dict(out)


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry, every rule loaded, as a copy that a test may register rules into."""
    R.registry()
    monkeypatch.setattr(R, "_REGISTRY", dict(R._REGISTRY))


# -- the contract ----------------------------------------------------------------------------------------
def test_every_scope_has_its_rules_and_ids_are_bare():
    by_scope = defaultdict(list)
    for spec in R.registry():
        by_scope[spec.scope].append(spec.id)
        assert "." not in spec.id and spec.summary, spec
    assert set(by_scope) == set(R.SCOPES)
    for scope, ids in by_scope.items():
        assert len(ids) == len(set(ids)), scope
    # one diagnosis, three scopes: the same id, each scope's own rule
    shared = {"launch_overhead", "transfer_bound", "jitter"}
    assert all(shared <= set(ids) for ids in by_scope.values())
    assert len({R.get_rule(s, "jitter").func for s in R.SCOPES}) == 3


def _of_scope(runs: dict, scope: str) -> list:
    """The runs of one scope's rules; the layer rules' contexts include the trtexec fixtures, without which
    some of them see nothing to fire on: skipped then, saying so."""
    if scope == "layers" and not TRTEXEC_FIXTURES.is_dir():
        pytest.skip(f"the layer rules are exercised on the trtexec fixtures, not found at {TRTEXEC_FIXTURES}")
    return [(k, v) for k, v in runs.items() if k[0] == scope]


@pytest.mark.parametrize("scope", list(CONTEXTS))
def test_rules_read_exactly_the_thresholds_their_defaults_declare(runs, scope):
    for (_, rid), (seen, _) in _of_scope(runs, scope):
        declared = set(R.get_rule(scope, rid).defaults)
        assert seen <= declared, (scope, rid, seen - declared)  # Thresholds raises first; this names them
        assert seen == declared, f"{scope} rule {rid!r} never read {sorted(declared - seen)} on any context"


@pytest.mark.parametrize("scope", list(CONTEXTS))
def test_every_rule_fires_and_every_finding_carries_its_registry_id(runs, scope):
    for (_, rid), (_, found) in _of_scope(runs, scope):
        assert found, f"{scope} rule {rid!r} fired on no context: its contract is untested"
        assert {f.rule for f in found} == {rid}, (scope, rid)


def test_run_stamps_the_scope_and_refuses_a_finding_under_another_id(scratch_registry):
    @R.rule("liar", scope="sweep", defaults={"limit": 1.0})
    def liar(ctx: SweepContext, t: R.Thresholds) -> list[Finding]:
        """Emits another rule's id."""
        return [Finding(rule="jitter", severity="low", title="x", threshold=t.pick("limit"))]

    with pytest.raises(AssertionError, match="sweep rule 'liar' emitted a finding with rule 'jitter'"):
        R.run_rules("sweep", SweepContext([]))

    found = R.get_rule("sweep", "variant_failed").run(SweepContext([{"key": "k", "status": "failed"}]))
    assert [(f.rule, f.scope) for f in found] == [("variant_failed", "sweep")]


def test_one_rule_per_scope_and_id(scratch_registry):
    def another_jitter(ctx: Any, t: R.Thresholds) -> list[Finding]:
        return []

    with pytest.raises(ValueError, match="capture rule id 'jitter' is registered twice"):
        R.rule("jitter", scope="capture")(another_jitter)
    with pytest.raises(ValueError, match="bare names"):
        R.rule("capture.jitter", scope="capture")
    with pytest.raises(ValueError, match="scope 'engine'"):
        R.rule("x", scope="engine")


def test_a_threshold_missing_from_the_defaults_is_an_error():
    t = R.Thresholds("jitter", {"max_cov_pct": 10.0})
    assert t["max_cov_pct"] == 10.0 and t.pick("max_cov_pct") == {"max_cov_pct": 10.0}
    for read in (lambda: t["max_tail_ratio"], lambda: t.get("max_tail_ratio", 1.5)):
        with pytest.raises(KeyError, match="rule 'jitter' reads threshold 'max_tail_ratio', which its defaults lack"):
            read()


def test_run_rules_returns_its_thresholds_and_leaves_the_context_alone():
    ctx = SweepContext([_variant("fp16-ws64M-s1", 2.0, 500, cov_pct=3.0)], {"name": "tensorrt", "version": "10.14"})
    before = dict(vars(ctx))
    run = R.run_rules("sweep", ctx, overrides={"jitter": {"cov_pct": 2.0}}, only=["jitter"])
    assert vars(ctx) == before
    assert run.thresholds["jitter"] == {"cov_pct": 2.0, "medium_over_limit": 4.0}
    assert run.thresholds["workspace_limited"] == {"min_slowdown_pct": 5.0}  # every rule of the scope
    [f] = run.findings
    assert f.threshold["cov_pct"] == 2.0 and f.evidence["compute_cov_pct"] == 3.0 and f.severity == "low"
    with pytest.raises(UsageError, match="sweep rule 'jitter' has no threshold 'max_cov_pct'"):
        R.run_rules("sweep", ctx, overrides={"jitter": {"max_cov_pct": 2.0}})


def test_the_sweep_threshold_option_keys_overrides_by_the_ids_findings_carry():
    from profiler.sweep.options import parse_thresholds

    acc, rules = parse_thresholds(("fp16.cosine_min=0.99", "jitter.cov_pct=3", "launch_overhead.enqueue_over_compute=0.5"))
    assert acc == {"fp16": {"cosine_min": 0.99}}
    assert rules == {"jitter": {"cov_pct": 3.0}, "launch_overhead": {"enqueue_over_compute": 0.5}}
    assert R.resolve_thresholds("sweep", rules)["jitter"]["cov_pct"] == 3.0
    with pytest.raises(UsageError, match="rule 'jitter' has no threshold 'max_cov_pct' \\(it has: cov_pct, medium_over_limit\\)"):
        parse_thresholds(("jitter.max_cov_pct=3",))
    with pytest.raises(UsageError, match="sweep rule with thresholds \\(jitter, launch_overhead, stream_scaling, "
                                         "transfer_bound, workspace_limited\\)"):
        parse_thresholds(("gpu_idle.min_gap_us=50",))  # a capture rule's threshold
