"""The capture caches as a whole: their size cap, least-recently-used eviction, and what ``trtprof cache``
shows and clears.

Three folders under :func:`profiler.cache_dir.cache_root` serve ``trtprof analyze``:

- ``analyses``: analysis results (:mod:`profiler.capture.result_cache`), one folder per entry, plus
  ``seen/`` (one empty file per capture content analysed, which decides when frames are kept);
- ``traces``: loaded frames as Parquet (:mod:`profiler.capture.cache`), one folder per entry;
- ``hashes``: remembered content hashes (:mod:`profiler.capture.fingerprint`), a few hundred bytes per
  capture path.

The entries of ``analyses`` and ``traces`` together are kept under a cap, ``TRTPROF_CACHE_MAX_GB``
(default 5 GB, decimal): after an entry is written, the least recently used entries of both folders are
removed until the total fits. The entries just written are never removed (when they alone exceed the cap,
every other entry goes and they stay until the next write). Recency is the entry folder's mtime, set when
the entry is written and again on every hit (one ``utime`` call). The hash memos and ``seen`` markers are
not capped (they are tiny); ``trtprof cache clear`` removes them.

An entry is removed by renaming it to a hidden sibling first and deleting that: a reader that opens it
afterwards finds nothing (a miss), and a reader that was reading it loses a file mid-read, which the
caches treat as a miss too. Hidden folders (writes in progress, removals) older than an hour are left by
killed processes and are removed with the next eviction.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from profiler.errors import InputError, UsageError

CAP_ENV = "TRTPROF_CACHE_MAX_GB"
DEFAULT_CAP_GB = 5.0
CAPPED = ("analyses", "traces")  # the folders whose entries share the cap
ALL = ("analyses", "traces", "hashes")
STALE_HIDDEN_S = 3600.0


def cap_bytes() -> int:
    """The cap from ``TRTPROF_CACHE_MAX_GB`` (a number of gigabytes, 10**9 bytes; 0 keeps only the entries
    each run writes), else 5 GB. A value that is not such a number is a usage error."""
    text = os.environ.get(CAP_ENV, "").strip()
    if not text:
        return int(DEFAULT_CAP_GB * 1e9)
    try:
        gb = float(text)
    except ValueError:
        gb = float("nan")
    if not (gb >= 0 and gb < float("inf")):
        raise UsageError(f"{CAP_ENV}={text!r} is not a size in gigabytes: give a number such as 5 or 0.5 "
                         f"(0 keeps only the latest analysis)")
    return int(gb * 1e9)


def folder(name: str, root: Path | None = None) -> Path:
    """The folder of cache ``name`` (one of :data:`ALL`) under ``root`` (default the cache root)."""
    from profiler.cache_dir import cache_root

    return (root if root is not None else cache_root()) / name


@dataclass
class Entry:
    path: Path
    size_bytes: int
    used_ns: int  # the folder's mtime: when it was written or last served


def _folder_bytes(path: Path) -> int:
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    total += _folder_bytes(Path(e.path)) if e.is_dir(follow_symlinks=False) else \
                        e.stat(follow_symlinks=False).st_size
                except OSError:  # removed while we looked
                    pass
    except OSError:
        pass
    return total


def entries(cache: Path) -> list[Entry]:
    """The complete entries of one cache folder (not hidden, not ``seen``), with their size and last use."""
    out = []
    try:
        children = list(os.scandir(cache))
    except OSError:
        return out
    for e in children:
        if e.name.startswith(".") or e.name == "seen":
            continue
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            used_ns = e.stat(follow_symlinks=False).st_mtime_ns
        except OSError:
            continue
        out.append(Entry(Path(e.path), _folder_bytes(Path(e.path)), used_ns))
    return out


def touch(entry: Path) -> None:
    """Mark ``entry`` as used now (a read-only cache simply keeps its old recency)."""
    try:
        os.utime(entry)
    except OSError:
        pass


def remove(path: Path) -> bool:
    """Remove an entry or a file: renamed to a hidden sibling first (so no reader finds half of it), then
    deleted. False when it was already gone."""
    hidden = path.with_name(f".removing.{path.name}.{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, hidden)
    except FileNotFoundError:
        return False
    if hidden.is_dir() and not hidden.is_symlink():
        shutil.rmtree(hidden, ignore_errors=True)
    else:
        hidden.unlink(missing_ok=True)
    return True


def discard(path: Path) -> None:
    """:func:`remove` for a damaged or half-read entry: a miss, whatever the removal meets."""
    try:
        remove(path)
    except OSError:
        pass


def capped_folders(written: Path) -> list[Path]:
    """The folders that share a cap with the entry ``written``: its own and, when that is named
    ``analyses`` or ``traces``, its sibling of the other name."""
    own = written.parent
    if own.name not in CAPPED:
        return [own]
    return [own.parent / name for name in CAPPED]


def _remove_stale_hidden(cache: Path, now_s: float) -> None:
    try:
        children = list(os.scandir(cache))
    except OSError:
        return
    for e in children:
        try:
            if e.name.startswith(".") and now_s - e.stat(follow_symlinks=False).st_mtime > STALE_HIDDEN_S:
                remove(Path(e.path))
        except OSError:
            pass


def trim(written: Iterable[Path], cap: int | None = None) -> list[Entry]:
    """After writing the entries ``written``: remove the least recently used entries of their capped folders
    until the total is at most ``cap`` bytes (default :func:`cap_bytes`), never one of ``written``.
    Returns the entries removed. Never raises: a cache that cannot be trimmed is only larger."""
    keep = {Path(os.path.abspath(p)) for p in written}
    if not keep:
        return []
    cap = cap_bytes() if cap is None else cap
    folders = {f for p in keep for f in capped_folders(p)}
    now_s = time.time()
    found = []
    for f in sorted(folders):
        _remove_stale_hidden(f, now_s)
        found += entries(Path(os.path.abspath(f)))
    total = sum(e.size_bytes for e in found)
    removed = []
    for e in sorted(found, key=lambda e: (e.used_ns, e.path.name)):
        if total <= cap:
            break
        if e.path in keep:
            continue
        try:
            gone = remove(e.path)
        except OSError:  # not ours to remove (permissions): it stays, and counts
            continue
        total -= e.size_bytes
        if gone:
            removed.append(e)
    return removed


# ----------------------------------------------------------------------------- trtprof cache

@dataclass
class Usage:
    name: str
    path: Path
    entries: int
    size_bytes: int


def usage(root: Path | None = None) -> list[Usage]:
    """Each cache's folder, entry count and size in bytes (hash memos count as entries of ``hashes``;
    ``seen`` markers and hidden folders count in the size of ``analyses``/``traces``, not as entries)."""
    out = []
    for name in ALL:
        f = folder(name, root)
        if name == "hashes":
            files = [p for p in _files(f) if p.suffix == ".json"]
            out.append(Usage(name, f, len(files), _folder_bytes(f)))
        else:
            out.append(Usage(name, f, len(entries(f)), _folder_bytes(f)))
    return out


def _files(f: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(f) if e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def clear(names: Iterable[str], root: Path | None = None) -> list[Usage]:
    """Empty the caches ``names``; returns what each held before. A cache that cannot be emptied (its
    folder is a file, permissions) is one sentence."""
    before = {u.name: u for u in usage(root)}
    done = []
    for name in names:
        f = folder(name, root)
        if f.exists() and not f.is_dir():
            raise InputError(f"cannot clear the {name} cache: {f} is a file, not a folder")
        try:
            children = list(os.scandir(f)) if f.is_dir() else []
            for e in children:
                remove(Path(e.path))
        except OSError as exc:
            from profiler.files import os_reason

            raise InputError(f"cannot clear the {name} cache {f}: {os_reason(exc)}") from None
        done.append(before[name])
    return done
