"""`trtprof history` at a team's year: fill a SQLite store with RUNS nightly runs of VARIANTS variants each (a 10%
step in one variant), then time the build of the site and print a table (runs, variants, load+review s, write s,
pages, largest page).

    PYTHONPATH=. python benchmarks/bench_history.py [--runs 10000] [--variants 20] [--db FILE | --url postgresql://...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

import numpy as np


def fill(url: str, runs: int, variants: int, *, seed: int = 0, step_at: int | None = None) -> None:
    """RUNS runs of VARIANTS variants, inserted in bulk (Core executemany): medians with 3% noise, variant 0
    stepping up 10% at run ``step_at`` (default: half way), a driver change at two thirds."""
    from profiler.store import Store
    from profiler.store import models as m

    store = Store.open(url)
    rng = np.random.default_rng(seed)
    step_at = runs // 2 if step_at is None else step_at
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    run_rows, var_rows = [], []
    for i in range(runs):
        rid = i + 1
        run_rows.append({"id": rid, "kind": "sweep", "source": "/models/resnet.onnx", "label": "nightly",
                         "status": "ok", "created_at": t0 + dt.timedelta(hours=i), "gpu": "NVIDIA H200",
                         "driver_version": "580.1" if i < 2 * runs // 3 else "580.2", "tensorrt_version": "10.3",
                         "backend": "tensorrt", "model": "/models/resnet.onnx", "config": {}, "environment": {},
                         "summary": {}})
        noise = 1 + rng.normal(0, 0.03, variants)
        for v in range(variants):
            base = 1.0 + 0.1 * v
            med = base * noise[v] * (1.1 if v == 0 and i >= step_at else 1.0)
            var_rows.append({"run_id": rid, "kind": "variant", "key": f"fp16-ws1G-s{v}", "status": "ok",
                             "backend": "tensorrt", "fingerprint": f"fp-{v}", "precision": "fp16",
                             "latency_ms": {"median": med, "p99": med * 1.2, "count": 200},
                             "metrics": {"memory": {"rss_after_run_bytes": 3e8 + v * 1e6}}})
    with store.write_session() as s, s.begin():
        s.execute(m.Run.__table__.insert(), run_rows)
        for start in range(0, len(var_rows), 20000):
            s.execute(m.Variant.__table__.insert(), var_rows[start:start + 20000])
    store.close()


def build(url: str, out: Path) -> dict:
    from profiler.history.review import review_store
    from profiler.history.site import write_site
    from profiler.store import Store

    store = Store.open(url, upgrade=False)
    t0 = time.perf_counter()
    reviewed = review_store(store)
    t1 = time.perf_counter()
    made = write_site(reviewed, out, db=url)
    t2 = time.perf_counter()
    store.close()
    return {"series": len(reviewed), "review_s": t1 - t0, "write_s": t2 - t1, **made,
            "change_points": sum(len(s["change_points"]) for s in reviewed),
            "found": [(s["key"]["key"], c["after_run"], round(c["ratio"], 3)) for s in reviewed for c in s["change_points"]]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--variants", type=int, default=20)
    ap.add_argument("--db", default=None, help="SQLite file to fill (default: a temporary one)")
    ap.add_argument("--url", default=None, help="an empty store's SQLAlchemy URL instead (PostgreSQL)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{args.db or Path(tmp) / 'history.db'}"
        t0 = time.perf_counter()
        fill(url, args.runs, args.variants)
        fill_s = time.perf_counter() - t0
        r = build(url, Path(tmp) / "site")
    print(f"{'runs':>6} {'variants':>8} {'fill s':>7} {'series':>6} {'load+review s':>13} {'write s':>7} {'pages':>5} "
          f"{'largest page kB':>15} {'change points':>13}")
    print(f"{args.runs:>6} {args.variants:>8} {fill_s:>7.1f} {r['series']:>6} {r['review_s']:>13.2f} {r['write_s']:>7.2f} "
          f"{r['pages']:>5} {r['largest_page_bytes'] / 1e3:>15.0f} {r['change_points']:>13}")
    print(f"step made: variant fp16-ws1G-s0 x1.1 from run {args.runs // 2 + 1}; found (variant, first run after, ratio): "
          f"{r['found']}")


if __name__ == "__main__":
    main()
