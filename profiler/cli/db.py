"""`trtprof db`: run store maintenance."""

from __future__ import annotations

import click

from profiler.cli.options import db_option, db_url


@click.group(name="db", help="Database maintenance.")
def command() -> None:
    """Run store maintenance commands."""


@command.command(name="upgrade")
@db_option
@click.pass_context
def upgrade_cmd(ctx: click.Context, db: str | None) -> None:
    """Create the run store or apply its pending schema migrations; prints the revision."""
    from profiler.store import Store
    from profiler.store.api import connection_errors
    from profiler.store.migrate import current_revision, upgrade

    url = db_url(ctx, db)
    store = Store.open(url, upgrade=False)
    try:
        with connection_errors(url):
            before = current_revision(store.engine)
            after = upgrade(store.engine)
    finally:
        store.close()
    shown = store.engine.url.render_as_string(hide_password=True)
    if before == after:
        click.echo(f"{shown}: already at revision {after}")
    else:
        click.echo(f"{shown}: upgraded from {before or 'empty'} to revision {after}")


@command.command(name="current")
@db_option
@click.pass_context
def current_cmd(ctx: click.Context, db: str | None) -> None:
    """Print the schema revision of the run store and the newest one this trtprof knows."""
    from profiler.store import Store
    from profiler.store.api import connection_errors
    from profiler.store.migrate import current_revision, head_revision

    url = db_url(ctx, db)
    store = Store.open(url, upgrade=False)
    try:
        with connection_errors(url):
            rev = current_revision(store.engine)
    finally:
        store.close()
    click.echo(f"current: {rev or 'empty'}  head: {head_revision()}")
