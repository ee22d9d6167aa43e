"""The run store: every run trtprof makes or ingests, in SQLite (default) or PostgreSQL.

Producers hand the store plain dicts and lists, never ORM objects, so the sweep, the capture
analysis and the trtexec import stay independent of SQLAlchemy::

    store = Store.open(url)                     # None -> $TRTPROF_DB or ./trtprof.db
    run_id = store.create_run(kind="sweep", source="model.onnx", label="nightly")
    vid = store.add_variant(run_id, {"key": "fp16-ws1G-s1", "precision": "fp16", ...},
                            samples=[{"idx": 0, "latency_ms": 1.2, ...}], layers=[...], accuracy=[...])
    store.add_findings(run_id, findings)          # profiler.findings.Finding objects or dicts
    store.add_artifact(run_id, "report", "out/report.html")
    store.finish_run(run_id, status="ok", summary=summary_json)
    store.run_dict(run_id)                        # everything back as one JSON-able dict


The names are imported on first use: :mod:`profiler.store.rows` (what an analysis becomes in the store)
is read without SQLAlchemy by the analysis cache.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("DEFAULT_DB", "Store", "resolve_url"):
        from profiler.store import api

        return getattr(api, name)
    raise AttributeError(f"module 'profiler.store' has no attribute {name!r}")


__all__ = ["DEFAULT_DB", "Store", "resolve_url"]
