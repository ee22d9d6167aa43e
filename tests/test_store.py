"""The run store against SQLite and PostgreSQL (``db_url`` parametrises every test over both)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import create_engine, func, inspect, select, text

from profiler.errors import InputError
from profiler.findings import Finding
from profiler.store import Store
from profiler.store import models as m
from profiler.store.migrate import current_revision, head_revision, upgrade

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _stats(x) -> dict:
    from profiler import stats

    return stats.summarize(np.asarray(x, dtype=np.float32))


def test_round_trip_everything(db_url):
    store = Store.open(db_url)
    rid = store.create_run(kind="sweep", source="models/resnet.onnx", label="nightly", gpu="NVIDIA H200",
                           tensorrt_version="10.9.0", config={"shapes": {"x": [1, 3, 224, 224]}})
    rng = np.random.default_rng(7)
    lat = rng.gamma(9.0, 0.1, size=1000)
    lat[17] = np.nan  # a missing measurement is stored as NULL, not NaN
    df = pd.DataFrame({"idx": np.arange(1000, dtype=np.int64), "latency_ms": lat,
                       "compute_ms": lat * 0.8, "stream": np.zeros(1000, dtype=np.int32)})
    vid = store.add_variant(
        rid, {"key": "fp16-ws1G-s1", "precision": "fp16", "workspace_bytes": 1 << 30, "streams": 1,
              "cuda_graph": False, "fingerprint": "f" * 64, "latency_ms": _stats(lat[~np.isnan(lat)]),
              "throughput_qps": np.float64(812.5), "enqueue_ms": 0.02},  # unknown key -> metrics
        samples=df,
        layers=[{"name": "conv1 + relu <fused> & more", "type": "Convolution", "time_median_ms": 0.12,
                 "fused_nodes": ["conv1", "relu"]}],
        accuracy=[{"output": "logits", "max_abs": 1e-3, "cosine": 0.99999, "passed": True,
                   "threshold": {"cosine": 0.999}}])
    v2 = store.add_variant(rid, {"key": "int8", "status": "failed", "error": "calibration cache missing"},
                           samples=[{"idx": 0, "latency_ms": np.float32(2.5)}, {"idx": 1, "h2d_ms": 0.1}])
    store.add_findings(rid, [Finding("jitter", "medium", "Unstable latency", range="infer",
                                     evidence={"cov_pct": 12.5}, recommendation="pin clocks"),
                             {"rule": "gpu_idle", "severity": "low", "title": "gaps", "variant": "int8"}])
    store.add_artifact(rid, "report", "out/report.html")
    store.finish_run(rid, status="ok", summary={"best": "fp16-ws1G-s1"})

    d = store.run_dict("nightly")
    assert d["id"] == rid and d["status"] == "ok" and d["gpu"] == "NVIDIA H200"
    assert d["config"] == {"shapes": {"x": [1, 3, 224, 224]}} and d["summary"] == {"best": "fp16-ws1G-s1"}
    assert d["created_at"].endswith("+00:00") and d["finished_at"] >= d["created_at"]
    v = d["variants"][0]
    assert v["id"] == vid and v["workspace_bytes"] == 1 << 30 and v["cuda_graph"] is False
    assert v["metrics"] == {"enqueue_ms": 0.02} and v["throughput_qps"] == 812.5
    assert v["latency_ms"]["count"] == 999
    assert v["layers"][0]["name"] == "conv1 + relu <fused> & more"
    assert v["layers"][0]["extra"] == {"fused_nodes": ["conv1", "relu"]}
    assert v["accuracy"][0]["passed"] is True and v["accuracy"][0]["threshold"] == {"cosine": 0.999}
    assert d["variants"][1]["error"] == "calibration cache missing"
    assert [f["rule"] for f in d["findings"]] == ["jitter", "gpu_idle"]
    assert d["findings"][0]["evidence"] == {"cov_pct": 12.5} and d["findings"][1]["variant"] == "int8"
    assert d["artifacts"] == [{"id": d["artifacts"][0]["id"], "run_id": rid, "kind": "report",
                               "path": "out/report.html"}]

    back = store.samples_frame(vid)
    assert len(back) == 1000 and back["idx"].tolist() == list(range(1000))
    assert math.isnan(back["latency_ms"][17])
    np.testing.assert_array_equal(back["latency_ms"].to_numpy(), lat)  # float64 round trip is exact
    np.testing.assert_array_equal(back["compute_ms"].to_numpy(), lat * 0.8)
    assert back["h2d_ms"].isna().all() and (back["stream"] == 0).all()
    small = store.samples_frame(v2)
    assert small["latency_ms"].iloc[0] == 2.5 and math.isnan(small["latency_ms"].iloc[1])
    assert small["h2d_ms"].iloc[1] == 0.1
    with_samples = store.run_dict(rid, with_samples=True)
    assert len(with_samples["variants"][0]["samples"]) == 1000


def test_resolve_run_by_id_and_newest_label(db_url):
    store = Store.open(db_url)
    a = store.create_run(kind="analyze", source="a.sqlite", label="base")
    b = store.create_run(kind="analyze", source="b.sqlite", label="base")
    c = store.create_run(kind="analyze", source="c.sqlite", label=str(a))  # a label that looks like an id
    assert store.resolve_run("base") == b and store.latest_run_id("base") == b
    assert store.resolve_run(a) == a and store.resolve_run(str(c)) == c
    assert store.resolve_run(str(a)) == a  # an existing id wins over a label
    assert store.latest_run_id("nope") is None
    with pytest.raises(InputError, match="no run with id or label 'nope'"):
        store.resolve_run("nope")
    with pytest.raises(InputError):
        store.resolve_run(10_000)
    with pytest.raises(InputError):
        store.update_run(10_000, status="ok")


def test_list_runs_filters_counts_and_order(db_url):
    store = Store.open(db_url)
    ids = []
    for i, (kind, gpu, model) in enumerate([("sweep", "NVIDIA H200", "resnet50_%.onnx"),
                                            ("analyze", "NVIDIA L4", None),
                                            ("sweep", "NVIDIA L4", "resnet50_x.onnx")]):
        rid = store.create_run(kind=kind, source=f"s{i}", label=f"l{i}", gpu=gpu, model=model)
        for k in range(i):
            store.add_variant(rid, {"key": f"v{k}"})
        ids.append(rid)
    runs = store.list_runs()
    assert [r["id"] for r in runs] == ids[::-1]
    assert [r["variant_count"] for r in runs] == [2, 1, 0]
    assert [r["id"] for r in store.list_runs(kind="sweep")] == [ids[2], ids[0]]
    assert [r["id"] for r in store.list_runs(gpu="L4")] == [ids[2], ids[1]]
    assert [r["id"] for r in store.list_runs(label="l1")] == [ids[1]]
    assert [r["id"] for r in store.list_runs(model="50_%")] == [ids[0]]  # % is literal, not a wildcard
    assert [r["id"] for r in store.list_runs(limit=1)] == [ids[2]]


def test_history_queries_match_numpy(db_url):
    store = Store.open(db_url)
    rng = np.random.default_rng(3)
    expected = []
    for i in range(4):
        rid = store.create_run(kind="sweep", source="m.onnx", label=f"n{i}")
        lat = rng.normal(1.0 + 0.1 * i, 0.05, size=101 + i)  # odd and even counts
        vid = store.add_variant(rid, {"key": "fp16", "fingerprint": "fp-a", "latency_ms": {"median": 1.0}},
                                samples=pd.DataFrame({"idx": np.arange(len(lat)), "latency_ms": lat}))
        store.add_variant(rid, {"key": "fp32", "fingerprint": "fp-b"},
                          samples=[{"idx": 0, "latency_ms": 99.0}])
        expected.append((rid, vid, float(np.median(lat)), len(lat)))
    hist = store.fingerprint_history("fp-a")
    assert [(h["run_id"], h["variant_id"]) for h in hist] == [(r, v) for r, v, _, _ in expected]
    assert hist[0]["latency_ms"] == {"median": 1.0} and hist[2]["label"] == "n2"
    med = store.fingerprint_sample_medians("fp-a")
    assert [x["variant_id"] for x in med] == [v for _, v, _, _ in expected]
    assert [x["count"] for x in med] == [n for _, _, _, n in expected]
    for got, (_, _, want, _) in zip(med, expected):
        assert got["median_ms"] == pytest.approx(want, rel=1e-12)
    assert store.fingerprint_sample_medians("missing") == []


def test_migrated_schema_equals_models(db_url):
    """Alembic's autogenerate comparison finds nothing between the migrations and the models."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = Store.open(db_url)
    assert current_revision(store.engine) == head_revision()
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
        diff = compare_metadata(ctx, m.Base.metadata)
    assert diff == []
    names = set(inspect(store.engine).get_table_names())
    assert names == set(m.Base.metadata.tables) | {"alembic_version"}


