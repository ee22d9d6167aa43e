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
"""

from profiler.store.api import DEFAULT_DB, Store, resolve_url

__all__ = ["DEFAULT_DB", "Store", "resolve_url"]
