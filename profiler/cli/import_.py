"""`trtprof import`: trtexec exports (profile, layer info, times, logs) -> a stored run, JSON and report."""

from __future__ import annotations

from typing import Any

import click

from profiler.cli.options import db_option, db_url, open_store
from profiler.cli.terminal import one_line
from profiler.cli.outputs import check_output_file, check_outputs, store_file


def _ms(x: Any) -> str:
    return f"{x:.4f} ms" if isinstance(x, (int, float)) and x == x else "n/a"


@click.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the import (run, variants, layers, alignment, findings) as JSON here ('-' for stdout).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Write the per-layer HTML report here.")
@click.option("--label", default=None, help="Label the stored run (to find it later by name).")
@click.option("--variant", "variant_names", multiple=True, metavar="NAME",
              help="Name the variant of each export set, in the order they are found (repeatable).")
@click.option("--no-store", is_flag=True, help="Do not write the run store.")
@db_option
@click.pass_context
def command(ctx: click.Context, paths: tuple[str, ...], json_path: str | None, report_path: str | None,
            label: str | None, variant_names: tuple[str, ...], no_store: bool, db: str | None) -> None:
    """Import trtexec exports: PATHs are files or directories (files grouped by name prefix:
    *.profile.json from --exportProfile, *.graph.json / layer info from --exportLayerInfo, *.timing.json
    from --exportTimes, trtexec logs). Stores a run with its variants, layers, samples and findings."""
    check_output_file(json_path, "--json")
    check_output_file(report_path, "--report")
    check_outputs([("--json", json_path), ("--report", report_path)], [("the import path", p) for p in paths],
                  store=None if no_store else store_file(db_url(ctx, db)))
    from profiler.pipeline.imports import ImportRequest, import_exports

    store = None if no_store else open_store(ctx, db)  # a bad --db fails before the exports are read
    try:
        done = import_exports(ImportRequest(paths, variant_names, label, json_path=json_path,
                                            report_path=report_path), store=store)
    finally:
        close = getattr(store, "close", None)
        if close:
            close()
    data = done.data
    if done.json_text is not None:
        click.echo(done.json_text)
    if done.report_missing:
        click.echo("trtprof: the HTML report is not available in this build", err=True)
    for w in data["run"]["warnings"]:
        click.echo(one_line(f"warning: {w}"), err=True)
    if json_path != "-":
        for v in data["variants"]:
            g = v.get("gpu_compute_ms") or {}
            med = g.get("median")
            med_s = _ms(med)
            click.echo(one_line(f"{v['key']}: {v['layer_count']} layers, GPU compute median {med_s}, "
                                f"layer sum {_ms(v['layer_sum_ms'])}, precision {v.get('precision') or '?'}"))
        for f in data["findings"]:
            click.echo(one_line(f"[{f['severity']}] {f['rule']}: {f['title']}"))
        if data["run"].get("id") is not None:
            click.echo(f"stored run {data['run']['id']}")