def test_older_revision_is_upgraded_and_keeps_data(db_url):
    engine = create_engine(db_url)
    assert upgrade(engine, "0001") == "0001"
    with engine.begin() as conn:  # a run written by trtprof at revision 0001
        conn.execute(text("INSERT INTO runs (kind, source, status, created_at, config, environment, summary) "
                          "VALUES ('sweep', 'old.onnx', 'ok', CURRENT_TIMESTAMP, '{}', '{}', '{}')"))
    engine.dispose()
    store = Store.open(db_url)  # upgrades to head
    assert current_revision(store.engine) == head_revision()
    assert [r["source"] for r in store.list_runs()] == ["old.onnx"]
    assert upgrade(store.engine) == head_revision()  # idempotent


_OPENER = textwrap.dedent("""
    import pathlib, sys, time
    from profiler.store import Store
    from profiler.store.migrate import current_revision
    barrier, n = pathlib.Path(sys.argv[2]), int(sys.argv[3])  # start together, after the imports
    (barrier / sys.argv[4]).touch()
    deadline = time.time() + 60
    while len(list(barrier.iterdir())) < n and time.time() < deadline:
        time.sleep(0.005)
    s = Store.open(sys.argv[1])
    s.create_run(kind="sweep", source="opener")
    print(current_revision(s.engine))
""")


