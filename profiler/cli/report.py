"""`trtprof report RUN`: write the HTML report of a stored run (or of a saved --json file)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from profiler.cli.options import db_option, db_url, open_store
from profiler.cli.outputs import check_output_file, check_outputs, store_file
from profiler.errors import InputError
from profiler.files import check_input_file


@click.command(name="report")
@click.argument("run")
@click.option("-o", "--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write (default: report-<run>.html).")
@click.option("--cdn", is_flag=True, help="Reference plotly.js from a CDN instead of embedding it.")
@db_option
@click.pass_context
def command(ctx, run, out_path, cdn, db):
    """Write the report of RUN: a run id or label from the store, or a JSON file written by
    `analyze --json`, `sweep` (summary.json), `import --json` or `compare --json`."""
    from profiler.report import write_report

    path = Path(run)
    if path.suffix == ".json":
        check_input_file(run, "the saved JSON", "a JSON file written by trtprof")
    check_output_file(out_path, "--out")
    from_file = path.suffix == ".json"
    check_outputs([("--out", out_path or (path.with_suffix(".html").name if from_file else None))],
                  [("the saved JSON", run if from_file else None)],
                  store=None if from_file else store_file(db_url(ctx, db)))
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
        default_name = path.with_suffix(".html").name
    else:
        store = open_store(ctx, db, must_exist=True)
        rid = store.resolve_run(run)
        data = store.report_data(rid)
        if not data:
            status = store.run_dict(rid).get("status")
            raise InputError(f"run {rid} has no stored results to report (status {status})")
        default_name = f"report-{rid}.html"
    out = Path(out_path or default_name)
    write_report(data, out, cdn=cdn)
    click.echo(f"report: {out} ({out.stat().st_size / 1e6:.1f} MB)")
