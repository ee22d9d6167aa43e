"""Run store at scale: fill SQLite and a real PostgreSQL with thousands of runs and about a million
samples through the Store API (after a longer history of runs without samples), then time the queries
the comparison and trend views make, with no secondary indexes, with the initial schema's indexes
(revision 0001), and with the current schema's.

    python3 benchmarks/bench_store.py [PG_URL] [--scale 1.0] [--sqlite PATH] [--repeat 30]

PG_URL defaults to $TRTPROF_TEST_PG_URL; its user must be allowed to CREATE DATABASE (a scratch
database is created and dropped). Without a URL only SQLite is measured. Prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import create_engine, inspect, select, text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.store import Store  # noqa: E402
from profiler.store import models as m  # noqa: E402
from profiler.store.migrate import upgrade  # noqa: E402

VARIANT_KEYS = ("fp32-ws1G-s1", "fp16-ws1G-s1", "fp16-ws1G-s2-graph", "int8-ws1G-s1")
MODELS = 20


def fill(store: Store, runs: int, samples_per_variant: int, seed: int = 1) -> dict:
    """Write ``runs`` sweep runs of 4 variants each; returns what the queries will look up."""
    rng = np.random.default_rng(seed)
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    labels = [f"pr-{i}" for i in range(max(1, runs // 10))]
    variant_ids: list[int] = []
    idx = np.arange(samples_per_variant)
    for i in range(runs):
        model = i % MODELS
        # a third of the runs are the nightly job (one label with many runs), the rest PR labels
        label = "nightly" if i % 3 == 0 else labels[int(rng.integers(len(labels)))]
        created = t0 + dt.timedelta(hours=i * 2, minutes=float(rng.uniform(0, 90)))
        rid = store.create_run(kind="sweep", source=f"models/m{model}.onnx", label=label, model=f"m{model}",
                               gpu="NVIDIA H200" if i % 2 else "NVIDIA L4", created_at=created,
                               tensorrt_version="10.9.0" if i < runs // 2 else "10.11.0")
        for k, key in enumerate(VARIANT_KEYS):
            lat = rng.gamma(20.0, 0.05 * (k + 1), size=samples_per_variant)
            summary = {"count": samples_per_variant, "median": float(np.median(lat)),
                       "p99": float(np.quantile(lat, 0.99))}
            vid = store.add_variant(
                rid, {"key": key, "fingerprint": f"m{model}-{key}", "latency_ms": summary,
                      "throughput_qps": 1000.0 / summary["median"]},
                samples=pd.DataFrame({"idx": idx, "latency_ms": lat, "compute_ms": lat * 0.9}))
            variant_ids.append(vid)
        store.finish_run(rid, status="ok")
    return {"labels": ["nightly", *labels], "variant_ids": variant_ids,
            "fingerprints": [f"m{i}-{k}" for i in range(MODELS) for k in VARIANT_KEYS]}


def add_history(store: Store, runs: int, seed: int = 2) -> None:
    """Older runs without samples (bulk inserted): a long history, as years of nightly and PR jobs leave.

    They are dated before the measured runs, half of them labelled ``nightly``, with one variant each.
    """
    if runs <= 0:
        return
    rng = np.random.default_rng(seed)
    t0 = dt.datetime(2021, 1, 1, tzinfo=dt.timezone.utc)
    step_s = (dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc) - t0).total_seconds() / runs
    rows = [{"kind": "sweep", "source": "history", "label": "nightly" if i % 2 else f"old-pr-{i % 5000}",
             "status": "ok", "created_at": t0 + dt.timedelta(seconds=i * step_s + float(rng.uniform(0, 60))),
             "gpu": "NVIDIA A100", "model": f"m{i % MODELS}", "config": {}, "environment": {}, "summary": {}}
            for i in range(runs)]
    runs_t, var_t = m.Run.__table__, m.Variant.__table__
    with store.engine.begin() as c:
        c.execute(runs_t.insert(), rows)
        ids = c.execute(select(runs_t.c.id).where(runs_t.c.source == "history")).scalars().all()
        c.execute(var_t.insert(), [{"run_id": rid, "kind": "variant", "key": "fp16", "status": "ok",
                                    "fingerprint": f"old-{rid % 200}", "latency_ms": {"median": 1.0},
                                    "metrics": {}} for rid in ids])


def bulk_rates(store: Store, n: int) -> dict[str, float]:
    """Samples/s for one variant of ``n`` samples: Store.add_variant (COPY on PostgreSQL, raw
    executemany on SQLite) against a plain SQLAlchemy executemany of the same rows."""
    rng = np.random.default_rng(9)
    df = pd.DataFrame({"idx": np.arange(n), "start_ms": np.arange(n) * 2.0, "latency_ms": rng.random(n),
                       "compute_ms": rng.random(n), "gpu_busy_ms": rng.random(n)})
    rid = store.create_run(kind="analyze", source="bulk")
    t = time.perf_counter()
    store.add_variant(rid, {"key": "bulk"}, samples=df)
    store_rate = n / (time.perf_counter() - t)
    vid = store.add_variant(rid, {"key": "bulk-plain"})
    rows = [{**r, "variant_id": vid} for r in df.to_dict("records")]
    t = time.perf_counter()
    with store.engine.begin() as c:
        c.execute(m.Sample.__table__.insert(), rows)
    plain_rate = n / (time.perf_counter() - t)
    return {"store": store_rate, "plain": plain_rate}


def _index_sets(engine) -> dict[str, dict[str, tuple[str, list[str]]]]:
    """Index name -> (table, columns) at revision 0001 (a scratch SQLite database) and at head."""
    scratch = Path(tempfile.mkdtemp()) / "rev0001.db"
    e = create_engine(f"sqlite:///{scratch}")
    upgrade(e, "0001")
    insp = inspect(e)
    rev1 = {ix["name"]: (t, ix["column_names"]) for t in insp.get_table_names() if t != "alembic_version"
            for ix in insp.get_indexes(t)}
    e.dispose()
    head = {ix.name: (t.name, [c.name for c in ix.columns]) for t in m.Base.metadata.sorted_tables
            for ix in t.indexes}
    return {"none": {}, "0001": rev1, "head": head}


def set_indexes(engine, wanted: dict[str, tuple[str, list[str]]], all_names: set[str]) -> None:
    with engine.begin() as c:
        for name in all_names - set(wanted):
            c.execute(text(f"DROP INDEX IF EXISTS {name}"))
        existing = {ix["name"] for t in inspect(c).get_table_names() for ix in inspect(c).get_indexes(t)}
        for name, (table, cols) in wanted.items():
            if name not in existing:
                c.execute(text(f"CREATE INDEX {name} ON {table} ({', '.join(cols)})"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE"))


def _timed(fn, params, repeat: int, tries: int = 3) -> float:
    """Median over ``repeat`` parameters of the best of ``tries`` calls of ``fn(p)``, in ms.

    The best of a few calls drops the stalls a busy machine adds; the median over parameters keeps
    the answer representative of all of them. One warm-up call first.
    """
    fn(params[0])
    per_param = []
    for p in params[1:repeat + 1]:
        best = float("inf")
        for _ in range(tries):
            t = time.perf_counter()
            fn(p)
            best = min(best, time.perf_counter() - t)
        per_param.append(best * 1000)
    return statistics.median(per_param)


def queries(store: Store, keys: dict, repeat: int) -> dict[str, float]:
    rng = np.random.default_rng(5)
    labels = [keys["labels"][0]] * 5 + list(rng.choice(keys["labels"], repeat + 1))
    vids = [int(v) for v in rng.choice(keys["variant_ids"], repeat + 1)]
    fps = list(rng.choice(keys["fingerprints"], repeat + 1))
    smp = m.Sample.__table__

    def samples_of(vid: int):
        with store.engine.connect() as c:
            return c.execute(select(smp.c.idx, smp.c.latency_ms).where(smp.c.variant_id == vid)
                             .order_by(smp.c.idx)).all()

    return {
        "latest run by label": _timed(store.latest_run_id, labels, repeat),
        "samples of a variant": _timed(samples_of, vids, repeat),
        "runs of a fingerprint by time": _timed(store.fingerprint_history, fps, repeat),
        "sample medians per run (fingerprint)": _timed(store.fingerprint_sample_medians, fps, repeat),
        "list newest 50 runs": _timed(lambda _: store.list_runs(limit=50), list(range(repeat + 1)), repeat),
        "list runs of a GPU (newest 50)": _timed(lambda g: store.list_runs(gpu=g, limit=50),
                                                 ["H200", "L4"] * (repeat // 2 + 1), repeat),
    }


def bench_one(name: str, url: str, runs: int, spv: int, repeat: int, history: int) -> tuple[dict, dict]:
    store = Store.open(url)
    add_history(store, history)
    t = time.perf_counter()
    keys = fill(store, runs, spv)
    fill_s = time.perf_counter() - t
    n_samples = runs * len(VARIANT_KEYS) * spv
    print(f"{name}: {history} older runs without samples, then filled {runs} runs, "
          f"{runs * len(VARIANT_KEYS)} variants, {n_samples:,} samples "
          f"in {fill_s:.1f} s ({n_samples / fill_s:,.0f} samples/s through Store.add_variant)", flush=True)
    rates = bulk_rates(store, 200_000)
    print(f"{name}: one variant of 200,000 samples: Store.add_variant {rates['store']:,.0f} samples/s, "
          f"SQLAlchemy executemany of dicts {rates['plain']:,.0f} samples/s", flush=True)
    sets = _index_sets(store.engine)
    all_names = set().union(*(s.keys() for s in sets.values()))
    results = {}
    for state in ("none", "0001", "head"):
        if state == "head" and sets["head"] == sets["0001"]:
            continue
        set_indexes(store.engine, sets[state], all_names)
        results[state] = queries(store, keys, repeat)
    set_indexes(store.engine, sets["head"], all_names)
    store.close()
    return results, {"fill_s": fill_s, "samples": n_samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pg_url", nargs="?", default=os.environ.get("TRTPROF_TEST_PG_URL"))
    ap.add_argument("--scale", type=float, default=1.0, help="1.0 = 2000 runs x 4 variants x 125 samples (1M)")
    ap.add_argument("--sqlite", default=None, help="SQLite file to fill (default: a temporary file)")
    ap.add_argument("--repeat", type=int, default=30,
                    help="parameters per query (each timed best of 3; the median is reported)")
    ap.add_argument("--history", type=int, default=None,
                    help="older runs without samples added first (default 10x the measured runs)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch PostgreSQL database")
    args = ap.parse_args()
    runs, spv = max(10, int(2000 * args.scale)), 125
    history = 10 * runs if args.history is None else args.history

    results: dict[str, dict] = {}
    sqlite_path = args.sqlite or str(Path(tempfile.mkdtemp()) / "bench.db")
    results["sqlite"], _ = bench_one("sqlite", sqlite_path, runs, spv, args.repeat, history)
    if args.pg_url:
        from tests.pg import fresh_database

        pg_url = fresh_database(args.pg_url)
        try:
            results["postgresql"], _ = bench_one("postgresql", pg_url, runs, spv, args.repeat, history)
        finally:
            if not args.keep:
                import psycopg

                plain = args.pg_url.replace("postgresql+psycopg://", "postgresql://")
                with psycopg.connect(plain, autocommit=True) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{pg_url.rsplit("/", 1)[1]}" WITH (FORCE)')
    else:
        print("no PostgreSQL URL (argument or TRTPROF_TEST_PG_URL): SQLite only")

    cols = [(db, state) for db, per in results.items() for state in per]
    qnames = list(next(iter(next(iter(results.values())).values())))
    head = ["query (ms, median of best-of-3)"]
    head += [f"{db} {'no index' if s == 'none' else 'idx ' + s}" for db, s in cols]
    rows = [[q] + [f"{results[db][s][q]:.2f}" for db, s in cols] for q in qnames]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print()
    print(" | ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]))


if __name__ == "__main__":
    main()