def test_concurrent_first_open(db_url, tmp_path):
    """Several processes open the same fresh database at once: all succeed, the schema is made once."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _OPENER, db_url, str(barrier), "3", str(i)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == head_revision()
    store = Store.open(db_url)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    assert len(store.list_runs()) == 3


_WRITER = textwrap.dedent("""
    import sys
    from profiler.store import Store
    url, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = Store.open(url)
    for i in range(n):
        rid = s.create_run(kind="sweep", source=f"{tag}-{i}", label=tag)
        s.add_variant(rid, {"key": "v", "fingerprint": tag},
                      samples=[{"idx": k, "latency_ms": i + k / 1000} for k in range(40)],
                      layers=[{"name": "L"}])
        s.add_findings(rid, [{"rule": "jitter", "severity": "low", "title": tag}])
        s.finish_run(rid, status="ok")
""")


def test_two_processes_writing_lose_nothing(db_url):
    Store.open(db_url).close()  # schema first; the concurrent first open is tested above
    n = 50
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, db_url, tag, str(n)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for tag in ("A", "B")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = Store.open(db_url)
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(m.Run)) == 2 * n
        assert s.scalar(select(func.count()).select_from(m.Variant)) == 2 * n
        assert s.scalar(select(func.count()).select_from(m.Sample)) == 2 * n * 40
        assert s.scalar(select(func.count()).select_from(m.Layer)) == 2 * n
        assert s.scalar(select(func.count()).select_from(m.FindingRow)) == 2 * n
        assert s.scalar(select(func.count()).where(m.Run.status == "ok")) == 2 * n
        per_variant = s.execute(select(m.Sample.variant_id, func.count(), func.sum(m.Sample.idx))
                                .group_by(m.Sample.variant_id)).all()
    assert len(per_variant) == 2 * n and all(c == 40 and t == sum(range(40)) for _, c, t in per_variant)
    for tag in ("A", "B"):
        assert sorted(r["source"] for r in store.list_runs(label=tag, limit=1000)) == \
            sorted(f"{tag}-{i}" for i in range(n))


def test_bulk_samples_dataframe(db_url):
    """A large DataFrame goes in through the bulk path (COPY / executemany) and comes back exact."""
    store = Store.open(db_url)
    rid = store.create_run(kind="analyze", source="big")
    n = 60_000
    rng = np.random.default_rng(11)
    df = pd.DataFrame({"idx": np.arange(n), "start_ms": np.arange(n) * 1.5, "latency_ms": rng.random(n),
                       "gpu_busy_ms": rng.random(n), "ignored_column": 1})
    vid = store.add_variant(rid, {"key": "infer", "kind": "range"}, samples=df)
    back = store.samples_frame(vid)
    assert len(back) == n
    np.testing.assert_array_equal(back["latency_ms"].to_numpy(), df["latency_ms"].to_numpy())
    np.testing.assert_array_equal(back["start_ms"].to_numpy(), df["start_ms"].to_numpy())


def test_sqlite_uses_wal(tmp_path):
    path = tmp_path / "w.db"
    Store.open(str(path)).close()
    import sqlite3

    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_samples_need_idx(db_url):
    store = Store.open(db_url)
    rid = store.create_run(kind="sweep", source="x")
    with pytest.raises(ValueError, match="idx"):
        store.add_variant(rid, {"key": "v"}, samples=[{"latency_ms": 1.0}])
    assert store.run_dict(rid)["variants"] == []  # nothing half-written


def test_unversioned_store_is_stamped_and_upgraded(db_url):
    """A store whose tables predate the revision table (created with create_all) is adopted."""
    engine = create_engine(db_url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
        conn.execute(text("INSERT INTO runs (kind, source, status, created_at, config, environment, summary) "
                          "VALUES ('analyze', 'kept.sqlite', 'ok', CURRENT_TIMESTAMP, '{}', '{}', '{}')"))
    engine.dispose()
    store = Store.open(db_url)
    assert current_revision(store.engine) == head_revision()
    assert [r["source"] for r in store.list_runs()] == ["kept.sqlite"]


def test_store_from_a_newer_trtprof_is_refused(db_url):
    store = Store.open(db_url)
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    store.close()
    with pytest.raises(InputError, match="revision 9999, which this trtprof .* does not know"):
        Store.open(db_url)


def test_samples_non_finite_and_nullable_columns_become_null(db_url):
    store = Store.open(db_url)
    rid = store.create_run(kind="analyze", source="x")
    df = pd.DataFrame({"idx": [0, 1, 2], "latency_ms": [1.5, np.inf, -np.inf],
                       "stream": pd.array([7, None, 9], dtype="Int64"), "h2d_ms": [np.nan, 0.25, np.nan]})
    back = store.samples_frame(store.add_variant(rid, {"key": "k"}, samples=df))
    assert back["latency_ms"].iloc[0] == 1.5 and back["latency_ms"].iloc[1:].isna().all()
    assert back["stream"].tolist()[0] == 7 and back["stream"].isna().tolist() == [False, True, False]
    assert back["h2d_ms"].isna().tolist() == [True, False, True] and back["h2d_ms"].iloc[1] == 0.25


def test_samples_as_a_dict_of_columns(db_url):
    """What a cached analysis hands the store (read with pyarrow, no pandas): numpy columns and lists."""
    store = Store.open(db_url)
    rid = store.create_run(kind="analyze", source="x")
    n = 5000
    lat = np.linspace(0.5, 3.0, n)
    lat[[3, 7]] = [np.nan, np.inf]
    cols = {"idx": np.arange(n, dtype=np.int64), "latency_ms": lat, "gpu_busy_ms": [0.25] * n, "ignored": lat}
    back = store.samples_frame(store.add_variant(rid, {"key": "k"}, samples=cols))
    assert back["idx"].tolist() == list(range(n))
    assert back["latency_ms"].isna().tolist() == [i in (3, 7) for i in range(n)]
    keep = ~np.isin(np.arange(n), [3, 7])
    np.testing.assert_array_equal(back["latency_ms"].to_numpy()[keep], lat[keep])
    assert back["gpu_busy_ms"].sum() == 0.25 * n and "ignored" not in back.columns
    with pytest.raises(ValueError, match="idx"):
        store.add_variant(rid, {"key": "j"}, samples={"latency_ms": lat})


def test_the_head_constant_is_alembics_and_a_current_store_opens_without_alembic(tmp_path):
    from profiler.store import migrate

    assert migrate.HEAD == head_revision()
    db = tmp_path / "h.db"
    Store.open(str(db)).close()  # created and migrated (Alembic)
    probe = ("import sys\nfrom profiler.store import Store\nStore.open(sys.argv[1]).close()\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    out = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
    old = tmp_path / "old.db"
    upgrade(create_engine(f"sqlite:///{old}"), "0002")  # an older store still goes through Alembic
    out = subprocess.run([sys.executable, "-c", probe, str(old)], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "alembic" in out.stdout and current_revision(create_engine(f"sqlite:///{old}")) == head_revision()
