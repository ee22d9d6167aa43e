"""Every healthy capture we have stays silent on stream_race, repeated_setup and host_sleeps: the project's sample
captures (but the ones made to show those patterns), the real nsys exports of 2022-2026, NVIDIA's TensorRT
cookbook captures and the real LLM and two-thread TensorRT applications."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiler.capture.analyze import AnalysisOptions, analyze_path
from tests.conftest import SAMPLE_TRACES, SHARED

NEW_RULES = ("stream_race", "repeated_setup", "host_sleeps")
PATTERN_CAPTURES = {"race", "race_output", "race_threads", "rebuild", "sleeps"}  # their twins stay
"""The sample captures made to show these patterns (their healthy twins stay in the list below)."""


def _healthy() -> list[Path]:
    paths = [p for p in sorted(SAMPLE_TRACES.glob("*.sqlite")) if p.stem not in PATTERN_CAPTURES]
    for folder in ("nsys", "nsys-tensorrt", "nsys-real"):
        d = SHARED / "fixtures" / folder
        paths += sorted(d.glob("*.sqlite")) if d.is_dir() else []
    return paths


@pytest.mark.parametrize("path", _healthy(), ids=lambda p: p.stem)
def test_healthy_captures_are_silent_on_races_repeated_setup_and_sleeps(path: Path):
    res = analyze_path(path, AnalysisOptions(rules=list(NEW_RULES)))
    assert [(f.rule, f.title) for f in res.findings] == []
    assert "racing_overlap_ms" not in res.extra  # the overlap statistics are as before
