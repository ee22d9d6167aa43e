"""`trtprof runs`: list the run history, newest first."""

from __future__ import annotations

import json

import click

from profiler.cli.options import db_option, open_store
from profiler.cli.terminal import lines_of, one_line

#: The most runs one listing asks for (a larger number overflows the database's integers).
MAX_LIMIT = 1_000_000


@click.command(name="runs")
@click.option("--kind", default=None, help="Only runs of this kind (analyze, sweep, import).")
@click.option("--label", default=None, help="Only runs with exactly this label.")
@click.option("--model", default=None, help="Only runs whose model contains this text.")
@click.option("--gpu", default=None, help="Only runs whose GPU name contains this text.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1, max=MAX_LIMIT),
              help="Newest N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@db_option
@click.pass_context
def command(ctx: click.Context, kind, label, model, gpu, limit: int, as_json: bool, db: str | None) -> None:
    """List stored runs: id, created, kind, label, status, source, GPU and number of variants.

    The status is what the run came to: ``partial`` when some of its variants failed, ``failed`` when all
    did (``outcome`` in --json, beside the stored ``status``)."""
    store = open_store(ctx, db)
    try:
        runs = store.list_runs(kind=kind, label=label, model=model, gpu=gpu, limit=limit)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(runs, indent=2, default=str))
        return
    if not runs:
        click.echo("no runs")
        return
    click.echo(format_runs(runs))


def _short(text: str | None, width: int) -> str:
    text = "" if text is None else one_line(str(text))  # escaped before it is measured for the columns
    return text if len(text) <= width else "…" + text[-(width - 1):]


def format_runs(runs: list[dict]) -> str:
    """A fixed-width table of ``Store.list_runs`` rows."""
    header = ("id", "created (UTC)", "kind", "label", "status", "source", "gpu", "variants")
    rows = []
    for r in runs:
        created = (r.get("created_at") or "")[:19].replace("T", " ")
        rows.append((str(r["id"]), created, r.get("kind") or "", _short(r.get("label"), 24),
                     r.get("outcome") or r.get("status") or "", _short(r.get("source"), 40), _short(r.get("gpu"), 28),
                     str(r.get("variant_count", ""))))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines_of(lines))
