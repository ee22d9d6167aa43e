"""`trtprof db`: run store maintenance."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import click

from profiler.cli.options import db_option, db_url


@contextmanager
def _unmigrated_store(ctx: click.Context, db: str | None) -> Iterator[Any]:
    """The store at ``--db`` opened without migrating it; connection failures become one sentence."""
    from profiler.store import Store
    from profiler.store.api import connection_errors

    url = db_url(ctx, db)
    store = Store.open(url, upgrade=False)
    try:
        with connection_errors(url):
            yield store
    finally:
        store.close()


@click.group(name="db", help="Database maintenance.")
def command() -> None:
    """Run store maintenance commands."""


@command.command(name="upgrade")
@db_option
@click.pass_context
def upgrade_cmd(ctx: click.Context, db: str | None) -> None:
    """Create the run store or apply its pending schema migrations; prints the revision."""
    from profiler.store.migrate import current_revision, upgrade

    with _unmigrated_store(ctx, db) as store:
        before = current_revision(store.engine)
        after = upgrade(store.engine)
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
    from profiler.store.migrate import current_revision, head_revision

    with _unmigrated_store(ctx, db) as store:
        rev = current_revision(store.engine)
    click.echo(f"current: {rev or 'empty'}  head: {head_revision()}")
