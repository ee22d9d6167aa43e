"""`trtprof show RUN`: one stored run, its variants and findings."""

from __future__ import annotations

import json
import math

import click

from profiler.cli.options import db_option, open_store
from profiler.cli.terminal import lines_of, one_line


@click.command(name="show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the whole run as JSON (samples excluded).")
@db_option
@click.pass_context
def command(ctx: click.Context, run: str, as_json: bool, db: str | None) -> None:
    """Show RUN (a run id, or a label: its newest run)."""
    store = open_store(ctx, db, must_exist=True)
    try:
        d = store.run_dict(run)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(format_run(d))


def _ms(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.3f}"


def format_run(d: dict) -> str:
    """A human-readable summary of ``Store.run_dict``."""
    lines = [f"run {d['id']}  {d.get('kind')}  {d.get('status')}" + (f"  label {d['label']}" if d.get("label") else "")]
    for key in ("source", "model", "created_at", "finished_at", "host", "gpu", "driver_version", "cuda_version",
                "tensorrt_version", "nsys_version", "backend"):
        if d.get(key):
            lines.append(f"  {key.replace('_', ' ')}: {d[key]}")
    variants = d.get("variants") or []
    if variants:
        lines.append("")
        lines.append(f"variants ({len(variants)}):")
        header = ("key", "status", "n", "median ms", "p99 ms", "throughput qps")
        rows = []
        for v in variants:
            lat = v.get("latency_ms") or {}
            qps = v.get("throughput_qps")
            rows.append((one_line(v.get("key") or ""), v.get("status") or "", str(lat.get("count", "")),
                         _ms(lat.get("median")), _ms(lat.get("p99")), "-" if qps is None else f"{qps:.1f}"))
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        lines.append("  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        failed = [v for v in variants if v.get("error")]
        for v in failed:
            lines.append(f"  {v['key']}: {v['error']}")
    findings = d.get("findings") or []
    lines.append("")
    if findings:
        lines.append(f"findings ({len(findings)}):")
        for f in findings:
            where = f" [{f['range']}]" if f.get("range") else (f" [{f['variant']}]" if f.get("variant") else "")
            lines.append(f"  {f['severity']:<6} {f['rule']}{where}: {f['title']}")
    else:
        lines.append("findings: none")
    for a in d.get("artifacts") or []:
        lines.append(f"{a['kind']}: {a['path']}")
    return "\n".join(lines_of(lines))
