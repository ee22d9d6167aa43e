"""What a finished (or interrupted) sweep writes and says: summary.json and report.html in its folder, the
one-line-per-variant table, the gate's sentence, and the command that continues a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiler.backends import latency_notes


def _fmt(x: Any, digits: int = 3) -> str:
    return "-" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def _flat(error: Any) -> str:
    """A variant's error on one line of the table (a runtime's message can span several)."""
    return " / ".join(line.strip() for line in str(error).splitlines() if line.strip())


def format_table(summary: dict[str, Any]) -> str:
    """One line per variant: status, median/p99 latency, throughput, accuracy verdict."""
    from profiler.report.verdict import ungated_breaches

    header = ("variant", "status", "median ms", "p99 ms", "qps", "accuracy")
    ungated = {u["key"]: u["reason"] for u in ungated_breaches(summary)}
    rows = []
    for v in summary["variants"]:
        lat = v.get("latency_ms") or {}
        acc = v.get("accuracy") or {}
        flags = [m.get("passed") for m in acc.values()]
        verdict = "-" if not flags else ("ok" if all(flags) else "BREACH")
        if v["key"] in ungated:  # as the verdict says it: outside the thresholds, but not gated
            verdict += f" (not gated: {ungated[v['key']]})"
        status = v["status"]
        if status != "ok" and v.get("error"):
            err = _flat(v["error"])
            status = f"{status}: {err[:40]}" + ("..." if len(err) > 40 else "")
        rows.append((v["key"], status, _fmt(lat.get("median")), _fmt(lat.get("p99")),
                     _fmt(v.get("throughput_qps"), 1), verdict))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines += [f"note: {text}" for text in latency_notes(v.get("backend") for v in summary["variants"])]
    failed = [v for v in summary["variants"] if v["status"] == "failed" and v.get("error")]
    if failed:
        lines.append("")
        lines += [f"{v['key']} failed: {_flat(v['error'])}" for v in failed]
    return "\n".join(lines)


def nsys_table(summary: dict[str, Any]) -> list[str]:
    """One line per variant of a sweep captured with nsys: the harness's compute time beside nsys's GPU time."""
    lines = [f"{'variant':<28} {'harness compute ms':>18} {'nsys GPU busy ms':>17} {'nsys rules'}"]
    for v in summary["variants"]:
        n = v.get("nsys") or {}
        cmp = n.get("compute_vs_gpu_busy") or {}
        lines.append(f"{v['key']:<28} {_fmt(cmp.get('harness_compute_median_ms')):>18} "
                     f"{_fmt(cmp.get('nsys_gpu_busy_median_ms')):>17} {', '.join(n.get('rules') or []) or '-'}")
    return lines


def gate_message(failed: list[dict[str, Any]]) -> str | None:
    """The gate's sentence over :func:`profiler.sweep.gate_failures`: the variants that failed and those whose
    outputs breach their thresholds; None when nothing failed."""
    broken = sorted({f.get("variant") or "?" for f in failed if f.get("rule") == "variant_failed"})
    breached = [f for f in failed if f.get("rule") == "precision_regression"]
    parts = []
    if broken:
        parts.append(f"{len(broken)} variant(s) failed ({', '.join(broken)})")
    if breached:
        parts.append(f"accuracy gate: {len(breached)} output(s) breach their FP32 thresholds "
                     f"({', '.join(sorted({f.get('variant') or '?' for f in breached}))})")
    return "; ".join(parts) or None


def write_outputs(sweep: Any, summary: dict[str, Any], out_dir: Path, cdn: bool, store: Any) -> list[Path]:
    """summary.json always; report.html when the report package is available; both recorded as the stored
    run's artifacts. ``sweep`` is the :class:`profiler.sweep.Sweep` that made ``summary``."""
    from profiler.files import atomic_write_bytes

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    path = out_dir / "summary.json"
    atomic_write_bytes(path, json.dumps(summary, indent=2, sort_keys=False).encode("utf-8"), "--out")
    written.append(path)
    try:
        from profiler.report import write_sweep_report
    except ImportError:
        write_sweep_report = None  # type: ignore[assignment]  # the report's dependencies may be missing
    if write_sweep_report is not None:
        data, layers = sweep.report_data(summary)
        report = Path(write_sweep_report(data, out_dir / "report.html", cdn=cdn, layers=layers))
        written.append(report)
    if store is not None and sweep.run_id is not None:
        for p in written:
            store.add_artifact(sweep.run_id, "report" if p.suffix == ".html" else "summary", p.resolve())
    return written


def stored_out_dir(store: Any, sweep: Any) -> str | None:
    """The folder a stored run was started to write to: its config's, else that of its stored summary.json."""
    if sweep.config.out_dir:
        return sweep.config.out_dir
    try:
        run = store.run_dict(sweep.run_id)
    except Exception:  # an old store without artifacts: the default --out then
        return None
    for a in run.get("artifacts") or []:
        if a.get("kind") == "summary" and a.get("path"):
            return str(Path(a["path"]).parent)
    return None


def resume_command(run_id: Any, db: str | None, out: Path) -> str:
    """A command that continues the run when pasted: the store and the output folder spelled out."""
    import shlex

    from profiler.store import resolve_url

    url = resolve_url(db)
    where = str(Path(url[len("sqlite:///"):]).resolve()) if url.startswith("sqlite:///") else url
    return (f"trtprof sweep --resume {run_id} --db {shlex.quote(where)} "
            f"--out {shlex.quote(str(Path(out).resolve()))}")
