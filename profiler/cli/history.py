"""`trtprof history`: each benchmark's runs over time, their change points and environment changes, as a static
site (--out), as data (--json) or served live from the store (--serve)."""

from __future__ import annotations

import json
import time

import click

from profiler.cli.options import db_option, db_url, open_store
from profiler.errors import InputError, UsageError


@click.command(name="history")
@click.option("--label", default=None, help="Only runs with exactly this label.")
@click.option("--model", default=None, help="Only runs whose model contains this text.")
@click.option("--out", "out", default=None, type=click.Path(), help="Folder to write the site to.")
@click.option("--json", "json_path", default=None, type=click.Path(), help="Write the series and change points here.")
@click.option("--cdn", is_flag=True, help="Load plotly.js from its CDN instead of writing it into the site.")
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when a series' newest runs follow a regression beyond the run-to-run spread that fewer "
                   "than 6 runs have followed (the step is still new).")
@click.option("--serve", is_flag=True, help="Serve the site live from the store (read-only) until interrupted.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address --serve binds.")
@click.option("--port", default=8036, show_default=True, type=click.IntRange(0, 65535), help="Port --serve binds.")
@db_option
@click.pass_context
def command(ctx: click.Context, label, model, out, json_path, cdn: bool, fail_on_regression: bool, serve: bool,
            host: str, port: int, db: str | None) -> None:
    """Review the store's runs over time: one series per model x variant x GPU x backend (capture units per
    label x range), with latency, accuracy and memory by run and the steps beyond the run-to-run spread."""
    from profiler.history.review import history_document, review_store

    if not (out or json_path or serve):
        raise UsageError("give --out DIR (a site), --json FILE (data) or --serve (live)")
    from profiler.cli.outputs import check_output_dir, check_output_file

    check_output_file(json_path, "--json")  # a wrong kind of output path fails before the store is read
    if out:
        check_output_dir(out, "--out")
    url = db_url(ctx, db)
    store = open_store(ctx, db, upgrade=False, must_exist=True)  # read-only: no migration, no new file
    try:
        _check_store(store, url)
        if serve:
            _serve(store, url, label, model, host, port)
            return
        started = time.perf_counter()
        reviewed = review_store(store, label=label, model=model)
        if not reviewed:
            what = " and ".join(x for x in (f"label {label!r}" if label else "", f"model {model!r}" if model else "") if x)
            raise InputError(f"no stored runs{' with ' + what if what else ''} have a measured variant to chart")
        if out:
            from profiler.history.site import write_site

            made = write_site(reviewed, out, db=url, label=label, model=model, cdn=cdn)
            click.echo(f"history: {out}/index.html ({len(reviewed)} series, {made['pages']} pages, largest "
                       f"{made['largest_page_bytes'] / 1e3:.0f} kB, {time.perf_counter() - started:.1f} s)")
        doc = history_document(reviewed)
        if json_path:
            _write_json(json_path, doc)
        regressed = [s for s in doc["series"] if s["newest_regressed"]]
        click.echo(f"{len(doc['change_points'])} change points in {len(doc['series'])} series; "
                   f"{len(regressed)} regressed at their newest run")
    finally:
        store.close()
    if fail_on_regression and regressed:
        ctx.exit(1)


def _check_store(store, url: str | None) -> None:
    """One sentence when the store cannot be read or holds no runs table (an empty file, a missing folder)."""
    from sqlalchemy import exc as sa_exc
    from sqlalchemy import inspect

    from profiler.store.api import resolve_url

    where = resolve_url(url)
    try:
        has_runs = inspect(store.engine).has_table("runs")
    except sa_exc.OperationalError as exc:
        reason = str(exc.orig).splitlines()[0] if exc.orig is not None else str(exc)
        raise InputError(f"cannot read the run store {where}: {reason}") from None
    if not has_runs:
        raise InputError(f"{where} holds no trtprof run store (no runs table); analyse, import or sweep with that "
                         "--db first, or point --db at an existing store")


def _write_json(path: str, doc: dict) -> None:
    from pathlib import Path

    from profiler.files import atomic_write_bytes, os_reason

    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot write --json {path}: {os_reason(exc)}") from None
    atomic_write_bytes(Path(path), json.dumps(doc, indent=2, default=str).encode("utf-8"), "--json")


def _serve(store, url, label, model, host: str, port: int) -> None:
    from profiler.history.serve import Site, make_server

    server = make_server(Site(store, db=url, label=label, model=model, rule=None), host, port)
    click.echo(f"history: serving http://{host}:{server.server_address[1]}/ (read-only; Ctrl-C stops)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
