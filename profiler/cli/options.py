"""Options shared by the subcommands that use the run store.

``@db_option`` lets ``--db URL`` go after the subcommand (``trtprof runs --db x.db``) as well as
before it (``trtprof --db x.db runs``); the subcommand's value wins, then the group's, then
``TRTPROF_DB``, then ``./trtprof.db``. ``open_store(ctx, db)`` opens the store that choice names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import click


class Finite(click.ParamType):
    """A finite number in [lo, hi]: click's FloatRange lets nan through (every comparison with nan is
    false), and a nan threshold silently disables the rule that uses it."""

    name = "number"

    def __init__(self, lo: float, hi: float, *, open_ends: bool = False):
        self.lo, self.hi, self.open_ends = lo, hi, open_ends

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        import math

        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(x) or not self.lo <= x <= self.hi or (self.open_ends and x in (self.lo, self.hi)):
            span = "between" if self.open_ends else "from"
            self.fail(f"{value!r} is not a number {span} {self.lo:g} {'and' if self.open_ends else 'to'} "
                      f"{self.hi:g}", param, ctx)
        return x


def db_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--db URL`` (parameter name ``db``) to a subcommand."""
    return click.option(
        "--db", "db", default=None, metavar="URL",
        help="Run store: a SQLAlchemy URL (postgresql://user@host/db) or a SQLite path "
             "(default: the group's --db, else TRTPROF_DB, else ./trtprof.db).")(func)


def db_url(ctx: click.Context, db: str | None = None) -> str | None:
    """The store URL a command should use (None means TRTPROF_DB / ./trtprof.db, see resolve_url)."""
    if db:
        return db
    root = ctx.find_root()
    return (root.obj or {}).get("db_url")


def open_store(ctx: click.Context, db: str | None = None, *, upgrade: bool = True, must_exist: bool = False):
    """Open (creating or upgrading a fresh database) the run store for a command. ``must_exist``: a command that
    reads given runs (compare, report, show) refuses a SQLite file that is not there, rather than create an
    empty store and then find no run in it (a mistyped --db); a missing folder fails as any bad URL does."""
    from profiler.errors import InputError
    from profiler.store import Store
    from profiler.store.api import resolve_url

    url = db_url(ctx, db)
    resolved = resolve_url(url)
    path = resolved[len("sqlite:///"):] if resolved.startswith("sqlite:///") else None
    if path and path != ":memory:" and os.path.lexists(path):
        # the store is read before it is written: a directory or a FIFO there is bad input (exit 3)
        from profiler.files import check_input_file

        check_input_file(path, "the run store (--db, TRTPROF_DB or ./trtprof.db)", "a SQLite file")
    if must_exist:
        if path and path != ":memory:" and not Path(path).exists() and Path(path).parent.is_dir():
            raise InputError(f"no run store at {path} (--db, TRTPROF_DB or ./trtprof.db): analyse, import or "
                             "sweep with that --db first, or point --db at an existing store")
    return Store.open(url, upgrade=upgrade)


def scheduler_option(what: str) -> Callable:
    """``--scheduler URL``: where ``what`` go, a Dask distributed scheduler (its address checked when parsed)."""
    from profiler.pipeline.connect import check_option

    return click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", callback=check_option,
                        help=f"Send {what} to this Dask distributed scheduler (pip install 'trtprof[dask]').")


def worker_store_url(url: str | None) -> str | None:
    """The store URL as workers in other folders (or hosts) must see it: a SQLite path made absolute."""
    if url is None or not url.startswith("sqlite:///"):
        return url
    path = url[len("sqlite:///"):]
    return url if path in ("", ":memory:") or os.path.isabs(path) else f"sqlite:///{os.path.abspath(path)}"
