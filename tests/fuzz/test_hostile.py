"""Every hostile input of issue 13 through the real command line: a documented exit code (0-3), at most
one error sentence on stderr (no traceback, no 'internal error'), no raw control character on the
terminal, no hang, and no impossible number in the JSON that a successful run writes."""

from __future__ import annotations

import json
import math
import re
import signal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler.cli import main
from tests.fuzz.families import forged_lines
from tests.fuzz.hostile import Case, all_cases

CASE_SECONDS = 120
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from onnx import TensorProto, helper, save

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu0")], "tiny", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("model") / "tiny.onnx"
    save(m, str(path))
    return path


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    def alarm(signum, frame):
        raise TimeoutError(f"hung for {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(CASE_SECONDS)
    try:
        with pytest.raises(SystemExit) as exc:
            main(args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def impossible_numbers(data, path: str = "") -> list[str]:
    """Numbers no correct analysis produces: non-finite values, busy fractions outside [0, 1], negative
    durations, byte counts or counts, captures longer than a year."""
    bad: list[str] = []
    if isinstance(data, dict):
        for k, v in data.items():
            bad += impossible_numbers(v, f"{path}.{k}")
        return bad
    if isinstance(data, list):
        for i, v in enumerate(data):
            bad += impossible_numbers(v, f"{path}[{i}]")
        return bad
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        return bad
    key = path.rsplit(".", 1)[-1].split("[")[0]
    if isinstance(data, float) and not math.isfinite(data):
        bad.append(f"{path}={data}")
    elif "fraction" in key and not (0.0 <= data <= 1.0 + 1e-9):
        bad.append(f"{path}={data}")
    elif re.search(r"(_ms|_ns|_us|^count|bytes|^kernels|^launches)$", key) and data < 0 \
            and not re.search(r"delta|diff|change|start|end|offset|overhead", path):
        bad.append(f"{path}={data}")
    elif re.search(r"(duration|span|wall|length)_ms$", key) and data > 365 * 86400e3:
        bad.append(f"{path}={data}")
    return bad


def check(case: Case, code: int, out: str, err: str, tmp_path: Path) -> None:
    assert code in (case.expect or (0, 1, 2, 3)), f"exit {code}: {err[-2000:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("trtprof: error")]
    if code in (2, 3):
        assert len(errors) == 1, err[-2000:]
        assert errors[0].endswith((".", ")", "'", '"')) or len(errors[0]) < 400, errors[0]
    else:
        assert not errors, err
    for stream in (out, err):
        bad = CONTROL.findall(stream.replace("\r\n", "\n"))
        assert not bad, f"raw control characters {sorted(set(bad))!r} reach the terminal"
    forged = forged_lines(out, err)
    assert not forged, f"a line break in data starts a line of its own: {forged[:3]!r}"
    if case.after is not None:
        problems = case.after(tmp_path, out, err)
        assert not problems, problems
    js = tmp_path / "out.json"
    if code in (0, 1) and js.exists():
        text = js.read_text()
        data = json.loads(text)  # a complete file (the write is atomic)
        assert not impossible_numbers(data), impossible_numbers(data)[:10]
        if case.warns:  # damaged rows or text: the analysis names what it ignored or replaced
            assert data["capture"]["warnings"], "no warning for damaged input"


CASES = all_cases(Path("MODEL"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input(case: Case, tmp_path, capsys, tiny_model, monkeypatch) -> None:
    if case.needs is not None and not case.needs.exists():
        pytest.skip(f"fixture not found: {case.needs}")
    for key, value in case.env:
        monkeypatch.setenv(key, value)
    args = [tiny_model.as_posix() if a == "MODEL" else a for a in case.build(tmp_path)]
    code, out, err = _run(args, capsys)
    check(case, code, out, err, tmp_path)


@pytest.mark.slow
def test_twenty_thousand_nested_ranges_in_bounded_memory(tmp_path):
    """The capture that took 19.7 GB at 10,000 ranges and raised MemoryError at 20,000: every range
    holds every kernel, so (range, kernel) pairs are 20,000 x kernels; the analysis never forms them."""
    import tracemalloc

    from profiler.capture.analyze import AnalysisOptions, analyze_path
    from tests.fuzz.hostile import overlapping_ranges

    n_ranges, n_kernels = 20_000, 1_000
    path = overlapping_ranges(n_ranges, kernels=n_kernels)(tmp_path)[1]
    tracemalloc.start()
    try:
        # the whole capture (its nested ranges all look like setup to the steady-state cut)
        result = analyze_path(path, AnalysisOptions(include_setup=True)).to_json()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    pairs_bytes = n_ranges * n_kernels * 8  # one int64 per (range, kernel) pair: 160 MB
    assert peak < pairs_bytes / 2, f"peak {peak / 2**20:.0f} MiB"
    ranges = result["ranges"]
    assert sum(r["count"] for r in ranges) == n_ranges
    # the kernels cut away leave their launch calls without records: the capture reads incomplete, and the GPU
    # busy share of each range is unknown rather than computed from the kernels left
    assert [p["kind"] for p in result["integrity"]["problems"]][0] == "launches_without_records"
    for r in ranges:  # every range holds all kernels, so each instance launched all of them
        assert r["kernels_per_instance"] == n_kernels
        assert r["gpu_busy_fraction"] is None


names = st.text(min_size=1, max_size=60)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names, names)
def test_any_nvtx_and_kernel_name_analyses_cleanly(tmp_path, capsys, nvtx_name, kernel_name):
    """Whatever bytes name a range or a kernel (control characters, invalid UTF-8 from lone
    surrogates, NUL): exit 0, names shown escaped, the JSON complete."""
    import shutil
    import sqlite3

    from tests.fuzz.hostile import BASE

    d = tmp_path / f"c{abs(hash((nvtx_name, kernel_name)))}"
    d.mkdir(exist_ok=True)  # hypothesis replays an example while it shrinks a failure
    path = d / "cap.sqlite"
    shutil.copy(BASE, path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    raw = nvtx_name.encode("utf-8", "surrogatepass")
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(? AS TEXT) WHERE text IS NOT NULL", (raw,))
    con.execute("UPDATE StringIds SET value = CAST(? AS TEXT) WHERE id IN (SELECT shortName FROM "
                "CUPTI_ACTIVITY_KIND_KERNEL)", (kernel_name.encode("utf-8", "surrogatepass"),))
    con.commit()
    con.close()
    code, out, err = _run(["analyze", str(path), "--no-store", "--json", str(d / "out.json")], capsys)
    assert code == 0, err
    assert not CONTROL.findall(out.replace("\r\n", "\n")) and not CONTROL.findall(err)
    data = json.loads((d / "out.json").read_text())
    assert not impossible_numbers(data)
    assert data["ranges"] and all(isinstance(r["name"], str) for r in data["ranges"])


def test_a_range_named_by_a_carriage_return_cannot_redraw_the_range_table(tmp_path, capsys):
    """Hypothesis found it: the range table's lines begin with the range's name, and a carriage return that
    begins a write passes the terminal guard as a redrawn progress line."""
    import shutil
    import sqlite3

    from tests.fuzz.hostile import BASE

    path = tmp_path / "cap.sqlite"
    shutil.copy(BASE, path)
    path.chmod(0o644)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = CAST(? AS TEXT) WHERE text IS NOT NULL", (b"\r",))
    con.commit()
    con.close()
    code, out, err = _run(["analyze", str(path), "--no-store", "--no-cache"], capsys)
    assert code == 0, err
    assert "\r" not in out.replace("\r\n", "\n")
    assert any(line.startswith("\\r ") for line in out.splitlines())  # the range table row, escaped
