"""The capture model's declared heuristics: the set is complete and documented, reported in the analysis JSON,
overridden for one analysis (and restored), and a bad override is one sentence with exit 2."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest

from profiler.capture import heuristics as H
from profiler.errors import UsageError

CAPTURE = Path(H.__file__).resolve().parent

NOT_HEURISTICS = {
    # sizes of blocks, chunks and caches, memory tuning and table lengths: how the work is done, not what is said
    "blockwise.DISTINCT_BLOCK_ROWS", "cache.WRITE_CHUNK_ROWS", "heap.ANALYSIS_MMAP_THRESHOLD_BYTES",
    "heap.READ_MMAP_THRESHOLD_BYTES", "instance_metrics.NESTED_RATIO", "integrity.DIAGNOSTICS_MAX_ROWS",
    "keys.ROW_CHUNK", "races.MAX_EXAMPLES", "series.HELPER_LAUNCH_RANGES", "spill.DEFAULT_SPILL_ROWS",
    "spill.MIN_SPILL_BYTES", "spill.RESIDENT_BUDGET_BYTES", "summary.GAP_BLOCK_ROWS",
    "series.WINDOW_TID",  # a marker value (the thread id of the whole-capture window), no judgement
    "export.TABLE_THREADS_DEFAULT", "generation.KERNEL_GROUP_MAX_KERNELS",  # how the work is done, its bound
    "clocks.HZ_ABOVE",  # how nsys's clock samples are read (Hz above it, MHz below): a unit, not a judgement
    "races.ITEM_DEPTH",  # which nesting level of a thread's ranges is its item: a structure, not a number to tune
}


def _documented_numbers(path: Path) -> list[str]:
    """Public upper-case module constants of ``path`` holding a number, with a docstring."""
    body = ast.parse(path.read_text()).body
    out = []
    for a, b in zip(body, body[1:]):
        if not (isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)):
            continue
        name = a.targets[0].id
        if not name.isupper() or name.startswith("_"):
            continue
        if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
            try:
                value = ast.literal_eval(a.value) if isinstance(a.value, ast.Constant) else eval(
                    compile(ast.Expression(a.value), str(path), "eval"), {})
            except Exception:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(f"{path.stem}.{name}")
    return out


def test_every_documented_number_of_the_capture_model_is_declared_or_known_not_to_be_one():
    found = {n for p in sorted(CAPTURE.glob("*.py")) for n in _documented_numbers(p)}
    declared = {f"{h.module}.{h.name}" for h in H.HEURISTICS}
    assert found - declared - NOT_HEURISTICS == set()
    assert declared - found == set()  # each declared one is a documented number of its module
    assert len(declared) == len(H.HEURISTICS) == 56


def test_each_declared_heuristic_has_its_value_in_its_units_range_and_a_docstring():
    for h in H.HEURISTICS:
        lo, hi, whole = H.UNITS[h.unit]
        assert lo <= h.value <= hi, h
        assert isinstance(h.value, int) if whole else isinstance(h.value, (int, float)), h
        assert len(h.doc) > 20, h
    rows = {r["name"]: r for r in H.table()}
    assert rows["WARMUP_RATIO"]["module"] == "profiler.capture.unit" and rows["WARMUP_RATIO"]["value"] == 1.5
    assert rows["POLL_GAP_NS"]["unit"] == "ns" and rows["POLL_GAP_NS"]["range"] == [0, 10**12]


def test_values_group_the_heuristics_by_module():
    v = H.values()
    assert v["unit"]["UNIT_MIN_GPU_SHARE"] == 0.25 and v["waits"]["POLL_GAP_NS"] == 20_000
    assert sum(len(m) for m in v.values()) == len(H.HEURISTICS)


def test_parse_overrides_checks_name_value_range_and_whole_numbers():
    assert H.parse_overrides(["WARMUP_RATIO=2", "unit.SPAN_CANDIDATES=4", "profiler.capture.waits.POLL_GAP_NS=1e4"]) \
        == {"WARMUP_RATIO": 2.0, "SPAN_CANDIDATES": 4, "POLL_GAP_NS": 10_000}
    assert isinstance(H.parse_overrides(["POLL_GAP_NS=1e4"])["POLL_GAP_NS"], int)
    for bad, words in [("NO_SUCH=1", "no such heuristic"), ("waits.WARMUP_RATIO=2", "no such heuristic"),
                       ("WARMUP_RATIO", "NAME=VALUE"), ("WARMUP_RATIO=x", "not a number"),
                       ("WARMUP_RATIO=nan", "from 1 to"), ("WARMUP_RATIO=inf", "from 1 to"),
                       ("UNIT_MIN_GPU_SHARE=1.5", "a share from 0 to 1"), ("SPAN_CANDIDATES=0", "from 1"),
                       ("SPAN_CANDIDATES=2.5", "whole number")]:
        with pytest.raises(UsageError, match=words):
            H.parse_overrides([bad])


def test_an_override_reaches_the_module_global_an_imported_copy_and_a_default_argument_then_is_undone():
    unit = importlib.import_module("profiler.capture.unit")
    series = importlib.import_module("profiler.capture.series")
    im = importlib.import_module("profiler.capture.instance_metrics")
    cost = np.array([300, 100, 100, 100, 100, 100, 100, 100], dtype=np.int64)
    zero = np.zeros(len(cost), np.int64)
    assert unit.warmup_count(cost, zero) == 1  # 300 > 1.5 x 100
    with H.overriding({"WARMUP_RATIO": 4, "OUTLIER_MEDIAN_RATIO": 2.5, "UNIT_MIN_GPU_SHARE": 0.5}):
        assert unit.WARMUP_RATIO == 4 and unit.warmup_count(cost, zero) == 0  # the default argument too
        assert im.OUTLIER_MEDIAN_RATIO == series.OUTLIER_MEDIAN_RATIO == 2.5
        assert im.mark_outliers.__defaults__[0] == 2.5
        assert H.values()["unit"]["UNIT_MIN_GPU_SHARE"] == 0.5
    assert unit.WARMUP_RATIO == 1.5 and unit.warmup_count(cost, zero) == 1
    assert im.OUTLIER_MEDIAN_RATIO == series.OUTLIER_MEDIAN_RATIO == 1.5 == im.mark_outliers.__defaults__[0]
    assert unit.UNIT_MIN_GPU_SHARE == 0.25


def test_an_override_is_undone_when_the_analysis_fails():
    unit = importlib.import_module("profiler.capture.unit")
    with pytest.raises(RuntimeError):
        with H.overriding({"WARMUP_RATIO": 3}):
            raise RuntimeError("the analysis failed")
    assert unit.WARMUP_RATIO == 1.5


def test_the_analysis_json_reports_the_heuristics_in_force():
    from profiler.capture.analyze import analyze
    from profiler.capture.options import AnalysisOptions
    from tests.capture_builders import two_threads

    plain = analyze(two_threads(same_context=True, overlap=False, waits=None)).to_json()
    assert plain["heuristics"] == H.values() and list(plain)[list(plain).index("thresholds") + 1] == "heuristics"
    changed = analyze(two_threads(same_context=True, overlap=False, waits=None),
                      AnalysisOptions(heuristics={"WARMUP_RATIO": 3.0})).to_json()
    assert changed["heuristics"]["unit"]["WARMUP_RATIO"] == 3.0
    assert {k: v for k, v in changed["heuristics"]["unit"].items() if k != "WARMUP_RATIO"} == \
        {k: v for k, v in plain["heuristics"]["unit"].items() if k != "WARMUP_RATIO"}
    assert importlib.import_module("profiler.capture.unit").WARMUP_RATIO == 1.5


@pytest.mark.parametrize("arg", ["NO_SUCH=1", "WARMUP_RATIO=nan", "UNIT_MIN_GPU_SHARE=2", "MIN_DECODE_STEPS=1.5"])
def test_a_bad_heuristic_on_the_command_line_exits_2_with_one_sentence(arg, tmp_path, capsys):
    from profiler.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(tmp_path / "none.sqlite"), "--no-store", "--heuristic", arg])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.startswith(f"trtprof: error: --heuristic {arg.partition('=')[0]}") and err.count("\n") == 1
