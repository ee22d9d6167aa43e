"""The hostile-input corpus of issue 13, generated at test time from real captures (no committed binaries).

Each case is ``Case(category, name, build)``: ``build(tmp_path)`` writes whatever the case needs under
``tmp_path`` and returns the command line (after ``trtprof``) that exercises it. The captures are copies
of ``sample_traces/`` (always in the repository) altered with SQL or byte edits; trtexec cases start from
``../shared/fixtures/trtexec`` when present (skipped with the reason otherwise).

Run ``python3 -m tests.fuzz.hostile OUTDIR`` to write every case's files to a folder for manual use.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tests.conftest import SAMPLE_TRACES, TRTEXEC_FIXTURES

BASE = SAMPLE_TRACES / "transfer_bound.sqlite"  # kernels, copies, sync, NVTX, OS runtime, API calls
NVTX_BASE = SAMPLE_TRACES / "launch_bound.sqlite"  # many kernels inside NVTX ranges
TRTEXEC_BASE = TRTEXEC_FIXTURES / "pytorch" / "resnet" / "A100" / "fp32"
INT64_MAX = 2**63 - 1

K = "CUPTI_ACTIVITY_KIND_KERNEL"
API = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
COPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
OSRT = "OSRT_API"


@dataclass(frozen=True)
class Case:
    category: str
    name: str
    build: Callable[[Path], list[str]]
    needs: Path | None = None  # a fixture the case starts from (skip when absent)
    expect: tuple[int, ...] | None = None  # the exit codes a correct trtprof gives (None: any of 0-3)
    warns: bool = False  # a successful analysis must say what it ignored (a capture warning)
    after: Callable[[Path, str, str], list[str]] | None = None  # (tmp, stdout, stderr) -> what went wrong
    env: tuple[tuple[str, str], ...] = ()  # environment variables the case runs under (a tiny time limit)

    @property
    def id(self) -> str:
        return f"{self.category}-{self.name}"


# ----------------------------------------------------------------------------------------- captures

def _copy(base: Path, tmp: Path) -> Path:
    dst = tmp / "cap.sqlite"
    shutil.copy(base, dst)
    dst.chmod(0o644)
    return dst


def sql_case(*statements: str, base: Path = BASE) -> Callable[[Path], list[str]]:
    """A capture altered by SQL statements (each may use ? parameters given as (sql, params))."""
    def build(tmp: Path) -> list[str]:
        path = _copy(base, tmp)
        con = sqlite3.connect(path)
        for st in statements:
            sql, params = st if isinstance(st, tuple) else (st, ())
            con.execute(sql, params)
        con.commit()
        con.close()
        return ["analyze", str(path), "--no-store", "--json", str(tmp / "out.json")]
    return build


def unconstrained(table: str) -> tuple[str, ...]:
    """SQL that rebuilds ``table`` without its NOT NULL constraints (a tool other than nsys wrote it)."""
    return (f'CREATE TABLE "{table}_copy" AS SELECT * FROM "{table}"', f'DROP TABLE "{table}"',
            f'ALTER TABLE "{table}_copy" RENAME TO "{table}"')


def flip_case(seed: int, base: Path = BASE, count: int = 64) -> Callable[[Path], list[str]]:
    """Flipped bytes past the SQLite header (where tables and strings live)."""
    def build(tmp: Path) -> list[str]:
        import random

        path = _copy(base, tmp)
        data = bytearray(path.read_bytes())
        rng = random.Random(seed)
        for _ in range(count):
            i = rng.randrange(100, len(data))
            data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        return ["analyze", str(path), "--no-store", "--json", str(tmp / "out.json")]
    return build


def overlapping_ranges(n: int, base: Path = NVTX_BASE, kernels: int | None = None) -> Callable[[Path], list[str]]:
    """``n`` nested NVTX ranges on the launching thread, all covering every kernel (the quadratic case);
    ``kernels`` keeps only that many kernels."""
    def build(tmp: Path) -> list[str]:
        path = _copy(base, tmp)
        con = sqlite3.connect(path)
        if kernels is not None:
            con.execute(f"DELETE FROM {K} WHERE rowid NOT IN (SELECT rowid FROM {K} ORDER BY start LIMIT {kernels})")
        lo, hi = con.execute(f"SELECT min(s), max(e) FROM (SELECT min(start) AS s, max(end) AS e FROM {K} "
                             f"UNION ALL SELECT min(start), max(end) FROM {API})").fetchone()
        gtid = con.execute(f"SELECT globalTid FROM {API} GROUP BY globalTid ORDER BY count(*) DESC LIMIT 1"
                           ).fetchone()[0]
        con.execute(f"DELETE FROM {NVTX} WHERE eventType IN (59, 60)")
        rows = [(lo - 1000 - i, hi + 1000 + i, 59, f"range{i % 7}", gtid) for i in range(n)]
        con.executemany(f"INSERT INTO {NVTX} (start, end, eventType, text, globalTid) VALUES (?,?,?,?,?)", rows)
        con.commit()
        con.close()
        return ["analyze", str(path), "--no-store", "--json", str(tmp / "out.json")]
    return build


def capture_cases() -> list[Case]:
    c: list[Case] = []

    def add(cat: str, name: str, build, needs: Path | None = None) -> None:
        warns = cat in ("null", "retyped", "encoding") or (cat == "absurd" and not name.startswith(
            ("bytes-",)))
        c.append(Case(cat, name, build, needs, warns=warns))

    for table, col in ((K, "start"), (K, "end"), (K, "deviceId"), (NVTX, "eventType"), (NVTX, "start"),
                       ("StringIds", "value"), ("StringIds", "id"), (API, "start"), (OSRT, "start"),
                       (COPY, "bytes"), (COPY, "streamId")):
        add("renamed-column", f"{table}.{col}",
            sql_case(f'ALTER TABLE "{table}" RENAME COLUMN "{col}" TO "{col}_x"'))
    add("renamed-column", "memset.bytes", sql_case(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, streamId INT, "
        "correlationId INT, globalPid INT, nbytes INT)",
        f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET SELECT start, end, deviceId, streamId, correlationId, "
        f"globalPid, bytes FROM {COPY} LIMIT 5"))
    for table, col in ((K, "start"), (K, "end"), (K, "deviceId"), (NVTX, "start"), (NVTX, "globalTid"),
                       ("StringIds", "value"), ("StringIds", "id"), (API, "start"), (API, "end"),
                       (OSRT, "end"), (COPY, "bytes")):
        add("null", f"{table}.{col}", sql_case(*unconstrained(table), (
            f'UPDATE "{table}" SET "{col}" = NULL WHERE rowid IN (SELECT rowid FROM "{table}" LIMIT 5)')))
    add("null", "kernel-start-all", sql_case(*unconstrained(K), f"UPDATE {K} SET start = NULL"))
    for kind, value in (("text", "'abc'"), ("blob", "x'00ff'"), ("real", "1500000000.5"),
                        ("huge-real", "1e300")):
        add("retyped", f"kernel.start-{kind}", sql_case(
            f"UPDATE {K} SET start = {value} WHERE rowid IN (SELECT rowid FROM {K} LIMIT 3)"))
    add("retyped", "api.end-text", sql_case(f"UPDATE {API} SET end = 'x' WHERE rowid = 1"))
    add("retyped", "nvtx.eventType-text", sql_case(f"UPDATE {NVTX} SET eventType = 'push' WHERE rowid = 1"))
    add("encoding", "stringids-invalid-utf8", sql_case(
        ("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id IN (SELECT nameId FROM "
         f"{API} LIMIT 50)", (b"cuda\xff\xfeLaunch",)),
        ("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id IN (SELECT shortName FROM {K} LIMIT 1)".format(K=K),
         (b"kern\xc3\x28el",))))
    add("encoding", "nvtx-invalid-utf8", sql_case(
        (f"UPDATE {NVTX} SET text = CAST(? AS TEXT) WHERE text IS NOT NULL", (b"step\xff",))))
    add("encoding", "nvtx-blob-text", sql_case(f"UPDATE {NVTX} SET text = x'deadbeef' WHERE text IS NOT NULL"))
    add("encoding", "gpu-name-bytes", sql_case("UPDATE TARGET_INFO_GPU SET name = x'4e56ff00e280'"))
    add("encoding", "metadata-bytes", sql_case(
        "UPDATE META_DATA_EXPORT SET value = x'32303236ff' WHERE name = 'EXPORT_PRODUCT_VERSION'"))
    add("encoding", "process-name-bytes", sql_case("UPDATE PROCESSES SET name = x'70797468ff6e'"))
    add("absurd", "kernel-end-2^62", sql_case(f"UPDATE {K} SET end = end + {2**62} WHERE rowid = 7"))
    add("absurd", "kernel-at-int64-max", sql_case(
        f"UPDATE {K} SET start = {INT64_MAX - 10}, end = {INT64_MAX} WHERE rowid = 3"))
    add("absurd", "kernel-negative", sql_case(f"UPDATE {K} SET start = -{2**62}, end = -{2**61} WHERE rowid = 3"))
    add("absurd", "nvtx-end-2^62", sql_case(f"UPDATE {NVTX} SET end = end + {2**62} WHERE rowid = 2"))
    add("absurd", "api-int64-max", sql_case(f"UPDATE {API} SET end = {INT64_MAX} WHERE rowid = 5"))
    add("absurd", "api-swapped", sql_case(f"UPDATE {API} SET start = end, end = start"))
    add("absurd", "kernel-swapped", sql_case(f"UPDATE {K} SET start = end, end = start WHERE rowid < 20"))
    add("absurd", "device-2^40", sql_case(f"UPDATE {K} SET deviceId = {2**40} WHERE rowid < 20"))
    add("absurd", "device-negative", sql_case(f"UPDATE {K} SET deviceId = -3 WHERE rowid < 20"))
    add("absurd", "analysis-duration-huge", sql_case(f"UPDATE ANALYSIS_DETAILS SET duration = {INT64_MAX}"))
    add("absurd", "bytes-negative", sql_case(f"UPDATE {COPY} SET bytes = -5"))
    add("escape", "nvtx-osc-title", sql_case(
        f"UPDATE {NVTX} SET text = 'step' || char(27) || ']0;pwned' || char(7) WHERE text IS NOT NULL"))
    add("escape", "kernel-clear-screen", sql_case(
        "UPDATE StringIds SET value = value || char(27) || '[2J' || char(13)"))
    add("escape", "gpu-name-escape", sql_case(
        "UPDATE TARGET_INFO_GPU SET name = 'H200' || char(27) || '[31m' || char(155) || 'X'"))
    add("structure", "no-stringids", sql_case("DROP TABLE StringIds"))
    add("structure", "kernels-empty", sql_case(f"DELETE FROM {K}"))
    add("structure", "kernel-table-is-view", sql_case(
        f"ALTER TABLE {K} RENAME TO k_old", f"CREATE VIEW {K} AS SELECT start, end FROM k_old"))
    add("structure", "no-analysis-details", sql_case("DROP TABLE ANALYSIS_DETAILS"))
    for seed in range(6):
        add("flipped-bytes", f"seed{seed}", flip_case(seed))
    return c


# ------------------------------------------------------------------------------------------ trtexec

def _trtexec_copy(tmp: Path) -> tuple[Path, str]:
    dst = tmp / "trtexec"
    shutil.copytree(TRTEXEC_BASE, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    prefix = next(p.name[: -len(".timing.json")] for p in dst.glob("*.timing.json"))
    return dst, prefix


def trtexec_case(edit: Callable[[Path, str], None]) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        d, prefix = _trtexec_copy(tmp)
        edit(d, prefix)
        return ["import", str(d), "--no-store", "--json", str(tmp / "out.json")]
    return build


def _edit_json(suffix: str, fn: Callable[[object], object]) -> Callable[[Path, str], None]:
    def edit(d: Path, prefix: str) -> None:
        p = d / f"{prefix}{suffix}"
        p.write_text(json.dumps(fn(json.loads(p.read_text())), allow_nan=True))
    return edit


def _each(key: str, value) -> Callable[[object], object]:
    def fn(data):
        for rec in data if isinstance(data, list) else []:
            if isinstance(rec, dict) and key in rec:
                rec[key] = value(rec[key]) if callable(value) else value
        return data
    return fn


def trtexec_cases() -> list[Case]:
    c: list[Case] = []

    def add(name: str, edit) -> None:
        c.append(Case("trtexec", name, trtexec_case(edit), TRTEXEC_BASE))

    for key in ("count", "averageMs", "timeMs", "medianMs", "percentage"):
        for label, value in (("1e30", 1e30), ("abc", "abc"), ("nan", float("nan")), ("neg", -3.0),
                             ("null", None), ("list", [1])):
            add(f"profile.{key}-{label}", _edit_json(".profile.json", _each(key, value)))
    for key in ("startComputeMs", "endComputeMs", "computeMs", "latencyMs", "enqueueMs", "h2dMs", "d2hMs",
                "startEnqMs", "endEnqMs"):
        for label, value in (("string", "1.5"), ("1e308", 1e308), ("nan", float("nan")),
                             ("negated", lambda v: -v if isinstance(v, (int, float)) else v), ("inf", float("inf"))):
            add(f"times.{key}-{label}", _edit_json(".timing.json", _each(key, value)))
    add("times-negated-all", _edit_json(".timing.json", lambda data: [
        {k: (-v if isinstance(v, (int, float)) else v) for k, v in r.items()} for r in data]))
    add("times-not-list", _edit_json(".timing.json", lambda data: {"a": 1}))
    add("times-empty", _edit_json(".timing.json", lambda data: []))
    add("profile-not-list", _edit_json(".profile.json", lambda data: "x"))
    add("layer-info-garbage", _edit_json(".graph.json", lambda data: [1, "x", None]))

    def deep(d: Path, prefix: str) -> None:
        (d / f"{prefix}.timing.json").write_text("[" * 200_000 + "]" * 200_000)
    add("times-deep-nesting", deep)

    def deep_profile(d: Path, prefix: str) -> None:
        (d / f"{prefix}.profile.json").write_text('[{"a":' * 100_000 + "1" + "}" * 100_000 + "]")
    add("profile-deep-nesting", deep_profile)

    def only_log(d: Path, prefix: str) -> None:
        for p in d.iterdir():
            p.unlink()
        (d / f"{prefix}.log").write_text(
            "&&&& RUNNING TensorRT.trtexec [TensorRT v8401] # trtexec --onnx=m.onnx\n"
            "[06/01/2022-10:00:00] [I] Duration: 3s (+ 200ms warm up)\n"
            "[06/01/2022-10:00:05] [I] === Performance summary ===\n"
            "[06/01/2022-10:00:05] [I] Throughput: 512.5 qps\n"
            "[06/01/2022-10:00:05] [I] GPU Compute Time: min = 1.5 ms, max = 2.5 ms, mean = 1.9 ms, "
            "median = 1.9 ms, percentile(90%) = 2.1 ms, percentile(95%) = 2.2 ms, percentile(99%) = 2.4 ms\n")
    add("only-log", only_log)

    def invalid_utf8(d: Path, prefix: str) -> None:
        p = d / f"{prefix}.profile.json"
        p.write_bytes(p.read_bytes().replace(b'"name"', b'"na\xffme"', 3))
    add("profile-invalid-utf8", invalid_utf8)

    def escape_names(d: Path, prefix: str) -> None:
        p = d / f"{prefix}.profile.json"
        p.write_text(p.read_text().replace('"name" : "', '"name" : "\\u001b]0;pwned\\u0007'))
    add("profile-escape-names", escape_names)
    return c


# ------------------------------------------------------------------------------------ command line

def cli_cases(model: Path | None) -> list[Case]:
    c: list[Case] = []

    def add(name: str, build) -> None:  # every value below is wrong: refused before any work
        c.append(Case("cli", name, build, expect=(3,) if name.startswith(("model-", "capture-")) else (2,)))

    def analyze(*extra: str) -> Callable[[Path], list[str]]:
        return lambda tmp: ["analyze", str(_copy(BASE, tmp)), "--no-store", *extra]

    for v in ("nan", "inf", "-1", "1e400", "abc"):
        add(f"min-gap-us-{v}", analyze("--min-gap-us", v))

    def sweep(*extra: str) -> Callable[[Path], list[str]]:
        def build(tmp: Path) -> list[str]:
            return ["sweep", str(model), "--no-store", "--out", str(tmp / "o"), "--duration", "0",
                    "--iterations", "2", "--warmup", "0", "--no-layers", *extra]
        return build

    for v in ("99999999999999999999T", "1e400G", "-1G", "nan", "12Q"):
        add(f"workspace-{v}", sweep("--workspace", v))
    for v in ("x:1x3x100000x100000", "x:0x8", "x:-1x8", "x:99999999999999999999x8", "x:1x8x"):
        add(f"shape-{v}", sweep("--shape", v))
    for v in ("100000", "0", "99999999999999999999"):
        add(f"streams-{v}", sweep("--streams", v))
    for v in ("-5", "nan", "1e30"):
        add(f"duration-{v}", lambda tmp, v=v: ["sweep", str(model), "--no-store", "--out", str(tmp / "o"),
                                               "--duration", v, "--iterations", "2", "--no-layers"])
    for v in ("-1", "99999999999999999999"):
        add(f"iterations-{v}", lambda tmp, v=v: ["sweep", str(model), "--no-store", "--out", str(tmp / "o"),
                                                 "--duration", "0", "--iterations", v, "--no-layers"])

    def fifo(tmp: Path) -> list[str]:
        p = tmp / "model.onnx"
        os.mkfifo(p)
        return ["sweep", str(p), "--no-store", "--out", str(tmp / "o")]
    add("model-fifo", fifo)
    add("model-directory", lambda tmp: ["sweep", str(tmp), "--no-store", "--out", str(tmp / "o")])
    add("model-dev-zero", lambda tmp: ["sweep", "/dev/zero", "--no-store", "--out", str(tmp / "o")])

    def capture_fifo(tmp: Path) -> list[str]:
        p = tmp / "cap.sqlite"
        os.mkfifo(p)
        return ["analyze", str(p), "--no-store"]
    add("capture-fifo", capture_fifo)
    add("capture-dev-zero", lambda tmp: ["analyze", "/dev/zero", "--no-store"])
    return c


# ------------------------------------------------------------------------------------------- store

def store_cases() -> list[Case]:
    c: list[Case] = []

    def flipped_store(seed: int) -> Callable[[Path], list[str]]:
        def build(tmp: Path) -> list[str]:
            import random

            from profiler.cli import main

            db = tmp / "s.db"
            try:
                main(["--db", str(db), "analyze", str(_copy(BASE, tmp)), "--label", "x"])
            except SystemExit:
                pass
            data = bytearray(db.read_bytes())
            rng = random.Random(seed)
            for _ in range(200):
                i = rng.randrange(100, len(data))
                data[i] = rng.randrange(256)
            db.write_bytes(bytes(data))
            return ["--db", str(db), "runs"] if seed % 2 == 0 else ["--db", str(db), "show", "1"]
        return build

    for seed in range(4):
        c.append(Case("store", f"flipped-store-{seed}", flipped_store(seed)))

    def not_a_db(tmp: Path) -> list[str]:
        (tmp / "s.db").write_bytes(b"hello" * 100)
        return ["--db", str(tmp / "s.db"), "runs"]
    c.append(Case("store", "not-a-database", not_a_db))

    def labels(label: str) -> Callable[[Path], list[str]]:
        return lambda tmp: ["--db", str(tmp / "s.db"), "analyze", str(_copy(BASE, tmp)), "--label", label]

    c.append(Case("store", "label-300-chars", labels("L" * 300)))
    c.append(Case("store", "label-escape", labels("nightly\x1b]0;pwned\x07\x1b[2J")))
    c.append(Case("store", "long-nvtx-names", lambda tmp: ["--db", str(tmp / "s.db")] + sql_case(
        f"UPDATE {NVTX} SET text = text || '{'n' * 500}' WHERE text IS NOT NULL")(tmp)[:2]))
    c.append(Case("store", "nul-in-names", lambda tmp: ["--db", str(tmp / "s.db")] + sql_case(
        f"UPDATE {NVTX} SET text = text || char(0) || 'x' WHERE text IS NOT NULL")(tmp)[:2]))
    c.append(Case("store", "long-gpu-name", lambda tmp: ["--db", str(tmp / "s.db")] + sql_case(
        f"UPDATE TARGET_INFO_GPU SET name = '{'G' * 300}'")(tmp)[:2]))

    def compare_unlike(tmp: Path) -> list[str]:
        """Two stored runs with nothing in common to compare (different captures, different ranges)."""
        from profiler.cli import main

        db = str(tmp / "s.db")
        for base, label in ((BASE, "a"), (NVTX_BASE, "b")):
            try:
                main(["--db", db, "analyze", str(base), "--label", label])
            except SystemExit:
                pass
        return ["--db", db, "compare", "a", "b", "--json", str(tmp / "out.json")]
    c.append(Case("store", "compare-unlike-runs", compare_unlike))
    return c


def all_cases(model: Path | None = None) -> list[Case]:
    from tests.fuzz.families import all_family_cases  # issue 33's generated families

    return capture_cases() + trtexec_cases() + cli_cases(model) + store_cases() + all_family_cases()


if __name__ == "__main__":  # write every case's files for manual runs
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "hostile-cases")
    for case in all_cases(Path("model.onnx")):
        d = out / case.id
        d.mkdir(parents=True, exist_ok=True)
        if case.needs is not None and not case.needs.exists():
            continue
        print(case.id, " ".join(case.build(d)))
