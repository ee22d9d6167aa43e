"""`trtprof cache`: what the capture caches hold (`info`, the default) and emptying them (`clear`)."""

from __future__ import annotations

import click

WHAT = {"analyses": "analysis results: a repeated 'trtprof analyze' reads them back",
        "traces": "loaded frames (Parquet): a new analysis of a known capture skips SQLite",
        "hashes": "remembered content hashes of capture files"}


def size_text(n_bytes: int) -> str:
    """Decimal units, as the cap is given: 1234567 -> '1.2 MB'."""
    if n_bytes < 1000:
        return f"{n_bytes} B"
    for unit, scale in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("TB", 1e12)):
        if n_bytes < scale * 1000 or unit == "TB":
            return f"{n_bytes / scale:.1f} {unit}"
    raise AssertionError("unreachable")


def _root_line() -> str:
    import os

    from profiler.cache_dir import cache_root

    root = cache_root()
    if root.exists() and not root.is_dir():
        from profiler.errors import InputError

        raise InputError(f"the cache folder {root} is a file, not a folder: set TRTPROF_CACHE_DIR to a folder")
    how = ("TRTPROF_CACHE_DIR" if os.environ.get("TRTPROF_CACHE_DIR") else
           "XDG_CACHE_HOME/trtprof" if os.environ.get("XDG_CACHE_HOME") else "default; set TRTPROF_CACHE_DIR to move it")
    return f"cache folder: {root} ({how})"


@click.group(name="cache", invoke_without_command=True)
@click.pass_context
def command(ctx: click.Context) -> None:
    """Show the capture caches' entries and sizes (the default), or clear them."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(info_cmd)


@command.command(name="info")
def info_cmd() -> None:
    """Each cache's folder, entry count and size, and the size cap (TRTPROF_CACHE_MAX_GB)."""
    from profiler.capture import caches

    cap = caches.cap_bytes()
    click.echo(_root_line())
    rows = caches.usage()
    click.echo(f"{'cache':<9} {'entries':>8} {'size':>10}  what")
    for u in rows:
        click.echo(f"{u.name:<9} {u.entries:>8} {size_text(u.size_bytes):>10}  {WHAT[u.name]}")
    capped = sum(u.size_bytes for u in rows if u.name in caches.CAPPED)
    click.echo(f"total of analyses and traces: {size_text(capped)} of the {size_text(cap)} cap ({caches.CAP_ENV}); "
               "after each write the least recently used entries are removed")


@command.command(name="clear")
@click.argument("names", metavar="[CACHE]...", nargs=-1, type=click.Choice(["analyses", "traces", "hashes", "all"]))
def clear_cmd(names: tuple[str, ...]) -> None:
    """Empty the caches named (analyses, traces, hashes; default all). Every analysis still works: the
    next one of a capture reads it again."""
    from profiler.capture import caches

    click.echo(_root_line())
    chosen = caches.ALL if not names or "all" in names else tuple(n for n in caches.ALL if n in names)
    for u in caches.clear(chosen):
        click.echo(f"{u.name}: removed {u.entries} entr{'y' if u.entries == 1 else 'ies'} ({size_text(u.size_bytes)})")
