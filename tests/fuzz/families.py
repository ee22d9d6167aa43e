"""Issue 33's families of hostile input, generated from what each command reads and writes, so that a new
option, output, rule threshold or metadata field is fuzzed without a new line here:

- ``clobber``: every output option of every command aimed at every file the command reads (its inputs, the run
  store, its other outputs), reached by every kind of second name (the same path, a path with ``.``/``..``, a hard
  link, a symlink): refused (exit 2) with every input byte-identical afterwards.
- ``write-target``: outputs that are not plain new files (a character device, a full disk, symlinks): devices
  stay devices, links stay links and their targets get the document, a full disk is exit 3.
- ``value``: each numeric option and each declared threshold given values that cannot be right (non-finite,
  out of its range, not a number, past the integers a database holds), and names of outputs that do not exist.
- ``trtexec-shape``: every field of trtexec's metadata documents replaced by a value of another JSON type, and
  every number of a trtexec log replaced by a token that is not one (seeded samples of each product).
- ``forgery``: line breaks inside data the terminal shows (NVTX and kernel names, GPU names, stored labels, file
  names in errors): no output line may begin with the text that follows the break.
- ``onnx`` (:mod:`tests.fuzz.onnx_family`): models built with ``onnx.helper`` carrying each kind of defect
  (huge declared shapes, no outputs, run-time allocations of terabytes, nodes failing at run time under
  escaped names, never-ending Loops) around a sample of ops and sizes: one sentence, exit 3.
- ``path-kind``: every file option of every command given a directory, a missing path and a FIFO: an output
  path that is a directory where a file is written (or a FIFO where a folder is) is a usage error (exit 2), an
  input path of the wrong kind is bad input (exit 3), both in one sentence naming the path; a FIFO output is
  written in place, a missing output created, and no read of a FIFO hangs.

Every sample is drawn with ``random.Random(<the case's own name>)``: the corpus is the same on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import stat
from pathlib import Path
from typing import Callable

from tests.fuzz.hostile import BASE, NVTX, TRTEXEC_BASE, Case, _copy, _trtexec_copy

FORGED = "FORGED"  # the text after a line break in data; no output line may start with it
NOT_NUMBERS = ("nan", "inf", "-inf", "NaN", "1e400", "-1e400", "", "abc", "1e", "-", ".", "0x10", "1,5")
HUGE_INTEGERS = (str(2**63), str(10**30), "9" * 40)


# ------------------------------------------------------------------------------------ protected files

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"


def _protect(tmp: Path, paths: list[Path]) -> None:
    """Record the bytes of ``paths`` (files and every file under folders) for :func:`unchanged`."""
    files = [q for p in paths for q in ([p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()))]
    (tmp / "protected.json").write_text(json.dumps({str(p): _digest(p) for p in files}))


def unchanged(tmp: Path, out: str, err: str) -> list[str]:
    """Problems: protected files whose bytes changed, or that are gone."""
    record = json.loads((tmp / "protected.json").read_text())
    return [f"{p} was overwritten" for p, d in record.items() if _digest(Path(p)) != d]


# ---------------------------------------------------------------------------------------- clobbering

#: ways to give a second name to a file: (name, needs the file to exist, make(tmp, target) -> path string)
ALIASES: list[tuple[str, bool, Callable[[Path, Path], str]]] = [
    ("same-path", False, lambda tmp, t: str(t)),
    ("dot-dot", False, lambda tmp, t: str(t.parent / "." / ".." / t.parent.name / t.name)),
    ("relative", False, lambda tmp, t: os.path.relpath(t)),
    ("hard-link", True, lambda tmp, t: _linked(os.link, tmp, t, "hl")),
    ("symlink", False, lambda tmp, t: _linked(os.symlink, tmp, t, "sl")),
]


def _linked(make: Callable[[str, str], None], tmp: Path, target: Path, kind: str) -> str:
    link = tmp / "aliases" / f"{kind}-{target.name}"
    link.parent.mkdir(exist_ok=True)
    make(str(target), str(link))
    return str(link)


class Command:
    """One command's inputs and outputs: ``setup(tmp)`` makes its inputs and returns (the arguments before the
    outputs, {role: input path}); ``outputs`` are (option, default file name) of its outputs."""

    def __init__(self, name: str, setup: Callable[[Path], tuple[list[str], dict[str, Path]]],
                 outputs: list[tuple[str, str]]):
        self.name, self.setup, self.outputs = name, setup, outputs


def _store(tmp: Path) -> Path:
    db = tmp / "s.db"
    db.touch()  # an empty file is an empty SQLite database: the check runs before the store is opened
    return db


def _analyze_setup(tmp: Path) -> tuple[list[str], dict[str, Path]]:
    cap, layers, db = _copy(BASE, tmp), tmp / "layers.json", _store(tmp)
    layers.write_text("[]")
    return ["analyze", str(cap), "--layer-info", str(layers), "--db", str(db)], {
        "capture": cap, "layer-info": layers, "store": db}


def _import_setup(tmp: Path) -> tuple[list[str], dict[str, Path]]:
    d, prefix = _trtexec_copy(tmp)
    db = _store(tmp)
    return ["import", str(d), "--db", str(db)], {"export-file": d / f"{prefix}.profile.json", "store": db}


def _store_only(*head: str) -> Callable[[Path], tuple[list[str], dict[str, Path]]]:
    def setup(tmp: Path) -> tuple[list[str], dict[str, Path]]:
        db = _store(tmp)
        return [*head, "--db", str(db)], {"store": db}
    return setup


def _report_saved(tmp: Path) -> tuple[list[str], dict[str, Path]]:
    saved = tmp / "saved.json"
    saved.write_text("{}")
    return ["report", str(saved)], {"saved-json": saved}


def _compare_files(tmp: Path) -> tuple[list[str], dict[str, Path]]:
    a, b = tmp / "a.json", tmp / "b.json"
    a.write_text("{}")
    b.write_text("{}")
    return ["compare", str(a), str(b)], {"baseline": a, "candidate": b}


COMMANDS = [
    Command("analyze", _analyze_setup, [("--json", "o.json"), ("--report", "o.html"), ("--trace", "o.trace.json")]),
    Command("import", _import_setup, [("--json", "o.json"), ("--report", "o.html")]),
    Command("compare", _store_only("compare", "1", "2"), [("--json", "o.json"), ("--report", "o.html")]),
    Command("compare-files", _compare_files, [("--json", "o.json"), ("--report", "o.html")]),
    Command("report-run", _store_only("report", "1"), [("-o", "o.html")]),
    Command("report-json", _report_saved, [("-o", "o.html")]),
]


def _clobber(cmd: Command, option: str, target: str, alias: Callable[[Path, Path], str]
             ) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        args, inputs = cmd.setup(tmp)
        outs = {opt: tmp / name for opt, name in cmd.outputs}
        aimed = inputs.get(target) or outs[target]
        _protect(tmp, list(inputs.values()))
        given = {opt: (alias(tmp, aimed) if opt == option else str(path)) for opt, path in outs.items()}
        if target in outs:  # two outputs on one file: only those two are given
            given = {k: v for k, v in given.items() if k in (option, target)}
        return args + [x for opt, path in given.items() for x in (opt, path)]
    return build


def clobber_cases() -> list[Case]:
    c: list[Case] = []
    for cmd in COMMANDS:
        for option, _ in cmd.outputs:
            targets = _roles(cmd) + [o for o, _ in cmd.outputs if o != option]
            for target in targets:
                for alias_name, needs_file, alias in ALIASES:
                    if needs_file and target.startswith("-"):
                        continue  # another output does not exist yet: it has no inode to link
                    needs = TRTEXEC_BASE if cmd.name == "import" else None
                    c.append(Case("clobber", f"{cmd.name}{option}-onto-{target.lstrip('-')}-{alias_name}",
                                  _clobber(cmd, option, target, alias), needs, expect=(2,), after=unchanged))
    return c


def _roles(cmd: Command) -> list[str]:
    """The input roles of ``cmd`` (its setup run once in a scratch folder)."""
    import tempfile

    if cmd.name == "import" and not TRTEXEC_BASE.exists():
        return ["export-file", "store"]
    with tempfile.TemporaryDirectory() as d:
        return list(cmd.setup(Path(d))[1])


# ------------------------------------------------------------------------------------- write targets

def _is_char_device(path: str) -> Callable[[Path, str, str], list[str]]:
    def after(tmp: Path, out: str, err: str) -> list[str]:
        return [] if stat.S_ISCHR(os.stat(path).st_mode) else [f"{path} is no longer a character device"]
    return after


def _link_kept(tmp: Path, out: str, err: str) -> list[str]:
    link = tmp / "link.out"
    problems = [] if link.is_symlink() else ["the symlink was replaced by a file"]
    target = tmp / "target.out"
    if not target.is_file() or not target.stat().st_size:
        problems.append("the symlink's target did not get the document")
    return problems


def _write_target(option: str, kind: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        cap = _copy(BASE, tmp)
        if kind in ("symlink", "dangling-symlink"):
            if kind == "symlink":
                (tmp / "target.out").write_text("old")
            os.symlink(tmp / "target.out", tmp / "link.out")
            path = str(tmp / "link.out")
        else:
            path = {"dev-null": "/dev/null", "dev-full": "/dev/full",
                    "symlink-to-dev-null": _linked(os.symlink, tmp, Path("/dev/null"), "sl")}[kind]
        return ["analyze", str(cap), "--no-store", option, path]
    return build


def write_target_cases() -> list[Case]:
    c: list[Case] = []
    for option in ("--json", "--trace", "--report"):
        for kind in ("dev-null", "dev-full", "symlink", "dangling-symlink", "symlink-to-dev-null"):
            if option == "--report" and kind != "dev-full":
                continue  # the report renders for seconds; its write is the same helper
            after = _is_char_device("/dev/full" if kind == "dev-full" else "/dev/null") \
                if kind.startswith(("dev", "symlink-to")) else _link_kept
            c.append(Case("write-target", f"{option.lstrip('-')}-{kind}", _write_target(option, kind),
                          expect=(3,) if kind == "dev-full" else (0,), after=after))
    return c


# ----------------------------------------------------------------------------------------------- values

def _bad_values(name: str, lo: float | None, hi: float | None, count: int = 4) -> list[str]:
    """Values that cannot be right for a number in [lo, hi]: a seeded sample of the non-numbers and
    non-finite ones, and every value just outside the range."""
    rng = random.Random(name)
    picked = rng.sample(NOT_NUMBERS, count)
    if lo is not None:
        picked.append(f"{lo - max(1.0, abs(lo)):g}")
    if hi is not None and hi != float("inf"):  # past a bounded range: just past it, and far past it
        picked += [f"{hi + max(1.0, abs(hi)):g}", rng.choice(HUGE_INTEGERS)]
    return list(dict.fromkeys(picked))


def _sweep(*extra: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        return ["sweep", "MODEL", "--no-store", "--out", str(tmp / "o"), "--duration", "0", "--iterations", "2",
                "--warmup", "0", "--no-layers", *extra]
    return build


SHARES = ("cosine", "top1_agreement", "exact_match", "elementwise_fail_frac")  # at most 1 (cosine from -1)


def _limit_range(key: str) -> tuple[float, float]:
    metric = key[:-4] if key.endswith(("_min", "_max")) else key
    return (-1.0 if metric == "cosine" else 0.0), (1.0 if metric in SHARES else float("inf"))


def value_cases() -> list[Case]:
    from profiler.accuracy import DEFAULT_THRESHOLDS, TOLERANCE_KEYS
    from profiler.rules import registry

    c: list[Case] = []

    def add(name: str, build: Callable[[Path], list[str]], expect: tuple[int, ...] = (2,)) -> None:
        c.append(Case("value", name, build, expect=expect))

    for precision, limits in DEFAULT_THRESHOLDS.items():
        for key in limits:
            lo, hi = _limit_range(key)
            for v in _bad_values(f"{precision}.{key}", lo, hi):
                add(f"threshold-{precision}.{key}={v}", _sweep("--threshold", f"{precision}.{key}={v}"))
    for spec in registry("sweep"):
        for key in spec.defaults:
            for v in _bad_values(f"{spec.id}.{key}", 0.0, float("inf")):
                add(f"threshold-{spec.id}.{key}={v}", _sweep("--threshold", f"{spec.id}.{key}={v}"))
    for key in TOLERANCE_KEYS:
        for v in _bad_values(f"tolerance.{key}", 0.0, float("inf")):
            add(f"output-tolerance-{key}={v}", _sweep("--output-tolerance", f"y:{key}={v}"))
    for wrong in ("nosuch", "Y", "y ", " y", "y\x00", "yy"):  # the model's one output is 'y'
        add(f"output-kind-name-{wrong!r}", _sweep("--output-kind", f"{wrong}:classes"))
        add(f"output-tolerance-name-{wrong!r}", _sweep("--output-tolerance", f"{wrong}:atol=0.1"))
    for v in ("1", "-1", "1.5", "1e3", "nan", *HUGE_INTEGERS, "1000000000000"):
        add(f"repeat-{v}", _sweep("--repeat", v))
    for option, lo, hi in (("--alpha", 0.0, 1.0), ("--threshold-pct", 0.0, None), ("--floor-us", 0.0, None)):
        for v in _bad_values(option, lo, hi if hi is not None else float("inf")) + (["0", "1"] if hi else []):
            add(f"compare{option}={v}", lambda tmp, o=option, v=v: ["compare", "1", "2", "--db", str(_store(tmp)),
                                                                     o, v])
    for v in ("0", "-1", "1.5", "nan", *HUGE_INTEGERS):
        add(f"runs-limit-{v}", lambda tmp, v=v: ["runs", "--db", str(_store(tmp)), "--limit", v])
    for v in (*HUGE_INTEGERS, "1e20", "-1", "0", "²", "٣"):  # a lookup that finds nothing: exit 3
        add(f"show-{v}", lambda tmp, v=v: ["show", v, "--db", str(_real_store(tmp))], expect=(2, 3))
    for url in ("://x", "://", ":/x", "x://"):
        add(f"db-url-{url}", lambda tmp, u=url: ["runs", "--db", u], expect=(2, 3))
    return c


def _real_store(tmp: Path) -> Path:
    from profiler.store import Store

    db = tmp / "s.db"
    Store.open(str(db)).close()
    return db


# ----------------------------------------------------------------------------------------- trtexec shapes

WRONG_TYPES: list[tuple[str, object]] = [
    ("list", [1.5, "x"]), ("object", {"a": 1}), ("string", "fast"), ("integer", 7), ("null", None),
    ("bool", True), ("negative", -5.0), ("1e308", 1e308), ("empty-string", ""), ("huge-int", "HUGE_INT"),
]
HUGE_INT_TEXT = "9" * 5000  # past Python's 4300-digit conversion limit


def _json_paths(doc: object, depth: int = 2, prefix: tuple = ()) -> list[tuple]:
    """Every key path into ``doc`` to ``depth`` levels (objects by key, lists by index 0)."""
    out: list[tuple] = []
    if depth == 0:
        return out
    items = doc.items() if isinstance(doc, dict) else ([(0, doc[0])] if isinstance(doc, list) and doc else [])
    for k, v in items:
        out.append(prefix + (k,))
        out += _json_paths(v, depth - 1, prefix + (k,))
    return out


def _replace_at(suffix: str, path: tuple, value: object) -> Callable[[Path, str], None]:
    def edit(d: Path, prefix: str) -> None:
        p = d / f"{prefix}{suffix}"
        doc = json.loads(p.read_text())
        node = doc
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        p.write_text(json.dumps(doc).replace('"HUGE_INT"', HUGE_INT_TEXT))
    return edit


def _import_with(edit: Callable[[Path, str], None]) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        d, prefix = _trtexec_copy(tmp)
        edit(d, prefix)
        return ["import", str(d), "--no-store", "--json", str(tmp / "out.json")]
    return build


def trtexec_shape_cases(per_file: int = 16) -> list[Case]:
    c: list[Case] = []
    if not TRTEXEC_BASE.exists():
        return [Case("trtexec-shape", "fixture-missing", lambda tmp: [], TRTEXEC_BASE)]
    for suffix in (".profile.metadata.json", ".build.metadata.json", ".metadata.json"):
        src = next(TRTEXEC_BASE.glob(f"*{suffix}"), None)
        if src is None or (suffix == ".metadata.json" and src.name.endswith((".profile.metadata.json",
                                                                               ".build.metadata.json"))):
            src = next((p for p in TRTEXEC_BASE.glob("*.metadata.json")
                        if not p.name.endswith((".profile.metadata.json", ".build.metadata.json"))), None)
        if src is None:
            continue
        products = [(path, t) for path in _json_paths(json.loads(src.read_text())) for t in WRONG_TYPES]
        for path, (tname, value) in random.Random(suffix).sample(products, min(per_file, len(products))):
            shown = ".".join(map(str, path))
            c.append(Case("trtexec-shape", f"{suffix.strip('.')}:{shown}={tname}",
                          _import_with(_replace_at(suffix, path, value)), TRTEXEC_BASE, after=_stats_possible))
    c += trtexec_log_cases()
    return c


LOG = ("&&&& RUNNING TensorRT.trtexec [TensorRT v8401] # trtexec --onnx=m.onnx\n"
       "[06/01/2022-10:00:00] [I] TensorRT version: 8.4.1\n"
       "[06/01/2022-10:00:00] [I] Duration: 3s (+ 200ms warm up)\n"
       "[06/01/2022-10:00:01] [I] Warmup completed 12 queries over 200 ms\n"
       "[06/01/2022-10:00:05] [I] === Performance summary ===\n"
       "[06/01/2022-10:00:05] [I] Throughput: 512.5 qps\n"
       "[06/01/2022-10:00:05] [I] Latency: min = 1.6 ms, max = 2.6 ms, mean = 2.0 ms, median = 2.0 ms, "
       "percentile(90%) = 2.2 ms, percentile(95%) = 2.3 ms, percentile(99%) = 2.5 ms\n"
       "[06/01/2022-10:00:05] [I] GPU Compute Time: min = 1.5 ms, max = 2.5 ms, mean = 1.9 ms, "
       "median = 1.9 ms, percentile(90%) = 2.1 ms, percentile(95%) = 2.2 ms, percentile(99%) = 2.4 ms\n"
       "[06/01/2022-10:00:05] [I] Total Host Walltime: 3.00 s\n"
       "[06/01/2022-10:00:05] [I] GPU Compute Time: coefficient of variance = 1.5%\n")
BAD_TOKENS = ("-", "e", ".", "", "-5", "1e400", "nan", "..", "+", HUGE_INT_TEXT[:4400], "1.2.3")


def _log_case(text: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        d = tmp / "logs"
        d.mkdir()
        (d / "engine.log").write_text(text)
        return ["import", str(d), "--no-store", "--json", str(tmp / "out.json")]
    return build


def trtexec_log_cases(count: int = 16) -> list[Case]:
    import re

    numbers = [m for m in re.finditer(r"(?<![\w\[/:-])\d+(?:\.\d+)?", LOG)]
    products = [(m, tok) for m in numbers for tok in BAD_TOKENS]
    c = []
    for m, tok in random.Random("trtexec-log").sample(products, min(count, len(products))):
        text = LOG[:m.start()] + tok + LOG[m.end():]
        c.append(Case("trtexec-shape", f"log@{m.start()}:{m.group()}->{tok[:12]!r}", _log_case(text),
                      after=_stats_possible))
    swapped = LOG.replace("min = 1.5 ms, max = 2.5 ms", "min = 2.5 ms, max = 1.5 ms")
    negative = LOG.replace("min = 1.5 ms", "min = -5.0 ms")
    for name, text in (("min-above-max", swapped), ("negative-min", negative),
                       ("version-empty", LOG.replace("[TensorRT v8401]", "[TensorRT v]").replace("8.4.1", "")),
                       ("version-short", LOG.replace("v8401", "v1").replace("TensorRT version: 8.4.1\n", ""))):
        c.append(Case("trtexec-shape", f"log-{name}", _log_case(text), after=_stats_possible))
    return c


def _stats_possible(tmp: Path, out: str, err: str) -> list[str]:
    """An import that succeeded holds no statistics that cannot be: min above max, or negative times."""
    js = tmp / "out.json"
    if not js.exists():
        return []
    bad = []
    for v in json.loads(js.read_text()).get("variants") or []:
        for key in ("latency_ms", "gpu_compute_ms", "enqueue_ms", "h2d_ms", "d2h_ms"):
            s = v.get(key) or {}
            if not isinstance(s, dict):
                continue
            nums = {k: x for k, x in s.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}
            if any(x < 0 for k, x in nums.items() if k != "count"):
                bad.append(f"{key} has a negative statistic: {nums}")
            if "min" in nums and "max" in nums and nums["min"] > nums["max"]:
                bad.append(f"{key} min above max: {nums}")
    return bad


# ------------------------------------------------------------------------------------------ extremes

EXTREMES = {"2^62": 2**62, "-2^62": -(2**62), "int64-max": 2**63 - 1, "2^53+1": 2**53 + 1, "-1": -1}


def _columns(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    finally:
        con.close()


def extreme_cases(count: int = 12) -> list[Case]:
    """Integer columns the loader reads (every required one, and the copies' byte counts) set to values no
    capture holds on a few rows, and small tables with a repeated row that disagrees with the first: a
    seeded sample of the product. The analysis must exit cleanly and its JSON hold no impossible number."""
    from profiler.capture.validate import REQUIRED

    from tests.fuzz.hostile import sql_case

    have = _columns(BASE)
    pairs = [(t, col) for t, cols in REQUIRED.items() if t in have and t != "StringIds" for col in cols
             if col in have[t]]
    products = [(t, col, name) for t, col in pairs for name in EXTREMES]
    c = []
    for t, col, name in random.Random("extremes").sample(products, min(count, len(products))):
        c.append(Case("extreme", f"{t}.{col}={name}", sql_case(
            f'UPDATE "{t}" SET "{col}" = {EXTREMES[name]} WHERE rowid IN (SELECT rowid FROM "{t}" LIMIT 3)')))
    for t in ("TARGET_INFO_GPU", "PROCESSES", "META_DATA_EXPORT", "ANALYSIS_DETAILS"):
        if t in have:
            text_col = next((col for col in ("name", "value") if col in have[t]), None)
            edit = (f'UPDATE "{t}" SET "{text_col}" = \'other\' WHERE rowid = (SELECT max(rowid) FROM "{t}")'
                    if text_col else "SELECT 1")
            c.append(Case("extreme", f"{t}-repeated-row-disagrees", sql_case(
                f'INSERT INTO "{t}" SELECT * FROM "{t}"', edit)))
    return c


VIEWS = {
    "plain": 'SELECT * FROM "{old}"',
    "cross-join": 'SELECT a.* FROM "{old}" a, "{old}" b, "{old}" c',
    "recursive": ('WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) '
                  'SELECT o.* FROM r, (SELECT * FROM "{old}" LIMIT 1) o'),
}


def view_cases(count: int = 6) -> list[Case]:
    """A table the loader reads replaced by a view (a plain one, one that expands, one that never ends):
    refused in one sentence (exit 3), never read until memory or patience runs out."""
    from profiler.capture.validate import REQUIRED

    from tests.fuzz.hostile import sql_case

    have = _columns(BASE)
    products = [(t, kind) for t in REQUIRED if t in have for kind in VIEWS]
    c = []
    for t, kind in random.Random("views").sample(products, min(count, len(products))):
        old = f"{t}_old"
        c.append(Case("view", f"{t}-{kind}", sql_case(f'ALTER TABLE "{t}" RENAME TO "{old}"',
                                                      f'CREATE VIEW "{t}" AS {VIEWS[kind].format(old=old)}'),
                      expect=(3,)))
    return c


# ------------------------------------------------------------------------------------------- forgery

BREAKS = {"lf": "\n", "cr": "\r", "crlf": "\r\n", "vt": "\v", "ff": "\f", "nel": "\x85", "ls": "\u2028"}


def forged_lines(out: str, err: str) -> list[str]:
    """Output lines (by any break a terminal obeys) that begin with the forged text."""
    import re

    return [line for stream in (out, err) for line in re.split(r"\r\n|[\n\r\v\f\x85\u2028\u2029]", stream)
            if line.lstrip().startswith(FORGED)]


def _forgery(place: str, brk: str) -> Callable[[Path], list[str]]:
    text = f"name{brk}{FORGED} row"

    def build(tmp: Path) -> list[str]:
        if place == "missing-file":
            return ["analyze", str(tmp / f"cap{brk}{FORGED}.sqlite"), "--no-store"]
        if place == "import-dir":
            d = tmp / f"exports{brk}{FORGED}"
            d.mkdir()
            return ["import", str(d), "--no-store"]
        cap = _copy(BASE, tmp)
        con = sqlite3.connect(cap)
        if place == "nvtx":
            con.execute(f"UPDATE {NVTX} SET text = ? WHERE text IS NOT NULL", (text,))
        elif place == "gpu":
            con.execute("UPDATE TARGET_INFO_GPU SET name = ?", (text,))
        elif place == "kernel":
            con.execute("UPDATE StringIds SET value = ? || value WHERE id IN (SELECT shortName FROM "
                        "CUPTI_ACTIVITY_KIND_KERNEL)", (text,))
        con.commit()
        con.close()
        if place.startswith("label"):
            from profiler.cli import main

            db = str(tmp / "s.db")
            try:
                main(["--db", db, "analyze", str(cap), "--label", text])
            except SystemExit:
                pass
            return ["--db", db, "runs"] if place == "label-runs" else ["--db", db, "show", "1"]
        return ["analyze", str(cap), "--no-store", "--no-cache"]
    return build


def forgery_cases(per_place: int = 3) -> list[Case]:
    c: list[Case] = []
    for place in ("nvtx", "gpu", "kernel", "label-runs", "label-show", "missing-file", "import-dir"):
        names = ["lf"] + random.Random(place).sample([b for b in BREAKS if b != "lf"], per_place - 1)
        for b in names:
            c.append(Case("forgery", f"{place}-{b}", _forgery(place, BREAKS[b])))
    return c


# ----------------------------------------------------------------------------------------------- path kinds

PATH_KINDS = ("directory", "missing", "fifo")


def _analysis_json(tmp: Path, name: str) -> Path:
    """An analysis document of the base capture (a saved ``analyze --json``) for compare and report."""
    from profiler.cli import main

    out = tmp / name
    try:
        main(["analyze", str(_copy(BASE, tmp)), "--no-store", "--json", str(out)])
    except SystemExit:
        pass
    return out


def _sweep_head(tmp: Path) -> list[str]:
    return ["sweep", "MODEL", "--no-store", "--duration", "0", "--iterations", "2", "--warmup", "0",
            "--no-layers", "--precision", "fp32", "--no-localize"]


def _with_out(head: list[str], option: str, tmp: Path, path: str) -> list[str]:
    return head + ([] if option == "--out" else ["--out", str(tmp / "o")]) + [option, path]


#: (command, option or argument, role, make(tmp, path) -> command line, whether the command can succeed here).
#: Roles: ``out`` a file written, ``out-dir`` a folder written, ``in`` a file read, ``in-or-dir`` a file or a
#: folder read (a folder is then checked for what it holds, not here), ``store`` the run store (read, then
#: written; a missing one is created).
PATH_OPTIONS: list[tuple[str, str, str, Callable[[Path, str], list[str]], bool]] = [
    ("analyze", "CAPTURE", "in", lambda t, p: ["analyze", p, "--no-store"], True),
    *[("analyze", o, "out", lambda t, p, o=o: ["analyze", str(_copy(BASE, t)), "--no-store", o, p], True)
      for o in ("--json", "--report", "--trace")],
    ("analyze", "--layer-info", "in", lambda t, p: ["analyze", str(_copy(BASE, t)), "--no-store", "--layer-info", p],
     True),
    ("analyze", "--db", "store", lambda t, p: ["--db", p, "analyze", str(_copy(BASE, t))], True),
    ("import", "PATH", "in-or-dir", lambda t, p: ["import", p, "--no-store"], True),
    *[("import", o, "out", lambda t, p, o=o: ["import", str(_trtexec_copy(t)[0]), "--no-store", o, p], True)
      for o in ("--json", "--report")],
    ("compare", "BASELINE", "in", lambda t, p: ["compare", p, str(_analysis_json(t, "b.json"))], True),
    ("compare", "--json", "out", lambda t, p: ["compare", str(_analysis_json(t, "a.json")),
                                               str(_analysis_json(t, "b.json")), "--json", p], True),
    ("report", "SAVED-JSON", "in", lambda t, p: ["report", p], True),
    ("report", "-o", "out", lambda t, p: ["report", str(_analysis_json(t, "a.json")), "-o", p], True),
    ("history", "--json", "out", lambda t, p: ["history", "--db", str(_real_store(t)), "--json", p], False),
    ("history", "--out", "out-dir", lambda t, p: ["history", "--db", str(_real_store(t)), "--out", p], False),
    ("runs", "--db", "store", lambda t, p: ["--db", p, "runs"], True),
    ("sweep", "MODEL", "in", lambda t, p: ["sweep", p, "--no-store", "--out", str(t / "o")], True),
    *[("sweep", o, "out-dir", lambda t, p, o=o: _with_out(_sweep_head(t), o, t, p), True)
      for o in ("--out", "--cache-dir")],
    *[("sweep", o, "in-or-dir", lambda t, p, o=o: _with_out(_sweep_head(t), o, t, p), True)
      for o in ("--calib", "--inputs")],
]


def path_kind_expected(role: str, kind: str) -> int | None:
    """The exit code the rule gives ``role`` handed ``kind`` (None: not a case of this family)."""
    if role == "in-or-dir" and kind == "directory":
        return None  # an accepted kind of input: what the folder holds is checked elsewhere
    if role in ("in", "in-or-dir"):
        return 3
    if role == "store":
        return 0 if kind == "missing" else 3
    wrong = "directory" if role == "out" else "fifo"
    return 2 if kind == wrong else 0


_READERS: dict[str, object] = {}  # FIFO path -> the thread reading it


def _drain(fifo: Path, into: Path) -> None:
    """A reader for a FIFO output (as a shell pipeline would be): what it reads goes to ``into``."""
    import threading

    def read() -> None:
        with open(fifo, "rb") as fh:
            into.write_bytes(fh.read())
    _READERS[str(fifo)] = reader = threading.Thread(target=read, daemon=True)
    reader.start()


def _drained(fifo: Path, into: Path) -> list[str]:
    """Problems of a FIFO output: it was replaced, or its reader got nothing (the reader is let go then)."""
    reader = _READERS.pop(str(fifo))
    if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
        return [f"{fifo} is no longer a FIFO"]  # its reader waits on the old one, a daemon thread
    reader.join(timeout=0 if into.exists() else 1)  # type: ignore[attr-defined]
    if reader.is_alive():  # type: ignore[attr-defined]
        with open(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK), "wb"):  # EOF for a reader still waiting
            pass
        reader.join()  # type: ignore[attr-defined]
    problems = []
    if not into.exists() or not into.stat().st_size:
        problems.append("nothing was written into the FIFO")
    return problems


def _path_kind_build(make: Callable[[Path, str], list[str]], name: str, kind: str, role: str
                     ) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        path = tmp / "given" / name
        path.parent.mkdir()
        if kind == "directory":
            path.mkdir()
        elif kind == "fifo":
            os.mkfifo(path)
            if role == "out":
                _drain(path, tmp / "drained")
        return make(tmp, str(path))
    return build


def _path_kind_after(name: str, kind: str, role: str, code: int) -> Callable[[Path, str, str], list[str]]:
    def after(tmp: Path, out: str, err: str) -> list[str]:
        path = tmp / "given" / name
        if role == "out" and kind == "fifo":
            return _drained(path, tmp / "drained")
        if code and str(path) not in err:
            return [f"the error does not name {path}"]
        if role == "out" and kind == "missing" and not path.is_file():
            return [f"{path} was not written"]
        return []
    return after


def path_kind_cases() -> list[Case]:
    c: list[Case] = []
    for command, option, role, make, succeeds in PATH_OPTIONS:
        for kind in PATH_KINDS:
            code = path_kind_expected(role, kind)
            if code is None or (code == 0 and not succeeds):
                continue  # the setup cannot succeed (history needs measured runs): only the refusals are cases
            name = "x.json" if option in ("--json", "--layer-info", "BASELINE", "SAVED-JSON") else "x"
            needs = TRTEXEC_BASE if command == "import" and role == "out" else None
            c.append(Case("path-kind", f"{command}-{option.lstrip('-')}-{kind}",
                          _path_kind_build(make, name, kind, role), needs, expect=(code,),
                          after=_path_kind_after(name, kind, role, code)))
    return c


def all_family_cases() -> list[Case]:
    from tests.fuzz.columnar import columnar_cases
    from tests.fuzz.onnx_family import onnx_cases

    return (clobber_cases() + write_target_cases() + value_cases() + trtexec_shape_cases() + extreme_cases()
            + view_cases() + forgery_cases() + columnar_cases() + onnx_cases() + path_kind_cases())
