"""A series reviewed: its change points (``changes``, on the run medians), the environment changes between
consecutive runs, and the document ``--json`` writes."""

from __future__ import annotations

from typing import Any

from profiler.history.changes import MIN_SEGMENT_RUNS, change_points
from profiler.history.series import load_series


def env_changes(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{run_id, index, changes: {field: [before, after]}}] where a run's environment differs from the previous one's."""
    out = []
    for i in range(1, len(points)):
        a, b = points[i - 1]["env"], points[i]["env"]
        if a is b or a == b:
            continue
        diff = {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
        if diff:
            out.append({"run_id": points[i]["run_id"], "index": i, "changes": diff})
    return out


def review(series: dict[str, Any], rule: dict | None = None) -> dict[str, Any]:
    """``series`` with ``change_points`` (each with the runs on either side) and ``env_changes`` added."""
    pts = [p for p in series["points"] if p["median_ms"] is not None and p["median_ms"] > 0]
    envs = env_changes(series["points"])
    found = []
    for c in change_points([p["median_ms"] for p in pts], rule):
        before, after = pts[c["index"] - 1], pts[c["index"]]
        # what changed in the environment between the two runs either side (points without a median between them too)
        lo, hi = series["points"].index(before), series["points"].index(after)
        changed = sorted({k for e in envs if lo < e["index"] <= hi for k in e["changes"]})
        found.append({**c, "series": series["id"], "before_run": before["run_id"], "after_run": after["run_id"],
                      "before_report": before.get("report"), "after_report": after.get("report"),
                      "environment_changed": changed})
    newest = pts[-1]["run_id"] if pts else None
    last = found[-1] if found else None
    # the newest run is on the slow side of a step still too new for the rank test (the history rule found it)
    regressed = last is not None and last["direction"] == "regression" and len(pts) - last["index"] < MIN_SEGMENT_RUNS
    return {**series, "change_points": found, "env_changes": envs,
            "newest_run": newest, "newest_regressed": regressed}


def review_store(store, *, label: str | None = None, model: str | None = None,
                 rule: dict | None = None) -> list[dict[str, Any]]:
    return [review(s, rule) for s in load_series(store, label=label, model=model)]


CHANGE_FIELDS = ("series", "before_run", "after_run", "ratio", "confidence", "direction", "p_value", "before_ms",
                 "after_ms", "run_to_run_spread", "environment_changed", "rule")


def history_document(reviewed: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``--json`` writes: the series (id, key, run count, newest run) and every change point."""
    return {
        "kind": "history",
        "series": [{"id": s["id"], "key": s["key"], "run_count": len(s["points"]), "newest_run": s["newest_run"],
                    "newest_regressed": s["newest_regressed"],
                    "env_changes": [{"run_id": e["run_id"], "fields": sorted(e["changes"])} for e in s["env_changes"]]}
                   for s in reviewed],
        "change_points": [{k: c.get(k) for k in CHANGE_FIELDS} for s in reviewed for c in s["change_points"]],
    }
